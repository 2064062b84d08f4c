"""Answers of the producer's HTTP API: status, JSON body and headers, and what to log of them.

Results (one entry per record, in request order, under `"records"`, with `"failedRecordCount"`):

- 200: every record written. Nothing to do.
- 207: per-record outcomes (some written, some refused for their own reasons, or some whose
  replies were lost): each failed entry says whether a copy may be in the stream (`written`) and
  what to do (`retry`). With an `Idempotency-Key` every record has an id: post the request again
  as it was. Without one, resend exactly the entries marked `resend` or `resend-same-id`, as they
  were (same ids); an entry marked `resend-may-duplicate` may already be applied.
- 503 + `Retry-After`: nothing written, nor can anything land later (every record throttled, the
  stream unavailable in a brownout, or unreachable before anything was sent; never when a reply
  was lost): after `Retry-After` seconds, post the request again as it was.
- 404: nothing written, the route's Kinesis stream does not exist: no retry helps.
- 500: nothing written, Kinesis refused the function itself (AccessDenied, ...): a deployment
  fault (alarmed); post again once it is fixed.
- 422: nothing written, a record re-uses an id (its own, or `<Idempotency-Key>:<index>`) that was
  written with another payload (`_http_idempotency`).

An entry written: `{"id"?, "shardId", "sequenceNumber", "subSequenceNumber", "attempts"}` — the
position Kinesis returned for that very record (`subSequenceNumber`: its index in the aggregate).

A failed entry: `{"id"?, "errorCode", "errorMessage", "attempts", "written", "retry"}`:

- `"written": false` — no copy of the record is in the stream, nor can one land later (never sent,
  or Kinesis refused every copy). `"retry": "resend"`: sending it again cannot duplicate it.
- `"written": "unconfirmed"` — a reply from Kinesis was lost (a timeout, a reset connection, a 5xx,
  a malformed answer) and no later answer confirmed the record before the deadline: a copy may be
  in the stream. With an id, `"retry": "resend-same-id"`: send it again with the same id; shardline
  consumers apply an id once, so it is neither lost nor applied twice. Without an id, `"retry":
  "resend-may-duplicate"`: a resend may be applied twice and no resend may lose it — give records
  ids to avoid the choice.

`id` is present when the record has one (its own, or `<Idempotency-Key>:<index>`). `attempts`
counts the trips to Kinesis. `errorMessage` is shardline's own sentence for the outcome: never a
payload, a key, an endpoint or internal exception text (those go to the function's log).

A request with bad records answers 400 listing every problem. A path the API does not serve answers
404, a method it does not serve 405 with `Allow`. An unexpected failure answers 500 with a generic
message and the request id (`{"message", "requestId"}`); its details are logged, never answered.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from shardline.errors import (
    EXPIRED,
    PARTITIONER_ERROR,
    PERMANENT_ERROR_CODES,
    THROTTLE_ERROR_CODES,
    UNAVAILABLE_ERROR_CODES,
    RecordProblem,
)
from shardline.producer._result import RecordResult

if TYPE_CHECKING:
    from shardline.aws_lambda._http_idempotency import IdConflict
    from shardline.aws_lambda._http_settings import StreamRoute

#: The header that names a request (`_http_request`): its records without an id get `<key>:<index>`.
IDEMPOTENCY_KEY_HEADER = "Idempotency-Key"
#: Where a 422 names the request's Idempotency-Key.
IDEMPOTENCY_KEY_FIELD = "idempotencyKey"

#: What `Retry-After` says on a 503: Kinesis meters each shard per second.
RETRY_AFTER_SECONDS = 1
#: Kinesis's request-level code for a stream that does not exist (never created, or deleted).
STREAM_NOT_FOUND = "ResourceNotFoundException"
#: Codes of results that never reached Kinesis (decisions, not attempts).
_NOT_SENT_CODES = frozenset({EXPIRED, PARTITIONER_ERROR})
#: The producer's code for a call that failed without an answer from Kinesis (a timeout, a reset or
#: refused connection): like a brownout, nothing written for now.
TRANSPORT_FAILURE = "Internal"
_TRANSIENT_CODES = UNAVAILABLE_ERROR_CODES | {TRANSPORT_FAILURE}
#: Request-level refusals of the function itself (its role, its key, its request): a deployment fault.
_DEPLOYMENT_CODES = PERMANENT_ERROR_CODES - {STREAM_NOT_FOUND}

#: `written` of a failed entry whose record may be in the stream (a lost reply never settled).
UNCONFIRMED = "unconfirmed"
#: `retry` of a failed entry: no copy is in the stream; sending it again cannot duplicate it.
RESEND = "resend"
#: ... a copy may be in the stream and the record has an id: resend it with the same id.
RESEND_SAME_ID = "resend-same-id"
#: ... a copy may be in the stream and the record has no id: a resend may be applied twice.
RESEND_MAY_DUPLICATE = "resend-may-duplicate"
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
    ids: Sequence[str | None] | None = None,
    request_id: str | None = None,
) -> ApiResponse:
    """200 if every record was written; 404 if none was because the stream does not exist; 503
    (+ Retry-After) if none was because the stream throttled, was unavailable or unreachable; 500
    if Kinesis refused the function itself; else 207 — also when every record failed but one's
    reply was lost (it may be in the stream, so "nothing was written" would not be true).
    `ids[i]` is record i's id (or None); `route` names the stream in the 404, `request_id` the
    request in the 500."""
    failed = sum(1 for result in results if not result.success)
    # "Nothing was written" (404, 503, 500) only when it is so: a record whose reply was lost may be
    # in the stream, and a client told to post the whole request again would apply a record without
    # an id twice. Such a request answers 207, each entry saying what to do with its record.
    none_written = bool(results) and failed == len(results) and not any(map(is_unconfirmed, results))
    if none_written and all(is_stream_missing(result) for result in results):
        return stream_missing_response(route)
    record_ids = list(ids) if ids is not None else [None] * len(results)
    entries = [result_entry(result, record_id) for result, record_id in zip(results, record_ids, strict=True)]
    body: dict[str, Any] = {"failedRecordCount": failed, "records": entries}
    if failed == 0:
        return ApiResponse(200, body)
    if none_written and all(is_unavailable(result) for result in results):
        return unavailable_response(body, retry_after)
    if none_written and all(is_refused_deployment(result) for result in results):
        code = next(result.error_code for result in results)
        message = (
            f"nothing was written: Kinesis refused the producer function ({code}), a deployment fault"
            + (f"; request id {request_id}" if request_id else "")
        )
        named = {"requestId": request_id} if request_id else {}
        return ApiResponse(500, {"message": message, **named, **body})
    return ApiResponse(207, body)


def reused_id_response(conflicts: Sequence[IdConflict], idempotency_key: str | None) -> ApiResponse:
    """422: records re-use ids written before with other payloads; nothing of the request was
    written. Each error names the record's index, its id and (for a derived id) the key."""
    errors: list[dict[str, Any]] = []
    for conflict in conflicts:
        error: dict[str, Any] = {"index": conflict.record_index, "field": "id", "id": conflict.record_id}
        if conflict.derived:
            error["idempotencyKey"] = idempotency_key
            source = f"the {IDEMPOTENCY_KEY_HEADER} {idempotency_key!r} (record {conflict.record_index})"
        else:
            source = "the record's id"
        error["message"] = (
            f"id {conflict.record_id!r}, from {source}, was written before with another body: "
            "give the record a new id"
        )
        errors.append(error)
    count = len(conflicts)
    message = (
        f"{count} record{'s' if count != 1 else ''} re-use{'' if count != 1 else 's'} an id written "
        "with another body; nothing was written"
    )
    body: dict[str, Any] = {"message": message, "errors": errors}
    if idempotency_key is not None:
        body[IDEMPOTENCY_KEY_FIELD] = idempotency_key
    return ApiResponse(422, body)


