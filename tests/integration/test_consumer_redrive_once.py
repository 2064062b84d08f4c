"""Issue 39, property 4: a redrive is applied once with the group's own run — and property 6's
redrive half: a redrive of records older than their client-id guards is refused.

On the wire: Kinesis, the lease table and the sink on moto server. The shard holds a producer
retry's two copies of one aggregate (A, 8 user records) straddling a batch the event-source
mapping discarded: copy 1 inside the discarded batch, copy 2 after it.

    0  a   (p1, counter 1)            applied by the group
    1  A   (p1, counter 2)  copy 1    ┐ the batch the group stalled on and the mapping discarded
    2  b   (p2, counter 1)            ┘ (its on-failure message: records 1..2)
    3  x   (p3, counter 1)            the mapping's next delivery: the group notes the discard
    4  A   (p1, counter 2)  copy 2    applied by the group's run (the mapping, or a worker)
    5  c   (p2, counter 2)

The sink counts each user record by its payload (a copy's members have the same payloads), so
"exactly once" is every count at 1. Crashes are the process dying (`Died`) right before or right
after one of the redrive's DynamoDB writes lands.
"""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from shardline.consumer import KinesisConsumer, LeaseTable, Worker, redrive
from shardline.kinesis import UserRecord
from shardline.testing import read_shard
from tests.support.consumer_identity import Died, aggregate_id, counting_group, members, put_layout
from tests.support.integration import aws_client, create_sink_table, create_stream, unique_stream_name

A = members("A", 8)
LAYOUT: list[tuple[list[UserRecord], str]] = [
    (members("a", 3), aggregate_id(1, producer="p1")),
    (A, aggregate_id(2, producer="p1")),
    (
        [UserRecord(f"b-{i}", f"b-{i}".encode(), None, f"order-{i}") for i in range(3)],
        aggregate_id(1, producer="p2"),
    ),
    (members("x", 2), aggregate_id(1, producer="p3")),
    (A, aggregate_id(2, producer="p1")),  # copy 2: the very bytes of copy 1, sent again
    (members("c", 3), aggregate_id(2, producer="p2")),
]
EXPECTED = {user.data.decode(): 1 for users, _ in LAYOUT for user in users}
WRITES = ("put_item", "update_item", "transact_write_items")


class CrashingDynamoDB:
    """The DynamoDB client, which dies at its `at`-th write (counting from 1): before the write
    reaches DynamoDB, or (`landed`) after it landed and before its reply arrives."""

    def __init__(self, client: Any, at: int | None = None, *, landed: bool = False) -> None:
        self._client, self.at, self.landed, self.writes = client, at, landed, 0

    def __getattr__(self, name: str) -> Any:
        call = getattr(self._client, name)
        if name not in WRITES:
            return call

        def write(**request: Any) -> Any:
            self.writes += 1
            if self.writes != self.at:
                return call(**request)
            if self.landed:
                call(**request)
            raise Died(f"died at write {self.writes} ({name}, landed={self.landed})")

        return write


