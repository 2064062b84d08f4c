"""The stack: streams, the shared key and layers, the producer API, consumer groups, monitoring."""

from __future__ import annotations

from typing import Any

from aws_cdk import Acknowledgment, Aws, CfnOutput, Duration, RemovalPolicy, Stack, Tags, Validations
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from constructs import Construct

from shardline.cdk._config import PipelineConfig, logical_id
from shardline.cdk._consumer_group import ConsumerGroup
from shardline.cdk._feature_flags import FEATURE_FLAGS
from shardline.cdk._keys import retained_key
from shardline.cdk._layers import Layers
from shardline.cdk._monitoring import Monitoring
from shardline.cdk._producer_api import ProducerApi
from shardline.cdk._stream import Stream


class PipelineStack(Stack):
    """Everything `cdk deploy` ships, built from the pipeline configuration."""

    def __init__(self, scope: Construct, construct_id: str, *, config: PipelineConfig, **kwargs: Any) -> None:
        super().__init__(scope, construct_id, **kwargs)
        # The flags the constructs were built and tested with, whatever the app's own cdk.json says
        # (set before any child exists, as CDK requires).
        for flag, value in FEATURE_FLAGS.items():
            self.node.set_context(flag, value)
        # The alarm topic's key, and only its: CloudWatch and SNS may use it to deliver alarms. Each
        # consumer group has its own key for its data (`ConsumerGroup.key`), logs have `logs_key`.
        self.key = retained_key(
            self, "Key", description="shardline alarm topic", alias=f"alias/{config.prefix}/alarms"
        )
        # CloudWatch encrypts what it publishes to the alarm topic: only for this account's alarms.
        self.key.add_to_resource_policy(
            iam.PolicyStatement(
                sid="CloudWatchAlarmsOfThisAccount",
                principals=[iam.ServicePrincipal("cloudwatch.amazonaws.com")],
                actions=["kms:Decrypt", "kms:GenerateDataKey*"],
                resources=["*"],  # in a key policy, "*" is this key
                conditions={"StringEquals": {"aws:SourceAccount": Aws.ACCOUNT_ID}},
            )
        )
        self.logs_key = self._logs_key(config.prefix)
        self.access_logs = self._access_log_bucket()
        self.layers = Layers(self, "Layers")
        self.streams = {
            s.name: Stream(
                self, f"Stream-{s.name}", s, name=f"{config.prefix}-{s.name}", retain=config.retain_data
            )
            for s in config.streams
        }
        self.api = ProducerApi(
            self,
            "Producer",
            config=config.api,
            streams=list(self.streams.values()),
            layers=self.layers,
            pipeline=config,
            log_key=self.logs_key,
        )
        self.groups = [
            ConsumerGroup(
                self,
                f"Group-{group.name}",
                config=group,
                stream=self.streams[group.stream],
                layers=self.layers,
                log_key=self.logs_key,
                access_logs=self.access_logs,
                pipeline=config,
            )
            for group in config.consumer_groups
        ]
        self.monitoring = Monitoring(
            self,
            "Monitoring",
            streams=list(self.streams.values()),
            api=self.api,
            groups=self.groups,
            key=self.key,
            dashboard_name=config.prefix,
            namespace=config.metrics_namespace,
            alarms=config.alarms,
        )
        # Cost allocation: activate these tags in Billing to see each stage's bill.
        Tags.of(self).add("project", config.stack_name)
        Tags.of(self).add("stage", config.stage)
        self._outputs()

    def _logs_key(self, prefix: str) -> kms.Key:
        """The key of every log group of the stack (functions', API access and execution logs): CloudWatch
        Logs of this account and region may use it, for this account's log groups only."""
        key = retained_key(self, "LogsKey", description="shardline log groups", alias=f"alias/{prefix}/logs")
        key.add_to_resource_policy(
            iam.PolicyStatement(
                sid="CloudWatchLogsOfThisAccountAndRegion",
                principals=[iam.ServicePrincipal(f"logs.{Aws.REGION}.amazonaws.com")],
                actions=[
                    "kms:Encrypt*",
                    "kms:Decrypt*",
                    "kms:ReEncrypt*",
                    "kms:GenerateDataKey*",
                    "kms:Describe*",
                ],
                resources=["*"],  # in a key policy, "*" is this key
                conditions={
                    "ArnLike": {
                        "kms:EncryptionContext:aws:logs:arn": (
                            f"arn:{Aws.PARTITION}:logs:{Aws.REGION}:{Aws.ACCOUNT_ID}:log-group:*"
                        )
                    }
                },
            )
        )
        return key

    def _access_log_bucket(self) -> s3.Bucket:
        """S3 server access logs of the dead-letter buckets (one prefix per group): who read or wrote a
        dead letter. SSE-S3, as S3's log delivery requires (it cannot use a KMS key); written by S3's
        logging service only for this account's buckets (the bucket policy CDK writes); kept a year."""
        bucket = s3.Bucket(
            self,
            "AccessLogs",
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
            name = logical_id(group.config.name)
            CfnOutput(self, f"{name}LeaseTable", value=group.leases.table_name)
            CfnOutput(self, f"{name}SinkTable", value=group.sink.table_name)
            CfnOutput(
                self,
                f"{name}DeadLetters",
                value=group.dead_letters.queue_url,
                description="whole poison records",
            )
            CfnOutput(self, f"{name}MappingFailures", value=group.failures.queue_url)
