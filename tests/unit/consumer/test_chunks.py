"""How a batch handler's records are cut (`_chunks`): pure functions over lists, last chunk first."""

from __future__ import annotations

from shardline.consumer._careful import CarefulSpans
from shardline.consumer._chunks import around, first_chunks, halves, index_of, rerun_chunks
from tests.support.shard_parts import record

RECORDS = [record(n) for n in range(7)]


def numbers(stack):
    """The stack in the order it runs (popped from the end), as record numbers."""
    return [[int(r.data) for r in chunk] for chunk in reversed(stack)]


def test_the_first_chunk_is_the_whole_batch_or_its_first_record_alone_after_it_failed():
    assert numbers(first_chunks(RECORDS, None, single=False)) == [list(range(7))]
    assert numbers(first_chunks(RECORDS, None, single=True)) == [[0], list(range(1, 7))]


def test_after_a_crash_the_chunks_are_the_careful_spans_1_2_4():
    careful = CarefulSpans([r.position for r in RECORDS])
    assert numbers(first_chunks(RECORDS, careful, single=True)) == [[0], [1, 2], [3, 4, 5, 6]]


def test_a_failing_chunk_runs_again_as_halves_first_half_first():
    assert numbers(halves(RECORDS[:5])) == [[0, 1], [2, 3, 4]]


def test_a_condemned_record_is_cut_out_to_run_alone_between_the_others():
    at = index_of(RECORDS, RECORDS[3].position)
    assert at == 3
    assert numbers(around(RECORDS, at)) == [[0, 1, 2], [3], [4, 5, 6]]
    assert index_of(RECORDS[:2], RECORDS[5].position) is None


def test_a_refused_list_reruns_in_halves_between_what_was_done_before_and_after_it():
    waiting = [RECORDS[6:]]
    stack = rerun_chunks(RECORDS[2:5], waiting, RECORDS[:6])
    assert numbers(stack) == [[0, 1], [2], [3, 4], [5], [6]]


def test_a_refused_list_whose_guards_named_applied_records_runs_them_alone_to_be_passed():
    applied = frozenset({RECORDS[3].position})
    stack = rerun_chunks(RECORDS[2:6], [], RECORDS[:6], applied)
    assert numbers(stack) == [[0, 1], [2], [3], [4, 5], []]
