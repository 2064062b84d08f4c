"""Replaying a shard to a handler the way Lambda's Kinesis event-source mapping does.

    replay = MappingReplay(kinesis_event(records)["Records"], batch_size=10)
    replay.drain(consumer.process)

After each invocation, as Lambda does with ReportBatchItemFailures on: an exception (a crash, a
function error) retries the same batch; `batchItemFailures` restarts from the lowest reported
sequence number; an item identifier that is empty, missing or not in the batch fails the whole
batch (Lambda documents the first two; for the third it is undocumented, and LocalStack, checked
against AWS, retries the whole batch); no response, or an empty list, moves past the batch. Not
modelled: bisection, retry limits, record age, batching windows, several shards at once.
`read_shard` reads a real (loopback) shard's records to replay them.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from shardline.protocols import KinesisReadClient
from shardline.testing._events import event_record

Handler = Callable[[dict[str, Any], Any], Any]


class FakeLambdaContext:
    """A Lambda context as the Python runtime builds it; `remaining_ms` is a number or a callable.

    Each instance is one invocation: a fresh `aws_request_id` (the consumer's lease owner) unless
    one is given. `memory_limit_in_mb` is a string, as the runtime reads it from the environment.
    """

    def __init__(
        self,
        remaining_ms: int | Callable[[], int] = 900_000,
        *,
        function_name: str = "shardline-test",
        memory_limit_in_mb: int = 512,
        aws_request_id: str | None = None,
    ) -> None:
        self.aws_request_id = aws_request_id or str(uuid.uuid4())
        self.function_name = function_name
        self.function_version = "$LATEST"
        self.memory_limit_in_mb = str(memory_limit_in_mb)
        self.invoked_function_arn = f"arn:aws:lambda:us-east-1:123456789012:function:{function_name}"
        self.log_group_name = f"/aws/lambda/{function_name}"
        self.log_stream_name = "shardline-test"
        self.identity: object = None
        self.client_context: object = None
        self._remaining_ms = remaining_ms

    def get_remaining_time_in_millis(self) -> int:
        remaining = self._remaining_ms
        return remaining() if callable(remaining) else remaining


class MappingReplay:
    """Hands a handler batches of one shard's event records, as the event-source mapping does."""

    def __init__(
        self,
        event_records: Sequence[Mapping[str, Any]],
        batch_size: int = 10,
        *,
        maximum_retry_attempts: int = -1,
        maximum_record_age_s: float = -1,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if batch_size < 1:
            raise ValueError("batch_size must be at least 1")
        if maximum_retry_attempts < -1 or (maximum_record_age_s < 0 and maximum_record_age_s != -1):
            raise ValueError("maximum_retry_attempts and maximum_record_age_s are -1 (infinite) or >= 0")
        self.records = list(event_records)
        self.batch_size = batch_size
        self.maximum_retry_attempts = maximum_retry_attempts
        self.maximum_record_age_s = maximum_record_age_s
        self.clock = clock
        self.position = 0
        self.invocations = 0
        self.crashes = 0  # invocations that raised
        self.whole_batch_failures = 0  # answers Lambda reads as "the whole batch failed"
        self.retries = 0  # failed deliveries since the mapping last moved
        self.on_failure: list[dict[str, Any]] = []  # what the on-failure destination received

    @property
    def finished(self) -> bool:
        return self.position >= len(self.records)

    def next_event(self) -> dict[str, Any]:
        return {"Records": self.records[self.position : self.position + self.batch_size]}

    def invoke(self, handler: Handler, context: Any = None) -> Any:
        """One invocation; returns the response, or the exception it raised (a crash). Records
        past `maximum_record_age_s` are discarded first (None: nothing was left to invoke with)."""
        self._discard_aged()
        if self.finished:
            return None
        event = self.next_event()
        self.invocations += 1
        try:
            response = handler(event, context if context is not None else FakeLambdaContext())
        except BaseException as exc:  # a crash of any kind: the mapping retries the same batch
            self.crashes += 1
            self._failed(self.position, len(event["Records"]))
            return exc
        position = self._next_position(event["Records"], response)
        if position >= self.position + len(event["Records"]):
            self.position, self.retries = position, 0
        else:  # a partial failure: the mapping moves to the lowest failure and counts a retry
            self._failed(position, self.position + len(event["Records"]) - position)
        return response

    def _failed(self, position: int, count: int) -> None:
        """The `count` records from `position` failed: retried, or discarded past the limit."""
        self.position = position
        self.retries += 1
        if self.maximum_retry_attempts != -1 and self.retries > self.maximum_retry_attempts:
            self._discard(count, "RetryAttemptsExhausted")

    def _discard_aged(self) -> None:
        if self.maximum_record_age_s == -1:
            return
        oldest_allowed = self.clock() - self.maximum_record_age_s
        aged = 0
        for record in self.records[self.position :]:
            if float(record["kinesis"]["approximateArrivalTimestamp"]) >= oldest_allowed:
                break
            aged += 1
        if aged:
            self._discard(aged, "RecordAgeExceeded")

    def _discard(self, count: int, condition: str) -> None:
        """Move past the next `count` records, keeping the on-failure record Lambda sends for them."""
        records = self.records[self.position : self.position + count]
        first, last = records[0], records[-1]
        self.on_failure.append(
            {
                "requestContext": {"condition": condition, "approximateInvokeCount": max(self.retries, 1)},
                "version": "1.0",
                "KinesisBatchInfo": {
                    "shardId": str(first["eventID"]).split(":", 1)[0],
                    "startSequenceNumber": str(first["kinesis"]["sequenceNumber"]),
                    "endSequenceNumber": str(last["kinesis"]["sequenceNumber"]),
                    "approximateArrivalOfFirstRecord": first["kinesis"]["approximateArrivalTimestamp"],
                    "approximateArrivalOfLastRecord": last["kinesis"]["approximateArrivalTimestamp"],
                    "batchSize": len(records),
                    "streamArn": str(first["eventSourceARN"]),
                },
            }
        )
        self.position += len(records)
        self.retries = 0

    def _next_position(self, batch: list[Mapping[str, Any]], response: Any) -> int:
        """Where the shard continues after `response` to `batch` (which starts at `position`)."""
        failures = response.get("batchItemFailures") if isinstance(response, Mapping) else None
        if not failures:
            return self.position + len(batch)
        in_batch = {str(record["kinesis"]["sequenceNumber"]): index for index, record in enumerate(batch)}
        restarts: list[int] = []
        for failure in failures:
            identifier = failure.get("itemIdentifier") if isinstance(failure, Mapping) else None
            if not identifier or str(identifier) not in in_batch:
                self.whole_batch_failures += 1
                return self.position  # a complete failure: the same batch again
            restarts.append(in_batch[str(identifier)])
        return self.position + min(restarts)  # the lowest sequence number listed

    def drain(
        self,
        handler: Handler,
        max_invocations: int = 10_000,
        *,
        new_context: Callable[[], Any] = FakeLambdaContext,
    ) -> None:
        """Invoke until the shard is consumed (crashes and failures included), each invocation
        with a context from `new_context`."""
        for _ in range(max_invocations):
            if self.finished:
                return
            self.invoke(handler, new_context())
        raise AssertionError(f"shard not drained after {max_invocations} invocations (at {self.position})")


def read_shard(kinesis: KinesisReadClient, stream: str, shard_id: str) -> list[dict[str, Any]]:
    """Every record of a shard as Lambda event records, read with GetRecords from TRIM_HORIZON."""
    iterator = kinesis.get_shard_iterator(
        StreamName=stream, ShardId=shard_id, ShardIteratorType="TRIM_HORIZON"
    )["ShardIterator"]
    records: list[dict[str, Any]] = []
    while iterator:
        response = kinesis.get_records(ShardIterator=iterator, Limit=10000)
        records += [event_record(stream, shard_id, record) for record in response["Records"]]
        iterator = response.get("NextShardIterator")
        if not response["Records"] and response.get("MillisBehindLatest", 0) == 0:
            break
    return records
