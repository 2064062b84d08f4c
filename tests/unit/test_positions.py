"""Positions in a shard: KCL ordering, integer sequence numbers, sub-sequence ties, bad input."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shardline.kinesis import AT_TIMESTAMP, LATEST, SHARD_END, TRIM_HORIZON, Position

# A real Kinesis sequence number: 56 decimal digits, more than a 64-bit integer holds.
SEQ = "49590338271490256608559692538361571095921575989136588898"
MAX_SEQUENCE = 10**56 - 1  # the largest 56-digit sequence number

# The KCL's order, written out independently of the library: starts < records < SHARD_END.
EXPECTED_RANK = {AT_TIMESTAMP: 0, TRIM_HORIZON: 1, LATEST: 2, SHARD_END: 4}
RECORD_RANK = 3


def expected_key(position: Position) -> tuple[int, int, int]:
    if position.sequence in EXPECTED_RANK:
        return (EXPECTED_RANK[position.sequence], 0, 0)
    return (RECORD_RANK, int(position.sequence), position.sub_sequence)


def test_sentinels_and_records_order_exactly_as_the_kcl():
    ordered = [
        Position(AT_TIMESTAMP),
        Position(TRIM_HORIZON),
        Position(LATEST),
        Position("0"),
        Position("0", 1),
        Position("1"),
        Position(SEQ),
        Position(SEQ, 7),
        Position(str(MAX_SEQUENCE), 2**31),
        Position(SHARD_END),
    ]
    for i, low in enumerate(ordered):
        for high in ordered[i + 1 :]:
            assert low < high
            assert high > low
            assert low <= high
            assert low != high
    assert sorted(reversed(ordered)) == ordered


@pytest.mark.parametrize("start", [AT_TIMESTAMP, TRIM_HORIZON, LATEST])
def test_every_start_sentinel_sorts_below_the_smallest_record(start):
    assert Position(start) < Position("0", 0)


@pytest.mark.parametrize("sequence", ["0", "1", SEQ, str(MAX_SEQUENCE)])
def test_shard_end_sorts_above_every_record(sequence):
    assert Position(sequence, 2**31) < Position(SHARD_END)


def test_sequence_numbers_compare_as_integers_not_strings():
    assert Position("9") < Position("10")
    assert Position("99", 5) < Position("100", 0)
    assert Position(SEQ) < Position(str(int(SEQ) + 1))
    assert Position(str(int(SEQ) - 1), 999) < Position(SEQ, 0)
    assert Position("9" * 55) < Position("1" + "0" * 55)  # 55 digits < 56 digits


def test_ties_on_sequence_are_broken_by_sub_sequence():
    assert Position(SEQ, 0) < Position(SEQ, 1) < Position(SEQ, 2) < Position(SEQ, 10)
    assert Position(SEQ) == Position(SEQ, 0)


def test_equal_positions_are_equal_and_hash_alike():
    assert Position(SEQ, 3) == Position(SEQ, 3)
    assert hash(Position(SEQ, 3)) == hash(Position(SEQ, 3))
    assert Position(SEQ, 3) != Position(SEQ, 4)
    assert len({Position(SEQ, 3), Position(SEQ, 3), Position(SEQ, 4)}) == 2
    for sentinel in (AT_TIMESTAMP, TRIM_HORIZON, LATEST, SHARD_END):
        assert Position(sentinel) == Position(sentinel)
        assert hash(Position(sentinel)) == hash(Position(sentinel))
    assert len({Position(s) for s in (AT_TIMESTAMP, TRIM_HORIZON, LATEST, SHARD_END)}) == 4


def test_a_sentinel_ignores_a_sub_sequence():
    assert Position(SHARD_END, 5) == Position(SHARD_END)
    assert Position(SHARD_END, 5).sub_sequence == 0
    assert Position(TRIM_HORIZON, 3) < Position(LATEST)


def test_a_position_is_never_equal_to_a_plain_string():
    assert Position(SEQ) != SEQ
    assert Position(SHARD_END) != SHARD_END


def test_comparing_with_a_non_position_raises_type_error():
    with pytest.raises(TypeError):
        _ = Position("1") < "2"
    with pytest.raises(TypeError):
        sorted([Position("1"), "2"])


def test_is_sentinel_and_repr():
    assert Position(SHARD_END).is_sentinel
    assert Position(TRIM_HORIZON).is_sentinel
    assert not Position(SEQ, 2).is_sentinel
    assert repr(Position(SEQ, 2)) == f"Position({SEQ}, 2)"
    assert repr(Position(LATEST)) == "Position(LATEST)"


@pytest.mark.parametrize(
    "text",
    [
        "",
        "abc",
        "-1",
        "+1",
        " 12",
        "12 ",
        "1.5",
        "1e5",
        "0x10",
        "1_000",
        "trim_horizon",
        "SHARD_END ",
        "AT_SEQUENCE_NUMBER",
        "１２",  # full-width digits: str.isdigit() says yes, Kinesis never sends them
        "١٢٣",  # Arabic-Indic digits
        "²",  # superscript two
    ],
)
def test_a_string_that_is_neither_a_sequence_number_nor_a_sentinel_raises_value_error(text):
    with pytest.raises(ValueError):
        Position(text)


positions = st.one_of(
    st.sampled_from([AT_TIMESTAMP, TRIM_HORIZON, LATEST, SHARD_END]).map(Position),
    st.builds(
        lambda sequence, sub: Position(str(sequence), sub),
        st.one_of(st.integers(0, 20), st.integers(0, MAX_SEQUENCE)),
        st.integers(0, 5),
    ),
)


@given(st.lists(positions, max_size=30))
def test_sorting_positions_matches_sorting_by_rank_sequence_and_sub_sequence(items):
    assert [expected_key(p) for p in sorted(items)] == sorted(expected_key(p) for p in items)


@given(positions, positions)
def test_every_comparison_agrees_with_the_rank_sequence_sub_sequence_key(a, b):
    assert (a < b) == (expected_key(a) < expected_key(b))
    assert (a <= b) == (expected_key(a) <= expected_key(b))
    assert (a > b) == (expected_key(a) > expected_key(b))
    assert (a == b) == (expected_key(a) == expected_key(b))
    if a == b:
        assert hash(a) == hash(b)
