"""The pure parts of the Kinesis event-source mapping: records, batches, verdicts, on-failure messages.

Everything here is a function of its arguments (no clients, no threads, no clock), so `runner`
keeps the I/O and the tests can reason about each rule on its own. Shapes follow Lambda's documents
(with-kinesis, services-kinesis-batchfailurereporting, kinesis-on-failure-destination).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

# Lambda's synchronous invocation payload limit ("6 MB"), on the JSON event as sent.
MAX_PAYLOAD_BYTES = 6 * 1024 * 1024
# `{"Records": []}`: what the event weighs around its records.
_ENVELOPE_BYTES = len(json.dumps({"Records": []}))
_SEPARATOR_BYTES = len(", ")

RETRY_ATTEMPTS_EXHAUSTED = "RetryAttemptsExhausted"
RECORD_AGE_EXCEEDED = "RecordAgeExceeded"


@dataclass(frozen=True)
class StreamRecord:
    """One Kinesis record as the mapping holds it: its event record, ready to send, and its weight."""

    sequence_number: str
    arrival: float  # epoch seconds (ApproximateArrivalTimestamp)
    event_record: dict[str, Any]
    size: int  # bytes this record adds to the JSON event, separator included

    @property
    def sequence_key(self) -> int:
        return int(self.sequence_number)


def event_record(
    record: dict[str, Any], *, shard_id: str, stream_arn: str, role_arn: str, region: str
) -> StreamRecord:
    """A GetRecords record turned into Lambda's event record (every field of the documented shape)."""
    arrival = record["ApproximateArrivalTimestamp"]
    arrival_epoch = arrival.timestamp() if isinstance(arrival, datetime) else float(arrival)
    sequence_number = record["SequenceNumber"]
    body = {
        "kinesis": {
            "kinesisSchemaVersion": "1.0",
            "partitionKey": record["PartitionKey"],
            "sequenceNumber": sequence_number,
            "data": base64.b64encode(record["Data"]).decode("ascii"),
            "approximateArrivalTimestamp": round(arrival_epoch, 3),
        },
        "eventSource": "aws:kinesis",
        "eventVersion": "1.0",
        "eventID": f"{shard_id}:{sequence_number}",
        "eventName": "aws:kinesis:record",
        "invokeIdentityArn": role_arn,
        "awsRegion": region,
        "eventSourceARN": stream_arn,
    }
    # Measured as `json.dumps` writes it by default (the roomiest common form), so the cut holds
    # whatever separators the invoker serializes with.
    size = len(json.dumps(body).encode()) + _SEPARATOR_BYTES
    return StreamRecord(sequence_number, arrival_epoch, body, size)


def make_event(records: Sequence[StreamRecord]) -> dict[str, Any]:
    return {"Records": [record.event_record for record in records]}


def batch_length(records: Sequence[StreamRecord], batch_size: int, max_bytes: int = MAX_PAYLOAD_BYTES) -> int:
    """How many leading records make the next batch: at most `batch_size`, and an event under `max_bytes`.

    A lone record is always taken (a Kinesis record, 1 MiB at most, cannot outweigh the limit).
    """
    total = _ENVELOPE_BYTES - _SEPARATOR_BYTES  # the first record has no separator before it
    count = 0
    for record in records[:batch_size]:
        if count and total + record.size > max_bytes:
            break
        total += record.size
        count += 1
    return count


def event_bytes(records: Sequence[StreamRecord]) -> int:
    """The size of the JSON event these records make (as `batch_length` counts it)."""
    return _ENVELOPE_BYTES - _SEPARATOR_BYTES + sum(r.size for r in records) if records else _ENVELOPE_BYTES


SUCCESS, PARTIAL, FAILURE = "success", "partial", "failure"


@dataclass(frozen=True)
class BatchVerdict:
    """What an invocation's result means for its batch: `outcome` is SUCCESS, PARTIAL or FAILURE.

    For PARTIAL, `retry_from` is the index of the lowest reported record: the batch is checkpointed
    before it and retried from it.
    """

    outcome: str
    retry_from: int = 0
    reason: str = ""


def judge(
    payload: Any, function_error: str | None, records: Sequence[StreamRecord], report_item_failures: bool
) -> BatchVerdict:
    """Lambda's reading of a stream invocation's result (services-kinesis-batchfailurereporting).

    Success: no function error and, with ReportBatchItemFailures, a null or empty response or list.
    Complete failure: a function error, or an identifier that is empty, null, missing (a wrong key
    name) or not a sequence number of this batch (undocumented; LocalStack, checked against AWS,
    fails the whole batch). Otherwise the batch resumes from the lowest reported sequence number.
    """
    if function_error:
        return BatchVerdict(FAILURE, reason=f"function error ({function_error})")
    if not report_item_failures or payload is None or not isinstance(payload, dict):
        return BatchVerdict(SUCCESS)
    failures = payload.get("batchItemFailures")
    if failures is None or failures == []:
        return BatchVerdict(SUCCESS)
    if not isinstance(failures, list):
        return BatchVerdict(FAILURE, reason="batchItemFailures is not a list")
    index_of = {record.sequence_number: i for i, record in enumerate(records)}
    indexes = []
    for item in failures:
        identifier = item.get("itemIdentifier") if isinstance(item, dict) else None
        if not isinstance(identifier, str) or identifier not in index_of:
            return BatchVerdict(
                FAILURE, reason=f"itemIdentifier {identifier!r} is not a sequence number of the batch"
            )
        indexes.append(index_of[identifier])
    return BatchVerdict(PARTIAL, min(indexes), "partial batch response")


def iso_ms(epoch: float) -> str:
    """`2019-11-14T00:38:06.021Z`: the timestamp form of Lambda's invocation records."""
    moment = datetime.fromtimestamp(epoch, tz=UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def on_failure_message(
    *,
    request_id: str,
    function_arn: str,
    condition: str,
    invoke_count: int,
    function_error: str | None,
    invoked: bool,
    now: float,
    shard_id: str,
    stream_arn: str,
    records: Sequence[StreamRecord],
) -> dict[str, Any]:
    """The invocation record Lambda sends to an SQS or SNS on-failure destination (no record data).

    As AWS recorded it (tests/conformance/aws_recorded/kinesis_esm.json): after retries run out,
    `responseContext` describes the last invocation, its `functionError` null when the batch failed
    by its partial batch response rather than by an error; a `RecordAgeExceeded` message has no
    `responseContext` at all, and counts at least one invocation even for records that aged out
    before their first (`approximateInvokeCount` 1).
    """
    if condition == RECORD_AGE_EXCEEDED:
        invoke_count = max(invoke_count, 1)
    message: dict[str, Any] = {
        "requestContext": {
            "requestId": request_id,
            "functionArn": function_arn,
            "condition": condition,
            "approximateInvokeCount": invoke_count,
        }
    }
    if invoked and condition == RETRY_ATTEMPTS_EXHAUSTED:
        message["responseContext"] = {
            "statusCode": 200,
            "executedVersion": "$LATEST",
            "functionError": function_error or None,
        }
    message["version"] = "1.0"
    message["timestamp"] = iso_ms(now)
    message["KinesisBatchInfo"] = {
        "shardId": shard_id,
        "startSequenceNumber": records[0].sequence_number,
        "endSequenceNumber": records[-1].sequence_number,
        "approximateArrivalOfFirstRecord": iso_ms(records[0].arrival),
        "approximateArrivalOfLastRecord": iso_ms(records[-1].arrival),
        "batchSize": len(records),
        "streamArn": stream_arn,
    }
    return message
