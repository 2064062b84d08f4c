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


def test_a_parent_without_a_lease_row_does_not_block(resharded):
    kinesis, stream, parent, children, table = resharded
    consumer = KinesisConsumer("lineage", table, kinesis=kinesis)
    consumer.handler(lambda record: None)

    feed = MappingReplay(read_shard(kinesis, stream, children[0]), batch_size=100)
    assert feed.invoke(consumer.process, FakeLambdaContext()) == {"batchItemFailures": []}
    assert table.get(parent) is None
    assert table.get(children[0]).parent_shard_ids == frozenset({parent})
