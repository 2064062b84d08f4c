"""Every id applied exactly once, whatever interleaving of sends, lost replies, retries, re-POSTs,
reshards and consumer crashes hypothesis draws.

The real `Producer` sends to a stream held in memory (`SimStream`: shards with hash ranges,
Kinesis-shaped sequence numbers, splits that close a parent and open two children) that loses
replies before or after the write, answers 503, throttles entries, and lands slow writes after the
client gave up (the retry first). The real `KinesisConsumer` reads each shard the way the
event-source mapping does (`MappingReplay`, parents before children) with the testing kit's
`InMemoryLeaseTable`, whose faults crash deliveries before and after their commits. The sink
counts applications per identity with `ADD`, so a second application shows as a count of 2.

Wire-level behaviour (botocore, moto server, the local endpoint) is tested elsewhere; this test is
about the interleavings, which only a fast in-memory stream can explore by the thousand.
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Callable, Mapping
from typing import Any

from botocore.exceptions import ClientError, ReadTimeoutError
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from shardline.consumer import ConsumedRecord, KinesisConsumer, once
from shardline.kinesis import UserRecord
from shardline.producer import Producer, ProducerConfig
from shardline.testing import FakeLambdaContext, InMemoryLeaseTable, MappingReplay, event_record

STREAM = "events"
FIRST_SEQUENCE = 49_590_338_271_490_256_608_559_692_538_361_571_095_921_575_989_136_588_898
MAX_HASH = 2**128 - 1
FAULTS = ("ok", "ok", "ok", "lost_after", "lost_before", "throttle", "brownout", "slow")


class Crash(BaseException):
    """The consumer's process dies (not an `Exception`: nothing in shardline catches it)."""


class SimShard:
    def __init__(self, shard_id: str, start: int, end: int, parents: tuple[str, ...] = ()) -> None:
        self.shard_id, self.start, self.end, self.parents = shard_id, start, end, parents
        self.records: list[dict[str, Any]] = []
        self.children: list[str] = []
        self.closed = False

    def listing(self) -> dict[str, Any]:
        shard: dict[str, Any] = {
            "ShardId": self.shard_id,
            "HashKeyRange": {"StartingHashKey": str(self.start), "EndingHashKey": str(self.end)},
            "SequenceNumberRange": {"StartingSequenceNumber": str(FIRST_SEQUENCE)},
        }
        if self.parents:
            shard["ParentShardId"] = self.parents[0]
        if len(self.parents) > 1:  # a merge's child
            shard["AdjacentParentShardId"] = self.parents[1]
        if self.closed:
            shard["SequenceNumberRange"]["EndingSequenceNumber"] = str(FIRST_SEQUENCE + 10**30)
        return shard


