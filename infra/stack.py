"""The stack: streams, the shared key and layers, the producer API, consumer groups, monitoring."""

from __future__ import annotations

from aws_cdk import Aws, CfnOutput, RemovalPolicy, Stack, Tags
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from constructs import Construct

from infra.config import PipelineConfig, logical_id
from infra.consumer_group import ConsumerGroup
from infra.layers import Layers
from infra.monitoring import Monitoring
from infra.producer_api import ProducerApi
from infra.stream import Stream


class PipelineStack(Stack):
    """Everything `cdk deploy` ships, built from the pipeline configuration."""

    def __init__(self, scope: Construct, construct_id: str, *, config: PipelineConfig, **kwargs) -> None:
        super().__init__(scope, construct_id, **kwargs)
        # One key for queues and the alarm topic; CloudWatch and SNS may use it to deliver alarms.
        self.key = kms.Key(
            self, "Key", description="shardline queues and alarms", enable_key_rotation=True,
            removal_policy=RemovalPolicy.RETAIN, alias=f"alias/{config.prefix}/queues-and-alarms",
        )  # fmt: skip
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
        )
        self.groups = [
            ConsumerGroup(
                self,
                f"Group-{group.name}",
                config=group,
                stream=self.streams[group.stream],
                layers=self.layers,
                key=self.key,
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

    def _outputs(self) -> None:
        """What an operator needs after `cdk deploy`: where to call, what to watch, where failures go."""
        CfnOutput(
            self,
            "ApiUrl",
            value=self.api.api.url_for_path("/streams"),
            description="POST {url}/{stream}/records",
        )
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
