"""The checkpoint alone (`_checkpoint.Checkpoint`), on an in-memory lease table: what it commits,
with which sink writes, and on which record it blames a refusal — no handler, no consumer."""

from __future__ import annotations

import pytest

from shardline.consumer import LeaseLost, SinkConflict, once
from shardline.consumer._careful import CarefulSpans
from shardline.consumer._checkpoint import Rerun, RetryFrom
from shardline.kinesis import TRIM_HORIZON, Position
from shardline.testing import InMemoryLeaseTable, LeaseWrite
from tests.support.shard_parts import (
    KEY,
    SINK,
    GiveUps,
    checkpoint,
    kinesis_record,
    put,
    record,
    sink_ids,
)


def test_a_commit_moves_the_checkpoint_to_the_last_record_done_with_every_pending_write_in_one_transaction():
    part = checkpoint()
    table = part.table
    part.done_with(record(1), [put("a")])
    part.done_with(record(2), [])
    part.done_with(record(3), [put("c")])
    assert part.since_checkpoint == 3
    part.commit()
    assert table.row(KEY).checkpoint == record(3).position
    assert sink_ids(table) == ["a", "c"]
    assert table.writes[LeaseWrite.TRANSACTION] == 1
    assert (part.pending.writes, part.since_checkpoint) == ([], 0)
    assert part.metrics.snapshot()["CheckpointsWritten"] == 1


def test_a_commit_with_nothing_done_writes_nothing():
    part = checkpoint()
    before = part.table.total_writes
    part.commit()
    part.done_with(record(1), [])
    part.commit()
    part.commit()  # the checkpoint is there already
    assert part.table.total_writes == before + 1
    assert part.table.row(KEY).checkpoint == record(1).position


def test_writes_that_would_break_the_transaction_commit_what_was_done_before_them():
    part = checkpoint()
    part.done_with(record(1), [put("a")])
    part.done_with(record(2), [put("a")])  # the same item twice: not in one transaction
    assert part.table.row(KEY).checkpoint == record(1).position
    part.commit()
    assert part.table.row(KEY).checkpoint == record(2).position
    assert part.table.writes[LeaseWrite.TRANSACTION] == 2


def test_a_refused_write_is_blamed_on_its_record_what_precedes_it_commits_and_the_run_retries_from_it():
    give_up = GiveUps(False)
    part = checkpoint(give_up=give_up)
    table = part.table
    part.done_with(record(0), [put("taken")])
    part.commit()
    part.done_with(record(1), [put("a")])
    part.done_with(record(2), [put("taken", only_new=True)])
    part.done_with(record(3), [put("c")])
    with pytest.raises(RetryFrom) as stop:
        part.commit()
    assert stop.value.sequence == record(2).sequence_number
    assert table.row(KEY).checkpoint == record(1).position  # what preceded it
    assert sink_ids(table) == ["taken", "a"]
    ((blamed, error, details),) = give_up.calls
    assert blamed == record(2) and isinstance(error, SinkConflict)
    assert details["refusedWrites"] == [put("taken", only_new=True)]
    assert part.pending.writes == []
    assert part.metrics.snapshot()["SinkWritesRefused"] == 1


def test_a_refused_record_the_policy_dead_letters_is_passed_and_what_follows_it_commits():
    give_up = GiveUps(True)
    part = checkpoint(give_up=give_up)
    part.done_with(record(0), [put("taken")])
    part.commit()
    part.done_with(record(1), [put("taken", only_new=True)])
    part.done_with(record(2), [put("b")])
    part.commit()
    assert [call[0] for call in give_up.calls] == [record(1)]
    assert part.table.row(KEY).checkpoint == record(2).position
    assert sink_ids(part.table) == ["taken", "b"]