class Straddle:
    """The shard above, a lease table, a counting sink; the group's deliveries and the redrive."""

    def __init__(self, moto_url: str) -> None:
        self.kinesis = aws_client("kinesis", moto_url)
        self.dynamodb = aws_client("dynamodb", moto_url)
        self.stream = unique_stream_name("straddle")
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

    def table(self, client: Any = None) -> LeaseTable:
        return LeaseTable(client or self.dynamodb, self.leases, sleep=lambda _: None)

    def consumer(self, client: Any = None, **options: Any) -> KinesisConsumer:
        return counting_group(
            "straddle-group", self.table(client), self.kinesis, self.sink, lambda: self.stalled, **options
        )

    def deliver(self, first: int, last: int, consumer: KinesisConsumer | None = None) -> list[str]:
        """The mapping's delivery of Kinesis records `first`..`last` to the group's function."""
        answer = (consumer or self.consumer()).process({"Records": self.records[first : last + 1]}, None)
        return [failure["itemIdentifier"] for failure in answer["batchItemFailures"]]

    def discard_batch(self) -> None:
        """Records 0 applied; the group stalls on 1..2 and the mapping gives that batch up."""
        assert self.deliver(0, 0) == []
        self.stalled = True
        assert self.deliver(1, 2) == [self.sequences[1]]
        self.stalled = False

    def message(self) -> dict[str, Any]:
        """The mapping's on-failure record for the discarded batch (records 1..2)."""
        return {
            "requestContext": {"condition": "RetryAttemptsExhausted", "approximateInvokeCount": 3},
            "KinesisBatchInfo": {
                "shardId": self.shard_id,
                "startSequenceNumber": self.sequences[1],
                "endSequenceNumber": self.sequences[2],
                "batchSize": 2,
                "streamArn": self.stream_arn,
            },
        }

    def redrive(self, client: Any = None, **options: Any) -> Any:
        return redrive(self.consumer(client), self.kinesis, self.message(), sleep=lambda _: None, **options)

    def applied(self) -> dict[str, int]:
        items = self.dynamodb.scan(TableName=self.sink, ConsistentRead=True)["Items"]
        return {item["id"]["S"]: int(item["n"]["N"]) for item in items}

    def twice(self) -> dict[str, int]:
        return {key: n for key, n in self.applied().items() if n != 1}


@pytest.fixture
def straddle(moto_server) -> Straddle:
    return Straddle(moto_server)


def redrive_until_done(straddle: Straddle, crash: CrashingDynamoDB) -> None:
    """The redrive dies at `crash`'s write; then it is run again (as an operator does) until done."""
    with contextlib.suppress(Died):
        straddle.redrive(crash)
    for _ in range(3):
        if straddle.redrive().complete:
            return
    raise AssertionError("the redrive did not finish")


# -- Lambda's mapping as the group's driver ---------------------------------------------------------


def test_property_4_copies_straddling_a_discarded_batch_are_applied_once_main_run_first(straddle):
    straddle.discard_batch()
    assert straddle.deliver(3, 3) == []  # the mapping moved on: the group notes the discard
    assert straddle.deliver(4, 5) == []  # copy 2 applied by the group

    result = straddle.redrive()

    assert result.complete and result.copies_skipped == 1  # copy 1: the group applied copy 2
    assert straddle.twice() == {}, "a record applied twice"
    assert straddle.applied() == EXPECTED


def test_property_4_copies_straddling_a_discarded_batch_are_applied_once_redrive_first(straddle):
    straddle.discard_batch()
    assert straddle.deliver(3, 3) == []

    assert straddle.redrive().complete  # copy 1 applied by the redrive
    assert straddle.deliver(4, 5) == []  # the group skips copy 2

    assert straddle.twice() == {}, "a record applied twice"
    assert straddle.applied() == EXPECTED


def test_property_4_a_redrive_before_the_group_noted_the_discard_is_applied_once(straddle):
    straddle.discard_batch()

    assert straddle.redrive().complete  # the group's row still stalls on the batch
    assert straddle.deliver(3, 5) == []

    assert straddle.applied() == EXPECTED


def count_writes(straddle: Straddle, scenario: Callable[[CrashingDynamoDB], None]) -> int:
    counter = CrashingDynamoDB(straddle.dynamodb)
    scenario(counter)
    return counter.writes


