"""A consumer group: its function, lease/checkpoint table, sink table, queues and mapping."""

from __future__ import annotations

import jsii
from aws_cdk import Acknowledgment, Aws, Duration, Names, RemovalPolicy, Stack, Validations
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from shardline.aws_lambda import ConsumerEnvironment
from shardline.cdk._config import ConsumerGroupConfig, PipelineConfig
from shardline.cdk._function import python_function
from shardline.cdk._keys import retained_key
from shardline.cdk._layers import Layers
from shardline.cdk._stream import Stream
from shardline.cdk._tables import lease_table, sink_table

LEASE_ACTIONS = ("dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem")
# DescribeTable: the consumer reads the sink's key schema once, to tell a Put and an Update of one item.
SINK_ACTIONS = (
    "dynamodb:PutItem",
    "dynamodb:UpdateItem",
    "dynamodb:ConditionCheckItem",
    "dynamodb:DescribeTable",
)
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
#: Reading dead letters: what `deadLetterReaders` alone may do when the group names them.
READ_QUEUE = ["sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:ChangeMessageVisibility", "sqs:PurgeQueue"]
READ_OBJECTS = ["s3:GetObject", "s3:DeleteObject"]
#: What each service needs of the group's key when the function calls it (never kms:Encrypt or
#: ReEncrypt*): SQS's SendMessage to an encrypted queue GenerateDataKey and Decrypt, S3's PutObject
#: with SSE-KMS GenerateDataKey, DynamoDB Decrypt of the table key.
KEY_ACTIONS_VIA = {
    "sqs": ("kms:Decrypt", "kms:GenerateDataKey"),
    "s3": ("kms:GenerateDataKey",),
    "dynamodb": ("kms:Decrypt",),
}


