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
Kinesis record that is a copy of an aggregate already applied (`_dedup_run.DedupRun`, from the
lease row's state, or the parents' at a child's start), and every checkpoint writes, in the same write,
the applied-aggregate state at its position; a record whose writes are refused because its
`once` guard's condition failed is already applied: its writes are dropped and the checkpoint
passes it (`ClientIdDuplicatesSkipped`), whatever `sink_conflicts` says.

`ShardRun` is a thin composition of the parts that do this, each testable alone: it takes the
lease, skips what the checkpoint passed and what identity says is a copy, and hands the new
records to `_handler_loop.HandlerLoop` (running the handler), which hands what is done to
`_checkpoint.Checkpoint` (the one place that commits: what, with which writes, blamed on whom)
and what failed to `_failure_policy.FailurePolicy` (counting, backoff, the dead-letter queue);
`_chunks` cuts a batch handler's records. What is left here: the lease, the time budget, a lost
lease and a stall.
"""

from __future__ import annotations

import bisect
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from shardline.consumer._careful import CarefulSpans
from shardline.consumer._checkpoint import Checkpoint, RetryFrom
from shardline.consumer._dead_letters import DeadLetterQueue
from shardline.consumer._deaggregation import ConsumedRecord, KinesisRecord, user_records
from shardline.consumer._dedup_run import DedupRun
from shardline.consumer._failure_policy import FailurePolicy
from shardline.consumer._handler_deadline import HandlerDeadline, OutOfTime
from shardline.consumer._handler_loop import HandlerLoop
from shardline.consumer._lease_store import Lease, LeaseStore
from shardline.consumer._metrics import ConsumerMetrics
from shardline.consumer._redrive_claims import REDRIVE_SUFFIX, Arbiters
from shardline.consumer._resharding import ShardLineage
from shardline.consumer._settings import BatchHandler, ConsumerSettings, RecordHandler
from shardline.consumer._stalls import STALL_BACKOFF_S, backoff, stall_cause
from shardline.errors import LeaseLost
from shardline.kinesis._positions import Position
from shardline.kpl._identity import AggregateId

if TYPE_CHECKING:  # annotations only: the Protocols cost nothing at import
    from shardline.protocols import LambdaContext

logger = logging.getLogger(__name__)

_ANY_SEQUENCE = Position("0")
_MAX_SKIPPED_NOTES = 50


@dataclass(frozen=True, slots=True)
class GroupRuntime:
    """What every shard run of one consumer group shares: its settings and its collaborators."""

    settings: ConsumerSettings
    table: LeaseStore
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


class ShardRun:
    """One invocation's work on one shard: its lease, its records past the checkpoint, and the
    three parts that do the work — the handler loop, the checkpoint, the failure policy."""

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
        self.redrive = lease_key_suffix if lease_key_suffix.startswith(REDRIVE_SUFFIX) else None
        self.checkpoint = Checkpoint(group.table, group.metrics, group.settings, group.clock)
        self.failures = FailurePolicy(self.checkpoint, group.dlq, self._room)

    def run(self) -> str | None:
        """Process the shard's records; the sequence number to retry from, or None."""
        metrics, checkpoint = self.group.metrics, self.checkpoint
        metrics.count("RecordsReceived", len(self.records))
        try:
            try:
                failed = self._run()
                checkpoint.commit(release=True)
            except RetryFrom as retry:
                failed = retry.sequence
            lease = checkpoint.lease
            careful_done = failed is None and lease is not None and lease.careful_span is not None
            if lease is not None and (
                checkpoint.marked or lease.stalled_since is not None or lease.stalls or careful_done
            ):
                # No write took the mark away yet (a redelivery is then no crash), or the row
                # still shows a stall this delivery got past, or careful running that the whole
                # batch got through, without moving the checkpoint.
                checkpoint.lease = self.group.table.release(lease, careful_done=careful_done)
                checkpoint.marked = False
            self.group.stalls.pop(self.key, None)
            return failed
        except LeaseLost as lost:
            metrics.count("LeaseLosses")
            logger.error(
                "consumer group %s, shard %s: lease lost (%s); stopping", self.settings.group, self.key, lost
            )
            return checkpoint.first_uncommitted(self.records)
        except Exception as failure:  # every other failure is the environment's
            return self._stall(failure)

    def _run(self) -> str | None:
        group, metrics, lineage, checkpoint = (
            self.group,
            self.group.metrics,
            self.group.lineage,
            self.checkpoint,
        )
        first = self.records[0].sequence_number
        parents = lineage.parents(self.stream, self.shard_id) if lineage else ()
        crashed, previous = False, None
        if self.settings.detect_crashes:
            lease, crashed, previous = self._begin(first, parents)
        else:
            lease = group.table.hold(self.key, self.owner, parent_shard_ids=parents)
        checkpoint.lease = lease
        parent_keys = [self.settings.lease_key(self.stream, parent) for parent in lease.parent_shard_ids]
        if lineage is not None and not lineage.parents_finished(self.stream, parent_keys):
            metrics.count("BatchesWaitingForParent")
            return first
        hash_range = lineage.hash_range(self.stream, self.shard_id) if lineage else None
        stored = lease.applied_aggregates
        if stored is None and lineage is not None and parent_keys:
            stored = lineage.inherited(self.stream, self.shard_id, parent_keys)  # from its parents' states
        if self.redrive is None and _discarded_from(lease, first) is not None:
            self._note_skipped_by_mapping(first, stored)
            lease = checkpoint.lease
        checkpoint.dedup = DedupRun(stored, metrics, lease.checkpoint)
        self._consult_redrives(lease)
        records = user_records(
            self.records,
            hash_range=hash_range,
            metrics=metrics,
            dedup=checkpoint.dedup,
            sub_counts=checkpoint.sub_counts,
        )
        fresh = checkpoint.fresh = records[_first_after(records, lease.checkpoint) :]
        metrics.count("DuplicatesSkipped", len(records) - len(fresh))
        if fresh:
            metrics.set_behind(fresh[-1].approximate_arrival)
        if self.settings.detect_crashes and (crashed or lease.careful_span is not None):
            checkpoint.careful = CarefulSpans([record.position for record in fresh])
            if crashed and fresh:
                assert previous is not None
                self.failures.after_crash(fresh[0], previous, self.shard_id)
        with self._handler_deadline() as deadline:
            loop = HandlerLoop(
                checkpoint, self.failures, deadline, self._out_of_time(deadline), self.records[-1]
            )
            if group.batch_handler is not None:
                return loop.batch(group.batch_handler, fresh)
            assert group.record_handler is not None
            return loop.records(group.record_handler, fresh)

    def _begin(self, first: str, parents: tuple[str, ...] | list[str]) -> tuple[Lease, bool, Lease]:
        """Take the lease and mark this delivery in flight; whether the one before it died, and
        the row as that one left it."""
        table = self.group.table
        lease, crashed = table.begin(self.key, self.owner, first, parent_shard_ids=parents)
        self.checkpoint.marked = True
        if crashed and (self.key, first) in self.group.unreleased:
            crashed = False  # this process answered it, and DynamoDB would not take the mark away
        self.group.unreleased.discard((self.key, first))
        return lease, crashed, lease

    def _consult_redrives(self, lease: Lease) -> None:
        """A redrive consults its own row's claims; the group's run, the redrive rows of the
        batches it noted whose copies may still be in this delivery (`_redrive_claims`)."""
        checkpoint = self.checkpoint
        if self.redrive is not None:
            arbiters = Arbiters.for_redrive(self.group.table, lease, self.records[0].approximate_arrival)
        elif lease.skipped_by_mapping:
            arbiters = Arbiters.for_group(self.group.table, lease, self.records[0].approximate_arrival)
        else:
            return
        if not arbiters:
            return
        checkpoint.arbiters = arbiters
        metrics = self.group.metrics

        def applied_by_the_other(aggregate: AggregateId) -> bool:
            if arbiters.applied(aggregate):
                metrics.count("RedriveCopiesSkipped")
                return True
            return False

        assert checkpoint.dedup is not None
        checkpoint.dedup.others = applied_by_the_other

    def _note_skipped_by_mapping(self, first: str, state: str | None) -> None:
        """The shard stalled and asked the mapping to retry from `stalledSequence` (or a record
        failed, and the mapping retried from it: `failedSequenceNumber`); a delivery that starts
        past it means the mapping gave that batch up (its record age or retries): the records from
        there to this one were never applied. Note them for a redrive, and create the redrive's
        row: at the checkpoint, from the applied-aggregate state as it is before the batch
        (`_redrive_claims`), so the redrive and this group's run can each skip what the other
        applied. The row comes first: a note is never without its row. `state`: the applied-
        aggregate state this run starts from (the row's, or its parents')."""
        lease = self.checkpoint.lease
        assert lease is not None
        start = _discarded_from(lease, first)
        assert start is not None
        notes = json.loads(lease.skipped_by_mapping) if lease.skipped_by_mapping else []
        table = self.group.table
        table.start_at(self.key + REDRIVE_SUFFIX + start, lease.checkpoint, applied=state)
        notes = [note for note in notes if note.get("start") != start]
        notes.append(
            {
                "start": start,
                "checkpoint": lease.checkpoint.sequence,
                "checkpointSub": lease.checkpoint.sub_sequence,
                "detectedAt": round(table.now(), 3),
                "arrival": round(self.records[0].approximate_arrival, 3),
            }
        )
        self.checkpoint.lease = table.note_skipped(lease, json.dumps(notes[-_MAX_SKIPPED_NOTES:]))
        self.group.metrics.count("BatchesSkippedByMapping")
        logger.error(
            "consumer group %s, shard %s: the mapping discarded the stalled batch from %s (its record "
            "age or retries ran out); those records were never applied — redrive them from the "
            "on-failure destination while the stream holds them",
            self.settings.group,
            self.key,
            start,
        )

    # -- the time budget -----------------------------------------------------------------------

    def _out_of_time(self, deadline: HandlerDeadline) -> OutOfTime:
        remaining_ms = getattr(self.context, "get_remaining_time_in_millis", None)
        return OutOfTime(deadline, remaining_ms, self.settings.time_margin * 1000.0)

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

    # -- stalls --------------------------------------------------------------------------------

    def _stall(self, failure: BaseException) -> str:
        """The environment failed, not a record: note it, wait, retry from the first record not
        committed. Nothing is counted against a record; nothing is lost."""
        group, table, checkpoint = self.group, self.group.table, self.checkpoint
        cause = stall_cause(failure, self.settings.failure_detail)
        retry_from = checkpoint.first_uncommitted(self.records)
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
        if checkpoint.lease is not None:
            try:
                try:
                    lease = table.stall(checkpoint.lease, cause, retry_from, release=checkpoint.marked)
                except LeaseLost:
                    # The failure may be a write whose reply was lost after it landed: the row's
                    # counter moved past the lease held. Still this invocation's: note it there.
                    stored = table.get(self.key)
                    if stored is None or stored.owner != self.owner:
                        raise
                    lease = table.stall(stored, cause, retry_from, release=checkpoint.marked)
                checkpoint.lease = lease
                checkpoint.marked = False
                stalls = max(stalls, checkpoint.lease.stalls)
            except LeaseLost:
                return retry_from
            except Exception as unrecorded:  # DynamoDB is what failed
                logger.error(
                    "consumer group %s: could not note the stall: %s", self.settings.group, unrecorded
                )
        if checkpoint.marked:
            self.group.unreleased.add((self.key, self.records[0].sequence_number))
        table.sleep(min(backoff(stalls, STALL_BACKOFF_S), self._room()))
        return retry_from


def _discarded_from(lease: Lease, first: str) -> str | None:
    """The first sequence number of a batch the mapping discarded, if a delivery starting at
    `first` shows it did: it starts past where the row asked the mapping to retry from."""
    retry = lease.stalled_sequence
    if retry is None and lease.failed_at is not None and lease.checkpoint < lease.failed_at:
        retry = lease.failed_at.sequence
    if retry is None or int(first) <= int(retry):
        return None
    return retry


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
