"""The handler loop alone (`_handler_loop.HandlerLoop`): handlers run over records, their writes
handed to a checkpoint, failures to a failure policy — on an in-memory lease table, no consumer."""

from __future__ import annotations

import pytest

from shardline.consumer._careful import CarefulSpans
from shardline.consumer._checkpoint import RetryFrom
from shardline.consumer._failure_policy import FailurePolicy
from shardline.consumer._handler_deadline import HandlerDeadline, OutOfTime
from shardline.consumer._handler_loop import HandlerLoop, writes_by_record
from shardline.consumer._settings import call_bound
from shardline.errors import ConfigurationError
from shardline.kinesis import Position
from shardline.testing import LeaseWrite
from tests.support.shard_parts import KEY, FakeDeadLetters, checkpoint, kinesis_record, put, record, sink_ids

RECORDS = [record(n) for n in range(1, 6)]
LAST = kinesis_record(5)


def loop(dlq=None, out_of_time=lambda: False, **settings) -> HandlerLoop:
    part = checkpoint(**settings)
    return HandlerLoop(
        part, FailurePolicy(part, dlq, lambda: float("inf")), HandlerDeadline(None), out_of_time, LAST
    )


def number(r) -> int:
    return int(r.data)


def test_a_record_handler_runs_once_per_record_in_order_and_every_record_is_done():
    run, seen = loop(), []

    def handle(r):
        seen.append(number(r))
        return [put(f"item-{number(r)}")]

    assert run.records(handle, RECORDS) is None
    assert seen == [1, 2, 3, 4, 5]
    assert run.checkpoint.done.position == Position(LAST.sequence_number)  # the batch's tail
    run.checkpoint.commit()
    assert sink_ids(run.checkpoint.table) == [f"item-{n}" for n in range(1, 6)]
    assert run.metrics.snapshot()["RecordsProcessed"] == 5


def test_checkpoint_every_commits_inside_the_batch():
    run = loop(checkpoint_every=2)
    run.records(lambda r: None, RECORDS)
    assert run.checkpoint.table.writes[LeaseWrite.CHECKPOINT] == 2  # after 2 and 4; the tail is the run's
    assert run.checkpoint.table.row(KEY).checkpoint == RECORDS[3].position


def test_a_raising_record_stops_the_loop_at_it_after_committing_what_preceded_it():
    run = loop()

    def handle(r):
        if number(r) == 3:
            raise ValueError("bad record")

    assert run.records(handle, RECORDS) == RECORDS[2].sequence_number
    row = run.checkpoint.table.row(KEY)
    assert (row.checkpoint, row.failed_at, row.failed_attempts) == (
        RECORDS[1].position,
        RECORDS[2].position,
        1,
    )


def test_a_record_the_policy_dead_letters_is_passed_and_the_loop_goes_on():
    dlq = FakeDeadLetters()
    run = loop(dlq, max_attempts=2)
    table = run.checkpoint.table
    run.checkpoint.lease = table.record_failure(run.checkpoint.lease, RECORDS[2].position, "earlier")
    seen = []

    def handle(r):
        seen.append(number(r))
        if number(r) == 3:
            raise ValueError("bad record")

    assert run.records(handle, RECORDS) is None
    assert seen == [1, 2, 3, 4, 5]
    assert [sent[0] for sent in dlq.sent] == [RECORDS[2]]


def test_out_of_time_commits_what_is_done_and_stops_before_the_next_record():
    calls = []
    run = loop(out_of_time=lambda: len(calls) == 2)
    assert run.records(calls.append, RECORDS) == RECORDS[2].sequence_number
    assert run.checkpoint.table.row(KEY).checkpoint == RECORDS[1].position


def test_a_batch_chunk_that_raises_is_split_until_the_failing_record_is_alone():
    run, calls = loop(), []

    def handle(chunk):
        calls.append([number(r) for r in chunk])
        if 4 in calls[-1]:
            raise ValueError("bad record")

    assert run.batch(handle, RECORDS) == RECORDS[3].sequence_number
    assert calls[0] == [1, 2, 3, 4, 5] and calls[-1] == [4]
    row = run.checkpoint.table.row(KEY)
    assert (row.checkpoint, row.failed_at) == (RECORDS[2].position, RECORDS[3].position)
    assert run.metrics.snapshot()["BatchesSplit"] >= 2


