"""The AWS side of the event-source-mapping tests: loopback clients, streams, records, queues, reshards.

The local endpoint enforces Kinesis's per-shard limits, so the tests' own writes and reads wait out
its throttles (1 MiB/s of writes per shard: a 1 MiB record waits about a second for the next).

Also `answer_get_records`, which answers a runner's GetRecords calls in its client (an expired
iterator, which no endpoint gives within a test's time) before they reach the server.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

from botocore.exceptions import ClientError

from local.app import model
from local.app.provision import client as local_client

THROTTLED = "ProvisionedThroughputExceededException"


def client(service: str, endpoint_url: str) -> Any:
    """The runtime's local client, making one attempt: throttles are waited out here."""
    return local_client(service, endpoint_url, retries={"total_max_attempts": 1})


def unthrottled(call: Callable[[], Any], timeout: float = 60.0) -> Any:
    """`call()`'s answer, called again while the shard refuses it for its limits."""

    def attempt() -> Any:
        try:
            return call()
        except ClientError as exc:
            if exc.response["Error"]["Code"] != THROTTLED:
                raise
            return None

    return wait_until(attempt, timeout, "an answer within the shard's limits")


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
    return [
        unthrottled(lambda data=data: kinesis.put_record(StreamName=stream, Data=data, PartitionKey=key))
        for data in datas
    ]


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
    return unthrottled(lambda: kinesis.get_records(ShardIterator=iterator["ShardIterator"]))["Records"]


def seqs(answers: list[dict[str, Any]]) -> list[str]:
    return [answer["SequenceNumber"] for answer in answers]


def new_queue(endpoint: str) -> tuple[str, str]:
    """An SQS on-failure queue: (its ARN as a template names it, its URL)."""
    name = f"esm-dlq-{uuid.uuid4().hex[:8]}"
    url = client("sqs", endpoint).create_queue(QueueName=name)["QueueUrl"]
    return model.queue_arn(name), url


def shard_ids(kinesis: Any, stream: str) -> list[str]:
    return [shard["ShardId"] for shard in kinesis.list_shards(StreamName=stream)["Shards"]]


def _wait_active(kinesis: Any, stream: str) -> None:
    wait_until(
        lambda: (
            kinesis.describe_stream_summary(StreamName=stream)["StreamDescriptionSummary"]["StreamStatus"]
            == "ACTIVE"
        )
    )


def _children_of(kinesis: Any, stream: str, parents: set[str]) -> list[str]:
    return [
        shard["ShardId"]
        for shard in kinesis.list_shards(StreamName=stream)["Shards"]
        if {shard.get("ParentShardId"), shard.get("AdjacentParentShardId")} & parents
    ]


def split(kinesis: Any, stream: str) -> list[str]:
    """Splits a one-shard stream's shard in the middle of its hash keys; returns the two children."""
    [parent] = kinesis.list_shards(StreamName=stream)["Shards"]
    middle = str(int(parent["HashKeyRange"]["EndingHashKey"]) // 2)
    kinesis.split_shard(StreamName=stream, ShardToSplit=parent["ShardId"], NewStartingHashKey=middle)
    _wait_active(kinesis, stream)
    return _children_of(kinesis, stream, {parent["ShardId"]})


def merge(kinesis: Any, stream: str) -> str:
    """Merges a two-shard stream's shards (adjacent: they share a boundary); returns the child."""
    first, second = shard_ids(kinesis, stream)
    kinesis.merge_shards(StreamName=stream, ShardToMerge=first, AdjacentShardToMerge=second)
    _wait_active(kinesis, stream)
    [child] = _children_of(kinesis, stream, {first, second})
    return child


def put_keys(kinesis: Any, stream: str, first: int, count: int) -> list[str]:
    return seqs(
        [
            unthrottled(
                lambda i=i: kinesis.put_record(StreamName=stream, Data=b"%d" % i, PartitionKey=f"key-{i}")
            )
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


def log_get_records(kinesis: Any) -> list[list[Any]]:
    """Logs a client's GetRecords calls as they happen: [started, answered, error code or None].

    Both times are time.monotonic(); a call still in flight has no answer time yet (None).
    """
    calls: list[list[Any]] = []

    def before(**_: Any) -> None:
        calls.append([time.monotonic(), None, None])

    def after(parsed: dict[str, Any], **_: Any) -> None:
        calls[-1][1:] = [time.monotonic(), parsed.get("Error", {}).get("Code")]

    kinesis.meta.events.register("before-call.kinesis.GetRecords", before)
    kinesis.meta.events.register("after-call.kinesis.GetRecords", after)
    return calls
