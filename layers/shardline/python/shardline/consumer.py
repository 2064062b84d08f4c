"""Consumer groups for Lambda: de-aggregate, skip what was processed, checkpoint what survived.

    consumer = KinesisConsumer("orders", LeaseTable(dynamodb, "orders-leases"), kinesis=kinesis)

    @consumer.handler
    def handle(record: ConsumedRecord) -> None:
        save(record.json())

    def lambda_handler(event, context):
        return consumer.process(event, context)   # {"batchItemFailures": [...]}

`process` takes the shard's lease (fencing any older invocation), de-aggregates, skips every
user record at or below the checkpoint, runs the handler record by record, and checkpoints only
past records whose handler returned. On a failure it reports the failing record's Kinesis
sequence number, so the event-source mapping retries from there and the records before it in
the same aggregate are skipped on replay. A record that keeps failing goes, whole, to the
dead-letter queue after `max_attempts`, and the shard moves on. A handler may return DynamoDB
writes (TransactWriteItems entries): they are committed in the same transaction as the
checkpoint, so a crash leaves both or neither — exactly-once effects.
"""

from __future__ import annotations

import bisect
import json
import logging
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from shardline.checkpoint import MAX_TRANSACTION_BYTES, MAX_TRANSACTION_ITEMS, Lease, LeaseLost, LeaseTable
from shardline.consumer_metrics import ConsumerMetrics
from shardline.dead_letters import DeadLetterQueue
from shardline.deaggregation import ConsumedRecord, deaggregate, stream_and_shard
from shardline.positions import Position
from shardline.resharding import ShardLineage

logger = logging.getLogger(__name__)

Writes = Sequence[Mapping[str, Any]] | None
RecordHandler = Callable[[ConsumedRecord], Writes]
BatchHandler = Callable[[list[ConsumedRecord]], Writes]

__all__ = ["ConsumedRecord", "KinesisConsumer", "deaggregate"]

_ANY_SEQUENCE = Position("0")


