"""Issue 39, property 2 through the HTTP API: ids belong to their caller.

The real producer handler (shardline.cdk's `_producer_handler/app.py`) behind the local runtime's
REST API (`local.apigw`, which authenticates SigV4 and API keys and builds the proxy event as API
Gateway does), writing to moto server; the stream is read back and decoded as a consumer reads it.
Each record carries the caller API Gateway authenticated — the IAM principal, or `apikey:<id>` —
and never one the body or a header claims; explicit and derived ids stay two namespaces.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from local.apigw.server import ApiServer
from local.app.model import KeyPlan, Method
from shardline.kinesis import UserRecord
from shardline.kpl._identity import caller_scope
from tests.integration.test_producer_handler import FakeContext, load_app, rest_event
from tests.support.apigw import RECORDS, FunctionInvoker, request
from tests.support.integration import create_stream, kinesis_client, read_stream, unique_stream_name

ROUTE = "orders"
PATH = f"/v1/streams/{ROUTE}/records"
ACCOUNT = "000000000000"
CREDENTIALS = {"test": "test", "alice": "alice-secret", "mallory": "mallory-secret"}
ALICE = f"arn:aws:iam::{ACCOUNT}:user/alice"
MALLORY = f"arn:aws:iam::{ACCOUNT}:user/mallory"
ROOT = f"arn:aws:iam::{ACCOUNT}:root"


@pytest.fixture
def stream(monkeypatch: pytest.MonkeyPatch, moto_server: str) -> Iterator[tuple[Any, str]]:
    """The function's environment (Kinesis at moto server) and a fresh 2-shard stream as route "orders"."""
    for name, value in {
        "AWS_ENDPOINT_URL_KINESIS": moto_server,
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_REGION": "us-east-1",
        "POWERTOOLS_METRICS_NAMESPACE": "shardline-test",
        "POWERTOOLS_SERVICE_NAME": "shardline-producer",
        "POWERTOOLS_TRACE_DISABLED": "true",
    }.items():
        monkeypatch.setenv(name, value)
    for name in ("MAX_RECORDS_PER_REQUEST", "MAX_BODY_BYTES"):
        monkeypatch.delenv(name, raising=False)
    client = kinesis_client(moto_server)
    name = unique_stream_name("producer-callers")
    create_stream(client, name, shard_count=2)
    monkeypatch.setenv("SHARDLINE_STREAMS", json.dumps({ROUTE: {"streamName": name}}))
    app = load_app().function
    app.set_kinesis_client(None)
    yield client, name
    app.set_kinesis_client(None)
    client.delete_stream(StreamName=name, EnforceConsumerDeletion=True)


def producer_function(event: dict[str, Any]) -> Any:
    """The Lambda function the API invokes: the real handler, with a Lambda-like context."""
    return load_app().function.handler(event, FakeContext())


@pytest.fixture
def api(start: Callable[..., tuple[ApiServer, FunctionInvoker]], stream: tuple[Any, str]) -> ApiServer:
    """The local REST API with IAM authorization on the records route, three principals' keys."""
    server, _ = start(methods=(RECORDS,), functions={"producer": producer_function}, credentials=CREDENTIALS)
    return server


def post(
    server: ApiServer,
    records: list[dict[str, Any]],
    *,
    who: str | None = None,
    headers: dict[str, str] | None = None,
) -> tuple[int, dict[str, Any]]:
    sign = (who, CREDENTIALS[who]) if who is not None else None
    status, _, body = request(server, "POST", PATH, json.dumps({"records": records}).encode(), headers, sign)
    return status, json.loads(body)


def landed(client: Any, name: str) -> list[UserRecord]:
    return [user for entries in read_stream(client, name).values() for _, _, user in entries]


def identity(record: UserRecord) -> tuple[str, str, str | None]:
    """What consumers key an id by (`ConsumedRecord.scoped_id`'s parts)."""
    return caller_scope(record.caller), "k" if record.id_derived else "i", record.id


