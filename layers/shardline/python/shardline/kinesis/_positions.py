"""Positions in a shard, ordered as the KCL orders them.

A position is a Kinesis sequence number plus a sub-sequence number (a user record's index in a
KPL aggregate; 0 for a plain record), or one of the KCL's sentinels. Sentinels that mean "start
here" sort below every sequence number; SHARD_END sorts above everything:

    AT_TIMESTAMP < TRIM_HORIZON < LATEST < any (sequence, sub-sequence) < SHARD_END

Sequence numbers are compared as integers (decimal strings of up to 128 digits; real ones have
about 56).
"""

from __future__ import annotations

from functools import total_ordering

TRIM_HORIZON = "TRIM_HORIZON"
LATEST = "LATEST"
AT_TIMESTAMP = "AT_TIMESTAMP"
SHARD_END = "SHARD_END"

_SENTINEL_RANK = {AT_TIMESTAMP: -3, TRIM_HORIZON: -2, LATEST: -1, SHARD_END: 1}


@total_ordering
class Position:
    """A checkpointable position: `Position("4963...", 2)`, or `Position(SHARD_END)`."""

    __slots__ = ("_key", "sequence", "sub_sequence")

    def __init__(self, sequence: str, sub_sequence: int = 0) -> None:
        rank = _SENTINEL_RANK.get(sequence)
        if rank is None:
            if not (sequence.isascii() and sequence.isdigit()):
                raise ValueError(f"not a sequence number or sentinel: {sequence!r}")
            self._key: tuple[int, int, int] = (0, int(sequence), sub_sequence)
        else:
            self._key = (rank, 0, 0)
            sub_sequence = 0
        self.sequence = sequence
        self.sub_sequence = sub_sequence

    @property
    def is_sentinel(self) -> bool:
        return self._key[0] != 0

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Position) and self._key == other._key

    def __lt__(self, other: Position) -> bool:
        if not isinstance(other, Position):
            return NotImplemented
        return self._key < other._key

    def __hash__(self) -> int:
        return hash(self._key)

    def __repr__(self) -> str:
        if self.is_sentinel:
            return f"Position({self.sequence})"
        return f"Position({self.sequence}, {self.sub_sequence})"
