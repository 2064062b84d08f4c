"""One invocation's work on one shard: lease, de-aggregation, duplicate skip, handler, deferred checkpoint.

`ShardRun.run()` returns the Kinesis sequence number the event-source mapping should retry from
(reported in `batchItemFailures`), or None when every record of the shard's batch is done.
What it keeps: the checkpoint only moves forward, only under the lease it was taken with, and
only past records that are done — their handler returned and their sink writes committed with
it, or they are in the dead-letter queue. A record is dead-lettered only on evidence against it,
counted in the lease row, `max_attempts` times, on deliveries spaced by backoff
(`ConsumerSettings.retry_backoff`, doubling):

- its handler raises, or is still running at the time budget (interrupted, `_handler_deadline`),
  while it runs alone — a record handler always does; a batch handler's chunk that raises is
  split in halves and run again until the record that makes it fail is alone;
- its sink writes DynamoDB refuses at commit, or whose own condition fails: the others commit,
  it fails (or, with `sink_conflicts="skip"`, a failed condition means "already applied"). A
  batch handler's one list of writes for a chunk is split like a raising chunk until the
  refusal is pinned on one record;
- a delivery whose process died while the record ran alone (`_careful`): after a crash the
  shard runs in doubling spans until one crash is pinned on a lone record.

Nothing else counts against a record: shardline's own calls, DynamoDB, the dead-letter queue, a
sink table that is missing or forbidden, a handler raising `DependencyUnavailable` — those stall
the shard, loudly, and lose nothing (`_stalls`).

Identity enters at two call sites, its logic kept elsewhere: de-aggregation skips a
Kinesis record that is a copy of an aggregate already applied (`_dedup.DedupRun`, from the lease
row's state, or the parents' at a child's start), and every checkpoint writes, in the same write,
the applied-aggregate state at its position; a record whose writes are refused because its
`once` guard's condition failed is already applied: its writes are dropped and the checkpoint
passes it (`ClientIdDuplicatesSkipped`), whatever `sink_conflicts` says.
"""

from __future__ import annotations

import bisect
import contextlib
import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from shardline.consumer._careful import CRASHED_ALONE, CarefulSpans, crash_pinned
from shardline.consumer._dead_letters import DeadLetterQueue
from shardline.consumer._deaggregation import ConsumedRecord, KinesisRecord, sub_record_count, user_records
from shardline.consumer._dedup import DedupRun
from shardline.consumer._failure_text import failure_text
from shardline.consumer._handler_deadline import HandlerDeadline, HandlerTimedOut
from shardline.consumer._leases import Lease, LeaseTable
from shardline.consumer._metrics import ConsumerMetrics
from shardline.consumer._once import guarded_id, is_once_guard
from shardline.consumer._resharding import ShardLineage
from shardline.consumer._settings import BatchHandler, BatchWrites, ConsumerSettings, RecordHandler
from shardline.consumer._stalls import STALL_BACKOFF_S, backoff, stall_cause
from shardline.consumer._transaction import KeyLookup, PendingTransaction, RecordWrites, checked_writes
from shardline.errors import DependencyUnavailable, LeaseLost, SinkConflict, SinkRejected
from shardline.kinesis._positions import Position

if TYPE_CHECKING:  # annotations only: the Protocols cost nothing at import
    from shardline.protocols import LambdaContext

logger = logging.getLogger(__name__)

_ANY_SEQUENCE = Position("0")
_MAX_SKIPPED_NOTES = 50


@dataclass(frozen=True, slots=True)
class GroupRuntime:
    """What every shard run of one consumer group shares: its settings and its collaborators."""

    settings: ConsumerSettings
    table: LeaseTable
    metrics: ConsumerMetrics
    lineage: ShardLineage | None
    dlq: DeadLetterQueue | None
    clock: Callable[[], float]
    record_handler: RecordHandler | None
    batch_handler: BatchHandler | None
    #: (lease key, delivery) of in-flight marks this process left because DynamoDB refused to
    #: remove them: their redelivery here is no crash. Kept by the consumer while it is warm.
    unreleased: set[tuple[str, str]] = field(default_factory=set)
    #: Consecutive stalled deliveries per lease key, for when the lease row cannot say.
    stalls: dict[str, int] = field(default_factory=dict)


class _RetryFrom(Exception):
    """Stop this run: the mapping retries the shard from `sequence`."""

    def __init__(self, sequence: str) -> None:
        super().__init__(sequence)
        self.sequence = sequence


class _Rerun(Exception):
    """A batch handler's one list of writes for `records` was refused: run them again — without
    the records at `applied` (their `once` guards are there: already applied), else in halves."""

    def __init__(self, records: list[ConsumedRecord], applied: frozenset[Position] = frozenset()) -> None:
        super().__init__(len(records))
        self.records = records
        self.applied = applied


