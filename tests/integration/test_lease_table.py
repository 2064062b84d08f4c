"""LeaseTable against moto server's DynamoDB: KCL columns, fencing, forward-only checkpoints,
lost replies, transactional sink writes, poison-record counting, SHARD_END and racing takes."""

from __future__ import annotations

import contextlib
import itertools
import threading
import uuid
from typing import Any

import pytest
from botocore.exceptions import ClientError, ConnectionClosedError, ReadTimeoutError

from shardline.consumer import Lease, LeaseLost, LeaseTable, SinkConflict
from shardline.kinesis import LATEST, SHARD_END, TRIM_HORIZON, Position
from tests.support.integration import aws_client

KEY = "shardId-000000000001"
BASE_SEQUENCE = 49590338271490256608559692538361571095921575989136588898  # 56 digits, like Kinesis
FAILURE_COLUMNS = {"failedSequenceNumber", "failedSubSequenceNumber", "failedAttempts", "lastError"}


def seq(n: int) -> str:
    """The n-th sequence number of the shard (56 digits: too long for a DynamoDB number)."""
    return str(BASE_SEQUENCE + n)


def at(n: int, sub: int = 0) -> Position:
    return Position(seq(n), sub)


def ticking_clock() -> Any:
    """A clock that moves one second per reading, so that every write changes `updatedAt`."""
    return itertools.count(1_700_000_000).__next__


@pytest.fixture(scope="module")
def dynamodb(moto_server):
    return aws_client("dynamodb", moto_server)


@pytest.fixture
def table_name(dynamodb) -> str:
    name = f"leases-{uuid.uuid4().hex[:12]}"
    LeaseTable.create(dynamodb, name)
    return name


@pytest.fixture
def table(dynamodb, table_name) -> LeaseTable:
    return LeaseTable(dynamodb, table_name, clock=ticking_clock())


