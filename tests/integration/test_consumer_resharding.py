"""Parent before child after a split, on kinesis-mock (moto cannot reshard as Kinesis does).

The lease table lives in moto server's DynamoDB; the stream in kinesis-mock.
"""

from __future__ import annotations

import json
import uuid

import pytest

from shardline.consumer import KinesisConsumer, LeaseTable
from shardline.kinesis import SHARD_END, UserRecord
from shardline.producer import Producer, ProducerConfig
from shardline.testing import FakeLambdaContext, MappingReplay, read_shard
from tests.support.integration import (
    aws_client,
    create_stream,
    kinesis_client,
    open_shards,
    unique_stream_name,
    wait_active,
)


def split_stream(kinesis) -> tuple[str, str, list[str]]:
    """A one-shard stream with records before and after a split: (name, parent, children)."""
    name = unique_stream_name("lineage")
    create_stream(kinesis, name, shard_count=1)
    producer = Producer(kinesis, name, config=ProducerConfig(aggregation_max_size=400))  # ~10 per aggregate
    producer.put_many([UserRecord(f"k{i}", json.dumps({"n": i}).encode()) for i in range(40)])
    [parent] = open_shards(kinesis, name)
    middle = str(int(parent["HashKeyRange"]["EndingHashKey"]) // 2)
    kinesis.split_shard(StreamName=name, ShardToSplit=parent["ShardId"], NewStartingHashKey=middle)
    wait_active(kinesis, name)
    # A new producer: its map knows the children, so no copy lands outside its shard.
    producer = Producer(kinesis, name, config=ProducerConfig(aggregation_max_size=400))
    producer.put_many([UserRecord(f"k{i}", json.dumps({"n": i}).encode()) for i in range(40, 80)])
    return name, parent["ShardId"], [s["ShardId"] for s in open_shards(kinesis, name)]


@pytest.fixture
def resharded(kinesis_mock, moto_server):
    """(kinesis client, stream, parent, children, lease table) of a freshly split stream."""
    kinesis = kinesis_client(kinesis_mock)
    dynamodb = aws_client("dynamodb", moto_server)
    stream, parent, children = split_stream(kinesis)
    table = LeaseTable(dynamodb, f"leases-{uuid.uuid4().hex[:8]}")
    LeaseTable.create(dynamodb, table.table_name)
    return kinesis, stream, parent, children, table


def test_a_child_waits_until_its_parent_is_finished(resharded):
    kinesis, stream, parent, children, table = resharded
    order: list[tuple[str, int]] = []
    consumer = KinesisConsumer("lineage", table, kinesis=kinesis)
    consumer.handler(lambda record: order.append((record.shard_id, record.json()["n"])))

    parent_feed = MappingReplay(read_shard(kinesis, stream, parent), batch_size=1)
    parent_feed.invoke(consumer.process)  # the parent has a row now, and records left
    child_feeds = [MappingReplay(read_shard(kinesis, stream, child), batch_size=100) for child in children]
    assert all(feed.records for feed in child_feeds)

    for feed in child_feeds:
        response = feed.invoke(consumer.process)
        assert response["batchItemFailures"] == [
            {"itemIdentifier": feed.records[0]["kinesis"]["sequenceNumber"]}
        ]
    assert {shard for shard, _ in order} == {parent}, "no child record ran while the parent had records left"
    assert consumer.metrics.snapshot()["BatchesWaitingForParent"] == 2

    parent_feed.drain(consumer.process)
    assert table.get(parent).checkpoint.sequence != SHARD_END, "the consumer cannot see the end by itself"
    for feed in child_feeds:
        feed.drain(consumer.process)

    assert table.get(parent).checkpoint.sequence == SHARD_END, "the probe found nothing left and closed it"
    parent_part = [n for shard, n in order if shard == parent]
    assert parent_part == list(range(40)) and order[:40] == [(parent, n) for n in range(40)]
    assert sorted(n for shard, n in order[40:]) == list(range(40, 80))


def test_at_latest_a_parent_without_a_lease_row_in_a_lineage_never_read_does_not_block(resharded):
    """A group whose mapping starts at LATEST, created after the split: the parent is never
    delivered, so its child runs at once."""
    kinesis, stream, parent, children, table = resharded
    consumer = KinesisConsumer("lineage", table, kinesis=kinesis, starting_position="LATEST")
    consumer.handler(lambda record: None)

    feed = MappingReplay(read_shard(kinesis, stream, children[0]), batch_size=100)
    assert feed.invoke(consumer.process, FakeLambdaContext()) == {"batchItemFailures": []}
    assert table.get(parent) is None
    assert table.get(children[0]).parent_shard_ids == frozenset({parent})


@pytest.mark.parametrize("start", ["TRIM_HORIZON", "AT_TIMESTAMP before the parent's records"])
def test_property_5_a_child_delivered_before_its_parent_has_a_row_waits_for_it(resharded, start):
    """The mapping (TRIM_HORIZON, or a timestamp before the parent's records) delivers a child
    before the parent was ever delivered: the child waits (its batch is retried) until the parent
    ran, probed on kinesis-mock through an AT_TIMESTAMP or TRIM_HORIZON iterator."""
    kinesis, stream, parent, children, table = resharded
    parent_feed = MappingReplay(read_shard(kinesis, stream, parent), batch_size=100)
    settings = {}
    if start != "TRIM_HORIZON":
        first = min(float(r["kinesis"]["approximateArrivalTimestamp"]) for r in parent_feed.records)
        settings = {"starting_position": "AT_TIMESTAMP", "starting_position_timestamp": first - 60}
    consumer = KinesisConsumer("lineage", table, kinesis=kinesis, **settings)
    order = []
    consumer.handler(lambda record: order.append(record.shard_id))

    child_feed = MappingReplay(read_shard(kinesis, stream, children[0]), batch_size=100)
    response = child_feed.invoke(consumer.process, FakeLambdaContext())
    assert response["batchItemFailures"] == [
        {"itemIdentifier": child_feed.records[0]["kinesis"]["sequenceNumber"]}
    ]
    assert order == [] and table.get(parent) is None
    parent_feed.drain(consumer.process)
    child_feed.drain(consumer.process)
    assert order[:40] == [parent] * 40 and len(order) > 40 and set(order[40:]) == {children[0]}
    assert table.get(parent).checkpoint.sequence == SHARD_END


def test_property_5_at_a_timestamp_after_the_parents_records_a_child_does_not_wait_for_it(resharded):
    """The group starts after every record of the parent (a millisecond after the last: kinesis-mock
    refuses a timestamp in the future): the mapping never delivers the parent (kinesis-mock's
    AT_TIMESTAMP iterator finds nothing in it), so the child runs at once."""
    kinesis, stream, parent, children, table = resharded
    last = max(
        float(r["kinesis"]["approximateArrivalTimestamp"]) for r in read_shard(kinesis, stream, parent)
    )
    consumer = KinesisConsumer(
        "lineage",
        table,
        kinesis=kinesis,
        starting_position="AT_TIMESTAMP",
        starting_position_timestamp=last + 0.001,
    )
    consumer.handler(lambda record: None)
    feed = MappingReplay(read_shard(kinesis, stream, children[0]), batch_size=100)
    assert feed.invoke(consumer.process, FakeLambdaContext()) == {"batchItemFailures": []}
    assert table.get(parent) is None