class ShardRun:
    """One invocation's work on one shard: the state of the deferred checkpoint."""

    def __init__(
        self,
        group: GroupRuntime,
        stream: str,
        shard_id: str,
        records: list[KinesisRecord],
        context: LambdaContext | None,
        owner: str,
        lease_key_suffix: str = "",
    ) -> None:
        self.group = group
        self.settings = group.settings
        self.stream = stream
        self.shard_id = shard_id
        self.records = records
        self.context = context
        self.owner = owner
        self.key = group.settings.lease_key(stream, shard_id) + lease_key_suffix
        self.lease: Lease | None = None
        self.done: ConsumedRecord | None = None  # the last record done (handler returned, or DLQ)
        self.pending = PendingTransaction(group.table.sink_key)  # writes of the records since the checkpoint
        self.since_checkpoint = 0
        self.checkpointed_at = group.clock()
        self.marked = False  # our in-flight mark is in the lease row
        self.careful: CarefulSpans | None = None  # after a crash: doubling spans (`_careful`)
        self.deadline = HandlerDeadline(None)
        self.dedup: DedupRun | None = None  # the applied-aggregate state, from the lease row
        self.fresh: list[ConsumedRecord] = []
        self.applied_copies: set[Position] = set()  # records a refused guard showed as applied

    def run(self) -> str | None:
        """Process the shard's records; the sequence number to retry from, or None."""
        metrics = self.group.metrics
        metrics.count("RecordsReceived", len(self.records))
        try:
            try:
                failed = self._run()
                self._commit(release=True)
            except _RetryFrom as retry:
                failed = retry.sequence
            lease = self.lease
            careful_done = failed is None and lease is not None and lease.careful_span is not None
            if lease is not None and (
                self.marked or lease.stalled_since is not None or lease.stalls or careful_done
            ):
                # No write took the mark away yet (a redelivery is then no crash), or the row
                # still shows a stall this delivery got past, or careful running that the whole
                # batch got through, without moving the checkpoint.
                self.lease = self.group.table.release(lease, careful_done=careful_done)
                self.marked = False
            self.group.stalls.pop(self.key, None)
            return failed
        except LeaseLost as lost:
            metrics.count("LeaseLosses")
            logger.error(
                "consumer group %s, shard %s: lease lost (%s); stopping", self.settings.group, self.key, lost
            )
            return self._first_uncommitted()
        except Exception as failure:  # every other failure is the environment's
            return self._stall(failure)

    def _run(self) -> str | None:
        group, metrics, lineage = self.group, self.group.metrics, self.group.lineage
        first = self.records[0].sequence_number
        parents = lineage.parents(self.stream, self.shard_id) if lineage else ()
        crashed, previous = False, None
        if self.settings.detect_crashes:
            self.lease, crashed, previous = self._begin(first, parents)
        else:
            self.lease = group.table.hold(self.key, self.owner, parent_shard_ids=parents)
        parent_keys = [self.settings.lease_key(self.stream, parent) for parent in self.lease.parent_shard_ids]
        if lineage is not None and not lineage.parents_finished(self.stream, parent_keys):
            metrics.count("BatchesWaitingForParent")
            return first
        if self.lease.stalled_sequence is not None:
            self._note_skipped_by_mapping(first)
        hash_range = lineage.hash_range(self.stream, self.shard_id) if lineage else None
        stored = self.lease.applied_aggregates
        if stored is None and lineage is not None and parent_keys:
            stored = lineage.inherited(self.stream, self.shard_id, parent_keys)  # from its parents' states
        self.dedup = DedupRun(stored, metrics, self.lease.checkpoint)
        records = user_records(self.records, hash_range=hash_range, metrics=metrics, dedup=self.dedup)
        fresh = self.fresh = records[_first_after(records, self.lease.checkpoint) :]
        metrics.count("DuplicatesSkipped", len(records) - len(fresh))
        if fresh:
            metrics.set_behind(fresh[-1].approximate_arrival)
        if self.settings.detect_crashes and (crashed or self.lease.careful_span is not None):
            self.careful = CarefulSpans([record.position for record in fresh])
            if crashed and fresh:
                assert previous is not None
                self._after_crash(fresh[0], previous)
        with self._handler_deadline() as self.deadline:
            return self._batch(fresh) if group.batch_handler is not None else self._records(fresh)

    def _begin(self, first: str, parents: tuple[str, ...] | list[str]) -> tuple[Lease, bool, Lease]:
        """Take the lease and mark this delivery in flight; whether the one before it died, and
        the row as that one left it."""
        table = self.group.table
        lease, crashed = table.begin(self.key, self.owner, first, parent_shard_ids=parents)
        self.marked = True
        if crashed and (self.key, first) in self.group.unreleased:
            crashed = False  # this process answered it, and DynamoDB would not take the mark away
        self.group.unreleased.discard((self.key, first))
        return lease, crashed, lease

    # -- running handlers ----------------------------------------------------------------------

    def _records(self, records: list[ConsumedRecord]) -> str | None:
        group = self.group
        handler = group.record_handler
        assert handler is not None
        out_of_time, deadline, keys = self._out_of_time(), self.deadline, self.pending.keys
        checkpoint_every = self.settings.checkpoint_every or float("inf")
        condemned = self._condemned()
        processed = 0
        try:
            for record in records:
                if out_of_time():
                    self._commit()
                    return record.sequence_number
                if condemned is not None and record.position == condemned:
                    self._dead_letter(record, *self._last_failure())
                    continue
                if not self._backed_off(record):
                    return record.sequence_number
                self._starting(record)
                try:
                    deadline.in_handler = True
                    returned = handler(record)
                    deadline.in_handler = False
                except (Exception, HandlerTimedOut) as exc:
                    deadline.in_handler = False
                    if self._give_up_on(record, exc):
                        continue
                    return record.sequence_number
                self._check_deadline()
                try:
                    writes = checked_writes(returned, keys)
                except ValueError as exc:
                    if self._give_up_on(record, exc):
                        continue
                    return record.sequence_number
                self._returned(record)
                self._done(record, writes)
                processed += 1
                if (
                    self.since_checkpoint >= checkpoint_every
                    or group.clock() - self.checkpointed_at >= self.settings.checkpoint_interval
                    or (self.careful is not None and self.careful.ends_span(record.position))
                ):
                    self._commit()
            self._pass_tail()
            return None
        finally:
            group.metrics.count("RecordsProcessed", processed)

    def _batch(self, records: list[ConsumedRecord]) -> str | None:  # noqa: C901 -- over the gate before it existed; issue 26 cuts it
        """Run the batch handler on `records`, splitting a chunk that fails until its record is alone."""
        group, metrics = self.group, self.group.metrics
        handler = group.batch_handler
        assert handler is not None and self.lease is not None
        out_of_time, deadline = self._out_of_time(), self.deadline
        condemned = self._condemned()
        # After a failure at the first record, it runs alone first.
        single = bool(records) and self.lease.failed_at == records[0].position
        stack = self._chunks(records, single)
        processed = 0
        try:
            while True:
                try:
                    while stack:
                        chunk = stack.pop()
                        if not chunk:
                            continue
                        if out_of_time():
                            self._commit()
                            return chunk[0].sequence_number
                        if len(chunk) == 1 and chunk[0].position in self.applied_copies:
                            self._done(chunk[0], [])  # its guard is there: already applied
                            metrics.count("ClientIdDuplicatesSkipped")
                            continue
                        at = _index_of(chunk, condemned) if condemned is not None else None
                        if at is not None:
                            if len(chunk) > 1:
                                stack += [chunk[at + 1 :], chunk[at : at + 1], chunk[:at]]
                                continue
                            self._dead_letter(chunk[0], *self._last_failure())
                            condemned = None
                            continue
                        if not self._backed_off(chunk[0]):
                            return chunk[0].sequence_number
                        if len(chunk) == 1:
                            self._starting(chunk[0])
                        try:
                            deadline.in_handler = True
                            returned = handler(chunk)
                            deadline.in_handler = False
                            writes, chunk_writes = _writes_by_record(returned, chunk, self.pending.keys)
                        except (Exception, HandlerTimedOut) as exc:
                            deadline.in_handler = False
                            if isinstance(exc, DependencyUnavailable):
                                self._commit()
                                raise
                            if len(chunk) > 1 and isinstance(exc, HandlerTimedOut):
                                return self._timed_out_together(chunk)
                            if len(chunk) > 1:
                                metrics.count("BatchesSplit")
                                middle = len(chunk) // 2
                                stack += [chunk[middle:], chunk[:middle]]
                                continue
                            if self._give_up_on(chunk[0], exc):
                                stack.append(chunk[1:])
                                continue
                            return chunk[0].sequence_number
                        self._check_deadline()
                        if len(chunk) == 1:
                            self._returned(chunk[0])
                        if writes is None:  # the chunk's writes, as one: no checkpoint inside the chunk
                            self._done(chunk[-1], chunk_writes, covering=len(chunk))
                        else:
                            for record, record_writes in zip(chunk, writes, strict=True):
                                self._done(record, record_writes)
                        processed += len(chunk)
                        if (
                            self.careful is not None and self.careful.ends_span(chunk[-1].position)
                        ) or group.clock() - self.checkpointed_at >= self.settings.checkpoint_interval:
                            self._commit()
                    self._pass_tail()
                    self._commit(release=True)
                    return None
                except _Rerun as rerun:
                    metrics.count("BatchesSplit")
                    stack = self._rerun_stack(rerun.records, stack, rerun.applied)
        finally:
            metrics.count("RecordsProcessed", processed)

    def _chunks(self, records: list[ConsumedRecord], single: bool) -> list[list[ConsumedRecord]]:
        """The batch handler's first chunks, last first (a stack): all records at once; the first
        alone after its failure; in careful spans after a crash."""
        if self.careful is not None:
            chunks, start = [], 0
            while start < len(records):
                size = self.careful.span_after(records[start - 1].position if start else None)
                chunks.append(records[start : start + size])
                start += size
            return chunks[::-1]
        if single:
            return [records[1:], records[:1]]
        return [records]

    def _rerun_stack(
        self,
        refused: list[ConsumedRecord],
        stack: list[list[ConsumedRecord]],
        applied: frozenset[Position] = frozenset(),
    ) -> list[list[ConsumedRecord]]:
        """After a refused one-list chunk (`_reject` committed what preceded it): every record done
        since the checkpoint runs again — that chunk without its records already applied (each
        alone, to be passed) when the refused guards named them, else in halves, so the refusal is
        pinned on one record — and then what had not run yet."""
        assert self.lease is not None
        checkpoint = self.lease.checkpoint
        waiting = {record.position for chunk in stack for record in chunk}
        redo = [r for r in self.fresh if r.position > checkpoint and r.position not in waiting]
        first, last = refused[0].position, refused[-1].position
        before = [record for record in redo if record.position < first]
        after = [record for record in redo if record.position > last]
        self.pending.clear()
        self.done = None
        self.since_checkpoint = 0
        if applied:
            self.applied_copies |= applied
            chunks: list[list[ConsumedRecord]] = [[]]
            for record in refused:
                if record.position in applied:
                    chunks += [[record], []]
                else:
                    chunks[-1].append(record)
        else:
            middle = len(refused) // 2
            chunks = [refused[:middle], refused[middle:]]
        return [*stack, after, *reversed(chunks), before]

    def _done(self, record: ConsumedRecord, writes: list[Mapping[str, Any]], covering: int = 1) -> None:
        """`record`'s handler returned: its writes wait for the checkpoint that passes it. With
        `covering` > 1 the writes are those of the `covering` records up to `record`, done with it."""
        if writes:
            if not self.pending.fits(writes):
                self._commit()  # what is done so far; these writes start the next one
            self.pending.add(record, writes, self.done, covering)
        self.done = record
        self.since_checkpoint += covering

    def _starting(self, record: ConsumedRecord) -> None:
        """A careful record is about to run alone: say so, so that a death from here on may be
        pinned on it — and a death before (in shardline's own calls) is not (`_careful`)."""
        if self._alone(record):
            assert self.lease is not None
            self.lease = self.group.table.mark_careful(self.lease, 1, started=True)

    def _returned(self, record: ConsumedRecord) -> None:
        """A careful record that ran alone returned: say so before its commit, so that a death in
        the commit is not taken for its own (`_careful`)."""
        if self._alone(record):
            assert self.lease is not None
            self.lease = self.group.table.mark_careful(self.lease, 1, returned=True)

    def _alone(self, record: ConsumedRecord) -> bool:
        """Is `record` the one record of a careful span of one (the first past the checkpoint)?"""
        lease = self.lease
        return (
            self.careful is not None
            and lease is not None
            and lease.careful_span == 1
            and record.position > lease.checkpoint
            and (self.done is None or self.done.position <= lease.checkpoint)
        )

    def _out_of_time(self) -> Callable[[], bool]:
        remaining_ms = getattr(self.context, "get_remaining_time_in_millis", None)
        margin_ms = self.settings.time_margin * 1000.0
        deadline = self.deadline
        if remaining_ms is None:
            return lambda: deadline.expired
        return lambda: deadline.expired or remaining_ms() < margin_ms

    def _room(self) -> float:
        """Seconds this invocation may still spend before its time margin (inf without a context)."""
        remaining_ms = getattr(self.context, "get_remaining_time_in_millis", None)
        if remaining_ms is None:
            return float("inf")
        return max(0.0, float(remaining_ms()) / 1000.0 - self.settings.time_margin)

    def _handler_deadline(self) -> HandlerDeadline:
        remaining_ms = getattr(self.context, "get_remaining_time_in_millis", None)
        if remaining_ms is None:
            return HandlerDeadline(None)
        return HandlerDeadline(remaining_ms() / 1000.0 - self.settings.time_margin)

    def _check_deadline(self) -> None:
        """A handler that replaced shardline's SIGALRM timer disarmed the time budget: re-arm it."""
        if self.deadline.rearm():
            self.group.metrics.count("TimeBudgetDisarmed")
            logger.warning(
                "consumer group %s: a handler replaced the SIGALRM handler or timer shardline uses for "
                "the time budget; it was re-armed (do not use SIGALRM in handlers)",
                self.settings.group,
            )

    # -- failures ------------------------------------------------------------------------------

    def _backed_off(self, record: ConsumedRecord) -> bool:
        """Before running a record that failed before: wait out its backoff. False when this
        invocation has no time for that wait (the mapping then retries from it; nothing counted)."""
        lease = self.lease
        if lease is None or lease.failed_at != record.position or lease.failed_time is None:
            return True
        table = self.group.table
        wait = lease.failed_time + backoff(lease.failed_attempts, self.settings.retry_backoff) - table.now()
        if wait <= 0:
            return True
        self.group.metrics.count("RetriesDeferred")
        self._commit()
        room = self._room()
        table.sleep(min(wait, room))
        return wait <= room

    def _give_up_on(
        self, record: ConsumedRecord, exc: BaseException, details: Mapping[str, Any] | None = None
    ) -> bool:
        """Count the failure of `record`, which ran alone; True if it went to the DLQ and
        processing goes on. A `DependencyUnavailable` is no failure of the record: it stalls."""
        if isinstance(exc, DependencyUnavailable):
            self._commit()  # what is done stays done
            raise exc
        group, settings = self.group, self.settings
        group.metrics.count("RecordsFailed")
        self._commit()
        assert self.lease is not None
        if isinstance(exc, HandlerTimedOut):
            group.metrics.count("HandlerTimeouts")
        attempts = self.lease.failed_attempts + 1 if self.lease.failed_at == record.position else 1
        dead_letter = group.dlq is not None and attempts >= settings.max_attempts
        release = self.marked and not dead_letter  # this write is the run's last
        error = failure_text(exc, settings.failure_detail).text  # bounded: never the data by default
        self.lease = group.table.record_failure(
            self.lease, record.position, error, release=release, details=_json(_row_details(details))
        )
        self.marked = self.marked and not release
        if not dead_letter:
            return False
        self._dead_letter(record, error, attempts, details)
        return True

    def _timed_out_together(self, chunk: list[ConsumedRecord]) -> str:
        """A batch handler still running at the time budget with several records: which one hung
        is unknown, so none is blamed; the next delivery runs them carefully, one first."""
        self.group.metrics.count("HandlerTimeouts")
        self._commit()
        assert self.lease is not None
        if self.settings.detect_crashes:
            self.lease = self.group.table.mark_careful(self.lease, 1, release=self.marked)
            self.marked = False
        return chunk[0].sequence_number

    def _dead_letter(
        self, record: ConsumedRecord, error: str, attempts: int, details: Mapping[str, Any] | None = None
    ) -> None:
        """Send `record` to the DLQ and checkpoint past it."""
        assert self.group.dlq is not None
        self.group.dlq.send(
            record, group=self.settings.group, error=error, attempts=attempts, details=details
        )
        self.group.metrics.count("RecordsSentToDLQ")
        logger.warning(
            "consumer group %s: record %s/%s sent to the DLQ after %d attempts: %s",
            self.settings.group,
            record.sequence_number,
            record.sub_sequence_number,
            attempts,
            error,
        )
        self.done = record  # the checkpoint moves past the poison record
        self._commit()

    def _condemned(self) -> Position | None:
        """The record the lease row already sent to the DLQ's door (its failures reached
        `max_attempts`, and the delivery that counted the last one did not send it — it died, or
        the DLQ refused): it is dead-lettered without running again."""
        lease = self.lease
        if lease is None or lease.failed_at is None or self.group.dlq is None:
            return None
        if lease.failed_attempts < self.settings.max_attempts:
            return None
        return lease.failed_at

    def _last_failure(self) -> tuple[str, int, Mapping[str, Any] | None]:
        """The error, attempts and details the lease row holds for the failing record."""
        lease = self.lease
        if lease is None:
            return "-", 0, None
        details = None
        if lease.last_error_details:
            with contextlib.suppress(ValueError):
                details = json.loads(lease.last_error_details)
        return lease.last_error or "-", lease.failed_attempts, details

    def _after_crash(self, record: ConsumedRecord, previous: Lease) -> None:
        """The delivery before this one died past the checkpoint. Pinned on `record` if it ran
        alone then (counted against it); otherwise nothing is counted and this delivery runs
        carefully from the checkpoint, one record first (`_careful`)."""
        assert self.lease is not None
        metrics, table = self.group.metrics, self.group.table
        metrics.count("CrashesDetected")
        if crash_pinned(previous):
            metrics.count("CrashesIsolated")
            metrics.count("RecordsFailed")
            self.lease = table.record_failure(self.lease, record.position, CRASHED_ALONE)
            logger.warning(
                "consumer group %s, shard %s: the last delivery died while record %s/%s ran alone "
                "(%d attempts)",
                self.settings.group,
                self.shard_id,
                record.sequence_number,
                record.sub_sequence_number,
                self.lease.failed_attempts,
            )
            return
        self.lease = table.mark_careful(self.lease, 1)
        logger.warning(
            "consumer group %s, shard %s: the last delivery died; running carefully to find the record",
            self.settings.group,
            self.shard_id,
        )

    # -- stalls --------------------------------------------------------------------------------

    def _stall(self, failure: BaseException) -> str:
        """The environment failed, not a record: note it, wait, retry from the first record not
        committed. Nothing is counted against a record; nothing is lost."""
        group, table = self.group, self.group.table
        cause = stall_cause(failure, self.settings.failure_detail)
        retry_from = self._first_uncommitted()
        group.metrics.count("ShardStalls")
        logger.error(
            "consumer group %s, shard %s STALLED: %s — no record is blamed and nothing is lost; the "
            "mapping retries from %s",
            self.settings.group,
            self.key,
            cause,
            retry_from,
        )
        stalls = group.stalls[self.key] = group.stalls.get(self.key, 0) + 1
        if self.lease is not None:
            try:
                self.lease = table.stall(self.lease, cause, retry_from, release=self.marked)
                self.marked = False
                stalls = max(stalls, self.lease.stalls)
            except LeaseLost:
                return retry_from
            except Exception as unrecorded:  # DynamoDB is what failed
                logger.error(
                    "consumer group %s: could not note the stall: %s", self.settings.group, unrecorded
                )
        if self.marked:
            self.group.unreleased.add((self.key, self.records[0].sequence_number))
        table.sleep(min(backoff(stalls, STALL_BACKOFF_S), self._room()))
        return retry_from

    def _note_skipped_by_mapping(self, first: str) -> None:
        """The shard stalled and asked the mapping to retry from `stalledSequence`; a delivery that
        starts past it means the mapping gave that batch up (its record age or retries): the
        records from there to this one were never applied. Note them for a redrive."""
        lease = self.lease
        assert lease is not None and lease.stalled_sequence is not None
        if int(first) <= int(lease.stalled_sequence):
            return
        notes = json.loads(lease.skipped_by_mapping) if lease.skipped_by_mapping else []
        notes.append(
            {
                "start": lease.stalled_sequence,
                "checkpoint": lease.checkpoint.sequence,
                "checkpointSub": lease.checkpoint.sub_sequence,
                "detectedAt": round(self.group.table.now(), 3),
            }
        )
        self.lease = self.group.table.note_skipped(lease, json.dumps(notes[-_MAX_SKIPPED_NOTES:]))
        self.group.metrics.count("BatchesSkippedByMapping")
        logger.error(
            "consumer group %s, shard %s: the mapping discarded the stalled batch from %s (its record "
            "age or retries ran out); those records were never applied — redrive them from the "
            "on-failure destination while the stream holds them",
            self.settings.group,
            self.key,
            lease.stalled_sequence,
        )

    # -- committing ----------------------------------------------------------------------------

    def _commit(self, *, release: bool = False) -> None:
        """Checkpoint at the last record done, with the pending sink writes, in one transaction.

        Writes DynamoDB refuses are blamed on their record: what precedes it commits, it fails
        (or, a failed condition with `sink_conflicts="skip"`, is taken as applied), and what
        follows it commits after — unless it must be retried, which stops the run (`_RetryFrom`).
        A batch handler's one list of writes for several records is run again in halves (`_Rerun`).
        """
        while self.done is not None and self.lease is not None and self.done.position > self.lease.checkpoint:
            position = self.done.position
            try:
                self.lease = self.group.table.checkpoint_with(
                    self.lease,
                    position,
                    self.pending.writes,
                    release=release and self.marked,
                    applied=self._applied_at(position),
                    careful_span=self._span_after(position, release),
                )
            except (SinkConflict, SinkRejected) as refused:
                if self._skip_applied(refused):
                    continue
                culprit = self.pending.owner(refused.indexes[0]) if refused.indexes else None
                guarded = culprit is not None and _guard_refused(refused, culprit, self.pending)
                ids = _guarded_ids(refused, culprit, self.pending) if culprit is not None else None
                if culprit is None:
                    culprit, refused = self._isolate(refused)
                    guarded = culprit is not None and _guard_refused(refused, culprit)
                    ids = _guarded_ids(refused, culprit) if culprit is not None else None
                if culprit is not None:
                    self._reject(culprit, refused, guarded, ids)
                continue
            self._committed(position)
            self.pending.clear()
            self.since_checkpoint = 0
            self.checkpointed_at = self.group.clock()
            self.group.metrics.count("CheckpointsWritten")
            self.marked = self.marked and not release
            return

    def _span_after(self, position: Position, release: bool) -> int | None:
        """The careful span a checkpoint at `position` writes (None: not careful, or done)."""
        if self.careful is None or release:
            return None
        return self.careful.span_after(position)

    def _skip_applied(self, refused: SinkConflict | SinkRejected) -> bool:
        """Every write DynamoDB blamed is a `once` guard of its own record: those records are
        already applied. Drop all their writes at once (a re-posted batch costs one more round
        trip, not one per record) and let the rest commit; False if any blamed write is not such
        a guard (then the refusal is handled record by record)."""
        pending = self.pending
        if not isinstance(refused, SinkConflict) or not refused.indexes:
            return False
        applied = []
        for index in refused.indexes:
            if index >= len(pending.writes) or not is_once_guard(pending.writes[index]):
                return False
            owner = pending.owner(index)
            if owner.covering != 1:
                return False  # a batch handler's one list: whose guard it is, is unknown
            applied.append(owner)
        pending.keep(group for group in pending.groups if all(group is not a for a in applied))
        self.group.metrics.count("ClientIdDuplicatesSkipped", len({id(a) for a in applied}))
        return True

    def _isolate(
        self, refused: SinkConflict | SinkRejected
    ) -> tuple[RecordWrites | None, SinkConflict | SinkRejected]:
        """DynamoDB did not say which write it refused: commit the first half of the pending
        records, then the next, narrowing to the half that is refused, until DynamoDB names a write
        or one record's writes are refused alone — O(log n) transactions, not n. Returns the
        refused record's writes (None if all committed) and the refusal."""
        remaining = list(self.pending.groups)  # not committed yet
        search = len(remaining)  # the refusal lies in remaining[:search]
        while remaining:
            size = max(1, search // 2)
            half = remaining[:size]
            position = half[-1].record.position
            assert self.lease is not None
            try:
                self.lease = self.group.table.checkpoint_with(
                    self.lease,
                    position,
                    [write for group in half for write in group.writes],
                    applied=self._applied_at(position),
                    careful_span=self._span_after(position, False),
                )
            except (SinkConflict, SinkRejected) as alone:
                self.pending.keep(remaining)  # half is its prefix: DynamoDB's indexes hold
                if alone.indexes or size == 1:
                    return (self.pending.owner(alone.indexes[0]) if alone.indexes else half[0]), alone
                search = size
                continue
            self._committed(position)
            self.group.metrics.count("CheckpointsWritten")
            remaining = remaining[size:]
            search = search - size if search > size else len(remaining)
        self.pending.clear()
        return None, refused

    def _applied_at(self, position: Position) -> str | None:
        """The applied-aggregate state a checkpoint at `position` writes (None: leave it)."""
        return self.dedup.state_at(position) if self.dedup is not None else None

    def _committed(self, position: Position) -> None:
        if self.dedup is not None:
            self.dedup.committed(position)

    def _reject(
        self,
        culprit: RecordWrites,
        refused: SinkConflict | SinkRejected,
        guarded: bool,
        guarded_ids: frozenset[str] | None = None,
    ) -> None:
        groups = self.pending.groups
        at = groups.index(culprit)
        done, after = self.done, groups[at + 1 :]
        self.pending.keep(groups[:at])
        self.done = culprit.before
        self._commit()  # the records before the culprit
        if culprit.covering > 1:  # a batch handler's one list: pin it on one record
            covered = self._covered(culprit)
            ids = guarded_ids or frozenset()
            raise _Rerun(covered, frozenset(r.position for r in covered if r.id is not None and r.id in ids))
        metrics = self.group.metrics
        if guarded:
            metrics.count("ClientIdDuplicatesSkipped")  # its `once` guard is there: already applied
        elif isinstance(refused, SinkConflict) and self.settings.sink_conflicts == "skip":
            metrics.count("SinkConflictsSkipped")  # its effect is already there
        else:
            metrics.count("SinkWritesRefused")
            details = {"refusedWrites": culprit.writes, "reasons": list(getattr(refused, "reasons", ()))}
            if not self._give_up_on(culprit.record, refused, details):
                self.pending.clear()
                raise _RetryFrom(culprit.record.sequence_number)
        self.pending.keep(after)
        self.done = done

    def _covered(self, writes: RecordWrites) -> list[ConsumedRecord]:
        """The records a batch handler's one list of writes was for: `covering` records up to
        `writes.record`, in this run's new records."""
        end = next(index for index, record in enumerate(self.fresh) if record is writes.record)
        return self.fresh[end - writes.covering + 1 : end + 1]

    def _pass_tail(self) -> None:
        """Every record of the batch is done: the checkpoint passes the last user record of its
        last Kinesis record — even where no handler ran (an empty aggregate, a copy skipped whole,
        members outside the shard's range) — so a closed shard's checkpoint reads as finished."""
        last = self.records[-1]
        count = sub_record_count(last.data)
        sub = count - 1 if count > 1 else None
        tail = Position(last.sequence_number, sub or 0)
        if self.done is None or self.done.position < tail:
            self.done = ConsumedRecord(
                last.stream, last.shard_id, last.sequence_number, sub, last.partition_key, None, b"", 0.0
            )

    def _first_uncommitted(self) -> str:
        """After a lost lease or a stall: the first Kinesis record not covered by our last checkpoint."""
        checkpoint = self.lease.checkpoint if self.lease is not None else None
        for record in self.records:
            sequence = record.sequence_number
            if checkpoint is None or checkpoint.is_sentinel or int(sequence) >= int(checkpoint.sequence):
                return sequence
        return self.records[-1].sequence_number


def _guard_refused(
    refused: SinkConflict | SinkRejected, culprit: RecordWrites, pending: PendingTransaction | None = None
) -> bool:
    """Did the cancelled transaction blame a `once` guard of `culprit` (one record's writes)?
    `refused.indexes` count in `pending.writes`, or, without `pending`, in `culprit.writes`."""
    if not isinstance(refused, SinkConflict) or culprit.covering != 1:
        return False  # a batch handler's one list for several records: whose guard is unknown
    writes = pending.writes if pending is not None else culprit.writes
    return any(
        index < len(writes)
        and is_once_guard(writes[index])
        and (pending is None or pending.owner(index) is culprit)
        for index in refused.indexes
    )


def _guarded_ids(
    refused: SinkConflict | SinkRejected, culprit: RecordWrites, pending: PendingTransaction | None = None
) -> frozenset[str] | None:
    """The client ids of a one-list chunk's refused `once(..., record_id=)` guards — None unless
    every write of `culprit` that DynamoDB blamed is such a guard. Indexes as in `_guard_refused`."""
    if not isinstance(refused, SinkConflict) or culprit.covering == 1 or not refused.indexes:
        return None
    writes = pending.writes if pending is not None else culprit.writes
    ids = set()
    for index in refused.indexes:
        if index >= len(writes) or (pending is not None and pending.owner(index) is not culprit):
            continue
        record_id = guarded_id(writes[index])
        if record_id is None:
            return None
        ids.add(record_id)
    return frozenset(ids) or None


def _writes_by_record(
    returned: BatchWrites, chunk: list[ConsumedRecord], keys: KeyLookup
) -> tuple[list[list[Mapping[str, Any]]] | None, list[Mapping[str, Any]]]:
    """A batch handler's answer, checked: each record's writes, or (None, the chunk's writes) if
    it answered one list. Raises `ValueError` where DynamoDB would refuse (the chunk is split)."""
    if not isinstance(returned, Mapping):
        return None, checked_writes(returned, keys)
    writes: list[list[Mapping[str, Any]]] = [[] for _ in chunk]
    index = {record: at for at, record in enumerate(chunk)}
    for record, record_writes in returned.items():
        if record not in index:
            raise ValueError(
                f"the batch handler returned writes for a record not in its batch: {record!r:.200}"
            )
        writes[index[record]] = checked_writes(record_writes, keys)
    return writes, []


def _index_of(chunk: list[ConsumedRecord], position: Position) -> int | None:
    for at, record in enumerate(chunk):
        if record.position == position:
            return at
    return None


def _first_after(records: list[ConsumedRecord], checkpoint: Position) -> int:
    """Index of the first record past `checkpoint`. A batch is in shard order, so the records at
    or below the checkpoint are a prefix: binary search, no Position per record."""
    if checkpoint.is_sentinel:
        return 0 if checkpoint < _ANY_SEQUENCE else len(records)
    target = (len(checkpoint.sequence), checkpoint.sequence, checkpoint.sub_sequence)
    # Decimal strings without leading zeros order as (length, text): no int() per record.
    return bisect.bisect_right(
        records, target, key=lambda r: (len(r.sequence_number), r.sequence_number, r.sub_sequence_number or 0)
    )


def _row_details(details: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    """What the lease row keeps of a failure's details: each refused write's kind and table, never
    its item or key (record data belongs in the dead letter alone, which carries them whole)."""
    if not details or "refusedWrites" not in details:
        return details
    writes = [
        {
            kind: {"TableName": body.get("TableName")}
            for kind, body in write.items()
            if isinstance(body, Mapping)
        }
        for write in details["refusedWrites"]
        if isinstance(write, Mapping)
    ]
    return {**details, "refusedWrites": writes}


def _json(details: Mapping[str, Any] | None) -> str | None:
    """`details` as the lease row keeps them (JSON; binary as base64, anything else as text)."""
    if not details:
        return None
    return json.dumps(details, default=lambda value: str(value))