@pytest.mark.parametrize("landed", [False, True], ids=["before-a-write", "after-a-write"])
@pytest.mark.parametrize("order", ["main-first", "redrive-first", "interleaved"])
def test_property_4_every_crash_point_of_the_redrive_applies_every_record_once(moto_server, order, landed):
    """The redrive dies at each of its writes in turn (before it lands, or after), and is run
    again; the group's run applies copy 2 before the redrive, after it, or between its death and
    its resumption."""
    probe = Straddle(moto_server)
    probe.discard_batch()
    probe.deliver(3, 3)
    writes = count_writes(probe, lambda client: probe.redrive(client))
    assert writes >= 3
    for at in range(1, writes + 1):
        straddle = Straddle(moto_server)
        straddle.discard_batch()
        straddle.deliver(3, 3)
        crash = CrashingDynamoDB(straddle.dynamodb, at, landed=landed)
        if order == "main-first":
            straddle.deliver(4, 5)
            redrive_until_done(straddle, crash)
        elif order == "redrive-first":
            redrive_until_done(straddle, crash)
            straddle.deliver(4, 5)
        else:
            with pytest.raises(Died):
                straddle.redrive(crash)
            straddle.deliver(4, 5)
            for _ in range(3):
                if straddle.redrive().complete:
                    break
        assert straddle.twice() == {}, f"crash at write {at}: applied twice"
        assert straddle.applied() == EXPECTED, f"crash at write {at}"


def test_property_4_the_group_crashing_around_its_commit_of_copy_2_applies_every_record_once(straddle):
    """The group's run dies right after its commit of copy 2 landed (its reply lost); the redrive
    runs; the mapping delivers the batch again."""
    straddle.discard_batch()
    straddle.deliver(3, 3)
    crash = CrashingDynamoDB(straddle.dynamodb, 2, landed=True)  # begin, then copy 2's first commit
    with pytest.raises(Died):
        straddle.deliver(4, 5, straddle.consumer(crash))
    assert straddle.redrive().complete
    for _ in range(3):
        if straddle.deliver(4, 5) == []:
            break
    assert straddle.applied() == EXPECTED


def is_checkpoint(name: str, request: dict[str, Any]) -> bool:
    """Is this write a checkpoint (an UpdateItem of one, or a transaction holding one)?"""
    if name == "transact_write_items":
        return True
    return name == "update_item" and "checkpoint = :seq" in request.get("UpdateExpression", "")


class BeforeFirstCommit(CrashingDynamoDB):
    """The DynamoDB client, which runs `meanwhile` once, right before the first checkpoint write:
    the other run commits between this run's reading of the claims and its own commit."""

    def __init__(self, client: Any, meanwhile: Callable[[], None]) -> None:
        super().__init__(client)
        self.meanwhile, self.ran = meanwhile, False

    def __getattr__(self, name: str) -> Any:
        call = getattr(self._client, name)
        if name not in WRITES:
            return call

        def write(**request: Any) -> Any:
            if not self.ran and is_checkpoint(name, request):
                self.ran = True
                self.meanwhile()
            return call(**request)

        return write


def test_property_4_the_group_committing_copy_2_while_the_redrive_runs_applies_it_once(straddle):
    """The redrive read its row (no claims of the group), then the group's run commits copy 2,
    then the redrive commits copy 1: its condition fails, it re-reads the claims and skips A."""
    straddle.discard_batch()
    straddle.deliver(3, 3)
    client = BeforeFirstCommit(straddle.dynamodb, lambda: straddle.deliver(4, 5) and None)
    consumer = straddle.consumer(client)

    first = redrive(consumer, straddle.kinesis, straddle.message(), sleep=lambda _: None)
    assert client.ran
    assert consumer.metrics.snapshot()["RedriveClaimsMoved"] >= 1  # it found the group's claim
    for _ in range(3):
        if first.complete:
            break
        first = straddle.redrive()
    assert first.complete
    assert straddle.twice() == {}, "a record applied twice"
    assert straddle.applied() == EXPECTED


def test_property_4_the_redrive_committing_copy_1_while_the_group_runs_applies_it_once(straddle):
    """The group's run read the redrive row (no claims of the redrive), then the redrive commits
    copy 1, then the group commits copy 2: its condition fails, it re-reads, stops before A, and
    the mapping's next delivery skips A."""
    straddle.discard_batch()
    straddle.deliver(3, 3)
    client = BeforeFirstCommit(straddle.dynamodb, lambda: straddle.redrive() and None)
    consumer = straddle.consumer(client)

    failed = straddle.deliver(4, 5, consumer)
    assert client.ran
    assert failed == [straddle.sequences[4]]  # it stopped before A: the mapping retries from there
    assert consumer.metrics.snapshot()["RedriveClaimsMoved"] >= 1
    assert straddle.deliver(4, 5) == []
    assert straddle.twice() == {}, "a record applied twice"
    assert straddle.applied() == EXPECTED


