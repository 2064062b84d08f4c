"""The stack of this repository's app: the public constructs (`Stream`, `Layers`, `ProducerApi`,
`ConsumerGroup` or `WorkerGroup` per consumer group, `Monitoring`) composed from the pipeline
configuration, with the keys and the access-log bucket they share."""

from __future__ import annotations

from typing import Any

from aws_cdk import CfnOutput, RemovalPolicy, Stack, Tags
from aws_cdk import aws_cloudwatch_actions as actions
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_sns as sns
from constructs import Construct

from shardline.cdk._config import ConsumerGroupConfig, PipelineConfig, StreamConfig, logical_id
from shardline.cdk._consumer_group import ConsumerGroup
from shardline.cdk._dead_letters import access_log_bucket
from shardline.cdk._feature_flags import pin_feature_flags
from shardline.cdk._keys import alarm_topic_key, logs_key
from shardline.cdk._layers import Layers
from shardline.cdk._monitoring import Monitoring
from shardline.cdk._producer_api import ProducerApi
from shardline.cdk._signatures import shows_its_props
from shardline.cdk._sink import Sink
from shardline.cdk._stream import Stream
from shardline.cdk._tables import EXAMPLE_SINK_KEYS, attribute
from shardline.cdk._worker_group import WorkerGroup
from shardline.consumer._once import EXPIRES_AT_ATTRIBUTE

#: What the repository's example sinks hold (`shardline.aws_lambda.SinkDeclaration`), and what their
#: handlers write (`Sink.writes`: the role gets exactly those writes' actions): functions/event_sink
#: returns idempotent puts, functions/key_counter Updates (its counts) and `once` guards.
EXAMPLE_SINK_HOLDS: dict[str, dict[str, Any]] = {
    "events": {"holds": "records", "id_attribute": "recordId", "writes": ("idempotent_put",)},
    "counter": {
        "holds": "counts",
        "key_attribute": "partitionKey",
        "count_attribute": "count",
        "writes": ("Update", "once"),
    },
}