class SimStream:
    """One Kinesis stream in memory, with a queue of faults for the next PutRecords calls."""

    def __init__(self, shard_count: int, faults: list[str]) -> None:
        width = (MAX_HASH + 1) // shard_count
        self.shards: dict[str, SimShard] = {}
        for index in range(shard_count):
            end = MAX_HASH if index == shard_count - 1 else (index + 1) * width - 1
            self._add(SimShard(self._next_id(), index * width, end))
        self.faults = list(faults)
        self.sequence = itertools.count(FIRST_SEQUENCE, 10**16)
        self.now = 1_700_000_000.0
        self.slow: list[Mapping[str, Any]] = []  # entries of a call that timed out, landing after the next
        #: Run (and dropped) when a call's reply is lost after its write: what the world does in
        #: that gap, e.g. a reshard, before the producer resends.
        self.after_lost_reply: list[Callable[[], None]] = []

    def _next_id(self) -> str:
        return f"shardId-{len(self.shards):012d}"

    def _add(self, shard: SimShard) -> None:
        self.shards[shard.shard_id] = shard

    # -- what the producer calls -------------------------------------------------------------

    def list_shards(self, **_: Any) -> dict[str, Any]:
        return {"Shards": [shard.listing() for shard in self.shards.values()]}

    def put_records(self, *, StreamName: str, Records: list[Mapping[str, Any]]) -> dict[str, Any]:
        assert StreamName == STREAM
        fault = self.faults.pop(0) if self.faults else "ok"
        if fault == "lost_before":
            raise ReadTimeoutError(endpoint_url="http://sim")
        if fault == "brownout":
            raise ClientError(
                {"Error": {"Code": "ServiceUnavailable"}, "ResponseMetadata": {"HTTPStatusCode": 503}},
                "PutRecords",
            )
        if fault == "slow":
            self.slow.extend(Records)
            raise ReadTimeoutError(endpoint_url="http://sim")
        entries = []
        for index, entry in enumerate(Records):
            if fault == "throttle" and index % 2 == 0:
                entries.append({"ErrorCode": "ProvisionedThroughputExceededException", "ErrorMessage": "x"})
            else:
                entries.append(self._write(entry))
        slow, self.slow = self.slow, []
        for entry in slow:  # the call that timed out lands now, after its retry
            self._write(entry)
        if fault == "lost_after":
            hooks, self.after_lost_reply = self.after_lost_reply, []
            for hook in hooks:
                hook()
            raise ReadTimeoutError(endpoint_url="http://sim")
        failed = sum(1 for entry in entries if "ErrorCode" in entry)
        return {"FailedRecordCount": failed, "Records": entries}

    def _write(self, entry: Mapping[str, Any]) -> dict[str, str]:
        explicit = entry.get("ExplicitHashKey")
        key = int(explicit) if explicit is not None else _md5(entry["PartitionKey"])
        shard = next(s for s in self.shards.values() if not s.closed and s.start <= key <= s.end)
        self.now += 0.01
        sequence = str(next(self.sequence))
        shard.records.append(
            {
                "PartitionKey": entry["PartitionKey"],
                "Data": bytes(entry["Data"]),
                "SequenceNumber": sequence,
                "ApproximateArrivalTimestamp": self.now,
            }
        )
        return {"ShardId": shard.shard_id, "SequenceNumber": sequence}

    # -- what the consumer's lineage calls -------------------------------------------------------

    def get_shard_iterator(self, *, ShardId: str, ShardIteratorType: str, **kwargs: Any) -> dict[str, str]:
        records = self.shards[ShardId].records
        start = 0
        if ShardIteratorType == "AT_SEQUENCE_NUMBER":
            wanted = int(kwargs["StartingSequenceNumber"])
            start = next(
                (i for i, r in enumerate(records) if int(r["SequenceNumber"]) >= wanted), len(records)
            )
        return {"ShardIterator": f"{ShardId}|{start}"}

    def get_records(self, *, ShardIterator: str, Limit: int = 10_000, **_: Any) -> dict[str, Any]:
        shard_id, start = ShardIterator.split("|")
        shard = self.shards[shard_id]
        page = shard.records[int(start) : int(start) + Limit]
        end = int(start) + len(page)
        done = shard.closed and end >= len(shard.records)
        answer: dict[str, Any] = {"Records": page, "MillisBehindLatest": 0}
        answer["NextShardIterator"] = None if done else f"{shard_id}|{end}"
        if done:
            answer["ChildShards"] = [{"ShardId": child} for child in shard.children]
        return answer

    # -- resharding ------------------------------------------------------------------------------

    def split(self, pick: int) -> None:
        open_shards = [s for s in self.shards.values() if not s.closed and s.end - s.start > 1]
        if not open_shards:
            return
        parent = open_shards[pick % len(open_shards)]
        middle = (parent.start + parent.end) // 2
        parent.closed = True
        for start, end in ((parent.start, middle), (middle + 1, parent.end)):
            child = SimShard(self._next_id(), start, end, (parent.shard_id,))
            self._add(child)
            parent.children.append(child.shard_id)

    def merge(self, pick: int) -> None:
        """Merge two adjacent open shards (the `pick`-th pair) into one child."""
        open_shards = sorted((s for s in self.shards.values() if not s.closed), key=lambda s: s.start)
        pairs = [(a, b) for a, b in itertools.pairwise(open_shards) if a.end + 1 == b.start]
        if not pairs:
            return
        left, right = pairs[pick % len(pairs)]
        child = SimShard(self._next_id(), left.start, right.end, (left.shard_id, right.shard_id))
        for parent in (left, right):
            parent.closed = True
            parent.children.append(child.shard_id)
        self._add(child)

    def in_lineage_order(self) -> list[SimShard]:
        return sorted(self.shards.values(), key=lambda s: s.shard_id)  # parents are numbered first


def _md5(partition_key: str) -> int:
    return int.from_bytes(hashlib.md5(partition_key.encode()).digest(), "big")


class ProducerView:
    """The stream as the producer's client: it may list shards and write, and any read is counted."""

    def __init__(self, stream: SimStream) -> None:
        self.list_shards, self.put_records = stream.list_shards, stream.put_records
        self.reads = 0

    def get_records(self, **_: Any) -> dict[str, Any]:
        self.reads += 1
        raise ClientError({"Error": {"Code": "AccessDeniedException"}}, "GetRecords")

    get_shard_iterator = get_records


