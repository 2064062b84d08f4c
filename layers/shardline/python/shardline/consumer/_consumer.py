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

import time
import uuid
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from shardline.consumer._dead_letters import DeadLetterQueue
from shardline.consumer._deaggregation import stream_and_shard
from shardline.consumer._leases import LeaseTable
from shardline.consumer._metrics import ConsumerMetrics
from shardline.consumer._resharding import ShardLineage
from shardline.consumer._settings import BatchHandler, ConsumerSettings, RecordHandler
from shardline.consumer._shard_run import GroupRuntime, ShardRun
from shardline.errors import ConfigurationError

if TYPE_CHECKING:  # annotations only: the Protocols cost nothing at import
    from shardline.protocols import KinesisReadClient, LambdaContext


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
        kinesis: KinesisReadClient | None = None,
        dlq: DeadLetterQueue | None = None,
        max_attempts: int = 3,
        checkpoint_every: int | None = None,
        checkpoint_interval: float = 5.0,
        time_margin: float = 2.0,
        multi_stream: bool = False,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = ConsumerSettings(
            group,
            max_attempts=max_attempts,
            checkpoint_every=checkpoint_every,
            checkpoint_interval=checkpoint_interval,
            time_margin=time_margin,
            multi_stream=multi_stream,
        )
        self.table = table
        self.metrics = ConsumerMetrics()
        self._lineage = ShardLineage(kinesis, table) if kinesis is not None else None
        self._dlq = dlq
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

    @property
    def group(self) -> str:
        """The consumer group's name."""
        return self.settings.group

    def process(
        self, event: Mapping[str, Any], context: LambdaContext | None
    ) -> dict[str, list[dict[str, str]]]:
        """Process a Lambda Kinesis event; the answer for ReportBatchItemFailures."""
        if self._record_handler is None and self._batch_handler is None:
            raise ConfigurationError(f"consumer group {self.group}: register a handler first")
        runtime = GroupRuntime(
            self.settings,
            self.table,
            self.metrics,
            self._lineage,
            self._dlq,
            self._clock,
            self._record_handler,
            self._batch_handler,
        )
        event_records = event.get("Records") or []
        by_shard: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
        for index, event_record in enumerate(event_records):
            by_shard.setdefault(stream_and_shard(event_record, index), []).append(event_record)
        failures: list[dict[str, str]] = []
        owner = getattr(context, "aws_request_id", None) or f"local-{uuid.uuid4()}"
        for (stream, shard_id), records in by_shard.items():
            failed_at = ShardRun(runtime, stream, shard_id, records, context, owner).run()
            if failed_at is not None:
                failures.append({"itemIdentifier": failed_at})
        return {"batchItemFailures": failures}