@shows_its_props
class PipelineStack(Stack):
    """Everything `cdk deploy` ships, built from the pipeline configuration."""

    def __init__(self, scope: Construct, construct_id: str, *, config: PipelineConfig, **kwargs: Any) -> None:
        super().__init__(scope, construct_id, **kwargs)
        # The flags the constructs were built and tested with, whatever the app's own cdk.json says
        # (set before any child exists, as CDK requires).
        pin_feature_flags(self)
        self.config = config
        removal = RemovalPolicy.RETAIN if config.retain_data else RemovalPolicy.DESTROY
        # The alarm topic's key, and only its. Each consumer group has its own key for its data
        # (`ConsumerGroup.key`); every log group of the stack shares `logs_key`.
        self.key = alarm_topic_key(self, "Key", alias=f"alias/{config.prefix}/alarms")
        self.logs_key = logs_key(
            self, "LogsKey", description="shardline log groups", alias=f"alias/{config.prefix}/logs"
        )
        # S3 server access logs of every group's dead-letter bucket, one prefix per group.
        self.access_logs = access_log_bucket(self, "AccessLogs")
        self.layers = Layers(self, "Layers")
        self.streams = {s.name: self._stream(s, removal) for s in config.streams}
        api = config.api
        self.api = ProducerApi(
            self,
            "Producer",
            streams=self.streams,
            layers=self.layers,
            auth=api.auth,
            throttle_rate=api.throttle_rate,
            throttle_burst=api.throttle_burst,
            max_records_per_request=api.max_records_per_request,
            max_body_bytes=api.max_body_bytes,
            throttled_give_up_seconds=api.throttled_give_up_seconds,
            reserved_concurrency=api.reserved_concurrency,
            allowed_principals=api.allowed_principals,
            allowed_organization=api.allowed_organization,
            clients=api.clients,
            per_caller_rate=api.per_caller_rate,
            log_retention_days=config.log_retention_days,
            log_key=self.logs_key,
            removal_policy=removal,
            api_name=f"{config.prefix}-producer",
            metrics_namespace=config.metrics_namespace,
            key_alias=f"alias/{config.prefix}/api/ids",
        )
        self.groups: list[ConsumerGroup | WorkerGroup] = [
            self._group(group, removal) if group.workers is None else self._workers(group, removal)
            for group in config.consumer_groups
        ]
        alarms = config.alarms
        self.monitoring = Monitoring(
            self,
            "Monitoring",
            streams=list(self.streams.values()),
            api=self.api,
            groups=self.groups,
            key=self.key,
            dashboard_name=config.prefix,
            alarms_enabled=alarms.enabled,
            emails=alarms.emails,
            # The team's existing topics (a pager, chat) get every alarm and OK beside the stack's own.
            alarm_actions=[
                actions.SnsAction(sns.Topic.from_topic_arn(self, f"ExistingAlarmTopic{index}", arn))
                for index, arn in enumerate(alarms.topic_arns)
            ],
        )
        # Cost allocation: activate these tags in Billing to see each stage's bill.
        Tags.of(self).add("project", config.stack_name)
        Tags.of(self).add("stage", config.stage)
        self._outputs()

    def _stream(self, s: StreamConfig, removal: RemovalPolicy) -> Stream:
        """A configured stream: created under the stage's name, or an existing one by its ARN."""
        if s.arn is not None:
            return Stream.from_stream_arn(
                self, f"Stream-{s.name}", s.arn, key=s.key_arn, route=s.name,
                retention_hours=s.retention_hours, max_record_size_kib=s.max_record_size_kib,
                explicit_hash_keys=s.explicit_hash_keys,
            )  # fmt: skip
        return Stream(
            self,
            f"Stream-{s.name}",
            stream_name=f"{self.config.prefix}-{s.name}",
            route=s.name,
            shards=s.shards,
            retention_hours=s.retention_hours,
            encryption="customer-managed" if s.encryption == "customer-managed" else "aws-managed",
            max_record_size_kib=s.max_record_size_kib,
            explicit_hash_keys=s.explicit_hash_keys,
            removal_policy=removal,
        )

    def _group(self, group: ConsumerGroupConfig, removal: RemovalPolicy) -> ConsumerGroup:
        return ConsumerGroup(
            self,
            f"Group-{group.name}",
            name=group.name,
            stream=self.streams[group.stream],
            layers=self.layers,
            # A relative folder is the app's (code_root).
            code=self.config.code_root / group.handler,
            sinks=[_sink(group)],
            enhanced_fan_out=group.enhanced_fan_out,
            starting_position=group.starting_position,
            starting_position_timestamp=group.starting_position_timestamp,
            batch_size=group.batch_size,
            batching_window_seconds=group.batching_window_seconds,
            parallelization=group.parallelization,
            retry_attempts=group.retry_attempts,
            max_record_age_seconds=group.max_record_age_seconds,
            max_attempts=group.max_attempts,
            checkpoint_interval_seconds=group.checkpoint_interval_seconds,
            failure_detail=group.failure_detail,
            memory_mb=group.memory_mb,
            timeout_seconds=group.timeout_seconds,
            reserved_concurrency=group.reserved_concurrency,
            sink_ttl_days=group.sink_ttl_days,
            dead_letter_readers=group.dead_letter_readers,
            log_retention_days=self.config.log_retention_days,
            log_key=self.logs_key,
            access_logs=self.access_logs,
            removal_policy=removal,
            key_alias=f"alias/{self.config.prefix}/{group.name}",
            metrics_namespace=self.config.metrics_namespace,
        )

    def _workers(self, group: ConsumerGroupConfig, removal: RemovalPolicy) -> WorkerGroup:
        """A group driven by workers: shardline's image with the group's handler folder (in
        `code_root`), staged at synth, or the one a previous stage built, by its digest
        (`workers.image`)."""
        workers = group.workers
        assert workers is not None
        return WorkerGroup(
            self,
            f"Group-{group.name}",
            name=group.name,
            stream=self.streams[group.stream],
            code=None if workers.image else self.config.code_root / group.handler,
            image_uri=workers.image,
            egress=workers.egress,
            handler_object=workers.handler_object,
            sinks=[_sink(group)],
            enhanced_fan_out=group.enhanced_fan_out,
            worker_count=workers.count,
            cpu=workers.cpu,
            memory_mb=workers.memory_mb,
            lease_duration_seconds=workers.lease_duration_seconds,
            max_leases_per_worker=workers.max_leases_per_worker,
            starting_position=group.starting_position,
            max_attempts=group.max_attempts,
            checkpoint_interval_seconds=group.checkpoint_interval_seconds,
            failure_detail=group.failure_detail,
            sink_ttl_days=group.sink_ttl_days,
            dead_letter_readers=group.dead_letter_readers,
            log_retention_days=self.config.log_retention_days,
            log_key=self.logs_key,
            access_logs=self.access_logs,
            removal_policy=removal,
            key_alias=f"alias/{self.config.prefix}/{group.name}",
            metrics_namespace=self.config.metrics_namespace,
        )

    def _outputs(self) -> None:
        """What an operator needs after `cdk deploy`: where to call, what to watch, where failures go."""
        CfnOutput(
            self,
            "ApiUrl",
            value=self.api.api.url_for_path("/streams"),
            description="POST {url}/{stream}/records",
        )
        if self.monitoring.topic is not None:
            CfnOutput(
                self, "AlarmTopic", value=self.monitoring.topic.topic_arn, description="subscribe to be paged"
            )
        for name, stream in self.streams.items():
            CfnOutput(
                self,
                f"Stream{logical_id(name)}",
                value=stream.stream.stream_name,
                description=f"stream '{name}'",
            )
        for group in self.groups:
            name = logical_id(group.name)
            CfnOutput(self, f"{name}LeaseTable", value=group.leases.table_name)
            if group.sink is not None:
                CfnOutput(self, f"{name}SinkTable", value=group.sink.table_name)
            CfnOutput(
                self,
                f"{name}DeadLetters",
                value=group.dead_letters.queue_url,
                description="whole poison records",
            )
            if isinstance(group, WorkerGroup):
                CfnOutput(self, f"{name}WorkerService", value=group.service.service_name)
                CfnOutput(self, f"{name}WorkerCluster", value=group.cluster.cluster_name)
            else:
                CfnOutput(self, f"{name}MappingFailures", value=group.failures.queue_url)


def _sink(group: ConsumerGroupConfig) -> Sink:
    """The group's sink table from the configuration: an example's key schema (`events`, `counter`)
    and what it holds, or the group's own (`sink: {partitionKey, sortKey, holds, ...}`); each keeps a
    guard item per client id (`shardline.consumer.once`), which expires with its `expiresAt`."""
    partition: dynamodb.Attribute
    sort: dynamodb.Attribute | None
    if group.sink_keys is None:
        keys = EXAMPLE_SINK_KEYS[group.sink]
        partition, sort = attribute(keys[0]), (attribute(keys[1]) if keys[1] else None)
        declared: dict[str, Any] = EXAMPLE_SINK_HOLDS[group.sink]
    else:
        partition = attribute(group.sink_keys[0])
        sort = attribute(group.sink_keys[1]) if group.sink_keys[1] else None
        declared = {"holds": group.sink_holds, **dict(group.sink_attributes)}
        if group.sink_writes is not None:
            declared["writes"] = group.sink_writes
    return Sink.create(partition, sort, time_to_live_attribute=EXPIRES_AT_ATTRIBUTE, **declared)
