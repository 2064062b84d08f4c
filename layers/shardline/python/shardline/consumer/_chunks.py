"""How a batch handler's records are cut into chunks, so that a failure is pinned on one record.

A batch handler gets the new records at once; when a chunk raises (or its one list of writes is
refused) it is split in halves and run again until the record that makes it fail is alone —
only that record is counted against (`_failure_policy`). The chunks waiting to run are a stack,
last first, so `stack.pop()` is the next chunk. These functions only cut: they run nothing,
count nothing and write nothing.
"""

from __future__ import annotations

from collections.abc import Sequence

from shardline.consumer._careful import CarefulSpans
from shardline.consumer._deaggregation import ConsumedRecord
from shardline.kinesis._positions import Position

Chunk = list[ConsumedRecord]


def first_chunks(records: Chunk, careful: CarefulSpans | None, single: bool) -> list[Chunk]:
    """The batch handler's first chunks, last first (a stack): all records at once; the first
    alone after its failure (`single`); in careful spans after a crash (`_careful`)."""
    if careful is not None:
        chunks, start = [], 0
        while start < len(records):
            size = careful.span_after(records[start - 1].position if start else None)
            chunks.append(records[start : start + size])
            start += size
        return chunks[::-1]
    if single:
        return [records[1:], records[:1]]
    return [records]


def halves(chunk: Chunk) -> list[Chunk]:
    """A failing chunk's two halves, as stack entries (the first half runs first)."""
    middle = len(chunk) // 2
    return [chunk[middle:], chunk[:middle]]


def around(chunk: Chunk, at: int) -> list[Chunk]:
    """`chunk` cut around its record at `at` (which runs alone), as stack entries."""
    return [chunk[at + 1 :], chunk[at : at + 1], chunk[:at]]


def index_of(chunk: Sequence[ConsumedRecord], position: Position) -> int | None:
    """Where in `chunk` the record at `position` is, or None."""
    for at, record in enumerate(chunk):
        if record.position == position:
            return at
    return None


def rerun_chunks(
    refused: Chunk,
    stack: list[Chunk],
    redo: Chunk,
    applied: frozenset[Position] = frozenset(),
) -> list[Chunk]:
    """The stack after a refused one-list chunk (`refused`): `redo` — every record done since the
    checkpoint — runs again: that chunk without its records already applied (each alone, to be
    passed) when the refused guards named them (`applied`), else in halves, so the refusal is
    pinned on one record; and then what had not run yet (`stack`)."""
    first, last = refused[0].position, refused[-1].position
    before = [record for record in redo if record.position < first]
    after = [record for record in redo if record.position > last]
    if applied:
        chunks: list[Chunk] = [[]]
        for record in refused:
            if record.position in applied:
                chunks += [[record], []]
            else:
                chunks[-1].append(record)
    else:
        middle = len(refused) // 2
        chunks = [refused[:middle], refused[middle:]]
    return [*stack, after, *reversed(chunks), before]
