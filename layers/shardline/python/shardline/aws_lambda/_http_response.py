"""Answers of the producer's HTTP API: status, JSON body and headers, and what to log of them.

Results answer 200 (all written), 207 (some failed: retry exactly those, same order), 404 (nothing
written because the route's Kinesis stream does not exist: no retry can help) or 503 with
`Retry-After` (nothing written because the stream throttled or was unavailable); a request with
bad records answers 400 listing every problem. A path the API does not serve answers 404, a method
it does not serve 405 with `Allow`. Messages never echo record payloads or keys.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from shardline.errors import EXPIRED, PARTITIONER_ERROR, UNAVAILABLE_ERROR_CODES, RecordProblem
from shardline.producer._result import RecordResult

if TYPE_CHECKING:
    from shardline.aws_lambda._http_settings import StreamRoute

#: What `Retry-After` says on a 503: Kinesis meters each shard per second.
RETRY_AFTER_SECONDS = 1
#: Kinesis's request-level code for a stream that does not exist (never created, or deleted).
STREAM_NOT_FOUND = "ResourceNotFoundException"
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


def results_response(
    results: Sequence[RecordResult],
    retry_after: int = RETRY_AFTER_SECONDS,
    *,
    route: StreamRoute | None = None,
) -> ApiResponse:
    """200 if every record was written, 404 if none could be because the stream does not exist,
    503 (+ Retry-After) if none could be for now, else 207. `route` names the stream in the 404."""
    failed = sum(1 for result in results if not result.success)
    if results and failed == len(results) and all(is_stream_missing(result) for result in results):
        return stream_missing_response(route)
    body = {"failedRecordCount": failed, "records": [result_entry(result) for result in results]}
    if failed == 0:
        return ApiResponse(200, body)
    if failed == len(results) and all(is_unavailable(result) for result in results):
        return ApiResponse(503, body, {"Retry-After": str(retry_after)})
    return ApiResponse(207, body)


def stream_missing_response(route: StreamRoute | None = None) -> ApiResponse:
    """404: the route's Kinesis stream does not exist (not created yet, or deleted); nothing was written."""
    if route is None:
        return ApiResponse(404, {"message": "the stream does not exist; nothing was written"})
    physical = f" (Kinesis stream {route.stream_name!r})" if route.stream_name != route.name else ""
    return ApiResponse(
        404, {"message": f"stream {route.name!r}{physical} does not exist; nothing was written"}
    )


def route_not_found_response(method: str, path: str) -> ApiResponse:
    """404: no route of the API matches `path`."""
    served = "POST /streams/{stream}/records"
    return ApiResponse(404, {"message": f"not found: {method[:16]} {path[:256]} (the API serves {served})"})


def method_not_allowed_response(method: str, path: str, allowed: Sequence[str] = ("POST",)) -> ApiResponse:
    """405 with `Allow`: `path` is a route of the API, but not for `method`."""
    allow = ", ".join(allowed)
    return ApiResponse(
        405,
        {"message": f"method {method[:16]} is not allowed on {path[:256]}; use {allow}"},
        {"Allow": allow},
    )


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
    return _failed_only_with(result, UNAVAILABLE_ERROR_CODES, allow_no_attempt=True)


def is_stream_missing(result: RecordResult) -> bool:
    """True if `result` failed only because its stream does not exist (ResourceNotFoundException)."""
    return _failed_only_with(result, frozenset({STREAM_NOT_FOUND}), allow_no_attempt=False)


def _failed_only_with(result: RecordResult, codes: frozenset[str], *, allow_no_attempt: bool) -> bool:
    """True if `result` failed with one of `codes`, or expired after attempts that all failed so."""
    if result.success:
        return False
    if result.error_code in codes:
        return True
    if result.error_code != EXPIRED:
        return False
    # Expired with no attempt at all means time ran out, not that the stream is missing.
    tried = [a.error_code for a in result.attempts if not a.success and a.error_code != EXPIRED]
    return (allow_no_attempt or bool(tried)) and all(code in codes for code in tried)


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
