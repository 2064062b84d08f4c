"""The boundaries shardline talks across, as Protocols: the AWS clients it calls and the Lambda context.

A boto3 client satisfies each client Protocol as it is; so does a test fake that implements the
listed methods (keyword arguments in, the response dict out). shardline never creates a client
at import time: every component that talks to AWS takes one of these.

    producer = Producer(kinesis_client, "events")        # KinesisClient
    consumer = KinesisConsumer(group, table, kinesis=c)  # KinesisReadClient
    table = LeaseTable(dynamodb_client, "orders-leases")  # DynamoDBClient
    dlq = DeadLetterQueue(sqs_client, queue_url)          # SQSClient
    dlq = DeadLetterQueue(sqs, url, s3=s3_client, bucket=b)  # S3Client, for large dead letters
    consumer.process(event, context)                      # LambdaContext
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

__all__ = ["DynamoDBClient", "KinesisClient", "KinesisReadClient", "LambdaContext", "S3Client", "SQSClient"]


class KinesisClient(Protocol):
    """The Kinesis calls of the producer: PutRecords, and ListShards for its shard map."""

    def put_records(self, **kwargs: Any) -> Mapping[str, Any]: ...

    def list_shards(self, **kwargs: Any) -> Mapping[str, Any]: ...


class KinesisReadClient(Protocol):
    """The Kinesis calls of a consumer: ListShards (parents, hash ranges), and GetShardIterator and
    GetRecords to probe whether a parent shard is finished."""

    def list_shards(self, **kwargs: Any) -> Mapping[str, Any]: ...

    def get_shard_iterator(self, **kwargs: Any) -> Mapping[str, Any]: ...

    def get_records(self, **kwargs: Any) -> Mapping[str, Any]: ...


class DynamoDBClient(Protocol):
    """The DynamoDB calls of the lease table (and `LeaseTable.create`)."""

    def get_item(self, **kwargs: Any) -> Mapping[str, Any]: ...

    def put_item(self, **kwargs: Any) -> Mapping[str, Any]: ...

    def update_item(self, **kwargs: Any) -> Mapping[str, Any]: ...

    def transact_write_items(self, **kwargs: Any) -> Mapping[str, Any]: ...

    def batch_write_item(self, **kwargs: Any) -> Mapping[str, Any]: ...

    def scan(self, **kwargs: Any) -> Mapping[str, Any]: ...

    def describe_table(self, **kwargs: Any) -> Mapping[str, Any]: ...

    def create_table(self, **kwargs: Any) -> Mapping[str, Any]: ...

    def get_waiter(self, waiter_name: str) -> Any: ...


class SQSClient(Protocol):
    """The SQS call of the dead-letter queue."""

    def send_message(self, **kwargs: Any) -> Mapping[str, Any]: ...


class S3Client(Protocol):
    """The S3 call of the dead-letter queue, for a dead letter too large for SQS."""

    def put_object(self, **kwargs: Any) -> Mapping[str, Any]: ...


class LambdaContext(Protocol):
    """The parts of a Lambda context shardline reads."""

    @property
    def aws_request_id(self) -> str: ...

    def get_remaining_time_in_millis(self) -> int: ...