def test_with_sink_conflicts_skip_a_failed_condition_means_applied_and_no_policy_is_asked():
    give_up = GiveUps(False)
    part = checkpoint(give_up=give_up, sink_conflicts="skip")
    part.done_with(record(0), [put("taken")])
    part.commit()
    part.done_with(record(1), [put("taken", only_new=True)])
    part.done_with(record(2), [put("b")])
    part.commit()
    assert give_up.calls == []
    assert part.table.row(KEY).checkpoint == record(2).position
    assert part.metrics.snapshot()["SinkConflictsSkipped"] == 1


def test_a_record_whose_once_guard_is_there_is_already_applied_its_writes_dropped_and_passed():
    give_up = GiveUps(False)
    part = checkpoint(give_up=give_up)
    guard = once(SINK, {"id": {"S": "guard-1"}})
    part.done_with(record(1), [guard, put("first")])
    part.commit()
    part.done_with(record(2), [guard, put("again")])  # the same client id, re-posted
    part.done_with(record(3), [put("third")])
    part.commit()
    assert give_up.calls == []
    assert sink_ids(part.table) == ["guard-1", "first", "third"]
    assert part.table.row(KEY).checkpoint == record(3).position
    assert part.metrics.snapshot()["ClientIdDuplicatesSkipped"] == 1


def test_a_refused_list_for_several_records_is_handed_back_to_run_again_not_blamed():
    give_up = GiveUps(False)
    part = checkpoint(give_up=give_up)
    part.done_with(record(0), [put("taken")])
    part.commit()
    fresh = part.fresh = [record(1), record(2), record(3)]
    part.done_with(fresh[0], [put("a")])
    part.done_with(fresh[2], [put("b"), put("taken", only_new=True)], covering=2)  # one list for 2 and 3
    with pytest.raises(Rerun) as rerun:
        part.commit()
    assert rerun.value.records == fresh[1:]
    assert rerun.value.applied == frozenset()
    assert give_up.calls == []
    assert part.table.row(KEY).checkpoint == fresh[0].position  # what preceded the list
    assert sink_ids(part.table) == ["taken", "a"]


def test_a_lost_lease_stops_the_commit_and_nothing_lands():
    part = checkpoint()
    part.table.take(KEY, "someone else")
    part.done_with(record(1), [put("a")])
    with pytest.raises(LeaseLost):
        part.commit()
    assert sink_ids(part.table) == []
    assert part.table.row(KEY).checkpoint == Position(TRIM_HORIZON)


def test_the_tail_passes_the_last_kinesis_record_and_first_uncommitted_reads_the_checkpoint():
    part = checkpoint()
    batch = [kinesis_record(n) for n in (1, 2, 3)]
    assert part.first_uncommitted(batch) == batch[0].sequence_number  # at TRIM_HORIZON
    part.done_with(record(1), [])
    part.commit()
    assert part.first_uncommitted(batch) == batch[0].sequence_number  # its sub-records may follow
    part.pass_tail(batch[-1])
    assert part.done is not None and part.done.position == Position(batch[-1].sequence_number)
    part.commit()
    assert part.table.row(KEY).checkpoint == Position(batch[-1].sequence_number)
    assert part.first_uncommitted(batch) == batch[-1].sequence_number


def test_a_careful_record_alone_is_marked_started_then_returned_and_the_commit_clears_both():
    table = InMemoryLeaseTable(key_schema={SINK: ["id"]}, start=0.0)
    part = checkpoint(table)
    part.lease = table.mark_careful(part.lease, 1)
    part.careful = CarefulSpans([record(1).position, record(2).position])
    assert part.alone(record(1))
    part.starting(record(1))
    assert (table.row(KEY).span_started, table.row(KEY).span_returned) == (True, False)
    part.returned(record(1))
    assert (table.row(KEY).span_started, table.row(KEY).span_returned) == (True, True)
    part.done_with(record(1), [])
    assert not part.alone(record(2))  # a record is done past the checkpoint: not alone
    part.commit()
    row = table.row(KEY)
    assert (row.span_started, row.span_returned, row.careful_span) == (False, False, 2)
