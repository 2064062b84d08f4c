"""Create the app's streams (and their registered consumers), tables, queues and buckets on the local
endpoint, from the template.

    provision(app, endpoint_url)

The properties are the template's, resolved (`local.app.template`); a setting the emulator has no
use for (encryption keys, point-in-time recovery, lifecycle rules, public-access blocks, access
logging) is left out here and named in `SKIPPED_PROPERTIES`, so start-up can say what is not
emulated. A table's
`TimeToLiveSpecification` is set with UpdateTimeToLive, as CloudFormation does after creating it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import boto3
from botocore.config import Config

from ..chaos.profiles import OBSERVER_AGENT
from . import model

TABLE_PROPERTIES = (
    "AttributeDefinitions",
    "KeySchema",
    "BillingMode",
    "ProvisionedThroughput",
    "GlobalSecondaryIndexes",
    "LocalSecondaryIndexes",
    "StreamSpecification",
)
QUEUE_ATTRIBUTES = (
    "DelaySeconds",
    "MaximumMessageSize",
    "MessageRetentionPeriod",
    "ReceiveMessageWaitTimeSeconds",
    "VisibilityTimeout",
    "FifoQueue",
    "ContentBasedDeduplication",
)
SKIPPED_PROPERTIES = {
    "AWS::DynamoDB::Table": (
        "SSESpecification",
        "PointInTimeRecoverySpecification",
        "DeletionProtectionEnabled",
    ),
    "AWS::SQS::Queue": ("KmsMasterKeyId", "KmsDataKeyReusePeriodSeconds", "SqsManagedSseEnabled"),
    "AWS::S3::Bucket": (
        "BucketEncryption",
        "LifecycleConfiguration",
        "PublicAccessBlockConfiguration",
        "LoggingConfiguration",  # S3 server access logs: no log delivery locally
    ),
}


def client(service: str, endpoint_url: str, **config: Any) -> Any:
    """A boto3 client for the local endpoint, with the local credentials: an observer's (provisioning,
    `status`, `send`'s verdict, tests' reads), which a chaos profile never injects a fault into."""
    config.setdefault("user_agent_extra", OBSERVER_AGENT)
    return boto3.client(
        service,
        endpoint_url=endpoint_url,
        region_name=model.REGION,
        aws_access_key_id=model.ACCESS_KEY,
        aws_secret_access_key=model.SECRET_KEY,
        config=Config(**config),
    )


def provision(app: model.LocalApp, endpoint_url: str, *, timeout: float = 30.0) -> None:
    """Create every stream, table, queue and bucket of `app`; returns when the streams are ACTIVE."""
    kinesis = client("kinesis", endpoint_url)
    dynamodb = client("dynamodb", endpoint_url)
    sqs = client("sqs", endpoint_url)
    s3 = client("s3", endpoint_url)

    def table(resource: model.Resource) -> None:
        settings = {key: resource.properties[key] for key in TABLE_PROPERTIES if key in resource.properties}
        dynamodb.create_table(TableName=resource.name, **settings)
        ttl = resource.properties.get("TimeToLiveSpecification")
        if ttl is not None:
            dynamodb.get_waiter("table_exists").wait(TableName=resource.name)
            dynamodb.update_time_to_live(TableName=resource.name, TimeToLiveSpecification=ttl)

    def queue(resource: model.Resource) -> None:
        attributes = {
            key: str(resource.properties[key]).lower()
            if isinstance(resource.properties[key], bool)
            else str(resource.properties[key])
            for key in QUEUE_ATTRIBUTES
            if key in resource.properties
        }
        if "RedrivePolicy" in resource.properties:
            attributes["RedrivePolicy"] = json.dumps(resource.properties["RedrivePolicy"])
        sqs.create_queue(QueueName=resource.name, Attributes=attributes)

    def bucket(resource: model.Resource) -> None:
        s3.create_bucket(Bucket=resource.name)

    create: dict[str, Callable[[model.Resource], None]] = {
        "AWS::DynamoDB::Table": table,
        "AWS::SQS::Queue": queue,
        "AWS::S3::Bucket": bucket,
    }
    for stream in app.streams:
        kinesis.create_stream(
            StreamName=stream.name,
            ShardCount=stream.shard_count,
            MaxRecordSizeInKiB=stream.max_record_size_kib,
        )
    with ThreadPoolExecutor(max_workers=4) as pool:
        for wave in _waves(app.resources):  # a queue after the dead-letter queue its RedrivePolicy names
            for _ in pool.map(lambda resource: create[resource.type](resource), wave):
                pass
    _streams_ready(kinesis, app, timeout)


def _waves(resources: Sequence[model.Resource]) -> list[list[model.Resource]]:
    """`resources` in waves, each created after the ones before: SQS refuses a queue whose
    RedrivePolicy names a dead-letter queue that does not exist yet (CloudFormation orders them by
    that reference)."""
    waiting = list(resources)
    made: set[str] = set()
    waves = []
    while waiting:
        ready = [r for r in waiting if _redrive_target(r) in made or _redrive_target(r) is None]
        if not ready:  # a target outside the app, or a cycle: SQS says which
            ready = waiting
        waves.append(ready)
        made.update(model.queue_arn(r.name) for r in ready if r.type == "AWS::SQS::Queue")
        waiting = [r for r in waiting if r not in ready]
    return waves


def _redrive_target(resource: model.Resource) -> str | None:
    policy = resource.properties.get("RedrivePolicy") if resource.type == "AWS::SQS::Queue" else None
    if isinstance(policy, str):
        policy = json.loads(policy)
    return (
        str(policy["deadLetterTargetArn"])
        if isinstance(policy, dict) and "deadLetterTargetArn" in policy
        else None
    )


def _streams_ready(kinesis: Any, app: model.LocalApp, timeout: float) -> None:
    """Wait for every stream to be ACTIVE, then set its retention and register its consumers."""
    deadline = time.monotonic() + timeout
    for stream in app.streams:
        while (
            kinesis.describe_stream_summary(StreamName=stream.name)["StreamDescriptionSummary"][
                "StreamStatus"
            ]
            != "ACTIVE"
        ):
            if time.monotonic() > deadline:
                raise TimeoutError(f"stream {stream.name} is not ACTIVE after {timeout:.0f} s")
            time.sleep(0.05)
        if stream.retention_hours > 24:
            kinesis.increase_stream_retention_period(
                StreamName=stream.name, RetentionPeriodHours=stream.retention_hours
            )
    for consumer in app.stream_consumers:  # enhanced fan-out: registered once the stream is ACTIVE
        kinesis.register_stream_consumer(
            StreamARN=model.stream_arn(consumer.stream_name), ConsumerName=consumer.name
        )
