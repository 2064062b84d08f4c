"""Answers of the producer's HTTP API: status, JSON body and headers, and what to log of them.

Results answer 200 (all written), 207 (some failed: retry exactly those, same order) or 503 with
`Retry-After` (nothing written because the stream throttled or was unavailable); a request with
bad records answers 400 listing every problem. Messages never echo record payloads or keys.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from shardline.errors import EXPIRED, PARTITIONER_ERROR, UNAVAILABLE_ERROR_CODES, RecordProblem
from shardline.producer._result import RecordResult

#: What `Retry-After` says on a 503: Kinesis meters each shard per second.
RETRY_AFTER_SECONDS = 1
#: Codes of results that never reached Kinesis (decisions, not attempts).
_NOT_SENT_CODES = frozenset({EXPIRED, PARTITIONER_ERROR})
_MAX_LOGGED_PROBLEMS = 20


@dataclass(frozen=True, slots=True)
class ApiResponse:
    """An HTTP answer: status, JSON body and extra headers."""

    status: int
    body: dict[str, Any]
    headers: Mapping[str, str] = field(default_factory=dict)

    def json(self) -> str:
        """The body as compact JSON text."""
        return json.dumps(self.body, separators=(",", ":"), ensure_ascii=False)


def validation_response(problems: Sequence[RecordProblem]) -> ApiResponse:
    """400 listing every problem as `{index, field, message}`; nothing was written."""
    invalid = len({problem.index for problem in problems})
    return ApiResponse(
        400,
        {
            "message": f"{invalid} invalid record{'s' if invalid != 1 else ''}; nothing was written",
            "errors": [problem._asdict() for problem in problems],
        },
    )


def results_response(results: Sequence[RecordResult], retry_after: int = RETRY_AFTER_SECONDS) -> ApiResponse:
    """200 if every record was written, 503 (+ Retry-After) if none could be for now, else 207."""
    failed = sum(1 for result in results if not result.success)
    body = {"failedRecordCount": failed, "records": [result_entry(result) for result in results]}
    if failed == 0:
        return ApiResponse(200, body)
    if failed == len(results) and all(is_unavailable(result) for result in results):
        return ApiResponse(503, body, {"Retry-After": str(retry_after)})
    return ApiResponse(207, body)


def result_entry(result: RecordResult) -> dict[str, Any]:
    """One record's outcome as the API spells it; `attempts` counts the trips to Kinesis."""
    attempts = sum(1 for attempt in result.attempts if attempt.error_code not in _NOT_SENT_CODES)
    if result.success:
        return {
            "shardId": result.shard_id,
            "sequenceNumber": result.sequence_number,
            "subSequenceNumber": result.sub_sequence_number,
            "attempts": attempts,
        }
    return {"errorCode": result.error_code, "errorMessage": result.error_message, "attempts": attempts}


def is_unavailable(result: RecordResult) -> bool:
    """True if `result` failed only because the stream throttled or was unavailable (or time ran out)."""
    if result.success:
        return False
    if result.error_code in UNAVAILABLE_ERROR_CODES:
        return True
    if result.error_code != EXPIRED:
        return False
    return all(
        attempt.error_code in UNAVAILABLE_ERROR_CODES
        for attempt in result.attempts
        if not attempt.success and attempt.error_code != EXPIRED
    )


def log_fields(response: ApiResponse) -> dict[str, Any]:
    """What to log about an answer: status, counts, error codes, problems — never a payload."""
    fields: dict[str, Any] = {"status": response.status}
    body = response.body
    if "records" in body:
        fields["records"] = len(body["records"])
        fields["failedRecordCount"] = body["failedRecordCount"]
        codes = Counter(entry["errorCode"] for entry in body["records"] if "errorCode" in entry)
        if codes:
            fields["errorCodes"] = dict(codes)
    else:
        fields["reason"] = body.get("message")  # "message" is taken by the log record
        if "errors" in body:
            fields["errors"] = body["errors"][:_MAX_LOGGED_PROBLEMS]
            fields["errorCount"] = len(body["errors"])
    return fields
