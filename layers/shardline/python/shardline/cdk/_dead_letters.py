"""Where a consumer group's failures go: shardline's DLQ (whole poison records), the mapping's
on-failure queue (what it gave up on, metadata only), the dead-letter bucket for records over SQS's
1 MiB, their resource policies, and the access-log bucket their requests are logged to."""

from __future__ import annotations

import jsii
from aws_cdk import Acknowledgment, Aws, Duration, RemovalPolicy, Stack, Token, Validations
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from shardline.consumer._once import SQS_MAX_RETENTION_SECONDS

#: Reading dead letters: what `dead_letter_readers` alone may do when the group names them.
READ_QUEUE = ["sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:ChangeMessageVisibility", "sqs:PurgeQueue"]
READ_OBJECTS = ["s3:GetObject", "s3:DeleteObject"]
#: How long the group's DLQ keeps a dead letter, and its bucket a large one: SQS's longest (14 days).
DEAD_LETTER_RETENTION_DAYS = 14
#: SQS's retention when a queue sets none (4 days).
SQS_DEFAULT_RETENTION_SECONDS = 4 * 24 * 3600


def dead_letter_queue(
    scope: Construct, construct_id: str, *, key: kms.IKey, removal_policy: RemovalPolicy
) -> sqs.Queue:
    return sqs.Queue(
        scope,
        construct_id,
        encryption=sqs.QueueEncryption.KMS,
        encryption_master_key=key,
        enforce_ssl=True,
        retention_period=Duration.days(DEAD_LETTER_RETENTION_DAYS),
        removal_policy=removal_policy,
    )


def dead_letter_retention_seconds(queue: sqs.IQueue) -> int:
    """How long `queue` keeps a message: its `MessageRetentionPeriod` when this app defines it (SQS's
    default, 4 days, when it sets none); SQS's longest, 14 days, for a queue imported by ARN or a
    retention known only at deploy time — no queue keeps a message longer, so a guard derived from
    it is never too short (`shardline.consumer._once.guard_ttl_seconds`)."""
    resource = queue.node.default_child
    if isinstance(resource, sqs.CfnQueue):
        period = resource.message_retention_period
        if period is None:
            return SQS_DEFAULT_RETENTION_SECONDS
        if isinstance(period, int | float) and not Token.is_unresolved(period):
            return int(period)
    return SQS_MAX_RETENTION_SECONDS


def dead_letter_bucket(
    scope: Construct,
    construct_id: str,
    *,
    key: kms.IKey,
    access_logs: s3.IBucket,
    prefix: str,
    removal_policy: RemovalPolicy,
) -> s3.Bucket:
    """Dead letters too large for SQS, whole; they expire with the queue's retention. Every request
    is in the access-log bucket, under the group's prefix."""
    return s3.Bucket(
        scope,
        construct_id,
        encryption=s3.BucketEncryption.KMS,
        encryption_key=key,
        bucket_key_enabled=True,
        enforce_ssl=True,
        block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
        object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
        lifecycle_rules=[s3.LifecycleRule(expiration=Duration.days(DEAD_LETTER_RETENTION_DAYS))],
        server_access_logs_bucket=access_logs,
        server_access_logs_prefix=prefix,
        removal_policy=removal_policy,
    )


def access_log_bucket(scope: Construct, construct_id: str) -> s3.Bucket:
    """S3 server access logs of dead-letter buckets (one prefix per group): who read or wrote a
    dead letter. SSE-S3, as S3's log delivery requires (it cannot use a KMS key); written by S3's
    logging service only for this account's buckets (the bucket policy CDK writes); kept a year."""
    bucket = s3.Bucket(
        scope,
        construct_id,
        encryption=s3.BucketEncryption.S3_MANAGED,
        enforce_ssl=True,
        block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
        object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
        lifecycle_rules=[s3.LifecycleRule(expiration=Duration.days(365))],
        removal_policy=RemovalPolicy.RETAIN,
    )
    Validations.of(bucket).acknowledge(
        Acknowledgment(
            id="AwsSolutions::AwsSolutions-S1",
            reason="This is the access-log bucket of the dead-letter buckets: its own access would be "
            "logged into itself. Its writes are S3's log delivery, scoped by its bucket policy.",
        )
    )
    return bucket


def acknowledge_dead_letter_objects(group: Construct, bucket: s3.Bucket) -> None:
    """The wildcard of PutObject on the group's own dead-letter bucket's objects (its role's policy)."""
    resource = bucket.node.default_child
    assert isinstance(resource, s3.CfnBucket)
    bucket_id = Stack.of(group).get_logical_id(resource)
    Validations.of(group).acknowledge(
        Acknowledgment(
            id=f"AwsSolutions::AwsSolutions-IAM5[Resource::<{bucket_id}.Arn>/*]",
            reason="PutObject on the group's own dead-letter bucket: one object per dead letter, by its id.",
        )
    )


def guard_dead_letters(
    role_arn: str, readers: list[str], queues: tuple[sqs.Queue, ...], bucket: s3.Bucket
) -> None:
    """Resource policies of the dead-letter stores, beside their TLS-only statement (`queues`: the
    group's own; a team's queue keeps its policy). Writers: the group's role (its function's: its
    code, and Lambda for the mapping's on-failure messages; a worker group's task role) and the
    group's `readers` (a redrive
    dead-letters what still fails). Readers: with `readers`, they alone
    may receive, get or delete; without, whoever IAM allows in this account, with kms:Decrypt on the
    group's key (its key policy leaves that to IAM, so reading one group's dead letters is a grant on
    that group's key, not on the others'). No principal of another account may do anything with them."""
    for queue in queues:
        queue.add_to_resource_policy(_deny_unless("OnlyTheGroupWrites", [role_arn, *readers],
                                                  ["sqs:SendMessage"], queue.queue_arn))  # fmt: skip
        if readers:
            queue.add_to_resource_policy(
                _deny_unless("OnlyItsReadersRead", readers, READ_QUEUE, queue.queue_arn)
            )
        queue.add_to_resource_policy(_deny_other_accounts("sqs:*", queue.queue_arn))
    objects = bucket.arn_for_objects("*")
    bucket.add_to_resource_policy(
        _deny_unless("OnlyTheGroupWrites", [role_arn, *readers], ["s3:PutObject"], objects)
    )
    if readers:
        bucket.add_to_resource_policy(_deny_unless("OnlyItsReadersRead", readers, READ_OBJECTS, objects))
    bucket.add_to_resource_policy(_deny_other_accounts("s3:*", bucket.bucket_arn, objects))


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
class QueueDestination:
    """The mapping's on-failure queue, without the grant `SqsDlq` adds (`grant_send_messages`: also
    kms:Encrypt, ReEncrypt*, GetQueueAttributes, GetQueueUrl); `ConsumerGroup` grants SendMessage."""

    def __init__(self, queue: sqs.IQueue) -> None:
        self.queue = queue

    def bind(
        self, _target: lambda_.IEventSourceMapping, _handler: lambda_.IFunction
    ) -> lambda_.DlqDestinationConfig:
        return lambda_.DlqDestinationConfig(destination=self.queue.queue_arn)
