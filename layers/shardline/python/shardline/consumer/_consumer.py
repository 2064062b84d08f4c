"""Consumer groups for Lambda: de-aggregate, skip what was processed, checkpoint what survived.

    consumer = KinesisConsumer("orders", LeaseTable(dynamodb, "orders-leases"), kinesis=kinesis)

    @consumer.handler
    def handle(record: ConsumedRecord) -> None:
        save(record.json())

    def lambda_handler(event, context):
        return consumer.process(event, context)   # {"batchItemFailures": [...]}

`process` checks the whole event first (`EventError` before any handler runs), takes the
shard's lease (fencing any older invocation), de-aggregates, skips every user record at or below
the checkpoint, runs the handler record by record, and checkpoints only past records that are
done. On a failure it reports the failing record's Kinesis sequence number, so the event-source
mapping retries from there and the records before it in the same aggregate are skipped on
replay. A record that keeps failing while it runs alone — its handler raises or hangs, its sink
writes are refused, its delivery kills the process — goes, whole, to the dead-letter queue after
`max_attempts` attempts spaced by backoff, and the shard moves on. A failure of the environment
(a missing or forbidden table, a DLQ that refuses, DynamoDB down, a handler raising
`DependencyUnavailable`) blames no record: the shard stalls, loudly (`ShardStalls`, the lease
row's `stalledCause`, an error log), and goes on where it stopped once the cause is gone.
A handler may return DynamoDB writes (TransactWriteItems entries): they are
committed in the same transaction as the checkpoint, so a crash leaves both or neither —
exactly-once effects. Copies of a shardline aggregate (a producer's retry after a lost reply) are
skipped by identity (`_dedup`), and a handler's `once` guard applies each client id once.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from shardline.consumer._dead_letters import DeadLetterQueue
from shardline.consumer._deaggregation import KinesisRecord, read_event
from shardline.consumer._lease_store import LeaseStore
from shardline.consumer._metrics import ConsumerMetrics
from shardline.consumer._resharding import GroupStart, ShardLineage
from shardline.consumer._settings import BatchHandler, ConsumerSettings, RecordHandler
from shardline.consumer._shard_run import GroupRuntime, ShardRun
from shardline.errors import ConfigurationError

if TYPE_CHECKING:  # annotations only: the Protocols cost nothing at import
    from shardline.protocols import KinesisReadClient, LambdaContext


class KinesisConsumer:
    """One consumer group's processing of Lambda Kinesis events.

    - `table`: where the group's leases and checkpoints live, any `LeaseStore`: a `LeaseTable`
      (DynamoDB) in production, a `shardline.testing.InMemoryLeaseTable` in handler tests.
    - `kinesis`: a Kinesis client, to learn parent shards and hash ranges (ListShards) and to
      probe whether a parent shard is finished (GetRecords). Without it there is no parent
      ordering (a child's records may be processed before its parents finish) and hash ranges
      are not checked; the event-source mapping itself delivers parents first.
    - `dlq`: where poison records go after `max_attempts` failed attempts (None: they block).
    - `max_attempts` (at least 2) and `retry_backoff`: a failing record is tried again after
      `retry_backoff` seconds, doubling per attempt (at most 60; jitter adds up to a quarter),
      and dead-lettered at the `max_attempts`-th failure — so with 3 and 2.0 a dependency out
      for less than 6 s fails no record. The wait happens inside the invocation, within its
      time budget.
    - `checkpoint_every` / `checkpoint_interval`: write the checkpoint after this many records
      (default: no count) or seconds, and at the end of the batch — not once per record. A
      batch that succeeds within the interval costs one DynamoDB write. After a crash, a plain
      handler sees again at most what ran since the last checkpoint.
    - `time_margin`: stop (checkpoint, report the rest failed) when the invocation has less
      than this many seconds left.
    - `multi_stream`: lease keys are `<stream>:<shard id>` (one group reading several streams).
    - `sink_conflicts`: what a sink write whose own condition fails means: `"fail"` (default:
      that record failed — counted, retried, then dead-lettered with the write and DynamoDB's
      reason) or `"skip"` (your conditions are idempotence checks: the effect is already there,
      the record's writes are dropped and it counts as done, `SinkConflictsSkipped`).
    - `detect_crashes`: mark each delivery in flight in the lease row, so that a delivery whose
      process died (timeout, out of memory) is found on redelivery and pinned on the record that
      caused it (`_careful`: doubling spans, a crash counts only against a record that ran
      alone); costs one more DynamoDB write per batch (and saves the read). Off: one write per
      batch, and such a record is retried until the mapping gives up on it.
    - `failure_detail`: what the lease row, the dead letter and the log say about a handler's
      exception (`_failure_text`): `"fingerprint"` (default: its type and a fingerprint of its
      message, never the message, which may quote the record) or `"message"` (also the message,
      cut to 256 characters, for handlers whose messages hold no record data).
    - `starting_position` (`TRIM_HORIZON`, `LATEST` or `AT_TIMESTAMP` with
      `starting_position_timestamp`, epoch seconds) and `max_record_age` (seconds, None: no
      limit): where the group's mapping starts and the oldest record it delivers, as the mapping
      is configured (`ConsumerFunction` takes them from the environment the constructs render).
      They decide whether a child shard delivered before its parent has a lease row waits for
      it (`_resharding`). Default TRIM_HORIZON, no age limit: a child waits for any parent that
      still holds records, so a resend's copy in both is never applied twice; a group whose
      mapping starts at LATEST must say so, or a child of a parent closed before the group
      existed waits until that parent's records are trimmed (the stream's retention) — and one
      whose mapping has a maximum record age, likewise, for a parent's records it discards.

    Clients: shardline's own calls must fit in `time_margin`. Give the DynamoDB, SQS and S3
    clients timeouts to match (`ConsumerFunction` does: `client_config(time_margin)`); boto3's
    defaults (60 s reads, retried) can outlast the function, which then dies in shardline's
    own write — taken for a crash, although never pinned on a record.
    """

    def __init__(
        self,
        group: str,
        table: LeaseStore,
        *,
        kinesis: KinesisReadClient | None = None,
        dlq: DeadLetterQueue | None = None,
        max_attempts: int = 3,
        checkpoint_every: int | None = None,
        checkpoint_interval: float = 5.0,
        time_margin: float = 2.0,
        multi_stream: bool = False,
        sink_conflicts: str = "fail",
        detect_crashes: bool = True,
        retry_backoff: float = 2.0,
        failure_detail: str = "fingerprint",
        starting_position: str = "TRIM_HORIZON",
        starting_position_timestamp: float | None = None,
        max_record_age: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = ConsumerSettings(
            group,
            max_attempts=max_attempts,
            checkpoint_every=checkpoint_every,
            checkpoint_interval=checkpoint_interval,
            time_margin=time_margin,
            multi_stream=multi_stream,
            sink_conflicts=sink_conflicts,
            detect_crashes=detect_crashes,
            retry_backoff=retry_backoff,
            failure_detail=failure_detail,
        )
        self.table = table
        self.metrics = ConsumerMetrics()
        start = GroupStart(starting_position, starting_position_timestamp, max_record_age)
        self._lineage = ShardLineage(kinesis, table, start) if kinesis is not None else None
        self._dlq = dlq
        self._clock = clock
        self._record_handler: RecordHandler | None = None
        self._batch_handler: BatchHandler | None = None
        self._unreleased: set[tuple[str, str]] = set()  # see GroupRuntime
        self._stalls: dict[str, int] = {}

    def handler(self, fn: RecordHandler) -> RecordHandler:
        """Decorator: `fn(record)` is called once per user record, in order."""
        self._record_handler = fn
        return fn

    def batch_handler(self, fn: BatchHandler) -> BatchHandler:
        """Decorator: `fn(records)` gets the new user records of the batch, in order, at once.

        It may return writes by record (`{record: [entries]}`: each record's commit with the
        checkpoint that passes it, in as many transactions as they need) or one list for the
        records it was given (one transaction). If it raises, the records are split in halves
        and run again until the one that fails is alone: only that record is counted, retried
        and dead-lettered. So `fn` may see a record more than once, in smaller lists."""
        self._batch_handler = fn
        return fn

    @property
    def group(self) -> str:
        """The consumer group's name."""
        return self.settings.group

    def process(
        self, event: Mapping[str, Any], context: LambdaContext | None, *, lease_key_suffix: str = ""
    ) -> dict[str, list[dict[str, str]]]:
        """Process a Lambda Kinesis event; the answer for ReportBatchItemFailures.
        `lease_key_suffix` runs it under lease rows of its own (a redrive: `redrive`)."""
        runtime = self._runtime(self.table)
        by_shard = read_event(event)
        failures: list[dict[str, str]] = []
        owner = getattr(context, "aws_request_id", None) or f"local-{uuid.uuid4()}"
        for (stream, shard_id), records in by_shard.items():
            failed_at = ShardRun(runtime, stream, shard_id, records, context, owner, lease_key_suffix).run()
            if failed_at is not None:
                failures.append({"itemIdentifier": failed_at})
        return {"batchItemFailures": failures}

    def _run_shard(
        self,
        stream: str,
        shard_id: str,
        records: list[KinesisRecord],
        *,
        table: LeaseStore,
        owner: str,
        context: LambdaContext | None,
    ) -> str | None:
        """One batch of one shard's records under `table` (a worker's `HeldLeases`): the
        sequence number to read again from, or None when every record is done (`Worker`)."""
        return ShardRun(self._runtime(table), stream, shard_id, records, context, owner).run()

    def _runtime(self, table: LeaseStore) -> GroupRuntime:
        if self._record_handler is None and self._batch_handler is None:
            raise ConfigurationError(f"consumer group {self.group}: register a handler first")
        return GroupRuntime(
            self.settings,
            table,
            self.metrics,
            self._lineage,
            self._dlq,
            self._clock,
            self._record_handler,
            self._batch_handler,
            self._unreleased,
            self._stalls,
        )
