"""The producer Lambda (shardline.cdk's `_producer_handler/app.py`) end to end: API Gateway REST events
in, moto server behind.

Each test invokes the real handler with the event API Gateway sends for a REST proxy integration
and a Lambda-like context, then reads the stream back to see what landed (and that nothing did
when the request was refused).
"""

from __future__ import annotations

import base64
import io
import json
import random
import sys
import time
from collections import Counter
from typing import Any

import pytest
from botocore.exceptions import ClientError

from local.chaos.faults import THROTTLED, THROTTLED_MESSAGE, FaultyKinesis
from shardline.errors import InvalidRecord
from shardline.kinesis import UserRecord, md5_hash_key, validate
from shardline.kpl._identity import caller_scope
from tests.support.integration import (
    create_stream,
    kinesis_client,
    read_stream,
    shard_ranges,
    unique_stream_name,
)
from tests.support.producer_api import COUNTS, EVENTS, Sinks
from tests.support.producer_handler import (
    NAMESPACE,
    ROUTE,
    FakeContext,
    load_app,
    rest_event,
)


class Invoker:
    """Invokes the handler; keeps what it logged (parsed JSON lines) and the EMF blobs it printed."""

    def __init__(self, app: Any, capsys: pytest.CaptureFixture[str]) -> None:
        self.app = app
        self.capsys = capsys
        self.logs: list[dict[str, Any]] = []
        self.emf: list[dict[str, Any]] = []

    def __call__(self, event: dict[str, Any], remaining_ms: int = 29_000) -> tuple[int, dict[str, Any], dict]:
        stream = io.StringIO()
        handler = self.app.logger.registered_handler
        handler.stream = stream  # not setStream: that flushes the old stream, maybe a closed capture
        try:
            response = self.app.handler(event, FakeContext(remaining_ms))
        finally:
            handler.stream = sys.stderr
        self.logs.extend(json.loads(line) for line in stream.getvalue().splitlines() if line.strip())
        printed = self.capsys.readouterr().out
        self.emf.extend(json.loads(line) for line in printed.splitlines() if '"_aws"' in line)
        # The REST resolver answers with multiValueHeaders (API Gateway accepts either form).
        headers = {name.lower(): values[-1] for name, values in response["multiValueHeaders"].items()}
        return response["statusCode"], json.loads(response["body"]), headers

    def metric(self, name: str) -> float:
        """The value of `name` in the last EMF blob that has it."""
        for blob in reversed(self.emf):
            if name in blob:
                value = blob[name]  # Powertools writes a list of values per metric
                return sum(value) if isinstance(value, list) else value
        raise AssertionError(f"no EMF metric {name} in {self.emf}")


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch, moto_server: str) -> str:
    """Environment of the function: Kinesis at moto server, Powertools settings, no real credentials."""
    for name, value in {
        "AWS_ENDPOINT_URL_KINESIS": moto_server,
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_REGION": "us-east-1",
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "POWERTOOLS_METRICS_NAMESPACE": NAMESPACE,
        "POWERTOOLS_SERVICE_NAME": "shardline-producer",
        "POWERTOOLS_TRACE_DISABLED": "true",
    }.items():
        monkeypatch.setenv(name, value)
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "MAX_RECORDS_PER_REQUEST", "MAX_BODY_BYTES"):
        monkeypatch.delenv(name, raising=False)
    return moto_server


@pytest.fixture
def invoke(env: str, capsys: pytest.CaptureFixture[str]) -> Any:
    """An `Invoker` over the function module, with its default (lazily made) Kinesis client."""
    app = load_app().function  # the module's ProducerFunction: its state is the warm container's
    app.set_kinesis_client(None)
    yield Invoker(app, capsys)
    app.set_kinesis_client(None)


