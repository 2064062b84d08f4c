"""An event-source mapping stand-in: reads a real shard and replays batches as Lambda's does.

`ShardFeed` reads every Kinesis record of one shard from the (loopback) stream once, then hands
out Lambda Kinesis events of `batch_size` records from its position. After each invocation:
a raised exception (a crash, a function error) retries the same batch; `batchItemFailures`
restarts from the reported sequence number; otherwise the position moves past the batch.
"""

from __future__ import annotations

import base64
import uuid
from collections.abc import Callable
from typing import Any

from shardline.consumer import KinesisConsumer


class Context:
    """The parts of a Lambda context the consumer reads."""

    def __init__(self, remaining_ms: Callable[[], int] = lambda: 900_000) -> None:
        self.aws_request_id = str(uuid.uuid4())
        self.get_remaining_time_in_millis = remaining_ms


def read_shard(kinesis: Any, stream: str, shard_id: str) -> list[dict[str, Any]]:
    iterator = kinesis.get_shard_iterator(
        StreamName=stream, ShardId=shard_id, ShardIteratorType="TRIM_HORIZON"
    )["ShardIterator"]
    records: list[dict[str, Any]] = []
    while iterator:
        response = kinesis.get_records(ShardIterator=iterator, Limit=10000)
        records += response["Records"]
        iterator = response.get("NextShardIterator")
        if not response["Records"] and response.get("MillisBehindLatest", 0) == 0:
            break
    return records


def lambda_record(stream: str, shard_id: str, record: dict[str, Any]) -> dict[str, Any]:
    return {
        "kinesis": {
            "kinesisSchemaVersion": "1.0",
            "partitionKey": record["PartitionKey"],
            "sequenceNumber": record["SequenceNumber"],
            "data": base64.b64encode(record["Data"]).decode(),
            "approximateArrivalTimestamp": record["ApproximateArrivalTimestamp"].timestamp(),
        },
        "eventSource": "aws:kinesis",
        "eventVersion": "1.0",
        "eventID": f"{shard_id}:{record['SequenceNumber']}",
        "eventName": "aws:kinesis:record",
        "invokeIdentityArn": "arn:aws:iam::123456789012:role/consumer",
        "awsRegion": "us-east-1",
        "eventSourceARN": f"arn:aws:kinesis:us-east-1:123456789012:stream/{stream}",
    }


class ShardFeed:
    """Replays one shard to a consumer the way the event-source mapping does."""

    def __init__(self, kinesis: Any, stream: str, shard_id: str, batch_size: int = 10) -> None:
        self.records = [lambda_record(stream, shard_id, r) for r in read_shard(kinesis, stream, shard_id)]
        self.batch_size = batch_size
        self.position = 0
        self.invocations = 0

    @property
    def finished(self) -> bool:
        return self.position >= len(self.records)

    def next_event(self) -> dict[str, Any]:
        return {"Records": self.records[self.position : self.position + self.batch_size]}

    def invoke(
        self, consumer: KinesisConsumer, context: Context | None = None
    ) -> dict[str, Any] | BaseException:
        """One invocation; returns the response, or the exception it raised (a crash)."""
        event = self.next_event()
        self.invocations += 1
        try:
            response = consumer.process(event, context or Context())
        except BaseException as exc:
            return exc
        failures = response["batchItemFailures"]
        if failures:
            sequence = failures[0]["itemIdentifier"]
            self.position = next(
                i for i, r in enumerate(self.records) if r["kinesis"]["sequenceNumber"] == sequence
            )
        else:
            self.position += len(event["Records"])
        return response

    def drain(self, consumer: KinesisConsumer, max_invocations: int = 10_000) -> None:
        """Invoke until the shard is consumed (crashes and failures included)."""
        for _ in range(max_invocations):
            if self.finished:
                return
            self.invoke(consumer)
        raise AssertionError(f"shard not drained after {max_invocations} invocations at {self.position}")