@pytest.fixture
def sink(dynamodb) -> str:
    name = f"sink-{uuid.uuid4().hex[:12]}"
    dynamodb.create_table(
        TableName=name,
        KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    dynamodb.get_waiter("table_exists").wait(TableName=name)
    return name


def row(dynamodb, table_name: str, key: str = KEY) -> dict[str, Any] | None:
    """The raw item, read strongly consistent."""
    return dynamodb.get_item(TableName=table_name, Key={"leaseKey": {"S": key}}, ConsistentRead=True).get(
        "Item"
    )


def stored_position(item: dict[str, Any]) -> Position:
    return Position(item["checkpoint"]["S"], int(item["checkpointSubSequenceNumber"]["N"]))


def sink_put(sink: str, item_id: str, value: str = "v", *, only_new: bool = False) -> dict[str, Any]:
    put: dict[str, Any] = {"TableName": sink, "Item": {"id": {"S": item_id}, "value": {"S": value}}}
    if only_new:
        put["ConditionExpression"] = "attribute_not_exists(id)"
    return {"Put": put}


def sink_items(dynamodb, sink: str) -> dict[str, str]:
    items = dynamodb.scan(TableName=sink, ConsistentRead=True)["Items"]
    return {item["id"]["S"]: item["value"]["S"] for item in items}


# -- take ------------------------------------------------------------------------------------


def test_take_of_a_missing_row_creates_it_at_trim_horizon_with_counter_1_in_kcl_columns(
    dynamodb, table_name, table
):
    lease = table.take(KEY, "worker-a", parent_shard_ids=["shardId-000000000000", "shardId-000000000002"])

    assert lease.counter == 1
    assert lease.owner == "worker-a"
    assert lease.checkpoint == Position(TRIM_HORIZON)
    assert lease.parent_shard_ids == {"shardId-000000000000", "shardId-000000000002"}
    item = row(dynamodb, table_name)
    assert item["leaseKey"] == {"S": KEY}
    assert item["leaseOwner"] == {"S": "worker-a"}
    assert item["leaseCounter"] == {"N": "1"}
    assert item["checkpoint"] == {"S": TRIM_HORIZON}
    assert item["checkpointSubSequenceNumber"] == {"N": "0"}
    assert item["ownerSwitchesSinceCheckpoint"] == {"N": "0"}
    assert set(item["parentShardId"]["SS"]) == {"shardId-000000000000", "shardId-000000000002"}
    assert not FAILURE_COLUMNS & item.keys()
    assert table.get(KEY) == lease


def test_take_without_parents_writes_no_parent_column(dynamodb, table_name, table):
    table.take(KEY, "worker-a")

    assert "parentShardId" not in row(dynamodb, table_name)


def test_get_of_a_missing_row_is_none(table):
    assert table.get(KEY) is None


def test_take_again_increments_the_counter_and_counts_only_switches_to_another_owner(
    dynamodb, table_name, table
):
    takes = [("a", 1, 0), ("a", 2, 0), ("b", 3, 1), ("b", 4, 1), ("a", 5, 2)]
    for owner, counter, switches in takes:
        lease = table.take(KEY, owner)
        assert (lease.owner, lease.counter, lease.owner_switches) == (owner, counter, switches)
        item = row(dynamodb, table_name)
        assert item["leaseOwner"] == {"S": owner}
        assert item["leaseCounter"] == {"N": str(counter)}
        assert item["ownerSwitchesSinceCheckpoint"] == {"N": str(switches)}
        assert item["checkpoint"] == {"S": TRIM_HORIZON}


def test_take_keeps_the_checkpoint_and_parents_of_an_existing_row(dynamodb, table_name, table):
    first = table.take(KEY, "a", parent_shard_ids=["shardId-000000000000"])
    table.checkpoint(first, at(4, 2))

    lease = table.take(KEY, "b")

    assert lease.checkpoint == at(4, 2)
    assert lease.parent_shard_ids == {"shardId-000000000000"}
    assert stored_position(row(dynamodb, table_name)) == at(4, 2)


# -- checkpoint ------------------------------------------------------------------------------


def test_checkpoint_moves_forward_writes_both_columns_and_resets_owner_switches(dynamodb, table_name, table):
    table.take(KEY, "a")
    lease = table.take(KEY, "b")
    assert row(dynamodb, table_name)["ownerSwitchesSinceCheckpoint"] == {"N": "1"}

    lease = table.checkpoint(lease, at(1, 3))

    assert lease.checkpoint == at(1, 3)
    assert lease.owner_switches == 0
    item = row(dynamodb, table_name)
    assert item["checkpoint"] == {"S": seq(1)}
    assert item["checkpointSubSequenceNumber"] == {"N": "3"}
    assert item["ownerSwitchesSinceCheckpoint"] == {"N": "0"}
    assert item["leaseCounter"] == {"N": str(lease.counter)}  # the returned lease is the row
    assert table.get(KEY) == lease


def test_checkpoint_compares_sequence_numbers_as_integers(dynamodb, table_name, table):
    lease = table.checkpoint(table.take(KEY, "a"), Position("9"))
    lease = table.checkpoint(lease, Position("10"))
    assert row(dynamodb, table_name)["checkpoint"] == {"S": "10"}

    assert table.checkpoint(lease, Position("9", 5)) == lease
    assert row(dynamodb, table_name)["checkpoint"] == {"S": "10"}


def test_checkpoint_steps_through_sub_sequences_of_one_aggregate(dynamodb, table_name, table):
    lease = table.take(KEY, "a")
    for sub in range(4):
        lease = table.checkpoint(lease, at(7, sub))
        assert stored_position(row(dynamodb, table_name)) == at(7, sub)
    lease = table.checkpoint(lease, at(8))
    assert stored_position(row(dynamodb, table_name)) == at(8)


@pytest.mark.parametrize(
    "position",
    [at(5, 2), at(5, 1), at(4, 9), Position("9"), Position(TRIM_HORIZON), Position(LATEST)],
    ids=["same", "lower-sub", "lower-sequence", "shorter-sequence", "trim-horizon", "latest"],
)
def test_checkpoint_at_or_below_the_current_position_writes_nothing(dynamodb, table_name, table, position):
    lease = table.checkpoint(table.take(KEY, "a"), at(5, 2))
    before = row(dynamodb, table_name)

    assert table.checkpoint(lease, position) == lease

    assert row(dynamodb, table_name) == before  # not even updatedAt moved


# -- fencing ---------------------------------------------------------------------------------


@pytest.fixture
def fenced(dynamodb, table_name, table):
    """Lease A taken, then taken over by B, who checkpointed: returns (A's lease, the row after B)."""
    lease_a = table.take(KEY, "worker-a")
    lease_a = table.checkpoint(lease_a, at(1))
    lease_b = table.take(KEY, "worker-b")
    table.checkpoint(lease_b, at(2))
    return lease_a, row(dynamodb, table_name)


def test_a_fenced_holder_cannot_checkpoint_and_the_row_keeps_the_new_holders_state(
    dynamodb, table_name, table, fenced
):
    lease_a, after_b = fenced

    with pytest.raises(LeaseLost):
        table.checkpoint(lease_a, at(3))

    assert row(dynamodb, table_name) == after_b
    assert after_b["leaseOwner"] == {"S": "worker-b"}
    assert stored_position(after_b) == at(2)


def test_a_fenced_holder_cannot_record_a_failure(dynamodb, table_name, table, fenced):
    lease_a, after_b = fenced

    with pytest.raises(LeaseLost):
        table.record_failure(lease_a, at(2), "boom")

    assert row(dynamodb, table_name) == after_b


def test_a_fenced_holder_cannot_checkpoint_with_writes_and_none_of_the_writes_land(
    dynamodb, table_name, table, sink, fenced
):
    lease_a, after_b = fenced

    with pytest.raises(LeaseLost):
        table.checkpoint_with(lease_a, at(3), [sink_put(sink, "x"), sink_put(sink, "y")])

    assert sink_items(dynamodb, sink) == {}
    assert row(dynamodb, table_name) == after_b


# -- forward only, even for stale writers ----------------------------------------------------


def test_a_stale_copy_of_the_lease_never_moves_the_checkpoint_backwards(dynamodb, table_name, table):
    stale = table.checkpoint(table.take(KEY, "worker-b"), at(1))
    table.checkpoint(stale, at(10))  # the live copy moves on; `stale` still believes at(1)

    try:
        result = table.checkpoint(stale, at(5))  # above its own view, below the row
    except LeaseLost:
        refused = True
    else:
        refused = result.checkpoint != at(5)

    assert refused
    assert stored_position(row(dynamodb, table_name)) == at(10)


def test_nothing_ever_overwrites_shard_end(dynamodb, table_name, table, sink):
    first = table.take(KEY, "worker-a")
    before_end = table.checkpoint(first, at(3))
    ended = table.checkpoint(before_end, Position(SHARD_END))
    item = row(dynamodb, table_name)
    assert (item["checkpoint"], item["checkpointSubSequenceNumber"]) == ({"S": SHARD_END}, {"N": "0"})

    attempts = [
        lambda: table.checkpoint(ended, at(99)),
        lambda: table.checkpoint(before_end, at(99, 5)),
        lambda: table.checkpoint(first, at(1)),
        lambda: table.checkpoint_with(before_end, at(100), [sink_put(sink, "late")]),
        lambda: table.checkpoint(table.take(KEY, "worker-b"), at(10**6)),
        lambda: table.mark_shard_end(before_end),
    ]
    for attempt in attempts:
        with contextlib.suppress(LeaseLost):
            attempt()
        assert stored_position(row(dynamodb, table_name)) == Position(SHARD_END)
    assert sink_items(dynamodb, sink) == {}
    assert table.take(KEY, "worker-c").checkpoint == Position(SHARD_END)


# -- lost replies ----------------------------------------------------------------------------


class LostReply:
    """A DynamoDB client whose next update_item / transact_write_items fails with `error`: after
    performing the real call (`lands=True`: the reply was lost) or without performing it."""

    def __init__(self, client: Any, error: Exception, *, lands: bool) -> None:
        self._client = client
        self._error = error
        self._lands = lands
        self.armed = False
        self.failed = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    def _call(self, name: str, kwargs: dict[str, Any]) -> Any:
        if not self.armed:
            return getattr(self._client, name)(**kwargs)
        self.armed = False
        self.failed += 1
        if self._lands:
            getattr(self._client, name)(**kwargs)
        raise self._error

    def update_item(self, **kwargs: Any) -> Any:
        return self._call("update_item", kwargs)

    def transact_write_items(self, **kwargs: Any) -> Any:
        return self._call("transact_write_items", kwargs)


ERRORS = {
    "read-timeout": ReadTimeoutError(endpoint_url="http://127.0.0.1/"),
    "connection-closed": ConnectionClosedError(endpoint_url="http://127.0.0.1/"),
    "connection-reset": ConnectionResetError(104, "Connection reset by peer"),
    "internal-server-error": ClientError(
        {"Error": {"Code": "InternalServerError", "Message": "lost"}}, "UpdateItem"
    ),
}


@pytest.fixture(params=list(ERRORS))
def error(request) -> Exception:
    return ERRORS[request.param]


def test_a_checkpoint_whose_reply_was_lost_is_accepted_when_it_landed(dynamodb, table_name, error):
    client = LostReply(dynamodb, error, lands=True)
    table = LeaseTable(client, table_name, clock=ticking_clock())
    lease = table.checkpoint(table.take(KEY, "a"), at(1))
    client.armed = True

    lease = table.checkpoint(lease, at(2, 1))

    assert client.failed == 1
    assert lease.checkpoint == at(2, 1)
    assert stored_position(row(dynamodb, table_name)) == at(2, 1)
    assert table.checkpoint(lease, at(3)).checkpoint == at(3)  # the returned lease is usable


def test_a_checkpoint_that_never_reached_the_table_raises_and_changes_nothing(dynamodb, table_name, error):
    client = LostReply(dynamodb, error, lands=False)
    table = LeaseTable(client, table_name, clock=ticking_clock())
    lease = table.checkpoint(table.take(KEY, "a"), at(1))
    before = row(dynamodb, table_name)
    client.armed = True

    with pytest.raises(type(error)):
        table.checkpoint(lease, at(2, 1))

    assert client.failed == 1
    assert row(dynamodb, table_name) == before
    assert table.checkpoint(lease, at(2, 1)).checkpoint == at(2, 1)  # the lease is still good


def test_a_checkpoint_with_writes_whose_reply_was_lost_is_accepted_when_it_landed(
    dynamodb, table_name, sink, error
):
    client = LostReply(dynamodb, error, lands=True)
    table = LeaseTable(client, table_name, clock=ticking_clock())
    lease = table.checkpoint(table.take(KEY, "a"), at(1))
    client.armed = True

    lease = table.checkpoint_with(lease, at(2), [sink_put(sink, "x", "1"), sink_put(sink, "y", "2")])

    assert client.failed == 1
    assert lease.checkpoint == at(2)
    assert stored_position(row(dynamodb, table_name)) == at(2)
    assert sink_items(dynamodb, sink) == {"x": "1", "y": "2"}


def test_a_checkpoint_with_writes_that_never_reached_the_table_raises_and_lands_nothing(
    dynamodb, table_name, sink, error
):
    client = LostReply(dynamodb, error, lands=False)
    table = LeaseTable(client, table_name, clock=ticking_clock())
    lease = table.checkpoint(table.take(KEY, "a"), at(1))
    before = row(dynamodb, table_name)
    client.armed = True

    with pytest.raises(type(error)):
        table.checkpoint_with(lease, at(2), [sink_put(sink, "x"), sink_put(sink, "y")])

    assert client.failed == 1
    assert row(dynamodb, table_name) == before
    assert sink_items(dynamodb, sink) == {}


# -- checkpoint with sink writes -------------------------------------------------------------


def test_checkpoint_with_lands_the_checkpoint_and_the_writes_together(dynamodb, table_name, table, sink):
    table.take(KEY, "a")
    lease = table.take(KEY, "a")  # counter 2: the transaction is fenced by the current counter

    lease = table.checkpoint_with(
        lease, at(3, 1), [sink_put(sink, "x", "1"), sink_put(sink, "y", "2", only_new=True)]
    )

    assert lease.checkpoint == at(3, 1)
    item = row(dynamodb, table_name)
    assert stored_position(item) == at(3, 1)
    assert item["ownerSwitchesSinceCheckpoint"] == {"N": "0"}
    assert sink_items(dynamodb, sink) == {"x": "1", "y": "2"}


def test_checkpoint_with_a_failing_sink_condition_raises_sink_conflict_and_lands_nothing(
    dynamodb, table_name, table, sink
):
    dynamodb.put_item(TableName=sink, Item={"id": {"S": "taken"}, "value": {"S": "original"}})
    lease = table.checkpoint(table.take(KEY, "a"), at(1))
    before = row(dynamodb, table_name)
    writes = [
        sink_put(sink, "new-1"),
        sink_put(sink, "taken", "overwritten", only_new=True),
        sink_put(sink, "new-2"),
    ]

    with pytest.raises(SinkConflict):
        table.checkpoint_with(lease, at(2), writes)

    assert row(dynamodb, table_name) == before
    assert sink_items(dynamodb, sink) == {"taken": "original"}
    assert table.checkpoint(lease, at(2)).checkpoint == at(2)  # the lease was not lost


def test_checkpoint_with_99_writes_lands_them_all(dynamodb, table_name, table, sink):
    lease = table.take(KEY, "a")

    lease = table.checkpoint_with(lease, at(1), [sink_put(sink, f"id-{i}") for i in range(99)])

    assert stored_position(row(dynamodb, table_name)) == at(1)
    assert len(sink_items(dynamodb, sink)) == 99


def test_checkpoint_with_more_than_99_writes_raises_value_error_and_lands_nothing(
    dynamodb, table_name, table, sink
):
    lease = table.take(KEY, "a")
    before = row(dynamodb, table_name)

    with pytest.raises(ValueError):
        table.checkpoint_with(lease, at(1), [sink_put(sink, f"id-{i}") for i in range(100)])

    assert row(dynamodb, table_name) == before
    assert sink_items(dynamodb, sink) == {}


@pytest.mark.parametrize(
    "position", [at(4), at(5, 1), Position(TRIM_HORIZON)], ids=["lower", "same", "start"]
)
def test_checkpoint_with_writes_and_a_backward_position_raises_value_error_and_lands_nothing(
    dynamodb, table_name, table, sink, position
):
    lease = table.checkpoint(table.take(KEY, "a"), at(5, 1))
    before = row(dynamodb, table_name)

    with pytest.raises(ValueError):
        table.checkpoint_with(lease, position, [sink_put(sink, "x")])

    assert row(dynamodb, table_name) == before
    assert sink_items(dynamodb, sink) == {}


# -- poison records --------------------------------------------------------------------------


def failure_columns(item: dict[str, Any]) -> tuple[Position, int, str]:
    return (
        Position(item["failedSequenceNumber"]["S"], int(item["failedSubSequenceNumber"]["N"])),
        int(item["failedAttempts"]["N"]),
        item["lastError"]["S"],
    )


def test_record_failure_counts_attempts_per_position_and_stores_the_last_error(dynamodb, table_name, table):
    lease = table.checkpoint(table.take(KEY, "a"), at(1))

    for attempt in (1, 2, 3):
        lease = table.record_failure(lease, at(2, 4), f"boom {attempt}")
        assert (lease.failed_at, lease.failed_attempts, lease.last_error) == (
            at(2, 4),
            attempt,
            f"boom {attempt}",
        )
        assert failure_columns(row(dynamodb, table_name)) == (at(2, 4), attempt, f"boom {attempt}")

    lease = table.record_failure(lease, at(2, 5), "another record")
    assert lease.failed_attempts == 1
    assert failure_columns(row(dynamodb, table_name)) == (at(2, 5), 1, "another record")
    assert stored_position(row(dynamodb, table_name)) == at(1)  # a failure never moves the checkpoint


def test_failed_attempts_survive_a_new_holder_taking_the_lease(dynamodb, table_name, table):
    lease = table.take(KEY, "a")
    lease = table.record_failure(lease, at(2), "boom")
    lease = table.record_failure(lease, at(2), "boom")

    retaken = table.take(KEY, "b")
    assert (retaken.failed_at, retaken.failed_attempts, retaken.last_error) == (at(2), 2, "boom")
    retaken = table.record_failure(retaken, at(2), "boom again")

    assert failure_columns(row(dynamodb, table_name)) == (at(2), 3, "boom again")


@pytest.mark.parametrize("position", [at(2, 4), at(2, 5), at(3)], ids=["at", "past-sub", "past-sequence"])
def test_a_checkpoint_at_or_past_the_failed_position_removes_the_failure_columns(
    dynamodb, table_name, table, position
):
    lease = table.record_failure(table.take(KEY, "a"), at(2, 4), "boom")

    lease = table.checkpoint(lease, position)

    assert (lease.failed_at, lease.failed_attempts, lease.last_error) == (None, 0, None)
    item = row(dynamodb, table_name)
    assert not FAILURE_COLUMNS & item.keys()
    assert stored_position(item) == position


def test_a_checkpoint_short_of_the_failed_position_keeps_the_failure(dynamodb, table_name, table):
    lease = table.record_failure(table.take(KEY, "a"), at(2, 4), "boom")

    lease = table.checkpoint(lease, at(2, 3))

    assert failure_columns(row(dynamodb, table_name)) == (at(2, 4), 1, "boom")
    assert lease.failed_attempts == 1


def test_a_checkpoint_with_writes_past_the_failed_position_removes_the_failure_columns(
    dynamodb, table_name, table, sink
):
    lease = table.record_failure(table.take(KEY, "a"), at(2), "boom")

    table.checkpoint_with(lease, at(2), [sink_put(sink, "x")])

    assert not FAILURE_COLUMNS & row(dynamodb, table_name).keys()


# -- SHARD_END by compare-and-swap -----------------------------------------------------------


def test_mark_shard_end_sets_shard_end_when_the_checkpoint_has_not_moved(dynamodb, table_name, table):
    table.checkpoint(table.take(KEY, "a"), at(7, 2))
    seen = table.get(KEY)

    assert table.mark_shard_end(seen) is True

    item = row(dynamodb, table_name)
    assert (item["checkpoint"], item["checkpointSubSequenceNumber"]) == ({"S": SHARD_END}, {"N": "0"})
    assert item["leaseCounter"] == {"N": str(seen.counter)}  # not a take: it fences no holder


@pytest.mark.parametrize("moved_to", [at(7, 3), at(8)], ids=["sub-sequence", "sequence"])
def test_mark_shard_end_changes_nothing_when_the_checkpoint_moved(dynamodb, table_name, table, moved_to):
    lease = table.checkpoint(table.take(KEY, "a"), at(7, 2))
    seen = table.get(KEY)
    table.checkpoint(lease, moved_to)
    before = row(dynamodb, table_name)

    assert table.mark_shard_end(seen) is False

    assert row(dynamodb, table_name) == before


def test_mark_shard_end_of_a_missing_row_changes_nothing(dynamodb, table_name, table):
    seen = Lease(key="shardId-000000000009", owner="a", counter=1, checkpoint=at(1))

    assert table.mark_shard_end(seen) is False

    assert row(dynamodb, table_name, "shardId-000000000009") is None


# -- racing takes ----------------------------------------------------------------------------


class AtomicWrites:
    """A client whose writes are applied one at a time, as DynamoDB applies each write to an item.

    moto server evaluates a ConditionExpression and applies the update in separate steps without a
    lock, so two racing writers can both pass `leaseCounter = :seen` (reproduced with plain boto3:
    4 threads of conditional increments hand out duplicate values). Only writes are serialized:
    reads, the decision to write and the conditional writes of the racers still interleave.
    """

    def __init__(self, client: Any, lock: threading.Lock) -> None:
        self._client = client
        self._lock = lock

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    def put_item(self, **kwargs: Any) -> Any:
        with self._lock:
            return self._client.put_item(**kwargs)

    def update_item(self, **kwargs: Any) -> Any:
        with self._lock:
            return self._client.update_item(**kwargs)


@pytest.mark.parametrize("threads, takes_each", [(2, 10), (4, 10)])
def test_racing_takes_hand_out_distinct_counters_and_the_row_counts_every_success(
    moto_server, dynamodb, table_name, threads, takes_each
):
    write_lock = threading.Lock()
    tables = [
        LeaseTable(AtomicWrites(aws_client("dynamodb", moto_server), write_lock), table_name)
        for _ in range(threads)
    ]
    start = threading.Barrier(threads)
    counters: list[int] = []
    contended: list[LeaseLost] = []
    unexpected: list[BaseException] = []
    lock = threading.Lock()

    def race(worker: int) -> None:
        try:
            start.wait(timeout=30)
            for _ in range(takes_each):
                try:
                    lease = tables[worker].take(KEY, f"worker-{worker}")
                except LeaseLost as exc:
                    with lock:
                        contended.append(exc)
                    continue
                with lock:
                    counters.append(lease.counter)
        except BaseException as exc:
            with lock:
                unexpected.append(exc)

    workers = [threading.Thread(target=race, args=(i,)) for i in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=120)

    assert not unexpected
    assert len(counters) + len(contended) == threads * takes_each
    assert counters, "no take succeeded"
    assert sorted(counters) == list(range(1, len(counters) + 1))  # distinct, and none skipped
    assert row(dynamodb, table_name)["leaseCounter"] == {"N": str(len(counters))}
