"""Issue 39, property 4 across a reshard: a parent shard whose last batch the event-source mapping
gave up. Nothing comes after it on the parent, so the parent's row never moves to SHARD_END by
itself; once the redrive of that tail has applied it to the parent's end, the parent is finished:
its children run, and start from the parent's applied aggregates and the redrive's.

On the wire: Kinesis on kinesis-mock (moto does not reshard as Kinesis does), the lease table and
the sink on moto server. The parent (split after 1):

    0  a   (p1, counter 1)            applied by the group
    1  T   (p1, counter 2)  copy 1    the group stalls; the mapping gives this last batch up
    -- split --
    child 0  T   (p1, counter 2)  copy 2 (the producer's resend after the reshard)
    child 1  c   (p1, counter 3)
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from shardline.consumer import KinesisConsumer, LeaseTable, redrive
from shardline.kinesis import UserRecord
from shardline.testing import read_shard
from tests.support.consumer_identity import aggregate_id, counting_group, members, put_layout
from tests.support.integration import (
    aws_client,
    create_sink_table,
    create_stream,
    kinesis_client,
    unique_stream_name,
    wait_active,
)

T = members("T", 3, hash_key=1)  # in the low child's hash range
PARENT_LAYOUT: list[tuple[list[UserRecord], str]] = [
    (members("a", 2, hash_key=1), aggregate_id(1)),
    (T, aggregate_id(2)),
]
CHILD_LAYOUT: list[tuple[list[UserRecord], str]] = [
    (T, aggregate_id(2)),  # copy 2: the very bytes of copy 1, sent again
    (members("c", 2, hash_key=1), aggregate_id(3)),
]
EXPECTED = {user.data.decode(): 1 for users, _ in PARENT_LAYOUT + CHILD_LAYOUT for user in users}


class GivenUpTail:
    """The parent above, split; its low child; a lease table and a counting sink."""

    def __init__(self, moto_url: str, kinesis_url: str) -> None:
        self.kinesis = kinesis_client(kinesis_url)
        self.dynamodb = aws_client("dynamodb", moto_url)
        self.stream = unique_stream_name("tail")
        self.stream_arn = create_stream(self.kinesis, self.stream, shard_count=1)["StreamARN"]
        [parent] = self.kinesis.list_shards(StreamName=self.stream)["Shards"]
        self.parent = parent["ShardId"]
        self._put(PARENT_LAYOUT)
        self.kinesis.split_shard(
            StreamName=self.stream, ShardToSplit=self.parent, NewStartingHashKey=str(2**127)
        )
        wait_active(self.kinesis, self.stream)
        self.child = next(
            shard["ShardId"]
            for shard in self.kinesis.list_shards(StreamName=self.stream)["Shards"]
            if shard.get("ParentShardId") == self.parent and shard["HashKeyRange"]["StartingHashKey"] == "0"
        )
        self._put(CHILD_LAYOUT)
        self.parent_records = read_shard(self.kinesis, self.stream, self.parent)
        self.child_records = read_shard(self.kinesis, self.stream, self.child)
        assert (len(self.parent_records), len(self.child_records)) == (2, 2)
        self.leases = f"leases-{uuid.uuid4().hex[:8]}"
        LeaseTable.create(self.dynamodb, self.leases)
        self.sink = create_sink_table(self.dynamodb)
        self.stalled = False

    def _put(self, layout: list[tuple[list[UserRecord], str]]) -> None:
        put_layout(self.kinesis, self.stream, layout, explicit_hash_key="1")

    def consumer(self) -> KinesisConsumer:
        table = LeaseTable(self.dynamodb, self.leases, sleep=lambda _: None)
        return counting_group("tail-group", table, self.kinesis, self.sink, lambda: self.stalled)

    def deliver(self, records: list[dict[str, Any]], *, down: bool = False) -> list[str]:
        self.stalled = down
        try:
            answer = self.consumer().process({"Records": records}, None)
        finally:
            self.stalled = False
        return [failure["itemIdentifier"] for failure in answer["batchItemFailures"]]

    def tail_message(self) -> dict[str, Any]:
        """The mapping's on-failure record for the parent's last batch (record 1)."""
        sequence = self.parent_records[1]["kinesis"]["sequenceNumber"]
        return {
            "requestContext": {"condition": "RetryAttemptsExhausted", "approximateInvokeCount": 1},
            "KinesisBatchInfo": {
                "shardId": self.parent,
                "startSequenceNumber": sequence,
                "endSequenceNumber": sequence,
                "batchSize": 1,
                "streamArn": self.stream_arn,
            },
        }

    def applied(self) -> dict[str, int]:
        items = self.dynamodb.scan(TableName=self.sink, ConsistentRead=True)["Items"]
        return {item["id"]["S"]: int(item["n"]["N"]) for item in items}


@pytest.fixture
def tail(moto_server, kinesis_mock) -> GivenUpTail:
    return GivenUpTail(moto_server, kinesis_mock)


def test_property_4_a_parent_whose_last_batch_was_given_up_is_finished_by_its_redrive(tail):
    assert tail.deliver(tail.parent_records[:1]) == []
    stalled_on = tail.parent_records[1]["kinesis"]["sequenceNumber"]
    assert tail.deliver(tail.parent_records[1:], down=True) == [stalled_on]  # the mapping gives it up
    first_of_child = tail.child_records[0]["kinesis"]["sequenceNumber"]
    assert tail.deliver(tail.child_records) == [first_of_child]  # the parent's tail has not run: it waits

    result = redrive(tail.consumer(), tail.kinesis, tail.tail_message(), sleep=lambda _: None)
    assert result.complete, result

    assert tail.deliver(tail.child_records) == []  # the parent is finished: the child runs
    assert {key: n for key, n in tail.applied().items() if n != 1} == {}, "a record applied twice"
    assert tail.applied() == EXPECTED  # copy 2 of T skipped: the redrive's state reached the child
