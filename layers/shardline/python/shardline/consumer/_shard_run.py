"""One invocation's work on one shard: lease, de-aggregation, duplicate skip, handler, deferred checkpoint.

`ShardRun.run()` returns the Kinesis sequence number the event-source mapping should retry from
(reported in `batchItemFailures`), or None when every record of the shard's batch is done.
What it keeps: the checkpoint only moves forward, only under the lease it was taken with, and
only past records that are done — their handler returned and their sink writes committed with
it, or they are in the dead-letter queue. Whatever fails is blamed on one record, counted in the
lease row, and after `max_attempts` dead-lettered, so no record blocks the shard for longer:

- a handler that raises, or is still running at the time budget (interrupted, `_handler_deadline`);
- a batch handler that raises: the batch is split in halves and run again until the record that
  makes it fail is alone (the mapping's bisection cannot split a KPL aggregate);
- sink writes DynamoDB refuses at commit, or whose own condition fails: the others commit, the
  record whose writes they were fails (or, with `sink_conflicts="skip"`, a failed condition
  means "already applied");
- a delivery whose process died (out of memory, the function's timeout): the next delivery of
  the same batch finds its in-flight mark, blames the first record past the checkpoint, and
  checkpoints after every record so that the record that kills it is next in line.

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
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from shardline.consumer._dead_letters import DeadLetterQueue
from shardline.consumer._deaggregation import ConsumedRecord, KinesisRecord, sub_record_count, user_records
from shardline.consumer._dedup import DedupRun
from shardline.consumer._handler_deadline import HandlerDeadline, HandlerTimedOut
from shardline.consumer._leases import Lease, LeaseTable
from shardline.consumer._metrics import ConsumerMetrics
from shardline.consumer._once import is_once_guard
from shardline.consumer._resharding import ShardLineage
from shardline.consumer._settings import BatchHandler, BatchWrites, ConsumerSettings, RecordHandler
from shardline.consumer._transaction import KeyLookup, PendingTransaction, RecordWrites, checked_writes
from shardline.errors import LeaseLost, SinkConflict, SinkRejected
from shardline.kinesis._positions import Position

if TYPE_CHECKING:  # annotations only: the Protocols cost nothing at import
    from shardline.protocols import LambdaContext

logger = logging.getLogger(__name__)

_ANY_SEQUENCE = Position("0")
_CRASHED = (
    "the delivery before this one ended without an answer (the function timed out, ran out of "
    "memory or its process died) at or after this record"
)


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


class _RetryFrom(Exception):
    """Stop this run: the mapping retries the shard from `sequence`."""

    def __init__(self, sequence: str) -> None:
        super().__init__(sequence)
        self.sequence = sequence


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
    ) -> None:
        self.group = group
        self.settings = group.settings
        self.stream = stream
        self.shard_id = shard_id
        self.records = records
        self.context = context
        self.owner = owner
        self.lease: Lease | None = None
        self.done: ConsumedRecord | None = None  # the last record done (handler returned, or DLQ)
        self.pending = PendingTransaction(group.table.sink_key)  # writes of the records since the checkpoint
        self.since_checkpoint = 0
        self.checkpointed_at = group.clock()
        self.marked = False  # our in-flight mark is in the lease row
        self.careful = False  # checkpoint after every record: a crash then names its record
        self.deadline = HandlerDeadline(None)
        self.dedup: DedupRun | None = None  # the applied-aggregate state, from the lease row

    def run(self) -> str | None:
        """Process the shard's records; the sequence number to retry from, or None."""
        metrics = self.group.metrics
        metrics.count("RecordsReceived", len(self.records))
        key = self.settings.lease_key(self.stream, self.shard_id)
        try:
            try:
                failed = self._run(key)
                self._commit(release=True)
            except _RetryFrom as retry:
                failed = retry.sequence
            if self.marked and self.lease is not None:  # no write took the mark away yet
                self.lease = self.group.table.release(self.lease)  # a redelivery is then no crash
            return failed
        except LeaseLost as lost:
            metrics.count("LeaseLosses")
            logger.error(
                "consumer group %s, shard %s: lease lost (%s); stopping", self.settings.group, key, lost
            )
            return self._first_uncommitted()
        except Exception:
            # DynamoDB failed us (throttled, unavailable, a transaction cancelled): the batch fails
            # and is delivered again, but nothing crashed, so no record is to blame for it.
            if self.marked and self.lease is not None:
                with contextlib.suppress(Exception):
                    self.lease = self.group.table.release(self.lease)
            raise

    def _run(self, key: str) -> str | None:
        group, metrics, lineage = self.group, self.group.metrics, self.group.lineage
        first = self.records[0].sequence_number
        parents = lineage.parents(self.stream, self.shard_id) if lineage else ()
        crashed = False
        if self.settings.detect_crashes:
            self.lease, crashed = group.table.begin(key, self.owner, first, parent_shard_ids=parents)
            self.marked = True
        else:
            self.lease = group.table.hold(key, self.owner, parent_shard_ids=parents)
        parent_keys = [self.settings.lease_key(self.stream, parent) for parent in self.lease.parent_shard_ids]
        if lineage is not None and not lineage.parents_finished(self.stream, parent_keys):
            metrics.count("BatchesWaitingForParent")
            return first
        hash_range = lineage.hash_range(self.stream, self.shard_id) if lineage else None
        stored = self.lease.applied_aggregates
        if stored is None and lineage is not None and parent_keys:
            stored = lineage.inherited(self.stream, self.shard_id, parent_keys)  # from its parents' states
        self.dedup = DedupRun(stored, metrics, self.lease.checkpoint)
        records = user_records(self.records, hash_range=hash_range, metrics=metrics, dedup=self.dedup)
        fresh = records[_first_after(records, self.lease.checkpoint) :]
        metrics.count("DuplicatesSkipped", len(records) - len(fresh))
        if fresh:
            metrics.set_behind(fresh[-1].approximate_arrival)
            if crashed:
                self._blame_crash(fresh[0])
        with self._handler_deadline() as self.deadline:
            failed = self._batch(fresh) if group.batch_handler is not None else self._records(fresh)
        if failed is None:
            self._pass_tail()
        return failed

    # -- running handlers ----------------------------------------------------------------------

    def _records(self, records: list[ConsumedRecord]) -> str | None:
        group = self.group
        handler = group.record_handler
        assert handler is not None
        out_of_time, deadline, keys = self._out_of_time(), self.deadline, self.pending.keys
        checkpoint_every = 1 if self.careful else (self.settings.checkpoint_every or float("inf"))
        condemned = self._condemned()
        processed = 0
        try:
            for record in records:
                if out_of_time():
                    self._commit()
                    return record.sequence_number
                if (
                    condemned is not None
                    and (record.sequence_number, record.sub_sequence_number or 0) == condemned
                ):
                    self._dead_letter(record, self._last_error(), self._attempts())
                    continue
                try:
                    deadline.in_handler = True
                    returned = handler(record)
                    deadline.in_handler = False
                    writes = checked_writes(returned, keys)
                except (Exception, HandlerTimedOut) as exc:
                    deadline.in_handler = False
                    group.metrics.count("RecordsFailed")
                    if self._give_up_on(record, exc):
                        continue
                    return record.sequence_number
                self._done(record, writes)
                processed += 1
                if (
                    self.since_checkpoint >= checkpoint_every
                    or group.clock() - self.checkpointed_at >= self.settings.checkpoint_interval
                ):
                    self._commit()
            return None
        finally:
            group.metrics.count("RecordsProcessed", processed)

    def _batch(self, records: list[ConsumedRecord]) -> str | None:
        """Run the batch handler on `records`, splitting a chunk that fails until its record is alone."""
        group, metrics = self.group, self.group.metrics
        handler = group.batch_handler
        assert handler is not None and self.lease is not None
        out_of_time, deadline = self._out_of_time(), self.deadline
        condemned = self._condemned()
        # After a failure at the first record (or a crash), one record at a time: a timeout or a
        # crash then names its record.
        single = self.careful or (bool(records) and self.lease.failed_at == records[0].position)
        stack = [[record] for record in reversed(records)] if single else [records]
        processed = 0
        try:
            while stack:
                chunk = stack.pop()
                if not chunk:
                    continue
                if out_of_time():
                    self._commit()
                    return chunk[0].sequence_number
                at = _index_of(chunk, condemned) if condemned is not None else None
                if at is not None:
                    if len(chunk) > 1:
                        stack += [chunk[at + 1 :], chunk[at : at + 1], chunk[:at]]
                        continue
                    self._dead_letter(chunk[0], self._last_error(), self._attempts())
                    condemned = None
                    continue
                try:
                    deadline.in_handler = True
                    returned = handler(chunk)
                    deadline.in_handler = False
                    writes, chunk_writes = _writes_by_record(returned, chunk, self.pending.keys)
                except (Exception, HandlerTimedOut) as exc:
                    deadline.in_handler = False
                    if len(chunk) > 1 and not isinstance(exc, HandlerTimedOut):
                        metrics.count("BatchesSplit")
                        middle = len(chunk) // 2
                        stack += [chunk[middle:], chunk[:middle]]
                        continue
                    metrics.count("RecordsFailed")
                    if self._give_up_on(chunk[0], exc):
                        stack.append(chunk[1:])
                        continue
                    return chunk[0].sequence_number
                if writes is None:  # the chunk's writes, as one: no checkpoint inside the chunk
                    self._done(chunk[-1], chunk_writes, covering=len(chunk))
                else:
                    for record, record_writes in zip(chunk, writes, strict=True):
                        self._done(record, record_writes)
                processed += len(chunk)
                if self.careful:
                    self._commit()
            return None
        finally:
            metrics.count("RecordsProcessed", processed)

    def _done(self, record: ConsumedRecord, writes: list[Mapping[str, Any]], covering: int = 1) -> None:
        """`record`'s handler returned: its writes wait for the checkpoint that passes it. With
        `covering` > 1 the writes are those of the `covering` records up to `record`, done with it."""
        if writes:
            if not self.pending.fits(writes):
                self._commit()  # what is done so far; these writes start the next one
            self.pending.add(record, writes, self.done, covering)
        self.done = record
        self.since_checkpoint += covering

    def _out_of_time(self) -> Callable[[], bool]:
        remaining_ms = getattr(self.context, "get_remaining_time_in_millis", None)
        margin_ms = self.settings.time_margin * 1000.0
        deadline = self.deadline
        if remaining_ms is None:
            return lambda: deadline.expired
        return lambda: deadline.expired or remaining_ms() < margin_ms

    def _handler_deadline(self) -> HandlerDeadline:
        remaining_ms = getattr(self.context, "get_remaining_time_in_millis", None)
        if remaining_ms is None:
            return HandlerDeadline(None)
        return HandlerDeadline(remaining_ms() / 1000.0 - self.settings.time_margin)

    # -- failures ------------------------------------------------------------------------------

    def _give_up_on(
        self, record: ConsumedRecord, exc: BaseException, details: Mapping[str, Any] | None = None
    ) -> bool:
        """Count the failure; True if the record went to the DLQ and processing goes on."""
        group, settings = self.group, self.settings
        self._commit()
        assert self.lease is not None
        if isinstance(exc, HandlerTimedOut):
            group.metrics.count("HandlerTimeouts")
        attempts = self.lease.failed_attempts + 1 if self.lease.failed_at == record.position else 1
        dead_letter = group.dlq is not None and attempts >= settings.max_attempts
        release = self.marked and not dead_letter  # this write is the run's last
        self.lease = group.table.record_failure(self.lease, record.position, _describe(exc), release=release)
        self.marked = self.marked and not release
        if not dead_letter:
            return False
        self._dead_letter(record, _describe(exc), attempts, details)
        return True

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

    def _condemned(self) -> tuple[str, int] | None:
        """The record the lease row already sent to the DLQ's door (its failures reached
        `max_attempts`, and the delivery that counted the last one died before sending it):
        it is dead-lettered without running again."""
        lease = self.lease
        if lease is None or lease.failed_at is None or self.group.dlq is None:
            return None
        if lease.failed_attempts < self.settings.max_attempts:
            return None
        return lease.failed_at.sequence, lease.failed_at.sub_sequence

    def _attempts(self) -> int:
        return self.lease.failed_attempts if self.lease is not None else 0

    def _last_error(self) -> str:
        return (self.lease.last_error if self.lease is not None else None) or "-"

    def _blame_crash(self, record: ConsumedRecord) -> None:
        """The delivery before this one died past the checkpoint: count it against the first
        record after the checkpoint, and checkpoint after every record from now on."""
        assert self.lease is not None
        self.group.metrics.count("CrashesDetected")
        self.careful = True
        self.lease = self.group.table.record_failure(self.lease, record.position, _CRASHED)
        logger.warning(
            "consumer group %s, shard %s: the last delivery died; record %s/%s blamed (%d attempts)",
            self.settings.group,
            self.shard_id,
            record.sequence_number,
            record.sub_sequence_number,
            self.lease.failed_attempts,
        )

    # -- committing ----------------------------------------------------------------------------

    def _commit(self, *, release: bool = False) -> None:
        """Checkpoint at the last record done, with the pending sink writes, in one transaction.

        Writes DynamoDB refuses are blamed on their record: what precedes it commits, it fails
        (or, a failed condition with `sink_conflicts="skip"`, is taken as applied), and what
        follows it commits after — unless it must be retried, which stops the run (`_RetryFrom`).
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
                )
            except (SinkConflict, SinkRejected) as refused:
                if self._skip_applied(refused):
                    continue
                culprit = self.pending.owner(refused.indexes[0]) if refused.indexes else None
                guarded = culprit is not None and _guard_refused(refused, culprit, self.pending)
                if culprit is None:
                    culprit, refused = self._isolate(refused)
                    guarded = culprit is not None and _guard_refused(refused, culprit)
                if culprit is not None:
                    self._reject(culprit, refused, guarded)
                continue
            self._committed(position)
            self.pending.clear()
            self.since_checkpoint = 0
            self.checkpointed_at = self.group.clock()
            self.group.metrics.count("CheckpointsWritten")
            self.marked = self.marked and not release
            return

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
        """DynamoDB did not say which write it refused: commit record by record until it does.
        Returns the refused record's writes (None if each committed alone) and the refusal."""
        groups = list(self.pending.groups)
        for index, group in enumerate(groups):
            assert self.lease is not None
            position = group.record.position
            try:
                self.lease = self.group.table.checkpoint_with(
                    self.lease, position, group.writes, applied=self._applied_at(position)
                )
            except (SinkConflict, SinkRejected) as alone:
                self.pending.keep(groups[index:])
                return group, alone
            self._committed(position)
            self.group.metrics.count("CheckpointsWritten")
        self.pending.clear()
        return None, refused

    def _applied_at(self, position: Position) -> str | None:
        """The applied-aggregate state a checkpoint at `position` writes (None: leave it)."""
        return self.dedup.state_at(position) if self.dedup is not None else None

    def _committed(self, position: Position) -> None:
        if self.dedup is not None:
            self.dedup.committed(position)

    def _reject(self, culprit: RecordWrites, refused: SinkConflict | SinkRejected, guarded: bool) -> None:
        groups = self.pending.groups
        at = groups.index(culprit)
        done, after = self.done, groups[at + 1 :]
        self.pending.keep(groups[:at])
        self.done = culprit.before
        self._commit()  # the records before the culprit
        metrics = self.group.metrics
        if guarded:
            metrics.count("ClientIdDuplicatesSkipped")  # its `once` guard is there: already applied
        elif isinstance(refused, SinkConflict) and self.settings.sink_conflicts == "skip":
            metrics.count("SinkConflictsSkipped")  # its effect is already there
        else:
            metrics.count("RecordsFailed")
            metrics.count("SinkWritesRefused")
            details = {"refusedWrites": culprit.writes, "reasons": list(getattr(refused, "reasons", ()))}
            if not self._give_up_on(culprit.record, refused, details):
                self.pending.clear()
                raise _RetryFrom(culprit.record.sequence_number)
        self.pending.keep(after)
        self.done = done

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
        """After a lost lease: the first Kinesis record not covered by our last checkpoint."""
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


def _index_of(chunk: list[ConsumedRecord], position: tuple[str, int]) -> int | None:
    for at, record in enumerate(chunk):
        if (record.sequence_number, record.sub_sequence_number or 0) == position:
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


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"
