"""Chained reshards between a lost copy and its resend, on a loopback Kinesis, and both consumer drivers.

`resend_after(endpoint, shards, reshard)` makes the stream of a test of issue 39's property 5:
a stream of `shards` shards; the real `Producer` (its map loaded) sends 8 records whose explicit
hash keys spread over the whole range (two per quarter) through `LossyProxy`; their PutRecords
lands and its reply is lost; in between, `reshard` runs (e.g. a split and then a split of each
child); the producer's resend then lands in the descendants, re-routed whole to each open shard
that holds one of its members. So every record is in the stream twice: once in an ancestor, once
in a descendant, with shards in between that received nothing.

The two drivers consume it, each with a transactional counting sink
(`ADD n :1` keyed by the record's data, in the checkpoint's transaction) on a loopback DynamoDB:

- `lambda_driver`: the event-source mapping, as Lambda runs it — each shard that holds records
  replayed (`MappingReplay`) parents before children; a shard without records is never invoked,
  so its lease row never exists;
- `worker_driver`: an in-process `Worker` (its own discovery, leases, readers): a shard without
  records gets a row at discovery and is marked SHARD_END with no checkpoint ever written.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from typing import Any

from shardline.consumer import KinesisConsumer, LeaseTable, Worker
from shardline.kinesis import SHARD_END, UserRecord
from shardline.producer import Producer, ProducerConfig
from shardline.testing import MappingReplay, read_shard
from tests.support.consumer_identity import counting_sink
from tests.support.identity import LOSE_AFTER, LossyProxy, producer_client, read_copies
from tests.support.integration import (
    aws_client,
    create_sink_table,
    create_stream,
    kinesis_client,
    open_shards,
    unique_stream_name,
    wait_active,
)

TOP = 2**128 - 1
QUARTER = 2**126
FAST = ProducerConfig(retry_base_delay=0.01, retry_max_delay=0.05)
WARM_UP = UserRecord("warm-up", b"warm-up", "1")


def spread(count: int = 8) -> list[UserRecord]:
    """`count` records with explicit hash keys spread evenly over the whole range."""
    step = (TOP + 1) // count
    return [UserRecord(f"k{i}", f"record-{i}".encode(), str(i * step + step // 2)) for i in range(count)]


def split(raw: Any, stream: str, shard: dict[str, Any]) -> None:
    """Split `shard` in the middle of its range; wait until the stream is active again."""
    low, high = int(shard["HashKeyRange"]["StartingHashKey"]), int(shard["HashKeyRange"]["EndingHashKey"])
    raw.split_shard(
        StreamName=stream, ShardToSplit=shard["ShardId"], NewStartingHashKey=str((low + high + 1) // 2)
    )
    wait_active(raw, stream)


def merge(raw: Any, stream: str, low: dict[str, Any], high: dict[str, Any]) -> None:
    raw.merge_shards(StreamName=stream, ShardToMerge=low["ShardId"], AdjacentShardToMerge=high["ShardId"])
    wait_active(raw, stream)


def split_split(raw: Any, stream: str) -> None:
    """The one shard split, then each child split again at once: four grandchildren."""
    [parent] = open_shards(raw, stream)
    split(raw, stream, parent)
    for child in open_shards(raw, stream):
        split(raw, stream, child)


def split_merge(raw: Any, stream: str) -> None:
    """The one shard split, then its two children merged back at once."""
    [parent] = open_shards(raw, stream)
    split(raw, stream, parent)
    merge(raw, stream, *open_shards(raw, stream))


def merge_split(raw: Any, stream: str) -> None:
    """The two shards merged, then the merged child split at a quarter (not where they met)."""
    merge(raw, stream, *open_shards(raw, stream))
    [child] = open_shards(raw, stream)
    raw.split_shard(StreamName=stream, ShardToSplit=child["ShardId"], NewStartingHashKey=str(QUARTER))
    wait_active(raw, stream)


def resend_after(endpoint: str, shards: int, reshard: Callable[[Any, str], None]) -> tuple[Any, str]:
    """A stream whose records' lost copies are in the first shards and whose resends are in the
    descendants `reshard` made (module docstring): (Kinesis client, stream name)."""
    raw = kinesis_client(endpoint)
    stream = unique_stream_name("lineage")
    create_stream(raw, stream, shard_count=shards)
    with LossyProxy(endpoint) as proxy:
        producer = Producer(producer_client(proxy.url, read_timeout=10), stream, config=FAST)
        assert producer.put_many([WARM_UP])[0].success  # the producer's map: the shards before
        done: list[int] = []

        def reshard_once() -> None:  # after the copy landed, before its reply is lost
            if not done:
                done.append(1)
                reshard(raw, stream)

        proxy.after_forward = reshard_once
        proxy.script(LOSE_AFTER)
        results = producer.put_many(spread(), deadline=30)
        proxy.after_forward = None
    assert done and all(result.success for result in results), results
    first = {shard["ShardId"] for shard in raw.list_shards(StreamName=stream)["Shards"]} - {
        shard["ShardId"] for shard in open_shards(raw, stream)
    }
    copies = read_copies(raw, stream)
    ids = {copy.aggregate_id for copy in copies}
    assert all(aggregate is not None for aggregate in ids)
    assert {copy.shard_id for copy in copies} - first == {result.shard_id for result in results}, (
        "the resends landed in the open descendants only"
    )
    listed = raw.list_shards(StreamName=stream)["Shards"]
    between = {shard["ShardId"] for shard in listed if shard.get("ParentShardId")} & first
    assert between and not {copy.shard_id for copy in copies} & between, "the shards between received nothing"
    return raw, stream


def expected() -> dict[str, int]:
    return {record.data.decode(): 1 for record in [WARM_UP, *spread()]}


def _lineage_order(raw: Any, stream: str) -> list[str]:
    """Every shard id, each after its parents (ListShards lists them so; sorted to be sure)."""
    shards = {shard["ShardId"]: shard for shard in raw.list_shards(StreamName=stream)["Shards"]}
    order: list[str] = []

    def visit(shard_id: str) -> None:
        if shard_id in order or shard_id not in shards:
            return
        for key in ("ParentShardId", "AdjacentParentShardId"):
            if shards[shard_id].get(key):
                visit(shards[shard_id][key])
        order.append(shard_id)

    for shard_id in sorted(shards):
        visit(shard_id)
    return order


class Sink:
    """A counting sink table and a lease table on a loopback DynamoDB."""

    def __init__(self, endpoint: str) -> None:
        self.dynamodb = aws_client("dynamodb", endpoint)
        self.name = create_sink_table(self.dynamodb)
        self.leases = LeaseTable(self.dynamodb, f"leases-{uuid.uuid4().hex[:8]}")
        LeaseTable.create(self.dynamodb, self.leases.table_name)

    def consumer(self, raw: Any) -> KinesisConsumer:
        consumer = KinesisConsumer("lineage", self.leases, kinesis=raw)
        consumer.handler(counting_sink(self.name))
        return consumer

    def counts(self) -> dict[str, int]:
        items = self.dynamodb.scan(TableName=self.name, ConsistentRead=True)["Items"]
        return {item["id"]["S"]: int(item["n"]["N"]) for item in items}


def lambda_driver(raw: Any, stream: str, sink: Sink) -> KinesisConsumer:
    """Each shard with records, parents first, through `process` as the mapping invokes it."""
    consumer = sink.consumer(raw)
    for shard_id in _lineage_order(raw, stream):
        records = read_shard(raw, stream, shard_id)
        if records:  # the mapping invokes nothing for a shard without records
            MappingReplay(records, batch_size=100).drain(consumer.process)
    return consumer


def worker_driver(raw: Any, stream: str, sink: Sink, timeout: float = 60.0) -> KinesisConsumer:
    """One in-process `Worker` until every closed shard's row is at SHARD_END and every Kinesis
    record in the stream was delivered to the consumer (or the timeout passed), then stopped."""
    consumer = sink.consumer(raw)
    worker = Worker(
        consumer,
        raw,
        stream,
        owner="w1",
        lease_duration=3.0,
        discovery_interval=0.2,
        idle_interval=0.1,
        publish=None,
    )
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    closed = {
        shard["ShardId"]
        for shard in raw.list_shards(StreamName=stream)["Shards"]
        if "EndingSequenceNumber" in shard["SequenceNumberRange"]
    }
    in_stream = len(read_copies(raw, stream))
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            rows = {row.key: row for row in sink.leases.leases()}
            ended = all(key in rows and rows[key].checkpoint.sequence == SHARD_END for key in closed)
            if ended and consumer.metrics.snapshot().get("RecordsReceived", 0) >= in_stream:
                break  # every shard closed is done, and every Kinesis record was delivered
            time.sleep(0.1)
    finally:
        worker.stop()
        thread.join(timeout=30)
    assert not thread.is_alive()
    return consumer


def applied_twice(counts: dict[str, int]) -> Counter[str]:
    return Counter({key: n for key, n in counts.items() if n != 1})
