"""The producer's HTTP contract: `POST /streams/{stream}/records`, parsed, validated and answered.

Pure Python (no Powertools, no AWS client): the Lambda handler in `functions/producer` reads the
event, calls `handle` with a `put` callable that runs shardline's Producer, and returns the
`ApiResponse` it gets back. Everything is decided here:

- the body is `{"records": [{"data": <base64>, "partitionKey": ..., "explicitHashKey": ...}]}`
  (`application/json`) or one such record object per line (`application/x-ndjson`); a record
  may carry `"json": <any JSON value>` instead of `"data"` (sent as compact UTF-8 JSON);
- every record is checked before anything is sent: one bad record answers 400 with every
  problem as `{index, field, message}`, and `put` is never called;
- unknown stream 404, wrong content type 415, too many records or too large a body 413,
  malformed JSON 400;
- results answer 200 (all written), 207 (some failed: retry exactly those) or 503 with
  `Retry-After` (nothing written because the stream throttled or was unavailable).

Messages never echo record payloads or keys, so responses and logs can be kept as they are.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from shardline.aws_lambda._http_records import to_user_records
from shardline.errors import (
    EXPIRED,
    PARTITIONER_ERROR,
    UNAVAILABLE_ERROR_CODES,
    ConfigurationError,
    InvalidRecord,
    RecordProblem,
    RequestRejected,
)
from shardline.kinesis._limits import DEFAULT_LIMITS, Limits, MiB
from shardline.kinesis._records import UserRecord
from shardline.producer._config import ProducerConfig
from shardline.producer._result import RecordResult

JSON_MEDIA_TYPE = "application/json"
NDJSON_MEDIA_TYPE = "application/x-ndjson"

DEFAULT_MAX_RECORDS_PER_REQUEST = 500
DEFAULT_MAX_BODY_BYTES = 6_291_456
#: API Gateway (REST) refuses larger payloads before the Lambda runs.
API_GATEWAY_MAX_BODY_BYTES = 10 * MiB
#: API Gateway (REST) gives up on an integration after 29 s: flushing longer is wasted work.
API_GATEWAY_TIMEOUT_SECONDS = 29.0
#: Seconds of the invocation kept free when flushing: a request in flight at the deadline is
#: awaited, and the producer function's client gives up reading after 5 s.
DEADLINE_MARGIN_SECONDS = 6.0
#: Longest a flush may run: the API Gateway timeout minus the margin.
MAX_FLUSH_SECONDS = API_GATEWAY_TIMEOUT_SECONDS - DEADLINE_MARGIN_SECONDS
#: What `Retry-After` says on a 503: Kinesis meters each shard per second.
RETRY_AFTER_SECONDS = 1

#: Codes of results that never reached Kinesis (decisions, not attempts).
_NOT_SENT_CODES = frozenset({EXPIRED, PARTITIONER_ERROR})

_UTF8 = frozenset({"utf-8", "utf8"})
_MAX_LOGGED_PROBLEMS = 20


@dataclass(frozen=True, slots=True)
class StreamRoute:
    """One `{stream}` the API serves: the physical Kinesis stream behind it and that stream's limits."""

    name: str
    stream_name: str
    limits: Limits = DEFAULT_LIMITS


@dataclass(frozen=True, slots=True)
class ApiSettings:
    """What the function's environment configures: the streams and the request bounds."""

    streams: Mapping[str, StreamRoute]
    max_records_per_request: int = DEFAULT_MAX_RECORDS_PER_REQUEST
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES


@dataclass(frozen=True, slots=True)
class ApiResponse:
    """An HTTP answer: status, JSON body and extra headers."""

    status: int
    body: dict[str, Any]
    headers: Mapping[str, str] = field(default_factory=dict)

    def json(self) -> str:
        """The body as compact JSON text."""
        return json.dumps(self.body, separators=(",", ":"), ensure_ascii=False)


@dataclass(frozen=True, slots=True)
class PutRequest:
    """A request that passed every check: where to send, and what."""

    route: StreamRoute
    records: list[UserRecord]


#: Sends validated records to a route's stream and returns one result per record, in order.
PutFunction = Callable[[StreamRoute, list[UserRecord]], Sequence[RecordResult]]


# -- configuration -----------------------------------------------------------------------------