class Pipeline:
    """The producer, the stream, one consumer group and its sink, driven step by step."""

    def __init__(self, stream: SimStream, batch_size: int) -> None:
        self.stream, self.batch_size = stream, batch_size
        config = ProducerConfig(record_ttl=2.0, retry_base_delay=0.001, retry_max_delay=0.002)
        self.client = ProducerView(stream)
        self.producer = Producer(self.client, STREAM, config=config)
        self.table = InMemoryLeaseTable(key_schema={"sink": ["pk"]})
        self.consumer = KinesisConsumer("model", self.table, kinesis=stream, checkpoint_interval=0.0)
        self.consumer.handler(self._apply)
        self.requests: list[list[UserRecord]] = []
        self.confirmed: set[str] = set()  # identities with a confirmed success
        self.sent: set[str] = set()
        self.crash_at: int | None = None
        self.handled = 0

    def _apply(self, record: ConsumedRecord) -> list[dict[str, Any]]:
        self.handled += 1
        if self.crash_at is not None and self.handled >= self.crash_at:
            self.crash_at = None
            raise Crash("the process died in the handler")
        identity = record.id or record.data.decode()
        writes = [once("sink", {"pk": {"S": f"once#{record.id}"}})] if record.id else []
        return [
            *writes,
            {
                "Update": {
                    "TableName": "sink",
                    "Key": {"pk": {"S": identity}},
                    "UpdateExpression": "ADD applied :one",
                    "ExpressionAttributeValues": {":one": {"N": "1"}},
                }
            },
        ]

    def send(self, records: list[UserRecord]) -> None:
        self.requests.append(records)
        self.sent.update(r.id or r.data.decode() for r in records)
        for record, result in zip(records, self.producer.put_many(records, deadline=5.0), strict=True):
            if result.success:
                assert result.sequence_number is not None and result.shard_id is not None
                self.confirmed.add(record.id or record.data.decode())

    def consume(self, shard_id: str, crash: int) -> None:
        if crash == 1:
            self.crash_at = self.handled + 1
        elif crash == 2:
            self.table.fail_next("checkpoint_with", Crash("died after its commit"), landed=True)
        elif crash == 3:
            self.table.fail_next("checkpoint_with", Crash("died before its commit"))
        records = [event_record(STREAM, shard_id, r) for r in self.stream.shards[shard_id].records]
        replay = MappingReplay(records, batch_size=self.batch_size)
        for _ in range(60):  # a child waits (fails) until its parents are done
            if replay.finished:
                break
            replay.invoke(self.consumer.process, FakeLambdaContext())

    def applied(self) -> dict[str, int]:
        return {
            item["pk"]["S"]: int(item["applied"]["N"])
            for item in self.table.items("sink")
            if not item["pk"]["S"].startswith("once#")
        }


operations = st.lists(
    st.one_of(
        st.tuples(st.just("send"), st.integers(1, 25), st.booleans()),
        st.tuples(st.just("repost"), st.integers(0, 1_000), st.just(False)),
        st.tuples(st.just("split"), st.integers(0, 1_000), st.just(False)),
        st.tuples(st.just("consume"), st.integers(0, 1_000), st.integers(0, 3)),
    ),
    min_size=1,
    max_size=10,
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(operations, st.lists(st.sampled_from(FAULTS), max_size=40), st.integers(1, 3), st.integers(1, 7))
def test_every_id_is_applied_exactly_once_whatever_the_interleaving(ops, faults, shard_count, batch_size):
    stream = SimStream(shard_count, faults)
    pipeline = Pipeline(stream, batch_size)
    try:
        run(pipeline, stream, ops)
    finally:
        pipeline.producer.close()
    applied = pipeline.applied()
    metrics = pipeline.consumer.metrics.snapshot()
    for name in ("AggregateCopiesSkipped", "ClientIdDuplicatesSkipped", "OutOfRangeRecordsSkipped"):
        event(f"{name} > 0: {metrics[name] > 0}")
    event(f"shards at the end: {len(stream.shards)}")
    assert pipeline.client.reads == 0, "the producer read the stream"
    assert all(count == 1 for count in applied.values()), {k: v for k, v in applied.items() if v != 1}
    assert pipeline.confirmed <= set(applied), sorted(pipeline.confirmed - set(applied))[:5]
    assert set(applied) <= pipeline.sent


def run(pipeline: Pipeline, stream: SimStream, ops: list[tuple[str, int, Any]]) -> None:
    serial = itertools.count()
    for op, number, option in ops:
        if op == "send":
            with_ids = bool(option)
            batch = [
                UserRecord(f"key-{n % 5}", f"r{n}".encode(), None, f"id-{n}" if with_ids else None)
                for n in (next(serial) for _ in range(number))
            ]
            pipeline.send(batch)
        elif op == "repost":
            with_ids = [request for request in pipeline.requests if request[0].id is not None]
            if with_ids:
                pipeline.send(with_ids[number % len(with_ids)])
        elif op == "split":
            stream.split(number)
        else:
            shards = stream.in_lineage_order()
            pipeline.consume(shards[number % len(shards)].shard_id, int(option))
    # The client re-POSTs every request with ids until each of its records is confirmed.
    stream.faults.clear()
    for request in [r for r in pipeline.requests if r[0].id is not None]:
        if any(record.id not in pipeline.confirmed for record in request):
            pipeline.send(request)
    pipeline.crash_at = None
    for shard in stream.in_lineage_order():
        pipeline.consume(shard.shard_id, 0)
