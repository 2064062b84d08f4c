"""Helpers shared by the integration tests: loopback clients, small separate streams, numbered
records, and a consumer pipeline (stream, lease table, sink, DLQ) on moto server."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from typing import Any

import boto3
import botocore.config

from shardline.consumer import ConsumedRecord, KinesisConsumer, LeaseTable
from shardline.kinesis import UserRecord
from shardline.producer import Producer, ProducerConfig
from shardline.testing import MappingReplay, read_shard

STREAM_ACTIVE_DEADLINE_S = 30.0

CLIENT_CONFIG = botocore.config.Config(
    retries={"max_attempts": 0, "mode": "standard"},
    max_pool_connections=16,
    connect_timeout=5,
    read_timeout=30,
)


def aws_client(service: str, endpoint_url: str) -> Any:
    """A boto3 client for a loopback endpoint, with dummy credentials and no retries."""
    return boto3.client(
        service,
        endpoint_url=endpoint_url,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        config=CLIENT_CONFIG,
    )


def kinesis_client(endpoint_url: str) -> Any:
    """A Kinesis client for a loopback endpoint."""
    return aws_client("kinesis", endpoint_url)


def unique_stream_name(prefix: str = "test") -> str:
    """A stream name no other test uses (servers live for the whole session)."""
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def create_stream(client: Any, name: str, shard_count: int) -> dict[str, Any]:
    """Create a stream and wait until it is ACTIVE; returns its StreamDescriptionSummary."""
    client.create_stream(StreamName=name, ShardCount=shard_count)
    deadline = time.monotonic() + STREAM_ACTIVE_DEADLINE_S
    while True:
        summary = client.describe_stream_summary(StreamName=name)["StreamDescriptionSummary"]
        if summary["StreamStatus"] == "ACTIVE":
            return summary
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"stream {name} still {summary['StreamStatus']} after {STREAM_ACTIVE_DEADLINE_S:.0f} s"
            )
        time.sleep(0.05)


def read_stream(client: Any, name: str) -> dict[str, list[tuple[str, int | None, Any]]]:
    """Every user record in every shard (closed ones too), de-aggregated.

    Returns {shard id: [(sequence number, sub-sequence number or None, UserRecord), ...]} in
    shard order. Reads until each shard's iterator reaches its end or the tip of the shard.
    """
    from shardline.kinesis import UserRecord
    from shardline.kpl import decode, is_aggregated

    shards = client.list_shards(StreamName=name)["Shards"]
    found: dict[str, list[tuple[str, int | None, Any]]] = {}
    for shard in shards:
        shard_id = shard["ShardId"]
        iterator = client.get_shard_iterator(
            StreamName=name, ShardId=shard_id, ShardIteratorType="TRIM_HORIZON"
        )["ShardIterator"]
        records = found[shard_id] = []
        while iterator:
            response = client.get_records(ShardIterator=iterator, Limit=10000)
            for kinesis_record in response["Records"]:
                data = kinesis_record["Data"]
                sequence = kinesis_record["SequenceNumber"]
                if is_aggregated(data):
                    records.extend((sequence, i, user) for i, user in enumerate(decode(data)))
                else:
                    user = UserRecord(
                        kinesis_record["PartitionKey"], data, kinesis_record.get("ExplicitHashKey")
                    )
                    records.append((sequence, None, user))
            iterator = response.get("NextShardIterator")
            if not response["Records"] and response.get("MillisBehindLatest", 0) == 0:
                break
    return found


def shard_ranges(client: Any, name: str) -> dict[str, tuple[int, int]]:
    """{shard id: (starting hash key, ending hash key)} for every shard, open or closed."""
    return {
        shard["ShardId"]: (
            int(shard["HashKeyRange"]["StartingHashKey"]),
            int(shard["HashKeyRange"]["EndingHashKey"]),
        )
        for shard in client.list_shards(StreamName=name)["Shards"]
    }


# -- shared by several test modules ---------------------------------------------------------


def numbered_records(count: int, keys: int) -> list[UserRecord]:
    """Records whose data says their position, padded to about 100 bytes."""
    return [UserRecord(f"user-{i % keys}", f"{i:08d}|".encode().ljust(100, b".")) for i in range(count)]


def position(record: UserRecord) -> int:
    return int(record.data.split(b"|", 1)[0])


def wait_active(client, name: str, deadline_s: float = 30.0) -> None:
    deadline = time.monotonic() + deadline_s
    while (
        client.describe_stream_summary(StreamName=name)["StreamDescriptionSummary"]["StreamStatus"]
        != "ACTIVE"
    ):
        assert time.monotonic() < deadline, "stream did not become ACTIVE"
        time.sleep(0.05)


def open_shards(client, name: str) -> list[dict]:
    shards = client.list_shards(StreamName=name)["Shards"]
    opened = [s for s in shards if "EndingSequenceNumber" not in s["SequenceNumberRange"]]
    return sorted(opened, key=lambda s: int(s["HashKeyRange"]["StartingHashKey"]))


CONSUMER_RECORDS = 60


class VirtualClock:
    """Wall-clock time that a sleep advances at once."""

    def __init__(self) -> None:
        self.time = time.time()

    def now(self) -> float:
        return self.time

    def sleep(self, seconds: float) -> None:
        self.time += max(0.0, seconds)


def create_sink_table(dynamodb: Any) -> str:
    """A new on-demand sink table with hash key `id` (S); its name."""
    name = f"sink-{uuid.uuid4().hex[:8]}"
    dynamodb.create_table(
        TableName=name,
        KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    return name


class Pipeline:
    """One stream (one shard) of aggregated records, a lease table and a sink table."""

    def __init__(self, endpoint: str, records: int = CONSUMER_RECORDS) -> None:
        self.endpoint = endpoint
        self.kinesis = kinesis_client(endpoint)
        self.dynamodb = aws_client("dynamodb", endpoint)
        self.sqs = aws_client("sqs", endpoint)
        self.stream = unique_stream_name("consume")
        create_stream(self.kinesis, self.stream, shard_count=1)
        self.shard_id = self.kinesis.list_shards(StreamName=self.stream)["Shards"][0]["ShardId"]
        # Small aggregates (~10 records each) so a batch spans several Kinesis records.
        producer = Producer(self.kinesis, self.stream, config=ProducerConfig(aggregation_max_size=400))
        self.sent = [UserRecord(f"key-{i % 7}", json.dumps({"n": i}).encode()) for i in range(records)]
        assert all(r.success for r in producer.put_many(self.sent))
        self.clock = VirtualClock()  # backoffs cost no time; DynamoDB is real
        self.leases = LeaseTable(
            self.dynamodb, f"leases-{uuid.uuid4().hex[:8]}", clock=self.clock.now, sleep=self.clock.sleep
        )
        LeaseTable.create(self.dynamodb, self.leases.table_name)
        self.sink = create_sink_table(self.dynamodb)
        self.queue_url = self.sqs.create_queue(QueueName=f"dlq-{uuid.uuid4().hex[:8]}")["QueueUrl"]

    def feed(self, batch_size: int = 10) -> MappingReplay:
        return MappingReplay(read_shard(self.kinesis, self.stream, self.shard_id), batch_size=batch_size)

    def consumer(self, **options) -> KinesisConsumer:
        return KinesisConsumer("test-group", self.leases, kinesis=self.kinesis, **options)

    def lease_table(self, dynamodb: Any) -> LeaseTable:
        """The group's lease table through another DynamoDB client (a faulty one), on the same
        virtual clock: backoffs of a failed record or a stalled shard cost no time."""
        return LeaseTable(dynamodb, self.leases.table_name, clock=self.clock.now, sleep=self.clock.sleep)

    def sink_items(self) -> list[dict]:
        return self.dynamodb.scan(TableName=self.sink, ConsistentRead=True)["Items"]

    def dead_letters(self) -> list[dict]:
        messages = self.sqs.receive_message(QueueUrl=self.queue_url, MaxNumberOfMessages=10)
        return [json.loads(m["Body"]) for m in messages.get("Messages", [])]


def n_of(record: ConsumedRecord) -> int:
    return record.json()["n"]


def count_once(sink: str) -> Callable[[ConsumedRecord], list[dict[str, Any]]]:
    """A handler for a non-idempotent effect: applied twice, a counter would show 2."""

    def handle(record: ConsumedRecord) -> list[dict[str, Any]]:
        return [
            {
                "Update": {
                    "TableName": sink,
                    "Key": {"id": {"S": str(n_of(record))}},
                    "UpdateExpression": "ADD applied :one",
                    "ExpressionAttributeValues": {":one": {"N": "1"}},
                }
            }
        ]

    return handle
