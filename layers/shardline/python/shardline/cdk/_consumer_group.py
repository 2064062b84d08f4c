"""A consumer group: its function (the team's handler code), lease/checkpoint table, sinks, queues,
mapping and, with enhanced fan-out, its registered stream consumer."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from aws_cdk import Acknowledgment, Duration, Names, RemovalPolicy, Validations
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kinesis as kinesis
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_s3 as s3
from constructs import Construct

from shardline.aws_lambda import ConsumerEnvironment
from shardline.cdk import _group_rules as rules
from shardline.cdk._dead_letters import (
    QueueDestination,
    access_log_bucket,
    acknowledge_dead_letter_objects,
    dead_letter_bucket,
    dead_letter_queue,
    dead_letter_retention_seconds,
    guard_dead_letters,
)
from shardline.cdk._feature_flags import pin_feature_flags
from shardline.cdk._function import CodeSource, add_tags, python_function
from shardline.cdk._keys import grant_via, logs_key, retained_key
from shardline.cdk._layers import Layers
from shardline.cdk._nag import DEAD_LETTER_QUEUE, acknowledge_function
from shardline.cdk._signatures import shows_its_props
from shardline.cdk._sink import Sink
from shardline.cdk._stream import Stream
from shardline.cdk._tables import lease_table, table
from shardline.consumer._once import guard_ttl_seconds

LEASE_ACTIONS = ("dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem")
#: What Lambda's event-source mapping calls on the stream with the function's role, and what the
#: resharding probe calls (ListShards, GetShardIterator, GetRecords) — not the enhanced fan-out
#: actions (SubscribeToShard, DescribeStreamConsumer) nor ListStreams that `grant_read` adds.
STREAM_ACTIONS = (
    "kinesis:DescribeStream",
    "kinesis:DescribeStreamSummary",
    "kinesis:GetRecords",
    "kinesis:GetShardIterator",
    "kinesis:ListShards",
)
#: With enhanced fan-out, what Lambda calls on the group's registered consumer (and only on it).
CONSUMER_ACTIONS = ("kinesis:SubscribeToShard", "kinesis:DescribeStreamConsumer")
#: What each service needs of the group's key when the function calls it (never kms:Encrypt or
#: ReEncrypt*): SQS's SendMessage to an encrypted queue GenerateDataKey and Decrypt, S3's PutObject
#: with SSE-KMS GenerateDataKey, DynamoDB Decrypt of the table key.
KEY_ACTIONS_VIA = {
    "sqs": ("kms:Decrypt", "kms:GenerateDataKey"),
    "s3": ("kms:GenerateDataKey",),
    "dynamodb": ("kms:Decrypt",),
}


@shows_its_props
class ConsumerGroup(Construct):
    """Everything one consumer group owns; it reads only its stream and writes only its own.

    `code` is the team's handler (a folder, or any `lambda_.Code`; `handler` in it); `sinks` the
    tables it writes (`Sink`: the team's own, any key schema, or created by the group), whose
    actions it is granted and nothing more; none for a group that writes elsewhere (grant that on
    `group.function`). The mapping keeps shardline's safe defaults (bisect, partial batch responses,
    on-failure queue, record age below the retention) and its refusals, which hold after
    `mapping_props` too. `enhanced_fan_out` registers a stream consumer for the group alone.

    The group has its own KMS key (`key`) for its tables, queues and dead-letter bucket: another
    group's role cannot decrypt them. A `log_key` or `access_logs` bucket not given is created."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        name: str,
        stream: Stream,
        layers: Layers,
        code: CodeSource,
        handler: str = "app.handler",
        sinks: Sequence[Sink] = (),
        enhanced_fan_out: bool = False,
        consumer_name: str | None = None,
        starting_position: str = "TRIM_HORIZON",
        starting_position_timestamp: float | datetime | None = None,
        batch_size: int = 100,
        batching_window_seconds: int = 1,
        parallelization: int = 1,
        retry_attempts: int = -1,
        max_record_age_seconds: int | None = None,
        max_attempts: int = 3,
        checkpoint_interval_seconds: float = 5.0,
        failure_detail: str = "fingerprint",
        time_margin_seconds: float = 2.0,
        memory_mb: int = 512,
        timeout_seconds: int = 60,
        reserved_concurrency: int | None = None,
        sink_ttl_days: int | None = None,
        dead_letter_readers: Sequence[str] = (),
        log_retention_days: int = 30,
        log_key: kms.IKey | None = None,
        access_logs: s3.IBucket | None = None,
        removal_policy: RemovalPolicy = RemovalPolicy.RETAIN,
        dead_letters_removal_policy: RemovalPolicy = RemovalPolicy.RETAIN,
        key_alias: str | None = None,
        metrics_namespace: str = "shardline",
        tags: Mapping[str, str] | None = None,
        function_props: Mapping[str, Any] | None = None,
        mapping_props: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        pin_feature_flags(self)
        where = rules.construct_prop("ConsumerGroup", name)
        if not rules.CONSUMER_NAME.match(name) or len(name) > 64:
            raise ValueError(f"ConsumerGroup {name!r}: name: must be 1-64 letters, digits, '_', '.' or '-'")
        self.name = name
        self.stream = stream
        self.metrics_namespace = metrics_namespace
        self.timeout_seconds = timeout_seconds
        for key, prop, value, low, high in (
            ("batchSize", "batch_size", batch_size, 1, 10000),
            ("batchingWindowSeconds", "batching_window_seconds", batching_window_seconds, 0, 300),
            ("maxAttempts", "max_attempts", max_attempts, rules.MIN_MAX_ATTEMPTS, 100),
            ("retryAttempts", "retry_attempts", retry_attempts, -1, 10000),
            (
                "checkpointIntervalSeconds",
                "checkpoint_interval_seconds",
                checkpoint_interval_seconds,
                0.1,
                900,
            ),
            ("memoryMb", "memory_mb", memory_mb, 128, 10240),
            ("timeoutSeconds", "timeout_seconds", timeout_seconds, 3, 900),
            ("timeMarginSeconds", "time_margin_seconds", time_margin_seconds, 0.1, timeout_seconds - 1),
        ):
            if key == "maxAttempts":
                rules.check_max_attempts(where, max_attempts)
            rules.within(where, key, prop, value, low, high)
        rules.check_failure_detail(where, failure_detail)
        self.max_attempts = max_attempts
        self.key = retained_key(
            self, "Key", description=f"shardline consumer group {name}: tables, queues, dead letters",
            alias=key_alias,
        )  # fmt: skip
        self.leases = lease_table(self, "Leases", removal_policy=removal_policy, key=self.key)
        self.sinks: tuple[dynamodb.ITable, ...] = tuple(
            self._sink_table(sink, index, removal_policy) for index, sink in enumerate(sinks)
        )
        self.sink: dynamodb.ITable | None = self.sinks[0] if self.sinks else None
        self._sink_specs = tuple(sinks)  # what each table's handler writes: its grants
        # shardline's own DLQ (whole poison records) and the mapping's on-failure destination.
        self.dead_letters = dead_letter_queue(
            self, "DeadLetters", key=self.key, removal_policy=dead_letters_removal_policy
        )
        self.failures = dead_letter_queue(
            self, "MappingFailures", key=self.key, removal_policy=dead_letters_removal_policy
        )
        #: Where its dead-letter bucket's access is logged, and what its logs are encrypted with:
        #: given, or made here — pass them to the app's other constructs to share them.
        self.access_logs = access_logs if access_logs is not None else access_log_bucket(self, "AccessLogs")
        self.dead_letter_bucket = dead_letter_bucket(
            self, "DeadLetterBucket", key=self.key, prefix=f"{name}/",
            removal_policy=dead_letters_removal_policy, access_logs=self.access_logs,
        )  # fmt: skip
        if log_key is None:
            log_key = logs_key(
                self, "LogsKey", description=f"shardline consumer group {name}: logs", alias=None
            )
        self.log_key = log_key
        #: How long a client-id guard must live: a copy is read from the stream until its retention
        #: ends, and redriven from the DLQ until the dead letter's retention ends (+ a day's margin).
        self.guard_ttl_seconds = guard_ttl_seconds(
            stream.retention_seconds, dead_letter_retention_seconds(self.dead_letters)
        )
        declarations = tuple(
            declaration
            for sink, table_ in zip(sinks, self.sinks, strict=True)
            if (declaration := sink.declaration(table_.table_name)) is not None
        )
        # Checked before the function: where the mapping starts is in the function's environment.
        mapping = self._mapping_props(
            where,
            {
                "starting_position": starting_position,
                "starting_position_timestamp": starting_position_timestamp,
                "batch_size": batch_size,
                "max_batching_window": Duration.seconds(batching_window_seconds),
                "parallelization_factor": parallelization,
                "retry_attempts": retry_attempts,
                "max_record_age": Duration.seconds(
                    rules.default_max_record_age(stream.retention_hours)
                    if max_record_age_seconds is None
                    else max_record_age_seconds
                ),
                "bisect_batch_on_error": True,
                "report_batch_item_failures": True,
                "on_failure": QueueDestination(self.failures),
            },
            mapping_props or {},
        )
        environment = ConsumerEnvironment(
            group=name,
            lease_table=self.leases.table_name,
            sink_table=self.sink.table_name if self.sink is not None else None,
            sinks=declarations,
            dlq_url=self.dead_letters.queue_url,
            dlq_bucket=self.dead_letter_bucket.bucket_name,
            max_attempts=max_attempts,
            checkpoint_interval=checkpoint_interval_seconds,
            time_margin=time_margin_seconds,
            failure_detail=failure_detail,
            sink_ttl_days=sink_ttl_days,
            guard_ttl_seconds=self.guard_ttl_seconds,
            starting_position=mapping["starting_position"],
            starting_position_timestamp=mapping["starting_position_timestamp"],
            max_record_age_seconds=self.max_record_age_seconds,
        )
        self.function = python_function(
            self,
            "Function",
            owner=f"ConsumerGroup {name!r}",
            code=code,
            handler=handler,
            layers=layers,
            memory_mb=memory_mb,
            timeout_seconds=timeout_seconds,
            reserved_concurrency=rules.group_reservation(stream.shards, parallelization)
            if reserved_concurrency is None
            else reserved_concurrency,
            metrics_namespace=metrics_namespace,
            log_key=log_key,
            log_retention_days=log_retention_days,
            log_removal=removal_policy,
            environment={"POWERTOOLS_SERVICE_NAME": f"shardline-{name}", **environment.to_environ()},
            contract=(
                *ConsumerEnvironment.VARIABLES,
                "POWERTOOLS_SERVICE_NAME",
                "POWERTOOLS_METRICS_NAMESPACE",
            ),
            function_props=function_props,
        )
        self.consumer = (
            register_consumer(self, stream, where, consumer_name or name) if enhanced_fan_out else None
        )
        self._grant()
        assert self.function.role is not None
        guard_dead_letters(
            self.function.role.role_arn, list(dead_letter_readers), (self.dead_letters, self.failures),
            self.dead_letter_bucket,
        )  # fmt: skip
        self.mapping = self._mapping(mapping)
        self._acknowledge()
        add_tags(self, tags)

    def _sink_table(self, sink: Sink, index: int, removal_policy: RemovalPolicy) -> dynamodb.ITable:
        if sink.table is not None:
            return sink.table
        assert sink.partition_key is not None
        return table(
            self, "Sink" if index == 0 else f"Sink{index + 1}", sink.partition_key, sink.sort_key,
            removal_policy=removal_policy, key=self.key, ttl=sink.time_to_live_attribute,
            table_props=sink.table_props,
        )  # fmt: skip

    def _mapping_props(
        self, where: rules.Where, defaults: dict[str, Any], overrides: Mapping[str, Any]
    ) -> dict[str, Any]:
        """The mapping's props, checked: `defaults` with `overrides` over them; the starting
        position a name, its timestamp epoch seconds, the record age in seconds."""
        if "event_source_arn" in overrides:
            raise ValueError(
                f"{where('stream', 'mapping_props')}.event_source_arn: the group reads its `stream` "
                "(or its enhanced fan-out consumer); give the stream instead"
            )
        props = {**defaults, **overrides}
        position = props["starting_position"]
        position = position if isinstance(position, str) else position.name
        moment = props.get("starting_position_timestamp")
        if isinstance(moment, datetime):
            if moment.tzinfo is None:
                raise ValueError(
                    f"{where('startingPositionTimestamp', 'starting_position_timestamp')}: a datetime "
                    "with its offset (tzinfo), not a naive one"
                )
            moment = moment.timestamp()
        rules.check_starting_position(where, position, moment)
        rules.check_parallelization(where, props.get("parallelization_factor") or 1)
        retry = props.get("retry_attempts")
        retry = -1 if retry is None else retry
        rules.check_retry_attempts(where, retry, self.max_attempts)
        age = props["max_record_age"]
        age_seconds = int(age.to_seconds() if isinstance(age, Duration) else age)
        rules.within(
            where, "maxRecordAgeSeconds", "max_record_age_seconds", age_seconds, 60, rules.MAX_RECORD_AGE_S
        )
        rules.check_max_record_age(where, age_seconds, self.stream.retention_hours)
        self.max_record_age_seconds = age_seconds
        if (
            props.get("report_batch_item_failures") is not True
            or props.get("bisect_batch_on_error") is not True
        ):
            raise ValueError(
                f"{where('mapping', 'mapping_props')}: report_batch_item_failures and bisect_batch_on_error "
                "must stay true: shardline answers a batch with the records that failed, and finds a poison "
                "record by running it alone"
            )
        return {
            **props,
            "starting_position": position,
            "starting_position_timestamp": moment,
            "retry_attempts": retry,
        }

    def _mapping(self, props: Mapping[str, Any]) -> lambda_.EventSourceMapping:
        """The mapping (`_mapping_props`), as KinesisEventSource would make it (same construct id,
        so the same logical id and no replacement), without its grants: grant_read (fan-out
        actions, ListStreams) and the on-failure queue's grant_send_messages (kms:Encrypt,
        ReEncrypt*, GetQueueAttributes/Url)."""
        retry = props["retry_attempts"]
        source = self.stream.stream_arn if self.consumer is None else self.consumer.attr_consumer_arn
        mapping = self.function.add_event_source_mapping(
            f"KinesisEventSource:{Names.node_unique_id(self.stream.stream.node)}",
            **{
                **props,
                "event_source_arn": source,
                "starting_position": lambda_.StartingPosition[props["starting_position"]],
                "max_record_age": Duration.seconds(self.max_record_age_seconds),
                "retry_attempts": None if retry == -1 else retry,
            },
        )
        if retry == -1:  # CDK's construct takes 0..10000; CloudFormation also -1 (forever)
            cfn = mapping.node.default_child
            assert isinstance(cfn, lambda_.CfnEventSourceMapping)
            cfn.add_property_override("MaximumRetryAttempts", -1)
        return mapping

    def _grant(self) -> None:
        """Exactly what the function's code and Lambda (for its mapping) call, on the group's own."""
        role = self.function
        # Exactly what shardline and the sinks need (TransactWriteItems is authorised per item).
        self.leases.grant(role, *LEASE_ACTIONS)
        for spec, sink in zip(self._sink_specs, self.sinks, strict=True):
            spec.grant(sink, role)  # what its declared writes call (`Sink.writes`), nothing more
            if sink.encryption_key is not None and sink.encryption_key is not self.key:
                grant_via(role, "dynamodb", ["kms:Decrypt"], sink.encryption_key)
        # Its DLQ (the code's send_message) and the mapping's on-failure queue (Lambda, with this role).
        role.add_to_role_policy(
            iam.PolicyStatement(
                actions=["sqs:SendMessage"], resources=[self.dead_letters.queue_arn, self.failures.queue_arn]
            )
        )
        # Dead letters over SQS's 1 MiB: PutObject only (no read, delete or tagging).
        role.add_to_role_policy(
            iam.PolicyStatement(
                actions=["s3:PutObject"], resources=[self.dead_letter_bucket.arn_for_objects("*")]
            )
        )
        # The group's key, only through the service that holds the data.
        for service, actions in KEY_ACTIONS_VIA.items():
            grant_via(role, service, list(actions), self.key)
        role.add_to_role_policy(
            iam.PolicyStatement(actions=list(STREAM_ACTIONS), resources=[self.stream.stream_arn])
        )
        if self.consumer is not None:  # Lambda reads through the group's own consumer
            role.add_to_role_policy(
                iam.PolicyStatement(
                    actions=list(CONSUMER_ACTIONS), resources=[self.consumer.attr_consumer_arn]
                )
            )
        if self.stream.key is not None:  # reading an encrypted stream (the mapping and the probe)
            grant_via(role, "kinesis", ["kms:Decrypt"], self.stream.key)

    def _acknowledge(self) -> None:
        """The findings this group's own choices raise, on its own resources."""
        acknowledge_function(self.function)
        for queue in (self.dead_letters, self.failures):
            for rule, reason in DEAD_LETTER_QUEUE.items():
                Validations.of(queue).acknowledge(Acknowledgment(id=rule, reason=reason))
        acknowledge_dead_letter_objects(self, self.dead_letter_bucket)


def register_consumer(
    scope: Construct, stream: Stream, where: rules.Where, consumer_name: str
) -> kinesis.CfnStreamConsumer:
    """A group's own enhanced fan-out consumer on its stream (`Consumer` in `scope`). Kinesis creates
    at most 5 at a time: each waits for the stream's previous one, so a stack with many is not refused."""
    rules.check_consumer_name(where, consumer_name)
    registered = [c.consumer_name for c in stream.consumers]
    rules.check_stream_consumers(where, consumer_name, registered)
    consumer = kinesis.CfnStreamConsumer(
        scope, "Consumer", consumer_name=consumer_name, stream_arn=stream.stream_arn
    )
    if stream.consumers:
        consumer.add_dependency(stream.consumers[-1])
    stream.consumers.append(consumer)
    return consumer
