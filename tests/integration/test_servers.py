"""Smoke test of the integration fixtures: a record goes in and comes back out on each backend."""

from __future__ import annotations

import time
import uuid

from tests.support.integration import create_stream, kinesis_client, unique_stream_name

READ_DEADLINE_S = 10.0


def test_put_then_get_one_record(kinesis_endpoint):
    client = kinesis_client(kinesis_endpoint.endpoint_url)
    stream = unique_stream_name("smoke")
    create_stream(client, stream, shard_count=1)
    data = b"\x00\xff shardline " + uuid.uuid4().bytes
    partition_key = f"pk-{uuid.uuid4().hex}"
    try:
        put = client.put_record(StreamName=stream, Data=data, PartitionKey=partition_key)
        iterator = client.get_shard_iterator(
            StreamName=stream, ShardId=put["ShardId"], ShardIteratorType="TRIM_HORIZON"
        )["ShardIterator"]

        records = []
        deadline = time.monotonic() + READ_DEADLINE_S
        while not records and time.monotonic() < deadline:
            response = client.get_records(ShardIterator=iterator, Limit=10)
            records, iterator = response["Records"], response["NextShardIterator"]

        assert len(records) == 1, f"{kinesis_endpoint.name}: expected one record, got {records}"
        assert records[0]["Data"] == data
        assert records[0]["PartitionKey"] == partition_key
        assert records[0]["SequenceNumber"] == put["SequenceNumber"]
    finally:
        client.delete_stream(StreamName=stream, EnforceConsumerDeletion=True)
