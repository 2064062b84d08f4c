"""Helpers of the local endpoint's tests: streams, reads that wait out throttles, sized entries."""

from __future__ import annotations

import json
import time
import urllib.request

from botocore.exceptions import ClientError

from tests.support.integration import create_stream, kinesis_client, unique_stream_name

MiB = 1024 * 1024
THROTTLED = "ProvisionedThroughputExceededException"
TOP = 2**128 - 1


def rate_exceeded(shard_id: str, name: str) -> str:
    return f"Rate exceeded for shard {shard_id} in stream {name} under account 000000000000."


def new_stream(url: str, shards: int = 1, prefix: str = "endpoint"):
    client = kinesis_client(url)
    name = unique_stream_name(prefix)
    create_stream(client, name, shard_count=shards)
    return client, name


def shard_ids(client, name: str, **filters) -> list[str]:
    return [shard["ShardId"] for shard in client.list_shards(StreamName=name, **filters)["Shards"]]


def read_shard(client, name: str, shard_id: str, **position) -> tuple[list[dict], dict]:
    """Every record of a shard (waiting out throttles) and the last GetRecords answer."""
    request = {"ShardIteratorType": "TRIM_HORIZON", **position}
    iterator = client.get_shard_iterator(StreamName=name, ShardId=shard_id, **request)["ShardIterator"]
    records: list[dict] = []
    while True:
        try:
            answer = client.get_records(ShardIterator=iterator)
        except ClientError as error:
            assert error.response["Error"]["Code"] == THROTTLED
            time.sleep(0.25)
            continue
        records += answer["Records"]
        iterator = answer.get("NextShardIterator")
        if iterator is None or (not answer["Records"] and answer["MillisBehindLatest"] == 0):
            return records, answer


def data_of(client, name: str, shard_id: str) -> list[bytes]:
    return [record["Data"] for record in read_shard(client, name, shard_id)[0]]


def sized(key: str, total: int) -> dict:
    """An entry whose data plus UTF-8 partition key is `total` bytes."""
    return {"Data": b"d" * (total - len(key.encode())), "PartitionKey": key}


def get_json(url: str, method: str = "GET", body: dict | None = None) -> dict:
    data = json.dumps(body).encode() if body is not None else None
    with urllib.request.urlopen(urllib.request.Request(url, data=data, method=method), timeout=10) as answer:
        return json.loads(answer.read())
