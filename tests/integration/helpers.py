"""Helpers for integration tests: loopback Kinesis clients and small, separate streams."""

from __future__ import annotations

import time
import uuid
from typing import Any

import boto3
import botocore.config

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
