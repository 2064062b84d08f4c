"""The AWS side of the event-source-mapping tests: loopback clients, streams, records, queues.

Also `answer_get_records`, which answers a runner's GetRecords calls in its client (a throttle or an
expired iterator, as a Kinesis endpoint would) before they reach the server.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import boto3

from local import model


def client(service: str, endpoint_url: str) -> Any:
    return boto3.client(
        service,
        endpoint_url=endpoint_url,
        region_name=model.REGION,
        aws_access_key_id=model.ACCESS_KEY,
        aws_secret_access_key=model.SECRET_KEY,
    )


def create_stream(kinesis: Any, shards: int = 1) -> str:
    name = f"esm-{uuid.uuid4().hex[:10]}"
    kinesis.create_stream(StreamName=name, ShardCount=shards)
    wait_until(
        lambda: (
            kinesis.describe_stream_summary(StreamName=name)["StreamDescriptionSummary"]["StreamStatus"]
            == "ACTIVE"
        )
    )
    return name


def put(kinesis: Any, stream: str, *datas: bytes, key: str = "k") -> list[dict[str, Any]]:
    """Writes each record in order; returns what PutRecord answered (ShardId, SequenceNumber)."""
    return [kinesis.put_record(StreamName=stream, Data=data, PartitionKey=key) for data in datas]


def wait_until(predicate: Callable[[], Any], timeout: float = 20.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def receive(endpoint: str, url: str, count: int, timeout: float = 20.0) -> list[dict[str, Any]]:
    sqs = client("sqs", endpoint)
    messages: list[dict[str, Any]] = []

    def got_them() -> bool:
        for message in sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=0).get(
            "Messages", []
        ):
            messages.append(json.loads(message["Body"]))
            sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
        return len(messages) >= count

    wait_until(got_them, timeout, f"{count} on-failure messages")
    return messages


def read_back(kinesis: Any, stream: str) -> list[dict[str, Any]]:
    """Every record of a one-shard stream, as GetRecords gives it (to compare with what was sent)."""
    shard = kinesis.list_shards(StreamName=stream)["Shards"][0]["ShardId"]
    iterator = kinesis.get_shard_iterator(StreamName=stream, ShardId=shard, ShardIteratorType="TRIM_HORIZON")
    return kinesis.get_records(ShardIterator=iterator["ShardIterator"])["Records"]


def seqs(answers: list[dict[str, Any]]) -> list[str]:
    return [answer["SequenceNumber"] for answer in answers]


def split(kinesis: Any, stream: str) -> list[str]:
    [parent] = kinesis.list_shards(StreamName=stream)["Shards"]
    middle = str(int(parent["HashKeyRange"]["EndingHashKey"]) // 2)
    kinesis.split_shard(StreamName=stream, ShardToSplit=parent["ShardId"], NewStartingHashKey=middle)
    wait_until(
        lambda: (
            kinesis.describe_stream_summary(StreamName=stream)["StreamDescriptionSummary"]["StreamStatus"]
            == "ACTIVE"
        )
    )
    return [s["ShardId"] for s in kinesis.list_shards(StreamName=stream)["Shards"] if s.get("ParentShardId")]


def put_keys(kinesis: Any, stream: str, first: int, count: int) -> list[str]:
    return seqs(
        [
            kinesis.put_record(StreamName=stream, Data=b"%d" % i, PartitionKey=f"key-{i}")
            for i in range(first, first + count)
        ]
    )


def iso_ms(arrival: datetime) -> str:
    """An arrival time as Lambda's invocation records write it: UTC, milliseconds, Z."""
    return arrival.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def parse_iso(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def answer_get_records(kinesis: Any, codes: list[str | None]) -> list[tuple[float, str | None]]:
    """Answers a client's next GetRecords calls with the error `codes` in turn (None: the server's answer).

    Returns the log of calls, (time.monotonic(), code), which fills as the client calls.
    """
    calls: list[tuple[float, str | None]] = []
    pending = list(codes)

    def before_get_records(**_: Any) -> Any:
        code = pending.pop(0) if pending else None
        calls.append((time.monotonic(), code))
        if code is None:
            return None
        error = {"Error": {"Code": code, "Message": f"{code} (injected)"}, "ResponseMetadata": {}}
        return SimpleNamespace(status_code=400, headers={}), error

    kinesis.meta.events.register("before-call.kinesis.GetRecords", before_get_records)
    return calls