@pytest.fixture
def stream(env: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    """A fresh 2-shard stream served as route "orders"; yields (client, physical name)."""
    client = kinesis_client(env)
    name = unique_stream_name("producer-api")
    create_stream(client, name, shard_count=2)
    monkeypatch.setenv("SHARDLINE_STREAMS", json.dumps({ROUTE: {"streamName": name}}))
    yield client, name
    client.delete_stream(StreamName=name, EnforceConsumerDeletion=True)


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def landed(client: Any, name: str) -> dict[tuple[str, str, int | None], UserRecord]:
    """Every user record in the stream by (shard id, sequence number, sub-sequence number)."""
    return {
        (shard_id, sequence, sub): user
        for shard_id, entries in read_stream(client, name).items()
        for sequence, sub, user in entries
    }


#: The caller `rest_event`'s identity names: the producer stamps it on every record (issue 39).
REST_CALLER = "arn:aws:iam::123456789012:user/tester"


def assert_at_positions(entries: list[dict[str, Any]], expected: dict[int, UserRecord], stored: dict) -> None:
    """Each expected record sits in the stream exactly where its response entry says it landed, as
    the event's caller's (`REST_CALLER`, unless the expected record names another)."""
    for index, record in expected.items():
        if record.caller is None:
            record = record._replace(caller=REST_CALLER)
        entry = entries[index]
        position = (entry["shardId"], entry["sequenceNumber"], entry["subSequenceNumber"])
        assert stored.get(position) == record, f"record {index} is not at {position}"


# -- valid requests ----------------------------------------------------------------------------


def test_valid_records_land_where_the_answer_says(invoke, stream):
    client, name = stream
    secret = "payload-that-must-not-be-logged"
    records = [{"data": b64(f"{secret}-{i}".encode()), "partitionKey": f"user-{i % 7}"} for i in range(20)]
    records += [{"json": {"order": i, "note": "clé"}, "partitionKey": f"order-{i}"} for i in range(10)]
    records += [{"data": b64(b"pinned"), "partitionKey": "any", "explicitHashKey": "1"}]
    request_id = "c6af9ac6-7b61-11e6-9a41-93e8deadbeef"

    status, body, headers = invoke(rest_event(json.dumps({"records": records}), request_id=request_id))

    assert status == 200, body
    assert headers["content-type"] == "application/json"
    assert body["failedRecordCount"] == 0 and len(body["records"]) == len(records)
    expected = {i: UserRecord(f"user-{i % 7}", f"{secret}-{i}".encode()) for i in range(20)}
    expected.update(
        {20 + i: UserRecord(f"order-{i}", f'{{"order":{i},"note":"clé"}}'.encode()) for i in range(10)}
    )
    expected[30] = UserRecord("any", b"pinned", "1")
    stored = landed(client, name)
    assert len(stored) == len(records)
    assert_at_positions(body["records"], expected, stored)
    assert body["records"][30]["shardId"] == "shardId-000000000000"
    assert all(entry["attempts"] == 1 for entry in body["records"])

    answered = [log for log in invoke.logs if log["message"] == "answered"]
    assert answered and answered[-1]["correlation_id"] == request_id
    assert answered[-1]["status"] == 200 and answered[-1]["records"] == len(records)
    assert secret not in json.dumps(invoke.logs)
    (blob,) = [blob for blob in invoke.emf if "UserRecordsPut" in blob]
    assert blob["_aws"]["CloudWatchMetrics"][0]["Namespace"] == NAMESPACE
    assert blob["UserRecordsPut"] == [len(records)] and blob["StreamName"] == name


def test_ndjson_records_land(invoke, stream):
    client, name = stream
    lines = [json.dumps({"data": b64(f"line-{i}".encode()), "partitionKey": f"k-{i}"}) for i in range(12)]
    lines.insert(5, "")

    status, body, _ = invoke(rest_event("\n".join(lines) + "\n", "application/x-ndjson"))

    assert status == 200, body
    expected = {i: UserRecord(f"k-{i}", f"line-{i}".encode()) for i in range(12)}
    stored = landed(client, name)
    assert len(stored) == 12
    assert_at_positions(body["records"], expected, stored)


def test_base64_encoded_event_body_is_accepted(invoke, stream):
    client, name = stream
    document = json.dumps({"records": [{"json": [1, 2, 3], "partitionKey": "k"}]})
    status, body, _ = invoke(rest_event(b64(document.encode()), is_base64_encoded=True))
    assert status == 200, body
    assert list(landed(client, name).values()) == [UserRecord("k", b"[1,2,3]", caller=REST_CALLER)]


def test_warm_invocations_reuse_the_producer_and_publish_per_invocation_metrics(invoke, stream):
    _, name = stream
    one = {"records": [{"data": b64(b"x"), "partitionKey": f"k{i}"} for i in range(3)]}
    two = {"records": [{"data": b64(b"y"), "partitionKey": f"k{i}"} for i in range(5)]}

    assert invoke(rest_event(json.dumps(one)))[0] == 200
    producers = dict(invoke.app.producers)
    assert invoke.metric("UserRecordsReceived") == 3
    assert invoke(rest_event(json.dumps(two)))[0] == 200

    assert invoke.app.producers == producers, "the warm container keeps its producer (and shard map)"
    assert [key[0] for key in producers] == [name]
    assert invoke.metric("UserRecordsReceived") == 5, "counters are per invocation, not cumulative"


# -- refused requests: nothing written ---------------------------------------------------------


@pytest.mark.parametrize(
    ("record", "field"),
    [
        ({"data": "***", "partitionKey": "k"}, "data"),
        ({"data": b64(b"x"), "json": 1, "partitionKey": "k"}, "data"),
        ({"partitionKey": "k"}, "data"),
        ({"json": "x" * (1024 * 1024), "partitionKey": "k"}, "json"),
        ({"data": b64(b"x")}, "partitionKey"),
        ({"data": b64(b"x"), "partitionKey": "k" * 257}, "partitionKey"),
        ({"data": b64(b"x"), "partitionKey": "😀" * 129}, "partitionKey"),  # 129 chars, 258 UTF-16 units
        ({"data": b64(b"x"), "partitionKey": "k", "explicitHashKey": "0x10"}, "explicitHashKey"),
        ({"data": b64(b"x"), "partitionKey": "k", "explicitHashKey": str(2**128)}, "explicitHashKey"),
        ([], "record"),
    ],
)
def test_an_invalid_record_is_400_naming_it_and_nothing_is_written(invoke, stream, record, field):
    client, name = stream
    good = {"data": b64(b"fine"), "partitionKey": "ok"}

    status, body, _ = invoke(rest_event(json.dumps({"records": [good, record, good]})))

    assert status == 400
    assert [(error["index"], error["field"]) for error in body["errors"]] == [(1, field)]
    assert landed(client, name) == {}
    assert invoke.metric("RejectedRequests") == 1


def test_unknown_stream_is_404(invoke, stream):
    client, name = stream
    body = json.dumps({"records": [{"data": b64(b"x"), "partitionKey": "k"}]})
    status, answer, _ = invoke(rest_event(body, stream=name))  # the physical name is not a route
    assert status == 404 and answer == {"message": f"unknown stream {name!r}"}
    assert landed(client, name) == {}


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("POST", "/streams/orders/record"),
        ("POST", "/x"),
        ("GET", "/"),
        ("POST", "/streams/orders/records/extra"),
        ("POST", "/streams//records"),
    ],
)
def test_an_unknown_path_is_404_naming_method_and_path(invoke, stream, method, path):
    client, name = stream
    body = json.dumps({"records": [{"data": b64(b"x"), "partitionKey": "k"}]})

    status, answer, _ = invoke(rest_event(body, method=method, path=path))

    assert status == 404, answer
    assert answer["message"].startswith(f"not found: {method} {path} ")
    assert "POST /streams/{stream}/records" in answer["message"]
    assert not any(log["level"] == "ERROR" for log in invoke.logs), "not an internal error"
    assert invoke.metric("RejectedRequests") == 1
    assert landed(client, name) == {}