# -- a worker as the group's driver -----------------------------------------------------------------


def run_worker(straddle: Straddle, until: Callable[[], bool], timeout: float = 60.0) -> None:
    """A worker of the group over the stream, in this thread, until `until()` holds."""
    worker = Worker(
        straddle.consumer(),
        straddle.kinesis,
        straddle.stream,
        lease_duration=3.0,
        discovery_interval=0.5,
        idle_interval=0.1,
    )
    deadline = time.monotonic() + timeout

    def watch() -> None:
        while not until() and time.monotonic() < deadline:
            time.sleep(0.1)
        worker.stop()

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    worker.run()
    watcher.join()
    assert until(), "the worker did not get there in time"


def applied_all(straddle: Straddle) -> Callable[[], bool]:
    return lambda: set(straddle.applied()) == set(EXPECTED)


@pytest.mark.parametrize("order", ["worker-first", "redrive-first"])
def test_property_4_copies_straddling_a_discarded_batch_are_applied_once_under_a_worker(straddle, order):
    """The group moved from its mapping to workers after the discard: the worker resumes at the
    row's checkpoint (record 3) and applies copy 2 — before the redrive, or after it."""
    straddle.discard_batch()
    assert straddle.deliver(3, 3) == []
    if order == "redrive-first":
        assert straddle.redrive().complete
        run_worker(straddle, applied_all(straddle))
    else:
        run_worker(straddle, lambda: "c-2" in straddle.applied())
        assert straddle.redrive().complete
    assert straddle.twice() == {}, "a record applied twice"
    assert straddle.applied() == EXPECTED


# -- property 6: a redrive past its records' guards --------------------------------------------------


def test_property_6_redrive_of_records_older_than_their_guards_is_refused(straddle):
    from shardline.consumer import GuardsExpired

    straddle.discard_batch()
    straddle.deliver(3, 3)
    past_guards = 17 * 24 * 3600.0  # the default guard lifetime is 16 days
    key = f"{straddle.shard_id}#redrive#{straddle.sequences[1]}"
    row = straddle.table().get(key)  # the group created it when it noted the discard

    with pytest.raises(GuardsExpired) as refused:
        redrive(
            straddle.consumer(),
            straddle.kinesis,
            straddle.message(),
            sleep=lambda _: None,
            now=lambda: time.time() + past_guards,
        )

    text = str(refused.value)
    assert f"{straddle.stream}/{straddle.shard_id}" in text
    assert f"{straddle.sequences[1]}..{straddle.sequences[2]}" in text
    assert "17.0 days old" in text and "16.0 days" in text and "allow_expired_guards=True" in text
    assert straddle.applied() == {item: 1 for item in EXPECTED if item[0] in "ax"}  # nothing written
    assert straddle.table().get(key) == row

    result = redrive(
        straddle.consumer(),
        straddle.kinesis,
        straddle.message(),
        sleep=lambda _: None,
        now=lambda: time.time() + past_guards,
        allow_expired_guards=True,
    )
    assert result.complete


def test_property_6_redrive_guard_lifetime_comes_from_the_environment(straddle, monkeypatch):
    from shardline.consumer import GuardsExpired

    straddle.discard_batch()
    monkeypatch.setenv("SHARDLINE_GUARD_TTL_SECONDS", "60")

    with pytest.raises(GuardsExpired, match=r"1\.0 hours old, older than the 60 s"):
        redrive(straddle.consumer(), straddle.kinesis, straddle.message(), now=lambda: time.time() + 3600.0)
    assert straddle.redrive(guard_ttl_seconds=7200.0).complete  # younger than an explicit lifetime