def settings_from_env(environ: Mapping[str, str] | None = None) -> ApiSettings:
    """Read `SHARDLINE_STREAMS`, `MAX_RECORDS_PER_REQUEST` and `MAX_BODY_BYTES` (now, not at import)."""
    env = os.environ if environ is None else environ
    return ApiSettings(
        streams=parse_streams(env.get("SHARDLINE_STREAMS", "")),
        max_records_per_request=_positive_int(
            env, "MAX_RECORDS_PER_REQUEST", DEFAULT_MAX_RECORDS_PER_REQUEST
        ),
        max_body_bytes=_positive_int(env, "MAX_BODY_BYTES", DEFAULT_MAX_BODY_BYTES),
    )


def parse_streams(text: str) -> dict[str, StreamRoute]:
    """Parse `SHARDLINE_STREAMS`: `{"<route name>": {"streamName": ..., "maxRecordSize": ...}}`."""
    if not text.strip():
        return {}
    try:
        document = json.loads(text)
    except ValueError as exc:
        raise ConfigurationError(f"SHARDLINE_STREAMS is not valid JSON: {exc}") from None
    if not isinstance(document, dict):
        raise ConfigurationError("SHARDLINE_STREAMS must be a JSON object of route name to stream")
    return {name: _stream_route(name, spec) for name, spec in document.items()}


def producer_config(route: StreamRoute) -> ProducerConfig:
    """The producer settings for a route: its stream's limits, requests as large as they allow."""
    return ProducerConfig(limits=route.limits, collection_max_size=route.limits.max_request_size)


def _stream_route(name: str, spec: object) -> StreamRoute:
    where = f"SHARDLINE_STREAMS[{name!r}]"
    if not isinstance(spec, dict):
        raise ConfigurationError(f'{where} must be an object with "streamName"')
    unknown = sorted(set(spec) - {"streamName", "maxRecordSize"})
    if unknown:
        raise ConfigurationError(f"{where} has unknown keys {unknown}")
    stream_name = spec.get("streamName")
    if not isinstance(stream_name, str) or not stream_name:
        raise ConfigurationError(f'{where}["streamName"] must be a non-empty string')
    size = spec.get("maxRecordSize")
    if size is None:
        return StreamRoute(name, stream_name)
    if not isinstance(size, int) or isinstance(size, bool):
        raise ConfigurationError(f'{where}["maxRecordSize"] must be an integer number of bytes')
    try:
        limits = Limits.for_max_record_size(size)
    except ValueError as exc:
        raise ConfigurationError(f'{where}["maxRecordSize"]: {exc}') from None
    return StreamRoute(name, stream_name, limits)


def _positive_int(env: Mapping[str, str], name: str, default: int) -> int:
    text = env.get(name, "").strip()
    if not text:
        return default
    try:
        value = int(text)
    except ValueError:
        raise ConfigurationError(f"{name} must be an integer, got {text!r}") from None
    if value < 1:
        raise ConfigurationError(f"{name} must be at least 1, got {value}")
    return value


# -- the request -------------------------------------------------------------------------------


def handle(
    route_name: str,
    body: str | None,
    *,
    content_type: str | None,
    is_base64_encoded: bool,
    settings: ApiSettings,
    put: PutFunction,
) -> ApiResponse:
    """Answer one request: check all of it, then `put` the records and shape their results."""
    try:
        request = parse_request(
            route_name,
            body,
            content_type=content_type,
            is_base64_encoded=is_base64_encoded,
            settings=settings,
        )
    except RequestRejected as rejected:
        return rejected.response
    return results_response(put(request.route, request.records))


def parse_request(
    route_name: str,
    body: str | None,
    *,
    content_type: str | None,
    is_base64_encoded: bool,
    settings: ApiSettings,
) -> PutRequest:
    """The route and records of a request, or `RequestRejected` (404, 415, 413, 400) — in that order."""
    route = settings.streams.get(route_name)
    if route is None:
        raise _rejected(404, f"unknown stream {route_name[:128]!r}")
    media_type = request_media_type(content_type)
    text = body_text(body, is_base64_encoded=is_base64_encoded, max_body_bytes=settings.max_body_bytes)
    if media_type == NDJSON_MEDIA_TYPE:
        items = parse_ndjson_body(text, max_records=settings.max_records_per_request)
    else:
        items = parse_json_body(text, max_records=settings.max_records_per_request)
    try:
        return PutRequest(route, to_user_records(items, route.limits))
    except InvalidRecord as invalid:
        raise RequestRejected(validation_response(invalid.problems)) from None


