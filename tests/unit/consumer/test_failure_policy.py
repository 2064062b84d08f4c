"""The failure policy alone (`_failure_policy.FailurePolicy`) over a checkpoint on an in-memory
lease table: attempts counted in the lease row, backoff, the dead-letter queue, pinned crashes."""

from __future__ import annotations

import pytest

from shardline.consumer import DependencyUnavailable
from shardline.consumer._careful import CRASHED_ALONE
from shardline.consumer._failure_policy import FailurePolicy, row_details
from shardline.consumer._handler_deadline import HandlerTimedOut
from shardline.kinesis import TRIM_HORIZON, Position
from tests.support.shard_parts import KEY, FakeDeadLetters, checkpoint, put, record


def policy(dlq=None, room: float = float("inf"), **settings):
    return FailurePolicy(checkpoint(**settings), dlq, lambda: room)


def test_a_failure_is_counted_in_the_lease_row_and_the_max_attempts_th_goes_to_the_dlq_and_is_passed():
    dlq = FakeDeadLetters()
    part = policy(dlq, max_attempts=3)
    table, bad = part.table, record(2)
    part.checkpoint.done_with(record(1), [])
    assert part.give_up_on(bad, ValueError("boom")) is False
    assert table.row(KEY).checkpoint == record(1).position  # what was done is committed first
    assert part.give_up_on(bad, ValueError("boom")) is False
    row = table.row(KEY)
    assert (row.failed_at, row.failed_attempts) == (bad.position, 2)
    assert dlq.sent == []
    assert part.give_up_on(bad, ValueError("boom")) is True
    ((sent, error, attempts, _),) = dlq.sent
    assert (sent, attempts) == (bad, 3) and "ValueError" in error
    assert table.row(KEY).checkpoint == bad.position  # the checkpoint moved past it
    assert table.row(KEY).failed_at is None
    counted = part.metrics.snapshot()
    assert (counted["RecordsFailed"], counted["RecordsSentToDLQ"]) == (3, 1)


def test_without_a_dlq_a_record_is_never_given_up():
    part = policy(None, max_attempts=2)
    for _ in range(5):
        assert part.give_up_on(record(1), ValueError("boom")) is False
    assert part.table.row(KEY).failed_attempts == 5
    assert part.condemned() is None


def test_a_dependency_unavailable_blames_no_record_commits_what_is_done_and_propagates():
    part = policy(FakeDeadLetters())
    part.checkpoint.done_with(record(1), [put("a")])
    with pytest.raises(DependencyUnavailable):
        part.give_up_on(record(2), DependencyUnavailable("the sink's API is down"))
    row = part.table.row(KEY)
    assert (row.checkpoint, row.failed_at, row.failed_attempts) == (record(1).position, None, 0)
    assert part.metrics.snapshot()["RecordsFailed"] == 0


def test_a_timeout_is_a_failure_and_counted_as_one():
    part = policy(None)
    assert part.give_up_on(record(1), HandlerTimedOut()) is False
    assert part.metrics.snapshot()["HandlerTimeouts"] == 1
    assert part.table.row(KEY).failed_attempts == 1


def test_the_failure_that_is_the_runs_last_write_removes_the_in_flight_mark():
    part = policy(None)
    checkpoint_ = part.checkpoint
    checkpoint_.lease, _ = part.table.begin(KEY, "me", record(1).sequence_number)
    checkpoint_.marked = True
    part.give_up_on(record(1), ValueError("boom"))
    assert checkpoint_.marked is False
    assert part.table.row(KEY).inflight is None


def test_a_record_that_failed_waits_out_its_backoff_on_the_tables_clock_when_there_is_room():
    part = policy(None, retry_backoff=2.0)
    part.give_up_on(record(1), ValueError("boom"))
    assert part.backed_off(record(2)) is True  # never failed: no wait
    assert part.table.slept == 0
    assert part.backed_off(record(1)) is True
    assert 2.0 <= part.table.slept <= 2.5  # 2 s, and up to a quarter of jitter
    assert part.metrics.snapshot()["RetriesDeferred"] == 1


def test_without_room_for_the_backoff_the_record_is_left_for_the_next_delivery():
    part = policy(None, room=0.5)
    part.give_up_on(record(1), ValueError("boom"))
    assert part.backed_off(record(1)) is False
    assert part.table.slept == 0.5


def test_a_condemned_record_is_read_from_the_row_with_its_last_failure():
    dlq = FakeDeadLetters()
    part = policy(dlq, max_attempts=2)
    part.checkpoint.lease = part.table.record_failure(part.checkpoint.lease, record(1).position, "e1")
    assert part.condemned() is None
    part.checkpoint.lease = part.table.record_failure(
        part.checkpoint.lease, record(1).position, "e2", details='{"reasons": ["r"]}'
    )
    assert part.condemned() == record(1).position
    assert part.last_failure() == ("e2", 2, {"reasons": ["r"]})


def test_the_row_keeps_each_refused_writes_kind_and_table_never_its_item():
    details = {"refusedWrites": [put("secret")], "reasons": ["ConditionalCheckFailed"]}
    assert row_details(details) == {
        "refusedWrites": [{"Put": {"TableName": "sink"}}],
        "reasons": ["ConditionalCheckFailed"],
    }
    assert row_details(None) is None


def test_a_crash_is_pinned_on_a_record_that_ran_alone_else_the_shard_runs_carefully():
    part = policy(None)
    table, lease = part.table, part.checkpoint.lease
    part.after_crash(record(1), lease, KEY)  # the delivery that died ran no record alone
    row = table.row(KEY)
    assert (row.careful_span, row.failed_at) == (1, None)
    alone = table.mark_careful(part.checkpoint.lease, 1, started=True)
    part.checkpoint.lease = alone
    part.after_crash(record(1), alone, KEY)
    row = table.row(KEY)
    assert (row.failed_at, row.failed_attempts, row.last_error) == (record(1).position, 1, CRASHED_ALONE)
    counted = part.metrics.snapshot()
    assert (counted["CrashesDetected"], counted["CrashesIsolated"]) == (2, 1)


def test_a_batch_timed_out_together_blames_none_and_runs_carefully_next():
    part = policy(None)
    chunk = [record(1), record(2)]
    assert part.timed_out_together(chunk) == chunk[0].sequence_number
    row = part.table.row(KEY)
    assert (row.careful_span, row.failed_at, row.checkpoint) == (1, None, Position(TRIM_HORIZON))