def id_check_unavailable_response(code: str, ids: Sequence[str | None]) -> ApiResponse:
    """503: the idempotency table could not be read, so nothing was sent: every entry
    `written: false`."""
    entries = [
        ({} if record_id is None else {"id": record_id})
        | {
            "errorCode": code,
            "errorMessage": "the record's id could not be checked; it was not sent",
            "attempts": 0,
            "written": False,
            "retry": RESEND,
        }
        for record_id in ids
    ]
    return unavailable_response({"failedRecordCount": len(entries), "records": entries})


def unavailable_response(body: dict[str, Any], retry_after: int = RETRY_AFTER_SECONDS) -> ApiResponse:
    """503 + `Retry-After`: nothing was written and a later try may succeed; `body` holds the
    entries (every one `written: false`)."""
    message = (
        "nothing was written: the stream is throttled, unavailable or did not answer; post the "
        f"request again as it was (same Idempotency-Key and ids) after {retry_after} s"
    )
    return ApiResponse(503, {"message": message, **body}, {"Retry-After": str(retry_after)})


def stream_missing_response(route: StreamRoute | None = None) -> ApiResponse:
    """404: the route's Kinesis stream does not exist (not created yet, or deleted); nothing was written."""
    if route is None:
        return ApiResponse(404, {"message": "the stream does not exist; nothing was written"})
    physical = f" (Kinesis stream {route.stream_name!r})" if route.stream_name != route.name else ""
    return ApiResponse(
        404, {"message": f"stream {route.name!r}{physical} does not exist; nothing was written"}
    )


def internal_error_response(request_id: str | None) -> ApiResponse:
    """500 for an unexpected failure: a generic message and the request id, never the exception's
    text (it is logged with its traceback under the same request id)."""
    message = "internal error" + (f"; request id {request_id}" if request_id else "")
    return ApiResponse(500, {"message": message, **({"requestId": request_id} if request_id else {})})


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


