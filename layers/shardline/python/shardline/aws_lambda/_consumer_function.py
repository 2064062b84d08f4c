"""Lambda adapter for a consumer group: built from the environment at the first invocation,
reused while the container is warm, its metrics published as EMF after every invocation.

    function = ConsumerFunction(lambda sink_table: partial(my_handler, sink_table))
    handler = function.handler   # the Lambda entry point: Logger, Tracer and EMF Metrics wired

    handler = ConsumerFunction(handler=forward_to_queue).handler   # a group without a sink table

Environment: `ConsumerEnvironment` (SHARDLINE_GROUP, LEASE_TABLE, SINK_TABLE, DLQ_URL, DLQ_BUCKET,
SHARDLINE_SINKS, MAX_ATTEMPTS, CHECKPOINT_INTERVAL, TIME_MARGIN, FAILURE_DETAIL,
SHARDLINE_STARTING_POSITION(_TIMESTAMP), SHARDLINE_MAX_RECORD_AGE_SECONDS; SINK_TTL_DAYS is the
handler's to read), and POWERTOOLS_METRICS_NAMESPACE ("shardline").
Clients honour AWS_ENDPOINT_URL_<SERVICE>, as boto3 does, and time out within TIME_MARGIN
(`client_config`), so shardline's own calls never outlast the invocation.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from shardline.aws_lambda._emf import publish_metrics
from shardline.aws_lambda._environment import ConsumerEnvironment
from shardline.consumer._consumer import KinesisConsumer
from shardline.consumer._dead_letters import DeadLetterQueue
from shardline.consumer._leases import LeaseTable
from shardline.consumer._settings import BatchHandler, RecordHandler, client_config
from shardline.errors import ConfigurationError


class ConsumerFunction:
    """One consumer group's Lambda state: clients, the consumer, the last metrics published, and
    `handler`, the entry point with Powertools' Logger, Tracer and Metrics around `handle`."""

    def __init__(
        self,
        handler_for: Callable[[str], RecordHandler] | None = None,
        *,
        batch_handler_for: Callable[[str], BatchHandler] | None = None,
        handler: RecordHandler | None = None,
        batch_handler: BatchHandler | None = None,
    ) -> None:
        """Exactly one of: `handler_for(sink table name)` giving the record handler, or
        `batch_handler_for(...)` the batch handler (`KinesisConsumer.batch_handler`) — for a group
        whose environment names its sink table (SINK_TABLE) — or the `handler` or `batch_handler`
        itself, which needs no sink table."""
        from aws_lambda_powertools import Logger, Metrics, Tracer  # an adapter: the core never imports it

        given = [h for h in (handler_for, batch_handler_for, handler, batch_handler) if h is not None]
        if len(given) != 1:
            raise ConfigurationError(
                "ConsumerFunction: give exactly one of handler_for, batch_handler_for, handler, batch_handler"
            )
        self._handler_for = handler_for  # sink table name -> record handler
        self._batch_handler_for = batch_handler_for
        self._handler = handler
        self._batch_handler = batch_handler
        self.logger = Logger()
        self.tracer = Tracer()
        self.metrics = Metrics()
        self.reset()

        @self.logger.inject_lambda_context
        @self.tracer.capture_lambda_handler
        @self.metrics.log_metrics(capture_cold_start_metric=True)
        def entry(event: dict[str, Any], context: Any) -> dict[str, list[dict[str, str]]]:
            """Kinesis event -> {"batchItemFailures": [...]}; this invocation's metrics as EMF."""
            self.logger.append_keys(consumer_group=os.environ.get("SHARDLINE_GROUP"))
            return self.handle(event, context, self.metrics)

        self.handler = entry

    def reset(self) -> None:
        """Forget the warm state (tests do this between cases)."""
        self.clients: dict[str, Any] = {}
        self.consumer: KinesisConsumer | None = None
        self.published: dict[str, Any] | None = None

    def client(self, service: str) -> Any:
        if service not in self.clients:
            import boto3  # in the Lambda runtime; imported on first use, not at cold start

            margin = ConsumerEnvironment.from_environ().time_margin
            self.clients[service] = boto3.client(service, config=client_config(margin))
        return self.clients[service]

    def get(self) -> KinesisConsumer:
        """The consumer, built from the environment on first use."""
        if self.consumer is None:
            env = ConsumerEnvironment.from_environ()
            consumer = KinesisConsumer(
                env.group,
                LeaseTable(self.client("dynamodb"), env.lease_table),
                kinesis=self.client("kinesis"),
                dlq=self._dead_letters(env),
                max_attempts=env.max_attempts,
                checkpoint_interval=env.checkpoint_interval,
                time_margin=env.time_margin,
                failure_detail=env.failure_detail,
                starting_position=env.starting_position,
                starting_position_timestamp=env.starting_position_timestamp,
                max_record_age=env.max_record_age_seconds,
            )
            if self._handler is not None:
                consumer.handler(self._handler)
            elif self._batch_handler is not None:
                consumer.batch_handler(self._batch_handler)
            elif self._handler_for is not None:
                consumer.handler(self._handler_for(_sink_table(env)))
            else:
                assert self._batch_handler_for is not None
                consumer.batch_handler(self._batch_handler_for(_sink_table(env)))
            self.consumer = consumer
        return self.consumer

    def _dead_letters(self, env: ConsumerEnvironment) -> DeadLetterQueue | None:
        if not env.dlq_url:
            return None
        if env.dlq_bucket is None:
            return DeadLetterQueue(self.client("sqs"), env.dlq_url)
        return DeadLetterQueue(self.client("sqs"), env.dlq_url, s3=self.client("s3"), bucket=env.dlq_bucket)

    def handle(self, event: dict[str, Any], context: Any, metrics: Any) -> dict[str, list[dict[str, str]]]:
        """Process the event; publish this invocation's consumer metrics (ConsumerGroup dimension)."""
        consumer = self.get()
        metrics.namespace = os.environ.get("POWERTOOLS_METRICS_NAMESPACE", "shardline")
        metrics.add_dimension(name="ConsumerGroup", value=consumer.group)
        try:
            return consumer.process(event, context)
        finally:
            snapshot = consumer.metrics.snapshot()
            publish_metrics(metrics, snapshot, since=self.published)
            self.published = snapshot


def _sink_table(env: ConsumerEnvironment) -> str:
    """The sink table a `handler_for` is given: SINK_TABLE must name it."""
    if env.sink_table is None:
        raise ConfigurationError(
            f"consumer group {env.group}: SINK_TABLE is not set (the group has no sink table): "
            "give ConsumerFunction the handler itself (handler= or batch_handler=), not handler_for"
        )
    return env.sink_table
