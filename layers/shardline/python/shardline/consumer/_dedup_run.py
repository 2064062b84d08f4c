"""Producer-retry dedup in one run: which records are copies, what state each checkpoint writes.

`DedupRun` starts from the applied-aggregate state of the lease row (`_dedup.AppliedAggregates`,
whose docstring draws the design). De-aggregation asks it of each shardline aggregate whether it
is a copy (already in the state, or seen earlier in the same batch); it notes where the
checkpoint wholly passes each aggregate it admitted, and hands each commit the state to write
with its checkpoint: the stored state and every aggregate wholly passed there, pruned and bounded.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Protocol

from shardline.consumer._dedup import MAX_STATE_BYTES, AppliedAggregates
from shardline.errors import AggregationError
from shardline.kinesis._positions import Position
from shardline.kpl._identity import AggregateId, caller_scope

logger = logging.getLogger("shardline.consumer._dedup")  # the name operators filter on


class _Counter(Protocol):
    def count(self, name: str, value: int = 1) -> None: ...


class _Pending:
    __slots__ = ("aggregate", "arrival", "partial", "passed_at", "replay")

    def __init__(
        self, aggregate: AggregateId, arrival: float, passed_at: Position, replay: bool = False
    ) -> None:
        self.aggregate = aggregate
        self.arrival = arrival
        self.passed_at = passed_at
        self.partial = False
        self.replay = replay  # wholly before the checkpoint: applied by an earlier delivery


class DedupRun:
    """One run's dedup on one shard: the state as of the lease's checkpoint, the aggregates this
    batch holds (in shard order) and where the checkpoint wholly passes each.

    De-aggregation asks `admit` of each shardline aggregate (False: a copy, skipped) and says
    where its last delivered member is (`ends_at`); each commit writes `state_at(position)` with
    its checkpoint and, once it landed, calls `committed(position)`."""

    __slots__ = (
        "_at",
        "_below",
        "_checkpoint",
        "_covered",
        "_evictions_counted",
        "_metrics",
        "_pending",
        "_seen",
        "_text",
        "others",
        "state",
    )

    def __init__(
        self, stored: str | None, metrics: _Counter | None = None, checkpoint: Position | None = None
    ) -> None:
        self.state = AppliedAggregates.parse(stored)
        self._checkpoint: str | None = None  # the sequence number of the checkpoint's Kinesis record
        if checkpoint is None or checkpoint.is_sentinel:
            self._below = checkpoint or Position("0")
        else:  # a Kinesis record before the checkpoint's was wholly passed by an earlier one
            self._below = Position(checkpoint.sequence)
            self._checkpoint = checkpoint.sequence
        self._metrics = metrics
        self._seen: set[tuple[str, int]] = set()
        self._pending: list[_Pending] = []
        self._at = 0  # pending entries before this index are in `state`
        self._text = stored or ""  # the committed state as stored
        self._evictions_counted = 0  # pending entries whose write's evictions are counted
        self._covered: list[int] | None = None  # of the last admitted aggregate
        #: Did another run (a redrive and the group's, `_redrive_claims`) apply this aggregate?
        self.others: Callable[[AggregateId], bool] | None = None

    def admit(self, aggregate_id: str, sequence: str, arrival: float, caller: str | None = None) -> bool:
        """Should the Kinesis record at `sequence`, aggregate `aggregate_id` of `caller` (its
        `sl.c`), be applied? No if the state has the aggregate, or this batch held it earlier. An
        id that is not a shardline aggregate id is admitted and not remembered. A record wholly
        before the checkpoint is admitted (the checkpoint skips it: a replay, not a copy) and
        remembered for this batch. Lanes are the caller's (`scoped`): another caller's aggregate
        naming the same producer and lane is another lane, and never moves this one's floor."""
        self._covered = None
        try:
            aggregate = scoped(AggregateId.parse(aggregate_id), caller)
        except AggregationError:
            return True
        identity = (aggregate.key, aggregate.counter)
        if Position(sequence) < self._below:
            self._seen.add(identity)
            self._pending.append(_Pending(aggregate, arrival, Position(sequence), True))  # folds at once
            return True
        if identity in self._seen or self.state.applied(aggregate):
            return False
        if self.others is not None and self.others(aggregate):
            return False
        self._seen.add(identity)
        self._pending.append(_Pending(aggregate, arrival, Position(sequence)))
        self._covered = self.state.covered(aggregate)
        return True

    def covered(self) -> list[int] | None:
        """The hash-key ranges `[low, high, ...]` whose members of the aggregate just admitted
        are already applied (a parent applied them: skip them), or None."""
        return self._covered

    def replayed(self, sequence: str) -> bool:
        """Is the Kinesis record at `sequence`, refused by `admit`, the checkpoint's own (the
        batch is a replay: counted as a duplicate, not a copy)?"""
        return sequence == self._checkpoint

    def ends_at(self, sub_sequence: int | None, partial: bool = False) -> None:
        """The last admitted aggregate's last delivered user record is at `sub_sequence` (None:
        it delivered none, so a checkpoint at its sequence number passes it); `partial`: members
        outside the shard's range were skipped."""
        if not self._pending:
            return
        last = self._pending[-1]
        last.partial = partial
        if sub_sequence:
            last.passed_at = Position(last.passed_at.sequence, sub_sequence)

    def state_at(self, position: Position) -> str:
        """The serialized state to write with a checkpoint at `position`: the stored state and
        every aggregate wholly passed at `position`, pruned and bounded (lanes it evicts are
        counted here, once per position). `committed` makes it the state once the write landed."""
        end = self._passed(position)
        if end == self._at:
            return self._text
        state = self.state.copy()
        for entry in self._pending[self._at : end]:
            state.fold(entry.aggregate, entry.arrival, entry.partial)
        state.prune()
        text, evicted = state.bounded()
        if end > self._evictions_counted:
            # Counted before the write, not after it lands: a process that dies after its commit
            # must not hide the evictions it stored (an alarm may over-count a retried write, never miss one).
            self._evictions_counted = end
            if evicted and self._metrics is not None:
                self._metrics.count("DedupLanesEvicted", evicted)
                logger.warning(
                    "applied-aggregate state over %d bytes: %d lanes evicted", MAX_STATE_BYTES, evicted
                )
        return text

    def committed(self, position: Position) -> None:
        """A checkpoint at `position` landed with `state_at(position)`."""
        end = self._passed(position)
        if end == self._at:
            return
        for entry in self._pending[self._at : end]:
            self.state.fold(entry.aggregate, entry.arrival, entry.partial)
        self.state.prune()
        self.state.bounded()  # the same lanes `state_at` evicted (and counted) for this write
        self._at = end
        self._text = self.state.serialize()

    def claimed_through(self, position: Position) -> list[tuple[AggregateId, float]]:
        """The aggregates (and their arrivals) admitted in this run whose Kinesis record is at or
        before `position`: a checkpoint there applied (some of) their members (`_redrive_claims`)."""
        if position.is_sentinel:
            return []
        last = int(position.sequence)
        return [
            (entry.aggregate, entry.arrival)
            for entry in self._pending
            if not entry.replay and int(entry.passed_at.sequence) <= last
        ]

    def admitted(self) -> list[AggregateId]:
        """Every aggregate admitted in this run to be applied (not a replay below the checkpoint)."""
        return [entry.aggregate for entry in self._pending if not entry.replay]

    def _passed(self, position: Position) -> int:
        """Index past the last pending aggregate wholly passed by a checkpoint at `position`."""
        end = self._at
        pending = self._pending
        while end < len(pending) and pending[end].passed_at <= position:
            end += 1
        return end


def scoped(aggregate: AggregateId, caller: str | None) -> AggregateId:
    """`aggregate` as its caller's: its lane key (`AggregateId.key`) becomes
    `<caller scope>.<producer>.<lane>`, so only the lane's own caller and producer move its floor."""
    return aggregate._replace(producer=f"{caller_scope(caller)}.{aggregate.producer}")
