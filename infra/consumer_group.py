"""A consumer group: its function, lease/checkpoint table, sink table, queues and mapping."""

from __future__ import annotations

from aws_cdk import Acknowledgment, Duration, RemovalPolicy, Stack, Validations
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_lambda_event_sources as sources
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from infra.config import ConsumerGroupConfig, PipelineConfig
from infra.function import python_function
from infra.layers import Layers
from infra.stream import Stream
from infra.tables import lease_table, sink_table
from shardline.aws_lambda import ConsumerEnvironment

LEASE_ACTIONS = ("dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem")
# DescribeTable: the consumer reads the sink's key schema once, to tell a Put and an Update of one item.
SINK_ACTIONS = (
    "dynamodb:PutItem",
    "dynamodb:UpdateItem",
    "dynamodb:ConditionCheckItem",
    "dynamodb:DescribeTable",
)


class ConsumerGroup(Construct):
    """Everything one consumer group owns; it reads only its stream and writes only its own."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: ConsumerGroupConfig,
        stream: Stream,
        layers: Layers,
        key: kms.IKey,
        pipeline: PipelineConfig,
    ) -> None:
        super().__init__(scope, construct_id)
        self.config = config
        self.stream = stream
        self.leases = lease_table(self, "Leases", retain=pipeline.retain_data)
        self.sink = sink_table(self, "Sink", config.sink, retain=pipeline.retain_data)
        # shardline's own DLQ (whole poison records) and the mapping's on-failure destination.
        self.dead_letters = self._queue("DeadLetters", key)
        self.failures = self._queue("MappingFailures", key)
        self.dead_letter_bucket = self._bucket("DeadLetterBucket", key)
        self.function = python_function(
            self,
            "Function",
            folder=config.handler,
            layers=layers,
            memory_mb=config.memory_mb,
            timeout_seconds=config.timeout_seconds,
            reserved_concurrency=config.reserved_concurrency,
            pipeline=pipeline,
            environment={
                "POWERTOOLS_SERVICE_NAME": f"shardline-{config.name}",
                **ConsumerEnvironment(
                    group=config.name,
                    lease_table=self.leases.table_name,
                    sink_table=self.sink.table_name,
                    dlq_url=self.dead_letters.queue_url,
                    dlq_bucket=self.dead_letter_bucket.bucket_name,
                    max_attempts=config.max_attempts,
                    checkpoint_interval=config.checkpoint_interval_seconds,
                    sink_ttl_days=config.sink_ttl_days,
                ).to_environ(),
            },
        )
        # Exactly what shardline and the example sinks do (TransactWriteItems is authorised per item).
        self.leases.grant(self.function, *LEASE_ACTIONS)
        self.sink.grant(self.function, *SINK_ACTIONS)
        self.dead_letters.grant_send_messages(self.function)
        # Dead letters over SQS's 1 MiB: PutObject only (no read, delete or tagging), and the key to encrypt.
        self.function.add_to_role_policy(
            iam.PolicyStatement(
                actions=["s3:PutObject"], resources=[self.dead_letter_bucket.arn_for_objects("*")]
            )
        )
        key.grant_encrypt(self.function)
        bucket_id = Stack.of(self).get_logical_id(self.dead_letter_bucket.node.default_child)
        for rule, reason in (
            (
                f"AwsSolutions::AwsSolutions-IAM5[Resource::<{bucket_id}.Arn>/*]",
                "PutObject on the group's own dead-letter bucket: one object per dead letter, by its id.",
            ),
            (
                "AwsSolutions::AwsSolutions-S1",
                "The dead-letter bucket is written only by the group's function; CloudTrail data events are "
                "the audit path, and its objects expire with the queue.",
            ),
        ):
            Validations.of(self).acknowledge(Acknowledgment(id=rule, reason=reason))
        stream.stream.grant_read(self.function)  # also the ListShards/GetRecords the probe needs
        self.mapping = sources.KinesisEventSource(
            stream.stream,
            starting_position=lambda_.StartingPosition[config.starting_position],
            batch_size=config.batch_size,
            max_batching_window=Duration.seconds(config.batching_window_seconds),
            parallelization_factor=config.parallelization,
            retry_attempts=None if config.retry_attempts == -1 else config.retry_attempts,
            max_record_age=Duration.seconds(config.max_record_age_seconds),
            bisect_batch_on_error=True,
            report_batch_item_failures=True,
            on_failure=sources.SqsDlq(self.failures),
        )
        self.function.add_event_source(self.mapping)
        if config.retry_attempts == -1:  # CDK's construct takes 0..10000; CloudFormation also -1 (forever)
            for child in self.function.node.children:
                if isinstance(child, lambda_.EventSourceMapping):
                    child.node.default_child.add_property_override("MaximumRetryAttempts", -1)

    def _bucket(self, construct_id: str, key: kms.IKey) -> s3.Bucket:
        """Dead letters too large for SQS, whole; they expire with the queue's retention."""
        return s3.Bucket(
            self,
            construct_id,
            encryption=s3.BucketEncryption.KMS,
            encryption_key=key,
            bucket_key_enabled=True,
            enforce_ssl=True,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
            lifecycle_rules=[s3.LifecycleRule(expiration=Duration.days(14))],
            removal_policy=RemovalPolicy.RETAIN,
        )

    def _queue(self, construct_id: str, key: kms.IKey) -> sqs.Queue:
        return sqs.Queue(
            self,
            construct_id,
            encryption=sqs.QueueEncryption.KMS,
            encryption_master_key=key,
            enforce_ssl=True,
            retention_period=Duration.days(14),
            removal_policy=RemovalPolicy.RETAIN,
        )
