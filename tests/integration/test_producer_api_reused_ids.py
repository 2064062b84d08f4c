"""Issue 39, property 3 (API side): an id re-used with another payload is refused, never dropped.

Through the local API Gateway on loopback (SigV4-signed) to the real producer function, with its
idempotency table and the stream on moto server: a record re-using an id (its own, or
`<Idempotency-Key>:<index>`) that was written with another body answers 422 naming the record, the
id and the key, and nothing of that request reaches the stream (read back); the same body posted
again is accepted and applied once by both example sinks.
"""

from __future__ import annotations

import base64
import random
import threading
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from local.chaos.faults import FaultyKinesis
from shardline.aws_lambda._http_idempotency import (
    EXPIRES_AT_ATTRIBUTE,
    HASH_ATTRIBUTE,
    KEY_ATTRIBUTE,
    IdempotencyStore,
    payload_hash,
)
from shardline.kinesis import UserRecord
from shardline.producer._result import RecordResult
from tests.support.integration import kinesis_client, read_stream
from tests.support.producer_api import LoopbackApi, Sinks, create_idempotency_table, loopback_api

pytestmark = pytest.mark.integration


@pytest.fixture
def api(moto_server: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[LoopbackApi]:
    yield from loopback_api(moto_server, monkeypatch)


def in_stream(api: LoopbackApi) -> Counter[tuple[str | None, bytes]]:
    """Copies in the stream of each (id, data)."""
    return Counter(
        (user.id, user.data)
        for entries in read_stream(api.kinesis, api.stream).values()
        for *_, user in entries
    )


def record(data: bytes, key: str, record_id: str | None = None) -> dict[str, Any]:
    return {"data": base64.b64encode(data).decode(), "partitionKey": key} | (
        {"id": record_id} if record_id else {}
    )


def test_property_3_api_a_reused_id_with_another_body_is_422_and_nothing_of_the_request_is_written(api):
    # An explicit id, then the same id with another body in a request with a new record beside it.
    status, _, body = api.post([record(b"first", "pk-order-1", "order-1")])
    assert status == 200, body
    status, _, body = api.post(
        [record(b"new", "pk-new-0", "new-0"), record(b"second", "pk-order-1", "order-1")]
    )
    assert status == 422, body
    (error,) = body["errors"]
    assert (error["index"], error["field"], error["id"]) == (1, "id", "order-1")
    assert "idempotencyKey" not in error and "order-1" in error["message"]
    assert "nothing was written" in body["message"]

    # An Idempotency-Key's derived ids: record 1 of "req-7" re-posted with another body.
    batch = [record(b"a", "pk-a"), record(b"b", "pk-b")]
    assert api.post(batch, "req-7")[0] == 200
    changed = [record(b"a", "pk-a"), record(b"B!", "pk-b")]
    status, _, body = api.post(changed, "req-7")
    assert status == 422, body
    (error,) = body["errors"]
    assert (error["index"], error["id"], error["idempotencyKey"]) == (1, "req-7:1", "req-7")
    assert body["idempotencyKey"] == "req-7"
    # another partition key is another payload too
    status, _, body = api.post([record(b"a", "pk-elsewhere"), record(b"b", "pk-b")], "req-7")
    assert status == 422 and [e["index"] for e in body["errors"]] == [0], body

    copies = in_stream(api)
    assert copies[("order-1", b"first")] == 1 and ("order-1", b"second") not in copies
    assert ("new-0", b"new") not in copies, "a record beside the refused one was written"
    assert copies[("req-7:1", b"b")] == 1 and ("req-7:1", b"B!") not in copies
    assert copies[("req-7:0", b"a")] == 1, "the refused request's unchanged record was written again"

    # The same bodies posted again: accepted, and applied once by both sinks.
    assert api.post([record(b"first", "pk-order-1", "order-1")])[0] == 200
    assert api.post(batch, "req-7")[0] == 200
    sinks = Sinks(api.kinesis, api.stream)
    assert sinks.counts() == {"pk-order-1": 1, "pk-a": 1, "pk-b": 1}
    items = {item["recordId"]["S"]: item["data"]["B"] for item in sinks.event_items()}
    assert items == {"order-1": b"first", "req-7:0": b"a", "req-7:1": b"b"}
    # The API's hash of a payload is the consumers' (`ConsumedRecord.payload_hash`), item for item.
    from shardline.consumer._idempotent import PAYLOAD_ATTRIBUTE

    kept = {item[KEY_ATTRIBUTE]["S"].rsplit("/", 1)[-1]: item[HASH_ATTRIBUTE]["S"] for item in api.id_items()}
    sunk = {item["recordId"]["S"]: item[PAYLOAD_ATTRIBUTE]["S"] for item in sinks.event_items()}
    assert sunk == {"order-1": kept["order-1"], "req-7:0": kept["req-7:0"], "req-7:1": kept["req-7:1"]}


def test_property_3_api_an_explicit_id_and_a_derived_id_of_the_same_text_are_different_ids(api):
    """`k:1` as a record's own id and `k:1` derived from `Idempotency-Key: k` are two identities:
    different bodies under them are no conflict."""
    assert api.post([record(b"explicit", "pk-x", "k:1")])[0] == 200
    status, _, body = api.post([record(b"zero", "pk-0"), record(b"derived", "pk-1")], "k")
    assert status == 200, body


def test_property_3_api_an_unconfirmed_record_is_remembered_a_refused_one_is_not(api):
    """A record whose reply was lost may be in the stream: its hash is kept (another body under its
    id is refused). A record that failed without a copy (throttled to the end) is not: its id is free."""
    faulty = FaultyKinesis(kinesis_client(api.kinesis.meta.endpoint_url), rng=random.Random(3))
    faulty.lose_replies(10_000, landed=True)
    api.use(faulty)
    status, _, body = api.post([record(b"lost", "pk-lost", "lost-1")])
    assert status == 207 and body["records"][0]["written"] == "unconfirmed", body
    faulty = FaultyKinesis(kinesis_client(api.kinesis.meta.endpoint_url), rng=random.Random(3))
    faulty.throttle_fraction = 1.0
    api.use(faulty)
    status, _, body = api.post([record(b"refused", "pk-refused", "refused-1")])
    assert status == 503 and body["records"][0]["written"] is False, body
    api.use(None)

    assert api.post([record(b"other", "pk-lost", "lost-1")])[0] == 422
    assert api.post([record(b"other", "pk-refused", "refused-1")])[0] == 200


def test_property_3_api_an_unreadable_table_is_503_with_nothing_sent(api, monkeypatch):
    monkeypatch.setenv("IDEMPOTENCY_TABLE", "no-such-table")
    status, headers, body = api.post([record(b"x", "pk-x", "x-1"), record(b"y", "pk-y")])
    assert status == 503 and headers["retry-after"] == "1", body
    assert [(e["written"], e["retry"]) for e in body["records"]] == [(False, "resend")] * 2
    assert body["records"][0]["id"] == "x-1"
    assert in_stream(api) == Counter()


def test_property_3_api_hashes_are_scoped_by_stream_and_caller_and_expire(moto_server):
    """The store itself: another caller, another stream or a namespace never shares a hash; an
    item past its expiry counts as absent; each write carries stream retention + 14 days."""
    client = create_idempotency_table(moto_server, "ids-scoping")
    now = [1_000_000.0]
    store = IdempotencyStore(lambda: client, "ids-scoping", ttl_seconds=3600, clock=lambda: now[0])
    alice, bob = "arn:aws:iam::1:user/a", "arn:aws:iam::1:user/b"
    first = UserRecord("pk", b"one", None, "id-1")
    other = UserRecord("pk", b"two", None, "id-1")
    written = RecordResult(True, shard_id="shardId-000000000000", sequence_number="1")
    assert store.remember("s1", [first], [written], caller=alice) == 0
    assert [c.record_index for c in store.conflicts("s1", [other], caller=alice)] == [0]
    assert store.conflicts("s1", [first], caller=alice) == []
    assert store.conflicts("s1", [other], caller=bob) == [], "another caller's id"
    assert store.conflicts("s2", [other], caller=alice) == [], "another stream's id"
    assert store.conflicts("s1", [other._replace(id_derived=True)], caller=alice) == []
    assert store.conflicts("s1", [other._replace(caller=bob)], caller=alice) == [], "its own caller"
    (item,) = client.scan(TableName="ids-scoping")["Items"]
    assert item[HASH_ATTRIBUTE]["S"] == payload_hash(first)
    assert int(item[EXPIRES_AT_ATTRIBUTE]["N"]) == 1_000_000 + 3600
    assert item[KEY_ATTRIBUTE]["S"].startswith("s1/") and item[KEY_ATTRIBUTE]["S"].endswith("/i/id-1")
    now[0] += 3601
    assert store.conflicts("s1", [other], caller=alice) == [], "an expired hash holds nothing"


class RefusedWrites:
    """The idempotency table's client, but every BatchWriteItem is throttled (nothing recorded)."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.refused = 0

    def batch_get_item(self, **kwargs: Any) -> Any:
        return self.client.batch_get_item(**kwargs)

    def batch_write_item(self, **kwargs: Any) -> Any:
        from botocore.exceptions import ClientError

        self.refused += 1
        error = {"Error": {"Code": "ProvisionedThroughputExceededException", "Message": "injected"}}
        raise ClientError(error, "BatchWriteItem")


def test_property_3_api_records_written_but_not_recorded_are_answered_as_written(api, moto_server):
    """The hashes cannot be recorded after the write: the answer still says what was written (a 200,
    never a 500 that would have the client post again), and the loss is counted; the id then stays
    open to another body, which the consumers catch as a conflict (README)."""
    import boto3

    table = api.function._known_ids(api.function_settings())
    dynamodb = boto3.client(
        "dynamodb", endpoint_url=moto_server, region_name="us-east-1",
        aws_access_key_id="testing", aws_secret_access_key="testing",
    )  # fmt: skip
    refused = RefusedWrites(dynamodb)
    api.function._id_store = IdempotencyStore(lambda: refused, table.table, sleep=lambda _: None)

    status, _, body = api.post([record(b"one", "pk-unrecorded", "unrecorded-1")])
    assert status == 200, body
    assert refused.refused >= 1
    status, _, body = api.post([record(b"two", "pk-unrecorded", "unrecorded-1")])
    assert status == 200, body


class InFlight:
    """The idempotency table's client, counting its calls and the most ever in flight at once (each
    held a little, so that calls made together overlap)."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.lock = threading.Lock()
        self.now = self.most = 0
        self.calls: Counter[str] = Counter()

    def _call(self, name: str, **kwargs: Any) -> Any:
        with self.lock:
            self.now += 1
            self.most = max(self.most, self.now)
            self.calls[name] += 1
        try:
            time.sleep(0.02)
            return getattr(self.client, name)(**kwargs)
        finally:
            with self.lock:
                self.now -= 1

    def batch_get_item(self, **kwargs: Any) -> Any:
        return self._call("batch_get_item", **kwargs)

    def batch_write_item(self, **kwargs: Any) -> Any:
        return self._call("batch_write_item", **kwargs)


def test_a_requests_reads_and_writes_of_the_table_are_made_together_not_one_after_another(moto_server):
    """A 500-record request reads its ids in 5 calls and records them in 20: up to 8 in flight at
    once, every hash recorded and read back (one after another, they were most of the producer's
    latency: about a second per request behind the local endpoint's other writes)."""
    inflight = InFlight(create_idempotency_table(moto_server, "ids-in-flight"))
    store = IdempotencyStore(lambda: inflight, "ids-in-flight")
    records = [UserRecord(f"pk{i}", b"body", None, f"id-{i}") for i in range(500)]
    shard = "shardId-000000000000"
    written = [RecordResult(True, shard_id=shard, sequence_number=str(i)) for i in range(500)]
    assert store.remember("s", records, written) == 0
    assert inflight.calls["batch_write_item"] == 20 and 1 < inflight.most <= 8
    inflight.most = 0
    others = [record._replace(data=b"another body") for record in records]
    assert [c.record_index for c in store.conflicts("s", others)] == list(range(500))
    assert inflight.calls["batch_get_item"] == 5 and 1 < inflight.most <= 5