def request_media_type(content_type: str | None) -> str:
    """`application/json` or `application/x-ndjson` from a Content-Type header, else 415."""
    accepted = f"Content-Type must be {JSON_MEDIA_TYPE} or {NDJSON_MEDIA_TYPE} (UTF-8)"
    if not content_type:
        raise _rejected(415, f"no Content-Type: {accepted}")
    media_type, *parameters = (part.strip() for part in content_type.split(";"))
    media_type = media_type.lower()
    if media_type not in (JSON_MEDIA_TYPE, NDJSON_MEDIA_TYPE):
        raise _rejected(415, f"unsupported Content-Type {media_type[:100]!r}: {accepted}")
    for parameter in parameters:
        key, _, value = parameter.partition("=")
        if key.strip().lower() == "charset" and value.strip().strip('"').lower() not in _UTF8:
            raise _rejected(415, f"unsupported charset {value.strip()[:40]!r}: {accepted}")
    return media_type


def body_text(body: str | None, *, is_base64_encoded: bool, max_body_bytes: int) -> str:
    """The body as text: base64-decoded if API Gateway encoded it, at most `max_body_bytes`, UTF-8."""
    if body is None:
        raw = b""
    elif is_base64_encoded:
        if len(body) // 4 * 3 > max_body_bytes + 2:
            raise _too_large_body(len(body) // 4 * 3, max_body_bytes)
        try:
            raw = base64.b64decode(body, validate=True)
        except (binascii.Error, ValueError):
            raise _rejected(400, "the body is marked base64-encoded but is not valid base64") from None
    else:
        raw = body.encode("utf-8", "surrogatepass")
    if len(raw) > max_body_bytes:
        raise _too_large_body(len(raw), max_body_bytes)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _rejected(400, f"the body is not valid UTF-8 (byte {exc.start})") from None


def parse_json_body(text: str, *, max_records: int) -> list[Any]:
    """The record objects of an `application/json` body: `{"records": [...]}`."""
    document = _load_json(text, "the body")
    if not isinstance(document, dict) or not isinstance(document.get("records"), list):
        raise _rejected(400, 'the body must be a JSON object with a "records" array')
    unknown = sorted(set(document) - {"records"})
    if unknown:
        raise _rejected(400, f"unknown top-level fields {[name[:64] for name in unknown[:10]]}")
    items: list[Any] = document["records"]
    _check_count(len(items), max_records)
    return items


def parse_ndjson_body(text: str, *, max_records: int) -> list[Any]:
    """The record objects of an `application/x-ndjson` body: one per line, blank lines ignored."""
    lines = [(number, line) for number, line in enumerate(text.split("\n"), start=1) if line.strip()]
    _check_count(len(lines), max_records)  # before parsing: a count is cheaper than a parse
    return [_load_json(line, f"line {number}") for number, line in lines]


def _check_count(count: int, max_records: int) -> None:
    if count == 0:
        raise _rejected(400, "the request holds no records")
    if count > max_records:
        raise _rejected(413, f"the request holds {count} records; at most {max_records} are accepted")


def _load_json(text: str, where: str) -> Any:
    try:
        return json.loads(text, parse_constant=_reject_constant)
    except RecursionError:
        raise _rejected(400, f"{where} is nested too deeply") from None
    except ValueError as exc:  # JSONDecodeError, NaN/Infinity, integers with too many digits
        reason = (
            f"{exc.msg} at line {exc.lineno} column {exc.colno}"
            if isinstance(exc, json.JSONDecodeError)
            else exc
        )
        raise _rejected(400, f"{where} is not valid JSON: {reason}") from None


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON value")


def _too_large_body(size: int, max_body_bytes: int) -> RequestRejected:
    return _rejected(413, f"the body is {size} bytes; at most {max_body_bytes} are accepted")


def _rejected(status: int, message: str) -> RequestRejected:
    return RequestRejected(ApiResponse(status, {"message": message}))


# -- responses ---------------------------------------------------------------------------------


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
