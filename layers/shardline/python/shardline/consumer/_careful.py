"""Running carefully after a crash: spans that double, so a crash is pinned on a record that ran
alone, at a cost that grows with the logarithm of the batch, not its length.

A delivery whose process died (out of memory, the function's timeout, a native crash) leaves its
in-flight mark in the lease row; the next delivery of the same batch finds it (`LeaseTable.begin`).
Which record killed it is unknown, so nothing is counted against any record yet. The shard runs
*carefully* instead: the records past the checkpoint in spans of 1, 2, 4, 8, ... records, each
span's size written in the lease row (`carefulSpan`) by the checkpoint that precedes it. A crash
inside a span of one is pinned on that record only if its handler had started and not returned:
`spanStarted` is written right before the lone record's handler runs and `spanReturned` right
after it returns, and a failure counted for it clears `spanStarted` — so a death in shardline's
own calls before the handler (taking the lease, counting an earlier crash, a parent's probe) or
after it (the commit) is never the record's. The `spanStarted` write itself is the one a death
after would be pinned for, so it goes out only with room for its slowest answer beyond the time
margin (`HandlerLoop.may_start`): a timeout cannot land in it; a lost reply to it stalls the shard,
noted on the row it left (`ShardRun._stall`), and pins nothing. A pinned crash is counted
against the record as a failure; a crash inside a larger span starts the spans again at one,
from that span's first record.

Cost, per careful delivery of n records: one write to start (`mark_careful`), a `spanStarted` and
a `spanReturned` write, and ⌈log2(n + 1)⌉ checkpoints (100 records: 7, instead of 100 one per
record). A record
that kills every delivery at distance d past the checkpoint is pinned after at most
⌈log2(d + 1)⌉ + 1 crashes, then needs `max_attempts` pinned crashes, spaced by backoff, to be
dead-lettered.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

from shardline.consumer._lease_store import Lease
from shardline.kinesis._positions import Position

#: The error a pinned crash is counted with.
CRASHED_ALONE = (
    "the function died (timed out, ran out of memory or crashed) while this record's handler ran "
    "alone, after an earlier crash"
)


def crash_pinned(previous: Lease) -> bool:
    """Did the delivery that died run one record alone, whose handler had started and not
    returned?"""
    return previous.careful_span == 1 and previous.span_started and not previous.span_returned


class CarefulSpans:
    """The spans of a careful delivery over its new records (`positions`, in order): 1, 2, 4, ..."""

    def __init__(self, positions: Sequence[Position]) -> None:
        self._positions = list(positions)
        ends, end, size = [], 0, 1
        while end < len(self._positions):
            end += size
            ends.append(end)
            size *= 2
        self._ends = ends  # index one past each span's last record

    def span_after(self, done: Position | None) -> int:
        """How many records the span starting right after `done` holds, up to its end."""
        start = 0 if done is None else bisect.bisect_right(self._positions, done)
        at = bisect.bisect_right(self._ends, start)
        return (self._ends[at] - start) if at < len(self._ends) else 1

    def ends_span(self, position: Position) -> bool:
        """Is the record at `position` the last of its span (a checkpoint goes after it)?"""
        index = bisect.bisect_left(self._positions, position)
        return index + 1 in self._ends or index + 1 >= len(self._positions)
