"""Issue 39, property 4, two redrives: a producer retry's copies of one aggregate in two batches
the event-source mapping discarded, each redriven under its own row, are applied once.

On the wire: Kinesis, the lease table and the sink on moto server. The shard:

    0  a   (p1, counter 1)            applied by the group
    1  A   (p1, counter 2)  copy 1    ┐ batch 1: the group stalls, the mapping discards it
    2  b   (p2, counter 1)            ┘
    3  x   (p3, counter 1)            ┐ batch 2: the group notes batch 1, stalls again, the
    4  A   (p1, counter 2)  copy 2    ┘ mapping discards it too
    5  c   (p2, counter 2)            the mapping's next delivery: the group notes batch 2

Each batch is redriven from its own on-failure message (in either order, and with the redrives
both begun before either applies): A's members are applied once, not once by each redrive.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from shardline.consumer import KinesisConsumer, LeaseTable, redrive
from shardline.kinesis import UserRecord
from shardline.testing import read_shard
from tests.support.consumer_identity import aggregate_id, counting_group, members, put_layout
from tests.support.integration import aws_client, create_sink_table, create_stream, unique_stream_name

A = members("A", 4)
LAYOUT: list[tuple[list[UserRecord], str]] = [
    (members("a", 2), aggregate_id(1, producer="p1")),
    (A, aggregate_id(2, producer="p1")),
    (members("b", 2), aggregate_id(1, producer="p2")),
    (members("x", 2), aggregate_id(1, producer="p3")),
    (A, aggregate_id(2, producer="p1")),  # copy 2: the very bytes of copy 1, sent again
    (members("c", 2), aggregate_id(2, producer="p2")),
]
EXPECTED = {user.data.decode(): 1 for users, _ in LAYOUT for user in users}
BATCHES = ((1, 2), (3, 4))


class TwoDiscards:
    """The shard above, a lease table, a counting sink; the group's deliveries and the redrives."""

    def __init__(self, moto_url: str) -> None:
        self.kinesis = aws_client("kinesis", moto_url)
        self.dynamodb = aws_client("dynamodb", moto_url)
        self.stream = unique_stream_name("peers")
        self.stream_arn = create_stream(self.kinesis, self.stream, shard_count=1)["StreamARN"]
        self.shard_id = self.kinesis.list_shards(StreamName=self.stream)["Shards"][0]["ShardId"]
        put_layout(self.kinesis, self.stream, LAYOUT)
        self.records = read_shard(self.kinesis, self.stream, self.shard_id)
        assert len(self.records) == len(LAYOUT)
        self.sequences = [record["kinesis"]["sequenceNumber"] for record in self.records]
        self.leases = f"leases-{uuid.uuid4().hex[:8]}"
        LeaseTable.create(self.dynamodb, self.leases)
        self.sink = create_sink_table(self.dynamodb)
        self.stalled = False

    def consumer(self) -> KinesisConsumer:
        table = LeaseTable(self.dynamodb, self.leases, sleep=lambda _: None)
        return counting_group("peers-group", table, self.kinesis, self.sink, lambda: self.stalled)

    def deliver(self, first: int, last: int, *, down: bool = False) -> list[str]:
        """The mapping's delivery of Kinesis records `first`..`last` (the sink down or not)."""
        self.stalled = down
        try:
            answer = self.consumer().process({"Records": self.records[first : last + 1]}, None)
        finally:
            self.stalled = False
        return [failure["itemIdentifier"] for failure in answer["batchItemFailures"]]

    def discard_both(self) -> None:
        assert self.deliver(0, 0) == []
        assert self.deliver(1, 2, down=True) == [self.sequences[1]]  # batch 1 given up
        assert self.deliver(3, 4, down=True) == [self.sequences[3]]  # noted; batch 2 given up
        assert self.deliver(5, 5) == []  # batch 2 noted

    def message(self, batch: int) -> dict[str, Any]:
        first, last = BATCHES[batch]
        return {
            "requestContext": {"condition": "RetryAttemptsExhausted", "approximateInvokeCount": 1},
            "KinesisBatchInfo": {
                "shardId": self.shard_id,
                "startSequenceNumber": self.sequences[first],
                "endSequenceNumber": self.sequences[last],
                "batchSize": last - first + 1,
                "streamArn": self.stream_arn,
            },
        }

    def redrive(self, batch: int, **options: Any) -> Any:
        return redrive(self.consumer(), self.kinesis, self.message(batch), sleep=lambda _: None, **options)

    def applied(self) -> dict[str, int]:
        items = self.dynamodb.scan(TableName=self.sink, ConsistentRead=True)["Items"]
        return {item["id"]["S"]: int(item["n"]["N"]) for item in items}


@pytest.fixture
def shard(moto_server) -> TwoDiscards:
    return TwoDiscards(moto_server)


@pytest.mark.parametrize("order", [(0, 1), (1, 0)])
def test_property_4_copies_in_two_discarded_batches_are_applied_once_by_their_two_redrives(shard, order):
    shard.discard_both()

    results = [shard.redrive(batch) for batch in order]
    again = [shard.redrive(batch) for batch in order]  # a redrive run again applies nothing again

    assert all(result.complete for result in results + again), results + again
    assert results[1].copies_skipped == 1  # the second redrive skipped its copy of A
    assert {key: n for key, n in shard.applied().items() if n != 1} == {}, "a record applied twice"
    assert shard.applied() == EXPECTED


@pytest.mark.parametrize("order", [(0, 1), (1, 0)])
def test_property_4_two_redrives_both_begun_before_either_applies_apply_their_copies_once(shard, order):
    """Both redrives begin (their rows created, the sink down: nothing applied), then each runs
    one delivery in turn and finishes."""
    shard.discard_both()
    first, second = order
    shard.stalled = True  # every delivery of the first pass fails: nothing applied, rows created
    stalled = [shard.redrive(batch, max_deliveries=1) for batch in order]
    shard.stalled = False
    assert not any(result.finished for result in stalled)

    shard.redrive(first, max_deliveries=1)
    shard.redrive(second, max_deliveries=1)
    for batch in order:
        assert shard.redrive(batch).complete

    assert {key: n for key, n in shard.applied().items() if n != 1} == {}, "a record applied twice"
    assert shard.applied() == EXPECTED