def test_property_2_the_producer_stamps_the_authenticated_caller_and_never_a_bodys_claim(api, stream):
    client, name = stream
    # Alice: an explicit id, and a derived one from her Idempotency-Key.
    alices = [
        {"partitionKey": "p", "json": {"by": "alice"}, "id": "order-1"},
        {"partitionKey": "p", "json": 2},
    ]
    status, body = post(api, alices, who="alice", headers={"Idempotency-Key": "req"})
    assert status == 200, body
    # Mallory re-uses Alice's explicit id and posts her derived id as an explicit one, claiming in
    # headers to be Alice; the records are hers, under her own identities.
    mallorys = [
        {"partitionKey": "p", "json": {"by": "mallory"}, "id": "order-1"},
        {"partitionKey": "p", "json": {"by": "mallory"}, "id": "req:1"},
    ]
    spoof = {"X-Caller": ALICE, "X-Amz-User-Arn": ALICE, "Idempotency-Key": "other"}
    status, body = post(api, mallorys, who="mallory", headers=spoof)
    assert status == 200, body
    # A caller in the body is not a field of the contract: refused, nothing written.
    claim = [{"partitionKey": "p", "json": {"by": "mallory"}, "id": "order-2", "caller": ALICE}]
    status, body = post(api, claim, who="mallory")
    assert status == 400 and body["errors"] == [
        {"index": 0, "field": "caller", "message": "is not a known field"}
    ]
    # The local credentials are the account's root: a caller of their own.
    status, body = post(api, [{"partitionKey": "p", "json": 3, "id": "order-1"}], who="test")
    assert status == 200, body

    records = landed(client, name)
    by_data = {(r.data, r.id): r for r in records}
    assert len(records) == 5
    assert by_data[(b'{"by":"alice"}', "order-1")].caller == ALICE
    assert by_data[(b"2", "req:1")].caller == ALICE and by_data[(b"2", "req:1")].id_derived
    assert by_data[(b'{"by":"mallory"}', "order-1")].caller == MALLORY
    assert by_data[(b'{"by":"mallory"}', "req:1")].caller == MALLORY
    assert not by_data[(b'{"by":"mallory"}', "req:1")].id_derived
    assert by_data[(b"3", "order-1")].caller == ROOT
    # Five records, five identities: no caller's id can stand for another's.
    assert len({identity(r) for r in records}) == 5


def test_property_2_in_api_key_mode_the_caller_is_the_keys_id(start, stream):
    client, name = stream
    keyed = Method(path=RECORDS.path, http_method="POST", function_name="producer", api_key_required=True)
    keys = (KeyPlan("orders", "key-orders-0123456789"), KeyPlan("billing", "key-billing-0123456789"))
    server, _ = start(methods=(keyed,), functions={"producer": producer_function}, keys=keys)
    for value in ("key-orders-0123456789", "key-billing-0123456789"):
        # A SigV4 signature on a method without IAM authorization proves nothing: the key decides.
        headers = {"x-api-key": value}
        status, _, body = request(
            server,
            "POST",
            PATH,
            json.dumps({"records": [{"partitionKey": "p", "data": "eA==", "id": "same"}]}).encode(),
            headers,
            ("alice", "alice-secret"),
        )
        assert status == 200, body
    key_ids = {
        hashlib.sha1(v.encode()).hexdigest()[:10] for v in ("key-orders-0123456789", "key-billing-0123456789")
    }
    records = landed(client, name)
    assert {r.caller for r in records} == {f"apikey:{key_id}" for key_id in key_ids}
    assert len({identity(r) for r in records}) == 2


def test_property_2_an_event_without_an_authenticated_caller_writes_nothing(start, stream):
    client, name = stream
    # A method deployed without authorization (not how ProducerApi deploys it): no caller to stamp.
    open_method = Method(path=RECORDS.path, http_method="POST", function_name="producer")
    server, _ = start(methods=(open_method,), functions={"producer": producer_function})
    status, _, body = request(
        server, "POST", PATH, json.dumps({"records": [{"partitionKey": "p", "data": "eA=="}]}).encode()
    )
    answer = json.loads(body)
    assert status == 500 and answer["requestId"], answer
    # And the handler invoked directly with an event whose identity says nothing, body claims aside.
    event = rest_event(json.dumps({"records": [{"partitionKey": "p", "data": "eA=="}]}), stream=ROUTE)
    event["requestContext"]["identity"] = {"userArn": None, "apiKeyId": None, "sourceIp": "198.51.100.7"}
    response = producer_function(event)
    assert response["statusCode"] == 500
    assert landed(client, name) == []


def test_property_2_two_requests_ids_are_scoped_even_with_one_idempotency_key(api, stream):
    # Alice and Mallory use the same Idempotency-Key: their derived ids are equal, their identities not.
    client, name = stream
    for who in ("alice", "mallory"):
        status, body = post(
            api, [{"partitionKey": "p", "json": who}], who=who, headers={"Idempotency-Key": "k"}
        )
        assert status == 200, body
        assert body["records"][0]["id"] == "k:0"
    records = landed(client, name)
    assert {(r.caller, r.id, r.id_derived) for r in records} == {(ALICE, "k:0", True), (MALLORY, "k:0", True)}
    assert len({identity(r) for r in records}) == 2
