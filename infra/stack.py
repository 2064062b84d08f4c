"""The stack: streams, the shared key and layers, the producer API, consumer groups, monitoring."""

from __future__ import annotations

from aws_cdk import RemovalPolicy, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from constructs import Construct

from infra.config import PipelineConfig
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
            removal_policy=RemovalPolicy.RETAIN,
        )  # fmt: skip
        self.key.grant_encrypt_decrypt(iam.ServicePrincipal("cloudwatch.amazonaws.com"))
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
