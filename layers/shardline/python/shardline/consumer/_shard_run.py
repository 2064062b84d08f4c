"""One invocation's work on one shard: lease, de-aggregation, duplicate skip, handler, deferred checkpoint.

`ShardRun.run()` returns the Kinesis sequence number the event-source mapping should retry from
(reported in `batchItemFailures`), or None when every record of the shard's batch is done.
What it may assume, and keeps: the checkpoint only moves forward, only under the lease it was
taken with, and only past records whose handler returned; sink writes commit in the same
transaction as the checkpoint that covers their record.
"""

from __future__ import annotations

import bisect
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from shardline.consumer._dead_letters import DeadLetterQueue
from shardline.consumer._deaggregation import ConsumedRecord, deaggregate
from shardline.consumer._leases import Lease, LeaseTable
from shardline.consumer._metrics import ConsumerMetrics
from shardline.consumer._resharding import ShardLineage
from shardline.consumer._settings import BatchHandler, ConsumerSettings, RecordHandler
from shardline.consumer._transaction import PendingTransaction, checked_writes
from shardline.errors import LeaseLost
from shardline.kinesis._positions import Position

if TYPE_CHECKING:  # annotations only: the Protocols cost nothing at import
    from shardline.protocols import LambdaContext

logger = logging.getLogger(__name__)

_ANY_SEQUENCE = Position("0")


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


class ShardRun:
    """One invocation's work on one shard: the state of the deferred checkpoint."""

    def __init__(
        self,
        group: GroupRuntime,
        stream: str,
        shard_id: str,
        event_records: list[Mapping[str, Any]],
        context: LambdaContext | None,
        owner: str,
    ) -> None:
        self.group = group
        self.settings = group.settings
        self.stream = stream
        self.shard_id = shard_id
        self.event_records = event_records
        self.context = context
        self.owner = owner
        self.lease: Lease | None = None
        self.done: ConsumedRecord | None = None  # last record whose handler returned
        self.pending = PendingTransaction()  # sink writes of the records since the checkpoint
        self.since_checkpoint = 0
        self.checkpointed_at = group.clock()

    def run(self) -> str | None:
        """Process the shard's records; the sequence number to retry from, or None."""
        group, settings = self.group, self.settings
        metrics = group.metrics
        metrics.count("RecordsReceived", len(self.event_records))
        lineage = group.lineage
        key = settings.lease_key(self.stream, self.shard_id)
        try:
            parents = lineage.parents(self.stream, self.shard_id) if lineage else ()
            self.lease = group.table.hold(key, self.owner, parent_shard_ids=parents)
            parent_keys = [settings.lease_key(self.stream, parent) for parent in self.lease.parent_shard_ids]
            if lineage is not None and not lineage.parents_finished(self.stream, parent_keys):
                metrics.count("BatchesWaitingForParent")
                return str(self.event_records[0]["kinesis"]["sequenceNumber"])
            hash_range = lineage.hash_range(self.stream, self.shard_id) if lineage else None
            records = deaggregate(self.event_records, hash_range=hash_range, metrics=metrics)
            fresh = records[_first_after(records, self.lease.checkpoint) :]
            metrics.count("DuplicatesSkipped", len(records) - len(fresh))
            if fresh:
                metrics.set_behind(fresh[-1].approximate_arrival)
            failed = self._batch(fresh) if group.batch_handler is not None else self._records(fresh)
            if failed is None:
                self._commit()
            return failed
        except LeaseLost as lost:
            metrics.count("LeaseLosses")
            logger.error("consumer group %s, shard %s: lease lost (%s); stopping", settings.group, key, lost)
            return self._first_uncommitted()

    def _records(self, records: list[ConsumedRecord]) -> str | None:
        group, settings = self.group, self.settings
        handler = group.record_handler
        assert handler is not None
        remaining_ms = getattr(self.context, "get_remaining_time_in_millis", None)
        margin_ms = settings.time_margin * 1000.0
        checkpoint_every = settings.checkpoint_every or float("inf")
        processed = 0
        try:
            for record in records:
                if remaining_ms is not None and remaining_ms() < margin_ms:
                    self._commit()
                    return record.sequence_number
                try:
                    writes = checked_writes(handler(record))
                except Exception as exc:
                    group.metrics.count("RecordsFailed")
                    if self._give_up_on(record, exc):
                        continue
                    return record.sequence_number
                if writes:
                    if not self.pending.fits(writes):
                        self._commit()  # what is done so far; this record's writes start the next one
                    self.pending.add(writes)
                self.done = record
                processed += 1
                self.since_checkpoint += 1
                if (
                    self.since_checkpoint >= checkpoint_every
                    or group.clock() - self.checkpointed_at >= settings.checkpoint_interval
                ):
                    self._commit()
            return None
        finally:
            group.metrics.count("RecordsProcessed", processed)

    def _batch(self, records: list[ConsumedRecord]) -> str | None:
        if not records:
            return None
        group = self.group
        handler = group.batch_handler
        assert handler is not None and self.lease is not None
        try:
            writes = handler(records)
        except Exception as exc:
            group.metrics.count("RecordsFailed", len(records))
            self._commit()
            self.lease = group.table.record_failure(self.lease, records[0].position, _describe(exc))
            return records[0].sequence_number
        self.pending.writes.extend(writes or ())
        self.done = records[-1]
        group.metrics.count("RecordsProcessed", len(records))
        return None

    def _give_up_on(self, record: ConsumedRecord, exc: Exception) -> bool:
        """Count the failure; True if the record went to the DLQ and processing goes on."""
        group, settings = self.group, self.settings
        self._commit()
        assert self.lease is not None
        self.lease = group.table.record_failure(self.lease, record.position, _describe(exc))
        if group.dlq is None or self.lease.failed_attempts < settings.max_attempts:
            return False
        group.dlq.send(
            record, group=settings.group, error=_describe(exc), attempts=self.lease.failed_attempts
        )
        group.metrics.count("RecordsSentToDLQ")
        logger.warning(
            "consumer group %s: record %s/%s sent to the DLQ after %d attempts",
            settings.group,
            record.sequence_number,
            record.sub_sequence_number,
            self.lease.failed_attempts,
        )
        self.done = record  # the checkpoint moves past the poison record
        self._commit()
        return True

    def _commit(self) -> None:
        if self.done is None or self.lease is None or self.done.position <= self.lease.checkpoint:
            return
        self.lease = self.group.table.checkpoint_with(self.lease, self.done.position, self.pending.writes)
        self.pending.clear()
        self.since_checkpoint = 0
        self.checkpointed_at = self.group.clock()
        self.group.metrics.count("CheckpointsWritten")

    def _first_uncommitted(self) -> str:
        """After a lost lease: the first Kinesis record not covered by our last checkpoint."""
        checkpoint = self.lease.checkpoint if self.lease is not None else None
        for event_record in self.event_records:
            sequence = str(event_record["kinesis"]["sequenceNumber"])
            if checkpoint is None or checkpoint.is_sentinel or int(sequence) >= int(checkpoint.sequence):
                return sequence
        return str(self.event_records[-1]["kinesis"]["sequenceNumber"])


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