class KinesisConsumer:
    """One consumer group's processing of Lambda Kinesis events.

    - `kinesis`: a Kinesis client, to learn parent shards and hash ranges (ListShards) and to
      probe whether a parent shard is finished (GetRecords). Without it, parent ordering only
      uses parents already recorded in lease rows, and hash ranges are not checked.
    - `dlq`: where poison records go after `max_attempts` failed attempts (None: they block).
    - `checkpoint_every` / `checkpoint_interval`: write the checkpoint after this many records
      (default: no count) or seconds, and at the end of the batch — not once per record. A
      batch that succeeds within the interval costs one DynamoDB write. After a crash, a plain
      handler sees again at most what ran since the last checkpoint.
    - `time_margin`: stop (checkpoint, report the rest failed) when the invocation has less
      than this many seconds left.
    - `multi_stream`: lease keys are `<stream>:<shard id>` (one group reading several streams).
    """

    def __init__(
        self,
        group: str,
        table: LeaseTable,
        *,
        kinesis: Any = None,
        dlq: DeadLetterQueue | None = None,
        max_attempts: int = 3,
        checkpoint_every: int | None = None,
        checkpoint_interval: float = 5.0,
        time_margin: float = 2.0,
        multi_stream: bool = False,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if max_attempts < 1 or (checkpoint_every is not None and checkpoint_every < 1):
            raise ValueError("max_attempts and checkpoint_every must be at least 1")
        self.group = group
        self.table = table
        self.metrics = ConsumerMetrics()
        self._lineage = ShardLineage(kinesis, table) if kinesis is not None else None
        self._dlq = dlq
        self._max_attempts = max_attempts
        self._checkpoint_every = checkpoint_every or float("inf")
        self._checkpoint_interval = checkpoint_interval
        self._time_margin = time_margin
        self._multi_stream = multi_stream
        self._clock = clock
        self._record_handler: RecordHandler | None = None
        self._batch_handler: BatchHandler | None = None

    def handler(self, fn: RecordHandler) -> RecordHandler:
        """Decorator: `fn(record)` is called once per user record, in order."""
        self._record_handler = fn
        return fn

    def batch_handler(self, fn: BatchHandler) -> BatchHandler:
        """Decorator: `fn(records)` gets every new user record of the batch at once; if it raises,
        the whole batch is retried (the failure is counted against its first record)."""
        self._batch_handler = fn
        return fn

    def process(self, event: Mapping[str, Any], context: Any) -> dict[str, list[dict[str, str]]]:
        """Process a Lambda Kinesis event; the answer for ReportBatchItemFailures."""
        if self._record_handler is None and self._batch_handler is None:
            raise RuntimeError(f"consumer group {self.group}: register a handler first")
        event_records = event.get("Records") or []
        by_shard: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
        for index, event_record in enumerate(event_records):
            by_shard.setdefault(stream_and_shard(event_record, index), []).append(event_record)
        failures: list[dict[str, str]] = []
        owner = getattr(context, "aws_request_id", None) or f"local-{uuid.uuid4()}"
        for (stream, shard_id), records in by_shard.items():
            failed_at = _ShardRun(self, stream, shard_id, records, context, owner).run()
            if failed_at is not None:
                failures.append({"itemIdentifier": failed_at})
        return {"batchItemFailures": failures}

    # -- used by _ShardRun -----------------------------------------------------------------

    def lease_key(self, stream: str, shard_id: str) -> str:
        return f"{stream}:{shard_id}" if self._multi_stream else shard_id


class _ShardRun:
    """One invocation's work on one shard: the state of the deferred checkpoint."""

    def __init__(
        self,
        consumer: KinesisConsumer,
        stream: str,
        shard_id: str,
        event_records: list[Mapping[str, Any]],
        context: Any,
        owner: str,
    ) -> None:
        self.c = consumer
        self.stream = stream
        self.shard_id = shard_id
        self.event_records = event_records
        self.context = context
        self.owner = owner
        self.lease: Lease | None = None
        self.done: ConsumedRecord | None = None  # last record whose handler returned
        self.writes: list[Mapping[str, Any]] = []  # sink writes of the records since the checkpoint
        self.written_items: set[str] = set()  # (table, key) of those writes
        self.writes_size = 0
        self.since_checkpoint = 0
        self.checkpointed_at = consumer._clock()

    def run(self) -> str | None:
        """Process the shard's records; the sequence number to retry from, or None."""
        c = self.c
        metrics = c.metrics
        metrics.count("RecordsReceived", len(self.event_records))
        lineage = c._lineage
        key = c.lease_key(self.stream, self.shard_id)
        try:
            parents = lineage.parents(self.stream, self.shard_id) if lineage else ()
            self.lease = c.table.hold(key, self.owner, parent_shard_ids=parents)
            parent_keys = [c.lease_key(self.stream, parent) for parent in self.lease.parent_shard_ids]
            if lineage is not None and not lineage.parents_finished(self.stream, parent_keys):
                metrics.count("BatchesWaitingForParent")
                return self.event_records[0]["kinesis"]["sequenceNumber"]
            hash_range = lineage.hash_range(self.stream, self.shard_id) if lineage else None
            records = deaggregate(self.event_records, hash_range=hash_range, metrics=metrics)
            fresh = records[_first_after(records, self.lease.checkpoint) :]
            metrics.count("DuplicatesSkipped", len(records) - len(fresh))
            if fresh:
                metrics.set_behind(fresh[-1].approximate_arrival)
            failed = self._batch(fresh) if c._batch_handler is not None else self._records(fresh)
            if failed is None:
                self._commit()
            return failed
        except LeaseLost as lost:
            metrics.count("LeaseLosses")
            logger.error("consumer group %s, shard %s: lease lost (%s); stopping", c.group, key, lost)
            return self._first_uncommitted()

    def _records(self, records: list[ConsumedRecord]) -> str | None:
        c = self.c
        handler = c._record_handler
        assert handler is not None
        remaining_ms = getattr(self.context, "get_remaining_time_in_millis", None)
        margin_ms = c._time_margin * 1000.0
        processed = 0
        try:
            for record in records:
                if remaining_ms is not None and remaining_ms() < margin_ms:
                    self._commit()
                    return record.sequence_number
                try:
                    writes = _checked(handler(record))
                except Exception as exc:
                    c.metrics.count("RecordsFailed")
                    if self._give_up_on(record, exc):
                        continue
                    return record.sequence_number
                if writes:
                    self._add_writes(writes)
                self.done = record
                processed += 1
                self.since_checkpoint += 1
                if (
                    self.since_checkpoint >= c._checkpoint_every
                    or c._clock() - self.checkpointed_at >= c._checkpoint_interval
                ):
                    self._commit()
            return None
        finally:
            c.metrics.count("RecordsProcessed", processed)

    def _batch(self, records: list[ConsumedRecord]) -> str | None:
        if not records:
            return None
        handler = self.c._batch_handler
        assert handler is not None
        try:
            writes = handler(records)
        except Exception as exc:
            self.c.metrics.count("RecordsFailed", len(records))
            self._commit()
            self.lease = self.c.table.record_failure(self.lease, records[0].position, _describe(exc))
            return records[0].sequence_number
        self.writes.extend(writes or ())
        self.done = records[-1]
        self.c.metrics.count("RecordsProcessed", len(records))
        return None

    def _add_writes(self, writes: list[Mapping[str, Any]]) -> None:
        """Sink writes of the record about to be marked done; they ride with a checkpoint.

        What is pending is committed first when this record's writes would not fit in the same
        transaction: over 99 items, over the 4 MB request size, or an item already written in it
        (DynamoDB refuses two operations on one item in a transaction).
        """
        items = {_item_of(write) for write in writes}
        size = sum(_size_of(write) for write in writes)
        if (
            len(self.writes) + len(writes) > MAX_TRANSACTION_ITEMS - 1
            or self.writes_size + size > MAX_TRANSACTION_BYTES
            or not items.isdisjoint(self.written_items)
        ):
            self._commit()  # what is done so far; this record's writes start the next transaction
        self.writes.extend(writes)
        self.written_items |= items
        self.writes_size += size

    def _give_up_on(self, record: ConsumedRecord, exc: Exception) -> bool:
        """Count the failure; True if the record went to the DLQ and processing goes on."""
        c = self.c
        self._commit()
        self.lease = c.table.record_failure(self.lease, record.position, _describe(exc))
        if c._dlq is None or self.lease.failed_attempts < c._max_attempts:
            return False
        c._dlq.send(record, group=c.group, error=_describe(exc), attempts=self.lease.failed_attempts)
        c.metrics.count("RecordsSentToDLQ")
        logger.warning(
            "consumer group %s: record %s/%s sent to the DLQ after %d attempts",
            c.group,
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
        self.lease = self.c.table.checkpoint_with(self.lease, self.done.position, self.writes)
        self.writes = []
        self.written_items = set()
        self.writes_size = 0
        self.since_checkpoint = 0
        self.checkpointed_at = self.c._clock()
        self.c.metrics.count("CheckpointsWritten")

    def _first_uncommitted(self) -> str:
        """After a lost lease: the first Kinesis record not covered by our last checkpoint."""
        checkpoint = self.lease.checkpoint if self.lease is not None else None
        for event_record in self.event_records:
            sequence = event_record["kinesis"]["sequenceNumber"]
            if checkpoint is None or checkpoint.is_sentinel or int(sequence) >= int(checkpoint.sequence):
                return sequence
        return self.event_records[-1]["kinesis"]["sequenceNumber"]


def _checked(writes: Writes) -> list[Mapping[str, Any]]:
    """A record's sink writes, if they fit in one transaction with the checkpoint. A handler that
    returns more fails on that record (counted, then dead-lettered), like any handler error."""
    if not writes:
        return []  # the common case, on the hot path
    writes = list(writes)
    size = sum(_size_of(write) for write in writes)
    if (
        len(writes) > MAX_TRANSACTION_ITEMS - 1
        or len({_item_of(write) for write in writes}) < len(writes)
        or size > MAX_TRANSACTION_BYTES
    ):
        raise ValueError(
            f"the handler returned {len(writes)} writes ({size} bytes) for one record; at most "
            f"{MAX_TRANSACTION_ITEMS - 1} writes to distinct items, {MAX_TRANSACTION_BYTES} bytes, "
            "fit in a transaction with the checkpoint"
        )
    return writes


def _item_of(write: Mapping[str, Any]) -> str:
    """The (table, key) a TransactWriteItems entry touches, as a comparable string. A Put names
    no key (the table's schema is not known here): its whole item stands for it."""
    [(_, operation)] = write.items()
    target = operation.get("Key") or operation.get("Item")
    return json.dumps([operation.get("TableName"), target], sort_keys=True, default=str)


def _size_of(write: Mapping[str, Any]) -> int:
    """Rough bytes of an entry on the wire (binary values count once, as DynamoDB counts them)."""
    return len(json.dumps(write, default=lambda value: "x" * len(value)))


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
