"""Issue 39, property 4 on the in-memory lease table: a redrive and the group's own run apply each
aggregate once, whichever dies where — every call of the lease table that either makes is a crash
point (the table's `fail_next` hook: the process dies before the write lands, or after), and the
two interleave at each of them. The in-memory table must behave as DynamoDB does (the same
scenarios run on the wire in tests/integration/test_consumer_redrive_once.py).

The shard: a retry's copies of aggregate A straddle the batch the mapping discarded.

    0 a   1 A (copy 1)   2 b   |  3 x   4 A (copy 2)   5 c
          └ discarded ─────┘
"""

from __future__ import annotations

import base64
import contextlib
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from shardline.consumer import KinesisConsumer, read_event, redrive
from shardline.consumer._lease_store import Claim, ClaimsMoved
from shardline.consumer._redrive_claims import Arbiters, Claims
from shardline.consumer._worker_leases import HeldLeases
from shardline.errors import DependencyUnavailable
from shardline.kinesis import Position, UserRecord
from shardline.kinesis._positions import TRIM_HORIZON
from shardline.kpl._identity import AggregateId
from shardline.testing import InMemoryLeaseTable
from tests.support.consumer_identity import aggregate_id, applied, counting_sink, entry, members, seq

A = members("A", 4)
LAYOUT: list[tuple[list[UserRecord], str]] = [
    (members("a", 2), aggregate_id(1, producer="p1")),
    (A, aggregate_id(2, producer="p1")),
    (members("b", 2), aggregate_id(1, producer="p2")),
    (members("x", 2), aggregate_id(1, producer="p3")),
    (A, aggregate_id(2, producer="p1")),
    (members("c", 2), aggregate_id(2, producer="p2")),
]
RECORDS = [entry(users, aggregate, seq(index)) for index, (users, aggregate) in enumerate(LAYOUT)]
SEQUENCES = [record["kinesis"]["sequenceNumber"] for record in RECORDS]
EXPECTED = {user.data.decode(): 1 for users, _ in LAYOUT for user in users}
ARN = "arn:aws:kinesis:us-east-1:000000000000:stream/events"
MESSAGE = {
    "KinesisBatchInfo": {
        "shardId": "shardId-000000000000",
        "startSequenceNumber": SEQUENCES[1],
        "endSequenceNumber": SEQUENCES[2],
        "batchSize": 2,
        "streamArn": ARN,
    }
}
#: The lease-table calls a redrive and the group's run make.
OPERATIONS = ("get", "begin", "start_at", "checkpoint", "checkpoint_with", "release", "note_skipped")
KEY = "shardId-000000000000"


class Died(BaseException):
    """The process dies: nothing after it runs."""


class ShardReads:
    """GetShardIterator and GetRecords over the records of one shard (what the redrive reads back)."""

    def get_shard_iterator(self, **request: Any) -> dict[str, Any]:
        return {"ShardIterator": request["StartingSequenceNumber"]}

    def get_records(self, **request: Any) -> dict[str, Any]:
        start = int(request["ShardIterator"])
        found = [
            {
                "SequenceNumber": record["kinesis"]["sequenceNumber"],
                "PartitionKey": record["kinesis"]["partitionKey"],
                "Data": base64.b64decode(record["kinesis"]["data"]),
                "ApproximateArrivalTimestamp": record["kinesis"]["approximateArrivalTimestamp"],
            }
            for record in RECORDS
            if int(record["kinesis"]["sequenceNumber"]) >= start
        ]
        return {"Records": found, "NextShardIterator": None, "MillisBehindLatest": 0}


class CrashAt:
    """The in-memory table, whose `operation` dies at its `at`-th call (through `fail_next`)."""

    def __init__(self, table: InMemoryLeaseTable, operation: str, at: int, landed: bool) -> None:
        self.table, self.operation, self.at, self.landed, self.calls = table, operation, at, landed, 0

    def __getattr__(self, name: str) -> Any:
        call = getattr(self.table, name)
        if name != self.operation:
            return call

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls += 1
            if self.calls == self.at:
                landed = self.landed and name != "get"
                self.table.fail_next(name, Died(f"{name} #{self.at}"), landed=landed)
            return call(*args, **kwargs)

        return counted


class Group:
    """The group's consumer and its deliveries, on one in-memory table: the mapping's (Lambda's
    `process`), or a worker's batches (`HeldLeases`, each batch by a worker that took the lease)."""

    def __init__(self, table: InMemoryLeaseTable, driver: str = "mapping") -> None:
        self.table = table
        self.stalled = False
        self.driver = driver

    def consumer(self, table: Any = None) -> KinesisConsumer:
        consumer = KinesisConsumer("g", table or self.table, checkpoint_every=1)
        sink = counting_sink()

        @consumer.handler
        def handle(record: Any) -> list[dict[str, Any]]:
            if self.stalled:
                raise DependencyUnavailable("down")
            return sink(record)

        return consumer

    def deliver(self, first: int, last: int, table: Any = None) -> list[str]:
        event = {"Records": RECORDS[first : last + 1]}
        if self.driver == "mapping":
            answer = self.consumer(table).process(event, None)
            return [failure["itemIdentifier"] for failure in answer["batchItemFailures"]]
        [((stream, shard_id), records)] = read_event(event).items()
        worker = HeldLeases(table or self.table, f"worker-{uuid.uuid4().hex[:6]}")
        row = self.table.row(KEY)
        assert row is not None
        worker.acquire(row)
        consumer = self.consumer(table)
        retry = consumer._run_shard(stream, shard_id, records, table=worker, owner=worker.owner, context=None)
        return [] if retry is None else [retry]

    def until_done(self, first: int, last: int) -> None:
        """The mapping delivers from where the group asks, until the records are through."""
        start = first
        for _ in range(10):
            failed = self.deliver(start, last)
            if not failed:
                return
            start = SEQUENCES.index(failed[0])
        raise AssertionError("the group did not get through")

    def redrive(self, table: Any = None) -> Any:
        return redrive(self.consumer(table), ShardReads(), MESSAGE, sleep=lambda _: None)

    def redrive_until_done(self) -> None:
        for _ in range(5):
            if self.redrive().complete:
                return
        raise AssertionError("the redrive did not finish")