class ConsumerGroup(Construct):
    """Everything one consumer group owns; it reads only its stream and writes only its own.

    The group has its own KMS key (`key`) for its tables, queues and dead-letter bucket: another
    group's role cannot decrypt them, and neither can the alarm topic's subscribers."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: ConsumerGroupConfig,
        stream: Stream,
        layers: Layers,
        log_key: kms.IKey,
        access_logs: s3.IBucket,
        pipeline: PipelineConfig,
    ) -> None:
        super().__init__(scope, construct_id)
        self.config = config
        self.stream = stream
        self.key = retained_key(
            self,
            "Key",
            description=f"shardline consumer group {config.name}: tables, queues, dead letters",
            alias=f"alias/{pipeline.prefix}/{config.name}",
        )
        self.leases = lease_table(self, "Leases", retain=pipeline.retain_data, key=self.key)
        self.sink = sink_table(
            self, "Sink", config.sink, retain=pipeline.retain_data, key=self.key, keys=config.sink_keys
        )
        # shardline's own DLQ (whole poison records) and the mapping's on-failure destination.
        self.dead_letters = self._queue("DeadLetters")
        self.failures = self._queue("MappingFailures")
        self.dead_letter_bucket = self._bucket("DeadLetterBucket", access_logs)
        self.function = python_function(
            self,
            "Function",
            folder=config.handler,
            layers=layers,
            memory_mb=config.memory_mb,
            timeout_seconds=config.timeout_seconds,
            reserved_concurrency=config.reserved_concurrency,
            pipeline=pipeline,
            log_key=log_key,
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
        self._grant(stream)
        self._guard_dead_letters()
        bucket = self.dead_letter_bucket.node.default_child
        assert isinstance(bucket, s3.CfnBucket)
        bucket_id = Stack.of(self).get_logical_id(bucket)
        Validations.of(self).acknowledge(
            Acknowledgment(
                id=f"AwsSolutions::AwsSolutions-IAM5[Resource::<{bucket_id}.Arn>/*]",
                reason="PutObject on the group's own dead-letter bucket: one object per dead letter, "
                "by its id.",
            )
        )
        # The mapping, as KinesisEventSource would make it (same construct id, so the same logical id
        # and no replacement), without its grants: grant_read (fan-out actions, ListStreams) and the
        # on-failure queue's grant_send_messages (kms:Encrypt, ReEncrypt*, GetQueueAttributes/Url).
        self.mapping = self.function.add_event_source_mapping(
            f"KinesisEventSource:{Names.node_unique_id(stream.stream.node)}",
            event_source_arn=stream.stream.stream_arn,
            starting_position=lambda_.StartingPosition[config.starting_position],
            starting_position_timestamp=config.starting_position_timestamp,
            batch_size=config.batch_size,
            max_batching_window=Duration.seconds(config.batching_window_seconds),
            parallelization_factor=config.parallelization,
            retry_attempts=None if config.retry_attempts == -1 else config.retry_attempts,
            max_record_age=Duration.seconds(config.max_record_age_seconds),
            bisect_batch_on_error=True,
            report_batch_item_failures=True,
            on_failure=_QueueDestination(self.failures),
        )
        if config.retry_attempts == -1:  # CDK's construct takes 0..10000; CloudFormation also -1 (forever)
            cfn = self.mapping.node.default_child
            assert isinstance(cfn, lambda_.CfnEventSourceMapping)
            cfn.add_property_override("MaximumRetryAttempts", -1)

    def _grant(self, stream: Stream) -> None:
        """Exactly what the function's code and Lambda (for its mapping) call, on the group's own."""
        role = self.function
        # Exactly what shardline and the example sinks do (TransactWriteItems is authorised per item).
        self.leases.grant(role, *LEASE_ACTIONS)
        self.sink.grant(role, *SINK_ACTIONS)
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
            role.add_to_role_policy(
                iam.PolicyStatement(
                    actions=list(actions),
                    resources=[self.key.key_arn],
                    conditions={"StringEquals": {"kms:ViaService": f"{service}.{Aws.REGION}.amazonaws.com"}},
                )
            )
        role.add_to_role_policy(
            iam.PolicyStatement(actions=list(STREAM_ACTIONS), resources=[stream.stream.stream_arn])
        )
        if stream.key is not None:  # reading an encrypted stream (the mapping and the probe)
            role.add_to_role_policy(
                iam.PolicyStatement(
                    actions=["kms:Decrypt"],
                    resources=[stream.key.key_arn],
                    conditions={"StringEquals": {"kms:ViaService": f"kinesis.{Aws.REGION}.amazonaws.com"}},
                )
            )

    def _guard_dead_letters(self) -> None:
        """Resource policies of the dead-letter stores, beside their TLS-only statement. Writers: the
        group's function role (its code, and Lambda for the mapping's on-failure messages) and the
        group's `deadLetterReaders` (a redrive dead-letters what still fails). Readers: with
        `deadLetterReaders`, they alone may receive, get or delete; without, whoever IAM allows in
        this account, with kms:Decrypt on the group's key (its key policy leaves that to IAM, so
        reading one group's dead letters is a grant on that group's key, not on the others').
        No principal of another account may do anything with them."""
        role_arn = self.function.role.role_arn  # type: ignore[union-attr]
        readers = list(self.config.dead_letter_readers)
        bucket = self.dead_letter_bucket
        objects = bucket.arn_for_objects("*")
        for queue in (self.dead_letters, self.failures):
            queue.add_to_resource_policy(_deny_unless("OnlyTheGroupWrites", [role_arn, *readers],
                                                      ["sqs:SendMessage"], queue.queue_arn))  # fmt: skip
            if readers:
                queue.add_to_resource_policy(
                    _deny_unless("OnlyItsReadersRead", readers, READ_QUEUE, queue.queue_arn)
                )
            queue.add_to_resource_policy(_deny_other_accounts("sqs:*", queue.queue_arn))
        bucket.add_to_resource_policy(
            _deny_unless("OnlyTheGroupWrites", [role_arn, *readers], ["s3:PutObject"], objects)
        )
        if readers:
            bucket.add_to_resource_policy(_deny_unless("OnlyItsReadersRead", readers, READ_OBJECTS, objects))
        bucket.add_to_resource_policy(_deny_other_accounts("s3:*", bucket.bucket_arn, objects))

    def _bucket(self, construct_id: str, access_logs: s3.IBucket) -> s3.Bucket:
        """Dead letters too large for SQS, whole; they expire with the queue's retention. Every request
        is in the stack's access-log bucket, under the group's prefix."""
        return s3.Bucket(
            self,
            construct_id,
            encryption=s3.BucketEncryption.KMS,
            encryption_key=self.key,
            bucket_key_enabled=True,
            enforce_ssl=True,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
            lifecycle_rules=[s3.LifecycleRule(expiration=Duration.days(14))],
            server_access_logs_bucket=access_logs,
            server_access_logs_prefix=f"{self.config.name}/",
            removal_policy=RemovalPolicy.RETAIN,
        )

    def _queue(self, construct_id: str) -> sqs.Queue:
        return sqs.Queue(
            self,
            construct_id,
            encryption=sqs.QueueEncryption.KMS,
            encryption_master_key=self.key,
            enforce_ssl=True,
            retention_period=Duration.days(14),
            removal_policy=RemovalPolicy.RETAIN,
        )


def _deny_unless(sid: str, principals: list[str], actions: list[str], *resources: str) -> iam.PolicyStatement:
    """Deny `actions` to every principal whose ARN is not one of `principals`."""
    return iam.PolicyStatement(
        sid=sid,
        effect=iam.Effect.DENY,
        principals=[iam.AnyPrincipal()],
        actions=actions,
        resources=list(resources),
        conditions={"ArnNotEquals": {"aws:PrincipalArn": principals}},
    )


def _deny_other_accounts(action: str, *resources: str) -> iam.PolicyStatement:
    return iam.PolicyStatement(
        sid="OnlyThisAccount",
        effect=iam.Effect.DENY,
        principals=[iam.AnyPrincipal()],
        actions=[action],
        resources=list(resources),
        conditions={"StringNotEquals": {"aws:PrincipalAccount": Aws.ACCOUNT_ID}},
    )


@jsii.implements(lambda_.IEventSourceDlq)
class _QueueDestination:
    """The mapping's on-failure queue, without the grant `SqsDlq` adds (`grant_send_messages`: also
    kms:Encrypt, ReEncrypt*, GetQueueAttributes, GetQueueUrl); `ConsumerGroup._grant` grants it."""

    def __init__(self, queue: sqs.IQueue) -> None:
        self.queue = queue

    def bind(
        self, _target: lambda_.IEventSourceMapping, _handler: lambda_.IFunction
    ) -> lambda_.DlqDestinationConfig:
        return lambda_.DlqDestinationConfig(destination=self.queue.queue_arn)