def result_entry(result: RecordResult, record_id: str | None = None) -> dict[str, Any]:
    """One record's outcome as the API spells it; `attempts` counts the trips to Kinesis."""
    attempts = sum(1 for attempt in result.attempts if attempt.error_code not in _NOT_SENT_CODES)
    entry: dict[str, Any] = {} if record_id is None else {"id": record_id}
    if result.success:
        entry |= {
            "shardId": result.shard_id,
            "sequenceNumber": result.sequence_number,
            "subSequenceNumber": result.sub_sequence_number,
            "attempts": attempts,
        }
        return entry
    unconfirmed = is_unconfirmed(result)
    retry = RESEND_SAME_ID if record_id is not None else RESEND_MAY_DUPLICATE
    retry = retry if unconfirmed else RESEND
    entry |= {
        "errorCode": result.error_code,
        "errorMessage": error_message(result, attempts),
        "attempts": attempts,
        "written": UNCONFIRMED if unconfirmed else False,
        "retry": retry,
    }
    return entry


def is_unconfirmed(result: RecordResult) -> bool:
    """True if `result` failed while a copy of its record may be in the stream (a reply was lost)."""
    return not result.success and result.unconfirmed


def error_message(result: RecordResult, attempts: int) -> str:
    """shardline's sentence for a failed result: its code and what happened, never Kinesis's or an
    exception's own text (they can name endpoints, accounts and internals)."""
    code = result.error_code or "Unknown"
    tried = [a.error_code for a in result.attempts if not a.success and a.error_code not in _NOT_SENT_CODES]
    last = tried[-1] if tried else None
    if is_unconfirmed(result):
        return (
            f"no answer from Kinesis confirmed this record before the deadline (last: {last or code}): "
            "a copy may be in the stream"
        )
    if code == EXPIRED:
        if not tried:
            return "the deadline passed before the record could be sent"
        if all(c in THROTTLE_ERROR_CODES for c in tried):
            return f"the record's shard was over its write limit until the deadline ({attempts} attempts)"
        return f"the deadline passed after {attempts} attempts; Kinesis refused the last ({last})"
    if code == PARTITIONER_ERROR:
        return "the record could not be assigned a shard; it was not sent"
    if code in THROTTLE_ERROR_CODES:
        return f"the record's shard is over its write limit ({code})"
    if code == TRANSPORT_FAILURE:
        return "Kinesis could not be reached (no answer, Internal)"
    if code in UNAVAILABLE_ERROR_CODES:
        return f"the stream could not take the record ({code})"
    return f"Kinesis refused the record ({code})"


def is_refused_deployment(result: RecordResult) -> bool:
    """True if `result` failed because Kinesis refused the function itself (role, key, request)."""
    return _failed_only_with(result, _DEPLOYMENT_CODES, allow_no_attempt=False)


def is_unavailable(result: RecordResult) -> bool:
    """True if `result` failed only because the stream throttled, was unavailable or unreachable (or
    time ran out)."""
    return _failed_only_with(result, _TRANSIENT_CODES, allow_no_attempt=True)


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


#: Sequence numbers listed per shard in the log line; past it, the first and last and a count (a
#: log event holds 256 KiB, and a request of 10,000 unaggregated records has 10,000).
MAX_LOGGED_SEQUENCES = 50


def written_by_shard(entries: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Where a request's records went, for the audit trail: per shard, the records written and the
    sequence numbers of the Kinesis records (aggregates) that carry them — all of them up to
    `MAX_LOGGED_SEQUENCES`, else the first and the last."""
    sequences: dict[str, set[str]] = {}
    records: Counter[str] = Counter()
    for entry in entries:
        if "sequenceNumber" in entry:
            sequences.setdefault(entry["shardId"], set()).add(entry["sequenceNumber"])
            records[entry["shardId"]] += 1
    written: dict[str, dict[str, Any]] = {}
    for shard, numbers in sorted(sequences.items()):
        ordered = sorted(numbers, key=int)
        listed = ordered if len(ordered) <= MAX_LOGGED_SEQUENCES else [ordered[0], ordered[-1]]
        written[shard] = {"records": records[shard], "aggregates": len(ordered), "sequenceNumbers": listed}
    return written


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
        unconfirmed = sum(1 for entry in body["records"] if entry.get("written") == UNCONFIRMED)
        if unconfirmed:
            fields["unconfirmed"] = unconfirmed
        written = written_by_shard(body["records"])
        if written:
            fields["written"] = written
    else:
        fields["reason"] = body.get("message")  # "message" is taken by the log record
        if "errors" in body:
            fields["errors"] = body["errors"][:_MAX_LOGGED_PROBLEMS]
            fields["errorCount"] = len(body["errors"])
    return fields