@pytest.mark.parametrize("method", ["GET", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS"])
def test_a_wrong_method_on_the_records_route_is_405_with_allow_post(invoke, stream, method):
    client, name = stream
    body = json.dumps({"records": [{"data": b64(b"x"), "partitionKey": "k"}]})

    status, answer, headers = invoke(rest_event(body, method=method))

    assert status == 405, answer
    assert headers["allow"] == "POST"
    assert answer == {"message": f"method {method} is not allowed on /streams/{ROUTE}/records; use POST"}
    assert not any(log["level"] == "ERROR" for log in invoke.logs), "not an internal error"
    assert landed(client, name) == {}


@pytest.mark.parametrize("content_type", ["text/plain", None, "application/json; charset=iso-8859-1"])
def test_wrong_content_type_is_415(invoke, stream, content_type):
    client, name = stream
    body = json.dumps({"records": [{"data": b64(b"x"), "partitionKey": "k"}]})
    status, _, _ = invoke(rest_event(body, content_type))
    assert status == 415
    assert landed(client, name) == {}


def test_too_many_records_is_413(invoke, stream, monkeypatch):
    client, name = stream
    monkeypatch.setenv("MAX_RECORDS_PER_REQUEST", "3")
    records = [{"data": b64(b"x"), "partitionKey": f"k{i}"} for i in range(4)]

    status, body, _ = invoke(rest_event(json.dumps({"records": records})))
    assert status == 413 and "4 records" in body["message"]
    lines = "\n".join(json.dumps(record) for record in records)
    assert invoke(rest_event(lines, "application/x-ndjson"))[0] == 413
    assert invoke(rest_event(json.dumps({"records": records[:3]})))[0] == 200
    assert len(landed(client, name)) == 3


def test_too_large_body_is_413(invoke, stream, monkeypatch):
    client, name = stream
    monkeypatch.setenv("MAX_BODY_BYTES", "1000")
    records = [{"data": b64(b"x" * 100), "partitionKey": f"k{i}"} for i in range(8)]

    status, body, _ = invoke(rest_event(json.dumps({"records": records})))

    assert status == 413 and "at most 1000" in body["message"]
    assert landed(client, name) == {}


def test_malformed_json_is_400(invoke, stream):
    client, name = stream
    status, body, _ = invoke(rest_event('{"records": [{"data": "eA==", "partitionKey": "k"}'))
    assert status == 400 and "not valid JSON" in body["message"]
    assert landed(client, name) == {}


def test_bad_configuration_is_500_without_details(invoke, stream, monkeypatch):
    monkeypatch.setenv("SHARDLINE_STREAMS", "{not json")
    request_id = "5f0c7a52-internal-error"
    status, body, _ = invoke(rest_event(json.dumps({"records": []}), request_id=request_id))
    assert status == 500
    assert body == {"message": f"internal error; request id {request_id}", "requestId": request_id}
    assert "SHARDLINE_STREAMS" not in json.dumps(body), "the exception's text is logged, never answered"
    assert any(log["level"] == "ERROR" and "SHARDLINE_STREAMS" in log["exception"] for log in invoke.logs)


# -- throttles and unavailability --------------------------------------------------------------


class HotShard(FaultyKinesis):
    """Throttles every PutRecords entry whose hash key is in `hot` (one hot shard); the rest land."""

    def __init__(self, client: Any, hot: tuple[int, int]) -> None:
        super().__init__(client, rng=random.Random(0))
        self.hot = hot

    def put_records(self, **kwargs: Any) -> dict[str, Any]:
        entries = kwargs["Records"]
        is_hot = [self.hot[0] <= entry_hash_key(entry) <= self.hot[1] for entry in entries]
        cold = [entry for entry, hot in zip(entries, is_hot, strict=True) if not hot]
        landed_entries = iter(super().put_records(**{**kwargs, "Records": cold})["Records"] if cold else [])
        throttled = {"ErrorCode": THROTTLED, "ErrorMessage": THROTTLED_MESSAGE}
        self.injected[THROTTLED] += sum(is_hot)
        results = [dict(throttled) if hot else next(landed_entries) for hot in is_hot]
        return {"FailedRecordCount": sum(1 for r in results if "ErrorCode" in r), "Records": results}


def entry_hash_key(entry: dict[str, Any]) -> int:
    explicit = entry.get("ExplicitHashKey")
    return int(explicit) if explicit is not None else md5_hash_key(entry["PartitionKey"])


def test_every_record_throttled_until_the_deadline_is_503_with_retry_after(invoke, stream):
    client, name = stream
    faulty = FaultyKinesis(kinesis_client(client.meta.endpoint_url), rng=random.Random(1))
    faulty.throttle_fraction = 1.0
    invoke.app.set_kinesis_client(faulty)
    records = [{"data": b64(f"r{i}".encode()), "partitionKey": f"k{i}"} for i in range(10)]

    remaining_ms = 7_500  # 1.5 s of flushing after the 6 s margin
    started = time.monotonic()
    status, body, headers = invoke(rest_event(json.dumps({"records": records})), remaining_ms=remaining_ms)

    # The behaviour is "answer before the invocation's time is up": bound by the time it was given.
    assert time.monotonic() - started < remaining_ms / 1000, "the answer comes before the invocation ends"
    assert status == 503, body
    assert headers["retry-after"] == "1"
    assert body["failedRecordCount"] == len(records)
    assert {entry["errorCode"] for entry in body["records"]} == {"Expired"}
    assert all(entry["attempts"] >= 1 for entry in body["records"])
    assert faulty.injected[THROTTLED] >= 1
    assert landed(client, name) == {}
    assert invoke.metric("Errors.ProvisionedThroughputExceededException") >= 1


def test_3_the_log_line_of_an_answer_names_the_caller_and_the_shard_and_sequence_numbers_written(
    invoke, stream
):
    records = [{"data": b64(f"r{i}".encode()), "id": f"id-{i}", "partitionKey": f"k{i}"} for i in range(40)]
    event = rest_event(json.dumps({"records": records}))
    event["requestContext"]["identity"] |= {"apiKeyId": "k7xmpl", "principalOrgId": "o-aa111bb222"}

    status, body, _ = invoke(event)

    assert status == 200, body
    (line,) = [log for log in invoke.logs if log["message"] == "answered"]
    assert line["caller.userArn"] == "arn:aws:iam::123456789012:user/tester"
    assert (line["caller.accountId"], line["caller.apiKeyId"]) == ("123456789012", "k7xmpl")
    assert (line["caller.principalOrgId"], line["caller.sourceIp"]) == ("o-aa111bb222", "198.51.100.7")
    expected: dict[str, set[str]] = {}
    for entry in body["records"]:
        expected.setdefault(entry["shardId"], set()).add(entry["sequenceNumber"])
    assert {shard: set(written["sequenceNumbers"]) for shard, written in line["written"].items()} == expected
    assert sum(written["records"] for written in line["written"].values()) == len(records)


def test_2_a_shard_that_keeps_throttling_answers_503_with_retry_after_long_before_the_deadline(
    invoke, stream, monkeypatch
):
    client, name = stream
    monkeypatch.setenv("THROTTLED_GIVE_UP_SECONDS", "1")
    faulty = FaultyKinesis(kinesis_client(client.meta.endpoint_url), rng=random.Random(1))
    faulty.throttle_fraction = 1.0
    invoke.app.set_kinesis_client(faulty)  # a new producer, made with the setting above
    records = [{"data": b64(f"r{i}".encode()), "id": f"id-{i}", "partitionKey": f"k{i}"} for i in range(10)]

    started = time.monotonic()
    status, body, headers = invoke(rest_event(json.dumps({"records": records})), remaining_ms=29_000)
    elapsed = time.monotonic() - started

    # Given up for the shard's throttling (its code, not Expired): the 23 s flush deadline never came.
    assert status == 503, body
    assert headers["retry-after"] == "1"
    assert {entry["errorCode"] for entry in body["records"]} == {THROTTLED}
    assert all(entry["written"] is False and entry["retry"] for entry in body["records"])
    assert elapsed < 23 / 2, f"held {elapsed:.1f} s: the request waited for the deadline"
    assert landed(client, name) == {}


def test_a_hot_shard_fails_exactly_its_records_with_207(invoke, stream):
    client, name = stream
    hot = shard_ranges(client, name)["shardId-000000000001"]
    invoke.app.set_kinesis_client(HotShard(kinesis_client(client.meta.endpoint_url), hot))
    keys = [f"customer-{i}" for i in range(24)]
    expected_failed = [i for i, key in enumerate(keys) if hot[0] <= md5_hash_key(key) <= hot[1]]
    assert 0 < len(expected_failed) < len(keys)
    records = [{"data": b64(f"r{i}".encode()), "partitionKey": key} for i, key in enumerate(keys)]

    status, body, headers = invoke(
        rest_event(json.dumps({"records": records})), remaining_ms=8_000
    )  # 2 s of flushing after the 6 s margin

    assert status == 207, body
    assert "retry-after" not in headers
    assert body["failedRecordCount"] == len(expected_failed)
    failed = [i for i, entry in enumerate(body["records"]) if "errorCode" in entry]
    assert failed == expected_failed
    for i in failed:
        assert body["records"][i]["errorCode"] == "Expired" and body["records"][i]["attempts"] >= 1
        assert set(body["records"][i]) == {"errorCode", "errorMessage", "attempts", "written", "retry"}
        assert body["records"][i]["written"] is False and body["records"][i]["retry"] == "resend"
    written = {i: UserRecord(key, f"r{i}".encode()) for i, key in enumerate(keys) if i not in failed}
    stored = landed(client, name)
    assert len(stored) == len(written)
    assert_at_positions(body["records"], written, stored)

    # The client retries exactly the failed records once the shard cools down: all land.
    invoke.app.set_kinesis_client(None)
    retry = [records[i] for i in failed]
    status, body, _ = invoke(rest_event(json.dumps({"records": retry})))
    assert status == 200 and body["failedRecordCount"] == 0
    assert len(landed(client, name)) == len(keys)


def test_a_stream_that_does_not_exist_is_404_without_retry_after(invoke, env, monkeypatch):
    missing = unique_stream_name("gone")
    monkeypatch.setenv("SHARDLINE_STREAMS", json.dumps({ROUTE: {"streamName": missing}}))
    records = [{"data": b64(b"x"), "partitionKey": f"k{i}"} for i in range(3)]

    status, body, headers = invoke(rest_event(json.dumps({"records": records})))

    assert status == 404, body
    assert "retry-after" not in headers
    assert body == {
        "message": f"stream {ROUTE!r} (Kinesis stream {missing!r}) does not exist; nothing was written"
    }
    assert invoke.metric("Errors.ResourceNotFoundException") == len(records)


def test_a_stream_deleted_under_a_warm_producer_is_404(invoke, env, monkeypatch):
    client = kinesis_client(env)
    name = unique_stream_name("deleted")
    create_stream(client, name, shard_count=1)
    monkeypatch.setenv("SHARDLINE_STREAMS", json.dumps({ROUTE: {"streamName": name}}))
    body = json.dumps({"records": [{"data": b64(b"x"), "partitionKey": "k"}]})
    assert invoke(rest_event(body))[0] == 200  # the producer and its shard map are warm now

    client.delete_stream(StreamName=name, EnforceConsumerDeletion=True)
    status, answer, headers = invoke(rest_event(body))

    assert status == 404 and "retry-after" not in headers
    assert f"(Kinesis stream {name!r}) does not exist" in answer["message"]


# -- partition keys: counted as Kinesis counts them ----------------------------------------------


def test_kinesis_mock_and_validation_agree_on_the_partition_key_limit_in_utf16_units(kinesis_mock):
    """kinesis-mock measures a key as the service (a JVM) does, in UTF-16 code units; so do we."""
    client = kinesis_client(kinesis_mock)
    name = unique_stream_name("key-length")
    create_stream(client, name, shard_count=1)
    longest, too_long = "😀" * 128, "😀" * 129  # 256 and 258 UTF-16 units; 128 and 129 characters

    assert validate([UserRecord(longest, b"x")]) == [UserRecord(longest, b"x")]
    answer = client.put_records(StreamName=name, Records=[{"Data": b"x", "PartitionKey": longest}])
    assert answer["FailedRecordCount"] == 0

    with pytest.raises(InvalidRecord) as invalid:
        validate([UserRecord(too_long, b"x")])
    assert (invalid.value.index, invalid.value.field) == (0, "partition_key")
    with pytest.raises(ClientError) as refused:
        client.put_records(StreamName=name, Records=[{"Data": b"x", "PartitionKey": too_long}])
    # The whole request is refused: InvalidArgumentException from kinesis-mock (ValidationException
    # is what the service's own model validation would say).
    assert refused.value.response["Error"]["Code"] in ("InvalidArgumentException", "ValidationException")


# -- identity: a client's re-POST is applied once by the example consumers ------------------------


def post(invoke: Invoker, records: list[dict[str, Any]], key: str | None = None, **kwargs: Any) -> tuple:
    headers = {"Idempotency-Key": key} if key is not None else None
    return invoke(rest_event(json.dumps({"records": records}), extra_headers=headers), **kwargs)


def stream_copies(client: Any, name: str) -> Counter[str]:
    """How many user records with each client id the stream holds (Kinesis-level copies)."""
    return Counter(user.id for entries in read_stream(client, name).values() for _, _, user in entries)


def test_4_a_client_repost_is_never_applied_twice_after_lost_replies_a_lost_answer_or_a_reset(invoke, stream):
    client, name = stream
    endpoint = client.meta.endpoint_url
    expected: dict[str, str] = {}  # client id -> partition key

    # A: every reply lost (the writes landed): nothing confirmed in time -> 207, all unconfirmed
    # (never the 503 of "nothing written": they may be, and are, in the stream).
    batch_a = [{"json": {"a": i}, "partitionKey": f"user-{i % 5}"} for i in range(12)]
    faulty = FaultyKinesis(kinesis_client(endpoint), rng=random.Random(4))
    faulty.lose_replies(10_000, landed=True)
    invoke.app.set_kinesis_client(faulty)
    status, body, headers = post(invoke, batch_a, "req-A", remaining_ms=7_500)
    assert status == 207, body
    assert "retry-after" not in headers
    assert [entry["id"] for entry in body["records"]] == [f"req-A:{i}" for i in range(12)]
    assert {(entry["written"], entry["retry"]) for entry in body["records"]} == {
        ("unconfirmed", "resend-same-id")
    }
    assert faulty.injected["PutRecords:ReplyLost"] >= 1
    invoke.app.set_kinesis_client(None)
    status, body, _ = post(invoke, batch_a, "req-A")  # the client posts it again, as it was
    assert status == 200 and [entry["id"] for entry in body["records"]] == [f"req-A:{i}" for i in range(12)]
    expected |= {f"req-A:{i}": record["partitionKey"] for i, record in enumerate(batch_a)}

    # B: written and answered 200, but the answer never reached the client (a 504 at the gateway,
    # a reset connection): it posts the request again with the same key.
    batch_b = [{"data": b64(f"b{i}".encode()), "partitionKey": f"user-{i % 3}"} for i in range(10)]
    assert post(invoke, batch_b, "req-B")[0] == 200
    assert post(invoke, batch_b, "req-B")[0] == 200
    expected |= {f"req-B:{i}": record["partitionKey"] for i, record in enumerate(batch_b)}

    # C: ids of its own per record; two replies lost after writing (the producer resends the sealed
    # aggregates: Kinesis copies), then the client, whose connection reset, posts it again.
    batch_c = [{"json": i, "partitionKey": f"order-{i}", "id": f"order-{i}"} for i in range(8)]
    faulty = FaultyKinesis(kinesis_client(endpoint), rng=random.Random(5))
    faulty.lose_replies(2, landed=True)
    invoke.app.set_kinesis_client(faulty)
    status, body, _ = post(invoke, batch_c)
    assert status == 200, body
    invoke.app.set_kinesis_client(None)
    status, body, _ = post(invoke, batch_c)
    assert status == 200 and [entry["id"] for entry in body["records"]] == [f"order-{i}" for i in range(8)]
    expected |= {f"order-{i}": f"order-{i}" for i in range(8)}

    copies = stream_copies(client, name)
    assert set(copies) == set(expected)
    assert all(copies[record_id] >= 2 for record_id in expected), "every id reached Kinesis at least twice"

    sinks = Sinks(client, name)

    record_ids = Counter(item["recordId"]["S"] for item in sinks.event_items())
    assert record_ids == Counter(set(expected)), "the event sink holds each id once"
    assert sinks.counts() == dict(Counter(expected.values())), "the counter counts each id once"
    for table in (EVENTS, COUNTS):
        metrics = sinks.metrics[table]
        if table == EVENTS:  # each copy of an id rewrote its one item: nothing to skip
            assert metrics["IdempotentPutsWritten"] > len(expected), "re-posts rewrote their ids' items"
        else:  # the key counter folds a re-post that shares its chunk with the original (one guard)
            reached = metrics["RecordsProcessed"] + metrics["ClientIdDuplicatesSkipped"]
            assert reached > len(expected), "re-posts reached the counter (skipped or folded), counted once"
        assert metrics["AggregateCopiesSkipped"] > 0, "producer resends skipped by their aggregate ids"
        assert metrics["RecordsFailed"] == 0


def test_7_consumers_expose_the_identity_and_the_example_sinks_use_it(invoke, stream):
    from shardline.consumer import is_once_guard
    from shardline.kpl._identity import AggregateId

    client, name = stream
    records = [
        {"json": {"n": 0}, "partitionKey": "alice", "id": "evt-0"},
        {"json": {"n": 1}, "partitionKey": "bob"},  # gets "req-7:1"
        {"json": {"n": 2}, "partitionKey": "alice", "id": "evt-2"},
    ]
    assert post(invoke, records, "req-7")[0] == 200
    anonymous = [{"json": {"n": 3}, "partitionKey": "carol"}]
    assert post(invoke, anonymous)[0] == 200
    assert post(invoke, anonymous)[0] == 200  # a re-POST of a record without an id: a new record

    sinks = Sinks(client, name)

    items = sinks.event_items()
    by_id = {item.get("recordId", {}).get("S"): item for item in items}
    assert set(by_id) == {"evt-0", "req-7:1", "evt-2", None}
    for record_id in ("evt-0", "req-7:1", "evt-2"):
        item = by_id[record_id]
        aggregate = AggregateId.parse(item["aggregateId"]["S"])
        assert aggregate.counter >= 1 and aggregate.key == f"{aggregate.producer}.{aggregate.lane}"
    anonymous_items = [item for item in items if "recordId" not in item]
    assert len(anonymous_items) == 2, "without an id, a client re-POST is a new record: applied again"
    assert all("aggregateId" in item for item in items)

    for record_id in ("evt-0", "req-7:1", "evt-2"):  # keyed by the scoped id: one item for all copies
        item = by_id[record_id]
        kind = "k" if item.get("idDerived", {}).get("BOOL") else "i"
        scoped_id = f"{caller_scope(item.get('caller', {}).get('S'))}/{kind}/{record_id}"
        assert {"pk": item["pk"], "sk": item["sk"]} == sinks.events.id_key(scoped_id)

    assert sinks.counts() == {"alice": 2, "bob": 1, "carol": 2}
    counter_guards = sinks.counter_guards()
    assert len(counter_guards) == 3 and all("count" not in guard for guard in counter_guards)
    assert all(len(guard["partitionKey"]["S"]) > 256 for guard in counter_guards), "no partition key's length"

    # The rule for a sink of one's own, as the examples show it: an item keyed by the record's id
    # is one idempotent put and needs no guard; a count (not idempotent) carries one `once` guard
    # per id in its transaction; a record without an id carries none.
    from shardline.consumer import ConsumedRecord, is_idempotent_put

    def consumed(record_id: str | None) -> ConsumedRecord:
        return ConsumedRecord(
            name, "shardId-000000000000", "1", 0, "k", None, b"x", 1.0, "p.0.1.1", record_id
        )

    counter_chunk = partial_sink(sinks.counter.count, COUNTS)  # a batch handler: a chunk of records
    for record_id in ("abc", None):
        (event,) = sinks.events.to_sink(EVENTS, consumed(record_id))
        assert is_idempotent_put(event)
        assert sum(map(is_once_guard, counter_chunk([consumed(record_id)]))) == (record_id is not None)
    # The key counter's one list for a chunk: one guard per client id, however often it is there.
    assert sum(map(is_once_guard, counter_chunk([consumed("abc"), consumed("abc"), consumed(None)]))) == 1


def partial_sink(handler: Any, table: str) -> Any:
    return lambda records: handler(table, records)


def test_1_a_record_whose_data_is_a_kpl_aggregate_reaches_consumers_as_the_one_record(invoke, stream):
    """A caller posts one record whose data is itself a KPL aggregate of 20,000 members with keys
    Kinesis refuses (empty, 300 characters): it goes inside shardline's own aggregate, so both
    example consumers read back exactly the record that was accepted — one event, one count for
    the caller's key — never 20,000 records with unvalidated keys."""
    from shardline.kpl import encode

    client, name = stream
    members = [UserRecord("" if i % 2 else "other-tenant" * 25, b"x") for i in range(20_000)]
    forged = encode(members)
    status, body, _ = post(invoke, [{"data": b64(forged), "partitionKey": "tenant-a", "id": "forged-1"}])
    assert status == 200, body

    sinks = Sinks(client, name)

    items = sinks.event_items()
    assert [(item["partitionKey"]["S"], item["data"]["B"]) for item in items] == [("tenant-a", forged)]
    assert sinks.counts() == {"tenant-a": 1}
    for table in (EVENTS, COUNTS):
        assert sinks.metrics[table]["UserRecords"] == 1


def test_3_a_stream_that_refuses_explicit_hash_keys_answers_400_and_writes_nothing(
    invoke, stream, monkeypatch
):
    client, name = stream
    routes = {ROUTE: {"streamName": name, "explicitHashKeys": False}}
    monkeypatch.setenv("SHARDLINE_STREAMS", json.dumps(routes))
    aimed = [
        {"json": {"n": 0}, "partitionKey": "tenant-a"},
        {"json": {"n": 1}, "partitionKey": "tenant-a", "explicitHashKey": "0"},  # aimed at one shard
    ]
    status, body, _ = post(invoke, aimed)
    assert status == 400, body
    assert [(e["index"], e["field"]) for e in body["errors"]] == [(1, "explicitHashKey")]
    assert not any(read_stream(client, name).values()), "nothing written"
    status, body, _ = post(invoke, aimed[:1])  # routed by its partition key: taken
    assert status == 200, body
    assert sum(len(entries) for entries in read_stream(client, name).values()) == 1