def test_a_batch_handler_whose_one_list_is_refused_reruns_until_the_refusal_is_pinned_on_one_record():
    run, calls = loop(), []
    table = run.checkpoint.table
    run.checkpoint.done_with(record(0), [put("taken")])
    run.checkpoint.commit()
    run.checkpoint.fresh = RECORDS

    def handle(chunk):
        numbers = calls.append([number(r) for r in chunk]) or calls[-1]
        clash = [put("taken", only_new=True)] if 2 in numbers else []  # record 2's write is refused
        return [put(f"item-{n}") for n in numbers] + clash

    with pytest.raises(RetryFrom) as stop:  # the run stops at it (ShardRun answers the mapping)
        run.batch(handle, RECORDS)
    assert stop.value.sequence == RECORDS[1].sequence_number
    # the list for 1-5 is refused: halves; the list for 1-2 is refused: each alone, then 3-5 again,
    # and the commit at the end pins the refusal on record 2's own writes
    assert calls == [[1, 2, 3, 4, 5], [1, 2], [3, 4, 5], [1], [2], [3, 4, 5]]
    row = table.row(KEY)
    assert (row.checkpoint, row.failed_at) == (RECORDS[0].position, RECORDS[1].position)
    assert sink_ids(table) == ["taken", "item-1"]


def test_a_batch_answer_by_record_must_name_only_records_of_the_batch():
    with pytest.raises(ValueError, match="not in its batch"):
        writes_by_record({record(9): [put("x")]}, RECORDS[:2], lambda table: None)
    by_record, one_list = writes_by_record({RECORDS[1]: [put("x")]}, RECORDS[:2], lambda table: None)
    assert (by_record, one_list) == ([[], [put("x")]], [])
    assert writes_by_record([put("y")], RECORDS[:2], lambda table: None) == (None, [put("y")])


# -- a careful record alone, and the room its start mark needs ---------------------------------


def careful_loop(rooms: list[float]) -> HandlerLoop:
    """A loop whose lease runs carefully (a span of one, after a crash); the invocation's room
    beyond the time margin is each of `rooms` in turn, then the last one."""
    part = checkpoint()
    part.lease = part.table.mark_careful(part.lease, 1)
    part.careful = CarefulSpans([r.position for r in RECORDS])
    left = iter(rooms)
    last = [rooms[0]]

    def room() -> float:
        last[0] = next(left, last[0])
        return last[0]

    return HandlerLoop(part, FailurePolicy(part, None, room), HandlerDeadline(None), lambda: False, LAST)


def test_a_careful_record_starts_alone_only_with_room_for_its_start_mark_slowest_answer():
    """Default margin 2 s: the mark's slowest answer is 6 s (2 tries of 1 s connect + 2 s read)."""
    assert call_bound(2.0) == 6.0
    run, seen = careful_loop([10.0, 5.9]), []  # room at the start, then at the lone record
    assert run.records(lambda r: seen.append(number(r)), RECORDS) == RECORDS[0].sequence_number
    assert seen == [] and not run.checkpoint.table.row(KEY).span_started  # nothing started, nothing counted
    assert run.checkpoint.table.row(KEY).failed_attempts == 0
    assert run.metrics.snapshot()["RetriesDeferred"] == 1
    run = careful_loop([10.0, 6.0])
    assert run.records(lambda r: seen.append(number(r)), RECORDS) is None and seen[0] == 1


def test_an_invocation_that_never_had_room_to_start_a_careful_record_stalls_saying_why():
    run = careful_loop([3.0])
    with pytest.raises(ConfigurationError, match=r"needs 6 s beyond the time margin .* raise the function's"):
        run.records(lambda r: None, RECORDS)
    assert not run.checkpoint.table.row(KEY).span_started


def test_the_batch_path_keeps_the_same_room_for_a_careful_record_alone():
    run = careful_loop([10.0, 1.0])
    assert run.batch(lambda chunk: None, RECORDS) == RECORDS[0].sequence_number
    assert not run.checkpoint.table.row(KEY).span_started


@pytest.mark.parametrize("kind", ["OutOfTime with a context", "OutOfTime without one", "a callable"])
def test_the_common_run_stops_before_the_record_where_time_runs_out_however_time_is_asked(kind):
    part = checkpoint()
    deadline = HandlerDeadline(None)
    left = {"ms": 60_000.0}
    asked = {"after": 0}
    out_of_time = {
        "OutOfTime with a context": OutOfTime(deadline, lambda: left["ms"], 2_000.0),
        "OutOfTime without one": OutOfTime(deadline, None, 2_000.0),
        "a callable": lambda: asked["after"] >= 3,
    }[kind]
    run = HandlerLoop(part, FailurePolicy(part, None, lambda: float("inf")), deadline, out_of_time, LAST)
    seen = []

    def handle(r):
        seen.append(number(r))
        asked["after"] += 1
        if len(seen) == 3:
            left["ms"] = 1_000.0  # below the margin from now on
            if kind == "OutOfTime without one":
                deadline.expired = True  # the budget's timer fired
        return None

    assert run.records(handle, RECORDS) == RECORDS[3].sequence_number
    assert seen == [1, 2, 3] and part.lease.checkpoint == RECORDS[2].position