def discarded(driver: str = "mapping") -> Group:
    """The mapping applied record 0, stalled on 1..2, discarded them and delivered 3 (the group
    noted the discard); from here on the group's driver is `driver`."""
    group = Group(InMemoryLeaseTable())
    assert group.deliver(0, 0) == []
    group.stalled = True
    assert group.deliver(1, 2) == [SEQUENCES[1]]
    group.stalled = False
    assert group.deliver(3, 3) == []  # the group notes the discard (and creates the redrive row)
    group.driver = driver
    return group


def crash_points() -> Iterator[tuple[str, int, bool]]:
    for operation in OPERATIONS:
        for at in range(1, 9):
            for landed in (False, True):
                yield operation, at, landed


def dies(run: Callable[..., Any], *args: Any) -> None:
    with contextlib.suppress(Died):
        run(*args)


@pytest.mark.parametrize("driver", ["mapping", "worker"])
@pytest.mark.parametrize("order", ["group-first", "redrive-first", "redrive-dies-group-runs"])
@pytest.mark.parametrize("who", ["redrive", "group"])
def test_property_4_every_crash_point_of_either_run_applies_every_record_once(order, who, driver):
    fired = 0
    for operation, at, landed in crash_points():
        group = discarded(driver)
        crashing = CrashAt(group.table, operation, at, landed)
        if who == "redrive":
            if order == "group-first":
                group.until_done(4, 5)
                dies(group.redrive, crashing)
            elif order == "redrive-first":
                dies(group.redrive, crashing)
                group.redrive_until_done()
                group.until_done(4, 5)
            else:
                dies(group.redrive, crashing)
                group.until_done(4, 5)
            group.redrive_until_done()
            group.until_done(4, 5)
        else:
            if order == "redrive-first":
                group.redrive_until_done()
            dies(group.deliver, 4, 5, crashing)
            if order == "redrive-dies-group-runs":
                group.redrive_until_done()
            group.until_done(4, 5)
            group.redrive_until_done()
        point = f"{who} dies at {operation} #{at} ({'after' if landed else 'before'} it lands)"
        assert applied(group.table) == EXPECTED, point
        fired += crashing.calls >= at
    assert fired >= 10, f"only {fired} crash points were reached"


def test_property_4_a_commit_under_moved_claims_is_refused_whole_by_the_in_memory_table():
    table = InMemoryLeaseTable(key_schema={"applied": ["id"]})
    assert table.start_at("s#redrive#1", Position(TRIM_HORIZON))
    redriving = table.take("s#redrive#1", "redrive")
    mine = Claim("s#redrive#1", 0, "redriveClaims", '{"p1.0":[2,2]}')
    redriving = table.checkpoint(redriving, Position("5"), claims=[mine])  # the redrive applied A
    assert (redriving.apply_version, redriving.redrive_claims) == (1, '{"p1.0":[2,2]}')
    group = table.take("s", "group")
    stale = Claim("s#redrive#1", 0, "groupClaims", '{"p1.0":[2,2]}')  # read before the redrive's

    with pytest.raises(ClaimsMoved):
        table.checkpoint_with(group, Position("9"), [_put("k")], claims=[stale])
    assert table.items("applied") == [] and table.row("s") == group  # nothing written

    fresh = Claim("s#redrive#1", 1, "groupClaims", '{"p3.0":[1,1]}')
    moved = table.checkpoint_with(group, Position("9"), [_put("k")], claims=[fresh])
    assert moved.checkpoint == Position("9") and len(table.items("applied")) == 1
    row = table.row("s#redrive#1")
    assert row is not None and (row.apply_version, row.group_claims) == (2, '{"p3.0":[1,1]}')
    assert (row.owner, row.counter) == (redriving.owner, redriving.counter)  # its lease untouched


def test_claims_hold_aggregate_ids_and_no_floors():
    claims = Claims().with_([_aggregate(3, floor=9), _aggregate(4), _aggregate(7)])
    assert claims.serialize() == '{"p1.0":[3,4,7,7]}'
    assert claims.has(_aggregate(4)) and not claims.has(_aggregate(5)) and not claims.has(_aggregate(1))
    assert Claims.parse(claims.serialize()).lanes == claims.lanes
    with pytest.raises(ValueError, match="claims of redrive row r are not readable"):
        Claims.parse("[1", "r")


def test_the_group_consults_a_redrive_row_only_while_copies_of_its_batch_may_arrive():
    table = InMemoryLeaseTable()
    group = Group(table)
    group.deliver(0, 0)
    group.stalled = True
    group.deliver(1, 2)
    group.stalled = False
    group.deliver(3, 3)
    row = table.row("shardId-000000000000")
    assert row is not None
    arrival = RECORDS[3]["kinesis"]["approximateArrivalTimestamp"]
    assert Arbiters.for_group(table, row, arrival + 299)
    assert not Arbiters.for_group(table, row, arrival + 301)


def _aggregate(counter: int, floor: int | None = None) -> AggregateId:
    return AggregateId("p1", "0", counter, counter if floor is None else floor)


def _put(key: str) -> dict[str, Any]:
    return {"Put": {"TableName": "applied", "Item": {"id": {"S": key}, "n": {"N": "1"}}}}
