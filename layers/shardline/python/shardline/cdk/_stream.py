"""A Kinesis data stream: encrypted, retention and capacity mode from the configuration."""

from __future__ import annotations

from aws_cdk import Duration, RemovalPolicy
from aws_cdk import aws_kinesis as kinesis
from aws_cdk import aws_kms as kms
from constructs import Construct

from shardline.cdk._config import StreamConfig
from shardline.cdk._keys import retained_key


class Stream(Construct):
    """`stream` (and its customer-managed `key`, or None when AWS manages it), named `name`."""

    def __init__(
        self, scope: Construct, construct_id: str, config: StreamConfig, *, name: str, retain: bool
    ) -> None:
        super().__init__(scope, construct_id)
        self.config = config
        self.name = name
        self.key: kms.Key | None = None
        if config.encryption == "customer-managed":
            self.key = retained_key(
                self,
                "Key",
                description=f"shardline stream {config.name}",
                alias=f"alias/{name}",  # the stream's own name: one alias per stage and stream
            )
        self.stream = kinesis.Stream(
            self,
            "Stream",
            stream_name=name,
            removal_policy=RemovalPolicy.RETAIN if retain else RemovalPolicy.DESTROY,
            shard_count=config.shards,
            stream_mode=kinesis.StreamMode.ON_DEMAND
            if config.shards is None
            else kinesis.StreamMode.PROVISIONED,
            retention_period=Duration.hours(config.retention_hours),
            encryption=kinesis.StreamEncryption.KMS if self.key else kinesis.StreamEncryption.MANAGED,
            encryption_key=self.key,
        )
        # The L2 construct has no property for it yet: the producer's limits and the stream's agree.
        cfn = self.stream.node.default_child
        assert isinstance(cfn, kinesis.CfnStream)
        cfn.max_record_size_in_kib = config.max_record_size_kib
