"""Running the user's handler over a shard run's new records, record by record or in chunks.

`HandlerLoop.records` calls a record handler once per record; `HandlerLoop.batch` calls a batch
handler with chunks (`_chunks`), split until a failing record is alone. Each answer's writes are
checked (`_transaction.checked_writes`) and handed to the `Checkpoint` as that record's, which
commits when it is due (`checkpoint_every`, `checkpoint_interval`, the end of a careful span) and
at the end. A failure goes to the `FailurePolicy`, which says whether the loop goes on past the
record (it was dead-lettered) or stops at it. Both return the sequence number the mapping
retries from, or None when every record is done. The handler runs under the time budget
(`_handler_deadline`): `out_of_time()` stops the loop before the next record.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from time import monotonic
from typing import Any

from shardline.consumer._checkpoint import Checkpoint, Rerun
from shardline.consumer._chunks import Chunk, around, first_chunks, halves, index_of, rerun_chunks
from shardline.consumer._deaggregation import ConsumedRecord, KinesisRecord
from shardline.consumer._failure_policy import FailurePolicy
from shardline.consumer._handler_deadline import (
    SIGALRM,
    HandlerDeadline,
    HandlerTimedOut,
    OutOfTime,
    getsignal,
)
from shardline.consumer._settings import BatchHandler, BatchWrites, RecordHandler, call_bound
from shardline.consumer._transaction import KeyLookup, checked_writes
from shardline.errors import ClientIdConflict, ConfigurationError, DependencyUnavailable
from shardline.kinesis._positions import Position

logger = logging.getLogger("shardline.consumer._shard_run")  # the name operators filter on

Writes = list[Mapping[str, Any]]


class HandlerLoop:
    """The handler's runs over one shard run's new records, under one time budget.

    `last`: the batch's last Kinesis record (the checkpoint passes it when every record is done).
    `out_of_time()`: the invocation must stop before the next record.
    """

    def __init__(
        self,
        checkpoint: Checkpoint,
        failures: FailurePolicy,
        deadline: HandlerDeadline,
        out_of_time: Callable[[], bool],
        last: KinesisRecord,
    ) -> None:
        self.checkpoint = checkpoint
        self.failures = failures
        self.deadline = deadline
        self.out_of_time = out_of_time
        self.last = last
        self.settings = checkpoint.settings
        self.metrics = checkpoint.metrics
        self.applied_copies: set[Position] = set()  # records a refused guard showed as applied
        self.conflicts: dict[Position, ClientIdConflict] = {}  # records a refused guard showed in conflict
        self._condemned: Position | None = None
        self._processed = 0
        self._room_at_start = failures.room()

    # -- a record handler ----------------------------------------------------------------------

    def records(self, handler: RecordHandler, records: list[ConsumedRecord]) -> str | None:
        """Run `handler` on each record in order; where the mapping retries from, or None."""
        failures = self.failures
        # Only a run that begins after a failure has a condemned record or a backoff to ask about
        # (a record failing in this run stops it, or is dead-lettered and passed), and only one
        # after a crash a careful span: the common run asks none of them, per record.
        try:
            if failures.condemned() is None and not failures.retrying() and self.checkpoint.careful is None:
                return self._plain_records(handler, records)
            return self._records_after_failure(handler, records)
        finally:
            if self.deadline.settle():
                self.budget_disarmed()

    def _records_after_failure(self, handler: RecordHandler, records: list[ConsumedRecord]) -> str | None:
        """`records` in a run after a failure or a crash: each record asks whether it is condemned,
        must wait for its backoff, or runs in a careful span."""
        checkpoint, failures, deadline = self.checkpoint, self.failures, self.deadline
        out_of_time, keys = self.out_of_time, checkpoint.pending.keys
        checkpoint_every = self.settings.checkpoint_every or float("inf")
        checkpoint_interval = self.settings.checkpoint_interval
        condemned = failures.condemned()
        retrying = failures.retrying()
        processed = 0
        try:
            for record in records:
                if out_of_time():
                    checkpoint.commit()
                    return record.sequence_number
                if condemned is not None and record.position == condemned:
                    failures.dead_letter(record, *failures.last_failure())
                    continue
                # A careful span exists only after a crash: the common run skips its three asks.
                careful = checkpoint.careful is not None
                if (retrying and not failures.backed_off(record)) or (
                    careful and not self.start_careful(record)
                ):
                    return record.sequence_number
                try:
                    deadline.in_handler = True
                    returned = handler(record)
                    deadline.in_handler = False
                except (Exception, HandlerTimedOut) as exc:
                    deadline.in_handler = False
                    if failures.give_up_on(record, exc):
                        continue
                    return record.sequence_number
                if deadline.rearm():
                    self.budget_disarmed()
                try:
                    writes = checked_writes(returned, keys) if returned else []  # most return none
                except ValueError as exc:
                    if failures.give_up_on(record, exc):
                        continue
                    return record.sequence_number
                if careful:
                    checkpoint.returned(record)
                checkpoint.done_with(record, writes)
                processed += 1
                if (
                    checkpoint.since_checkpoint >= checkpoint_every
                    or checkpoint.clock() - checkpoint.checkpointed_at >= checkpoint_interval
                    or (checkpoint.careful is not None and checkpoint.careful.ends_span(record.position))
                ):
                    checkpoint.commit()
            checkpoint.pass_tail(self.last)
            return None
        finally:
            self.metrics.count("RecordsProcessed", processed)

    def _plain_records(self, handler: RecordHandler, records: list[ConsumedRecord]) -> str | None:
        """`records` in the common run: no record condemned, none to back off for, no careful span
        (a crash). The same steps as `records` with what only those runs ask left out, and the
        per-record calls a record needs only when it returned writes or failed made only then.
        The time budget is checked as `HandlerDeadline.due` and `check` say (inlined here): the
        SIGALRM handler after every call, the timer itself after a fast call only now and then.

        A deliberate copy of `records`' call-and-except block: one loop for both cost the common
        run a third of its records/s (`python -m bench`'s consumer row). A change to how a call
        fails, or to what a record's end commits, is made in both."""
        checkpoint, failures, deadline = self.checkpoint, self.failures, self.deadline
        out_of_time, keys = self.out_of_time, checkpoint.pending.keys
        checkpoint_every = self.settings.checkpoint_every or float("inf")
        checkpoint_interval = self.settings.checkpoint_interval
        clock = checkpoint.clock
        shared_clock = clock is monotonic  # the default: one clock read serves both
        installed, timer_due = deadline.installed, deadline.timer_due
        remaining_ms, margin_ms = _time_left(out_of_time, deadline)
        processed = 0
        try:
            for record in records:
                if deadline.expired or remaining_ms() < margin_ms:  # `out_of_time()`, inlined
                    checkpoint.commit()
                    return record.sequence_number
                try:
                    deadline.in_handler = True
                    returned = handler(record)
                    deadline.in_handler = False
                except (Exception, HandlerTimedOut) as exc:
                    deadline.in_handler = False
                    if failures.give_up_on(record, exc):
                        continue
                    return record.sequence_number
                now = clock()
                if installed is not None:
                    at = now if shared_clock else monotonic()
                    if at >= timer_due or getsignal(SIGALRM) is not installed:
                        if deadline.check(at):
                            self.budget_disarmed()
                        installed, timer_due = deadline.installed, deadline.timer_due
                if returned:  # most return none: `done_with` without writes is these two lines
                    try:
                        writes = checked_writes(returned, keys)
                    except ValueError as exc:
                        if failures.give_up_on(record, exc):
                            continue
                        return record.sequence_number
                    checkpoint.done_with(record, writes)
                else:
                    checkpoint.done = record
                    checkpoint.since_checkpoint += 1
                processed += 1
                if (
                    checkpoint.since_checkpoint >= checkpoint_every
                    or now - checkpoint.checkpointed_at >= checkpoint_interval
                ):
                    checkpoint.commit()
            checkpoint.pass_tail(self.last)
            return None
        finally:
            self.metrics.count("RecordsProcessed", processed)

    def start_careful(self, record: ConsumedRecord) -> bool:
        """In a careful span: may `record` start (`may_start`)? If so, say that it starts."""
        if not self.may_start(record):
            return False
        self.checkpoint.starting(record)
        return True

    def may_start(self, record: ConsumedRecord) -> bool:
        """May `record` start now? A careful record run alone after a crash first writes that its
        handler starts (`Checkpoint.starting`), and a death after that write landed is pinned on
        the record: the row cannot tell a death in the write from a death in the handler. So the
        write goes out only with room for its slowest answer beyond the time margin
        (`call_bound`): a timeout cannot land inside it. Without that room the mapping retries
        from the record, nothing counted; an invocation that never had it stalls the shard."""
        if not self.checkpoint.alone(record):
            return True
        needed = call_bound(self.settings.time_margin)
        if self.failures.room() >= needed:
            return True
        if self._room_at_start < needed:
            raise ConfigurationError(
                f"a record run alone after a crash needs {needed:g} s beyond the time margin "
                f"({self.settings.time_margin:g} s) for the write that its handler starts; this "
                f"invocation had {self._room_at_start:.1f} s: raise the function's timeout"
            )
        self.metrics.count("RetriesDeferred")
        self.checkpoint.commit()
        return False

    # -- a batch handler -----------------------------------------------------------------------

    def batch(self, handler: BatchHandler, records: list[ConsumedRecord]) -> str | None:
        """Run `handler` on `records`, splitting a chunk that fails until its record is alone."""
        lease = self.checkpoint.lease
        assert lease is not None
        self._condemned = self.failures.condemned()
        # After a failure at the first record, it runs alone first.
        single = bool(records) and lease.failed_at == records[0].position
        stack = first_chunks(records, self.checkpoint.careful, single)
        self._processed = 0
        try:
            while True:
                try:
                    return self._drain(handler, stack)
                except Rerun as rerun:
                    self.metrics.count("BatchesSplit")
                    self.conflicts.update(rerun.conflicts)
                    stack = self._rerun_stack(
                        rerun.records, stack, rerun.applied | frozenset(rerun.conflicts)
                    )
        finally:
            self.metrics.count("RecordsProcessed", self._processed)
            if self.deadline.settle():
                self.budget_disarmed()

    def _drain(self, handler: BatchHandler, stack: list[Chunk]) -> str | None:
        """Run the chunks of `stack` (popped as they run) to the end of the batch, or a stop."""
        while stack:
            chunk = stack.pop()
            if not chunk:
                continue
            retry_from = self._chunk(handler, chunk, stack)
            if retry_from is not None:
                return retry_from
        self.checkpoint.pass_tail(self.last)
        self.checkpoint.commit(release=True)
        return None

    def _chunk(self, handler: BatchHandler, chunk: Chunk, stack: list[Chunk]) -> str | None:
        """Run one chunk (or pass it, or cut it onto `stack`); where to retry from, or None."""
        checkpoint, failures, deadline = self.checkpoint, self.failures, self.deadline
        if self.out_of_time():
            checkpoint.commit()
            return chunk[0].sequence_number
        if len(chunk) == 1 and (conflict := self.conflicts.get(chunk[0].position)) is not None:
            self.metrics.count("ClientIdConflicts")  # its id holds another payload: dead-lettered
            if failures.give_up_on(chunk[0], conflict, {"clientIdConflict": conflict.details()}):
                return None
            return chunk[0].sequence_number
        if len(chunk) == 1 and chunk[0].position in self.applied_copies:
            checkpoint.done_with(chunk[0], [])  # its guard is there: already applied
            self.metrics.count("ClientIdDuplicatesSkipped")
            return None
        if self._condemned is not None and (at := index_of(chunk, self._condemned)) is not None:
            if len(chunk) > 1:
                stack += around(chunk, at)
                return None
            failures.dead_letter(chunk[0], *failures.last_failure())
            self._condemned = None
            return None
        if not failures.backed_off(chunk[0]):
            return chunk[0].sequence_number
        if len(chunk) == 1:
            if not self.may_start(chunk[0]):
                return chunk[0].sequence_number
            checkpoint.starting(chunk[0])
        try:
            deadline.in_handler = True
            returned = handler(chunk)
            deadline.in_handler = False
            writes, chunk_writes = writes_by_record(returned, chunk, checkpoint.pending.keys)
        except (Exception, HandlerTimedOut) as exc:
            deadline.in_handler = False
            return self._chunk_failed(chunk, exc, stack)
        self.check_deadline()
        self._chunk_done(chunk, writes, chunk_writes)
        return None

    def _chunk_failed(self, chunk: Chunk, exc: BaseException, stack: list[Chunk]) -> str | None:
        """A chunk raised: split it, or count it against its lone record; where to retry from."""
        if isinstance(exc, DependencyUnavailable):
            self.checkpoint.commit()
            raise exc
        if len(chunk) > 1 and isinstance(exc, HandlerTimedOut):
            return self.failures.timed_out_together(chunk)
        if len(chunk) > 1:
            self.metrics.count("BatchesSplit")
            stack += halves(chunk)
            return None
        if self.failures.give_up_on(chunk[0], exc):
            stack.append(chunk[1:])
            return None
        return chunk[0].sequence_number

    def _chunk_done(self, chunk: Chunk, writes: list[Writes] | None, chunk_writes: Writes) -> None:
        """A chunk's handler returned: its records are done, with their writes."""
        checkpoint = self.checkpoint
        if len(chunk) == 1:
            checkpoint.returned(chunk[0])
        if writes is None:  # the chunk's writes, as one: no checkpoint inside the chunk
            checkpoint.done_with(chunk[-1], chunk_writes, covering=len(chunk))
        else:
            for record, record_writes in zip(chunk, writes, strict=True):
                checkpoint.done_with(record, record_writes)
        self._processed += len(chunk)
        if (
            checkpoint.careful is not None and checkpoint.careful.ends_span(chunk[-1].position)
        ) or checkpoint.clock() - checkpoint.checkpointed_at >= self.settings.checkpoint_interval:
            checkpoint.commit()

    def _rerun_stack(self, refused: Chunk, stack: list[Chunk], applied: frozenset[Position]) -> list[Chunk]:
        """After a refused one-list chunk (the checkpoint committed what preceded it): every record
        done since the checkpoint runs again (`_chunks.rerun_chunks`), and then what had not run."""
        checkpoint = self.checkpoint
        assert checkpoint.lease is not None
        at = checkpoint.lease.checkpoint
        waiting = {record.position for chunk in stack for record in chunk}
        redo = [r for r in checkpoint.fresh if r.position > at and r.position not in waiting]
        checkpoint.forget_since_checkpoint()
        if applied:
            self.applied_copies |= applied - self.conflicts.keys()
        return rerun_chunks(refused, stack, redo, applied)

    def check_deadline(self) -> None:
        """A handler that replaced shardline's SIGALRM timer disarmed the time budget: re-arm it."""
        if self.deadline.rearm():
            self.budget_disarmed()

    def budget_disarmed(self) -> None:
        """The deadline had to be re-armed after a handler: count it and say so."""
        self.metrics.count("TimeBudgetDisarmed")
        logger.warning(
            "consumer group %s: a handler replaced the SIGALRM handler or timer shardline uses for "
            "the time budget; it was re-armed (do not use SIGALRM in handlers)",
            self.settings.group,
        )


def _time_left(
    out_of_time: Callable[[], bool], deadline: HandlerDeadline
) -> tuple[Callable[[], float], float]:
    """What the common run asks before each record instead of calling `out_of_time`: it stops when
    `deadline` expired or the first answers less than the second. An `OutOfTime` of `deadline`
    is read into its parts; any other test of time is asked as it is."""
    if isinstance(out_of_time, OutOfTime) and out_of_time.deadline is deadline:
        if out_of_time.remaining_ms is None:  # no context: only the deadline
            return float, 0.0  # float() is 0.0, never below 0.0
        return out_of_time.remaining_ms, out_of_time.margin_ms
    return (lambda: -1.0 if out_of_time() else 0.0), 0.0


def writes_by_record(
    returned: BatchWrites, chunk: Chunk, keys: KeyLookup
) -> tuple[list[Writes] | None, Writes]:
    """A batch handler's answer, checked: each record's writes, or (None, the chunk's writes) if
    it answered one list. Raises `ValueError` where DynamoDB would refuse (the chunk is split)."""
    if not isinstance(returned, Mapping):
        return None, checked_writes(returned, keys)
    writes: list[Writes] = [[] for _ in chunk]
    index = {record: at for at, record in enumerate(chunk)}
    for record, record_writes in returned.items():
        if record not in index:
            raise ValueError(
                f"the batch handler returned writes for a record not in its batch: {record!r:.200}"
            )
        writes[index[record]] = checked_writes(record_writes, keys)
    return writes, []
