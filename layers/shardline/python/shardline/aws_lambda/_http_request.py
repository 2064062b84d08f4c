"""The producer's HTTP contract: `POST /streams/{stream}/records`, parsed, validated and answered.

Pure Python (no Powertools, no AWS client): the Lambda handler (`shardline.cdk`'s producer
function) reads the event, calls `handle` with a `put` callable that runs shardline's Producer, and
returns the `ApiResponse` it gets back. Everything about a request to that route is decided here:

- the body is `{"records": [{"data": <base64>, "partitionKey": ..., "explicitHashKey": ...,
  "id": ...}]}` (`application/json`) or one such record object per line (`application/x-ndjson`);
  a record may carry `"json": <any JSON value>` instead of `"data"` (sent as compact UTF-8 JSON);
- identity: a record's `id` (1 to 128 visible ASCII characters) is the client's name for it, and
  shardline consumers apply each id once. An `Idempotency-Key` header (1 to 120 visible ASCII
  characters, one per request) gives every record without its own `id` the id `<key>:<index>`
  (its position in the request), so a request posted again as it was, with the same header, is
  applied once. Two records of one request may not share an id (400 naming both). Answers carry
  each record's id;
- every record is checked before anything is sent: one bad record answers 400 with every
  problem as `{index, field, message}`, and `put` is never called;
- a partition key is 1 to 256 UTF-16 code units, as Kinesis counts it (an emoji counts 2);
- unknown stream 404, wrong content type 415, a bad `Idempotency-Key` 400 (naming the header),
  too many records or too large a body 413, malformed JSON 400;
- the body bound counts the body as the Lambda event carries it: API Gateway puts the body in a
  JSON string of the event, escaped (a quote, a backslash or a newline takes 2 bytes, a non-ASCII
  character is counted as its `\\uXXXX` escapes, 6 or 12 bytes), or base64 text when it passes
  the body base64-encoded. A body over `max_body_bytes` so counted, or whose event would not fit
  Lambda's 6 MB (6,291,456-byte) invocation payload, is answered 413 by shardline;
- results answer 200 (all written), 207 (per-record outcomes, each entry saying whether a copy may
  be in the stream and what to do), 404 (nothing written: the route's Kinesis stream does not
  exist, so retrying cannot help), 503 with `Retry-After` (nothing written: throttled, unavailable
  or unreachable; never when a reply was lost) or 500 (nothing written: the stream refused the
  function itself, a deployment fault); see `_http_response` for the entries;
- before `handle` is reached, the adapter (`_producer_function`) answers a path the API does not
  serve with 404 and another method on `/streams/{stream}/records` with 405 and `Allow: POST`.

Messages never echo record payloads or keys, nor internal exception text, so responses and logs
can be kept as they are.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from shardline.aws_lambda._http_idempotency import IdempotencyStore, IdempotencyUnavailable
from shardline.aws_lambda._http_records import to_user_records
from shardline.aws_lambda._http_response import IDEMPOTENCY_KEY_HEADER as IDEMPOTENCY_KEY_HEADER
from shardline.aws_lambda._http_response import (
    ApiResponse,
    id_check_unavailable_response,
    results_response,
    reused_id_response,
    validation_response,
)
from shardline.aws_lambda._http_settings import (
    DEFAULT_EVENT_ENVELOPE_BYTES,
    LAMBDA_PAYLOAD_BYTES,
    MAX_IDEMPOTENCY_KEY_LENGTH,
    ApiSettings,
    StreamRoute,
)
from shardline.errors import InvalidRecord, RequestRejected
from shardline.kinesis._records import UserRecord
from shardline.producer._result import RecordResult

JSON_MEDIA_TYPE = "application/json"
NDJSON_MEDIA_TYPE = "application/x-ndjson"

_UTF8 = frozenset({"utf-8", "utf8"})
_IDEMPOTENCY_KEY = re.compile(rf"[\x21-\x7e]{{1,{MAX_IDEMPOTENCY_KEY_LENGTH}}}")


@dataclass(frozen=True, slots=True)
class PutRequest:
    """A request that passed every check: where to send, and what."""

    route: StreamRoute
    records: list[UserRecord]


#: Sends validated records to a route's stream and returns one result per record, in order.
PutFunction = Callable[[StreamRoute, list[UserRecord]], Sequence[RecordResult]]


def handle(
    route_name: str,
    body: str | None,
    *,
    content_type: str | None,
    is_base64_encoded: bool,
    settings: ApiSettings,
    put: PutFunction,
    idempotency_key: str | Sequence[str] | None = None,
    envelope_bytes: int = DEFAULT_EVENT_ENVELOPE_BYTES,
    request_id: str | None = None,
    caller: str | None = None,
    known_ids: IdempotencyStore | None = None,
    unrecorded: Callable[[int], None] | None = None,
) -> ApiResponse:
    """Answer one request: check all of it, then `put` the records and shape their results.

    `idempotency_key` is the `Idempotency-Key` header (every value it was given, if several);
    `envelope_bytes` is what the Lambda event holds beside the body (its size with an empty
    body); `request_id` names the request in a 500; `caller` is the authenticated caller stamped
    on every record (`_http_caller.caller_of`; None: the producer's own `ProducerConfig.caller`).
    With `known_ids`, a record whose id its caller wrote before with another payload answers 422
    and nothing is sent; the hashes of what was written are recorded after, and `unrecorded(n)`
    hears of the n that could not be."""
    try:
        request = parse_request(
            route_name,
            body,
            content_type=content_type,
            is_base64_encoded=is_base64_encoded,
            settings=settings,
            idempotency_key=idempotency_key,
            envelope_bytes=envelope_bytes,
            caller=caller,
        )
    except RequestRejected as rejected:
        assert isinstance(rejected.response, ApiResponse)  # this module raises it with one
        return rejected.response
    stream = request.route.stream_name
    if known_ids is not None:
        try:
            conflicts = known_ids.conflicts(stream, request.records)
        except IdempotencyUnavailable as unavailable:
            return id_check_unavailable_response(unavailable.code, [r.id for r in request.records])
        if conflicts:
            return reused_id_response(conflicts, check_idempotency_key(idempotency_key))
    results = put(request.route, request.records)
    if known_ids is not None:
        try:
            lost = known_ids.remember(stream, request.records, results)
        except Exception:  # records were written: the answer must say so, whatever failed here
            lost = sum(1 for record in request.records if record.id)
        if lost and unrecorded is not None:
            unrecorded(lost)
    return results_response(
        results,
        route=request.route,
        ids=[record.id for record in request.records],
        request_id=request_id,
    )


def parse_request(
    route_name: str,
    body: str | None,
    *,
    content_type: str | None,
    is_base64_encoded: bool,
    settings: ApiSettings,
    idempotency_key: str | Sequence[str] | None = None,
    envelope_bytes: int = DEFAULT_EVENT_ENVELOPE_BYTES,
    caller: str | None = None,
) -> PutRequest:
    """The route and records of a request, or `RequestRejected` (404, 415, 400 for the header, 413
    for the body, 400, 413 for the count, 400 for the records) — in that order."""
    route = settings.streams.get(route_name)
    if route is None:
        raise _rejected(404, f"unknown stream {route_name[:128]!r}")
    media_type = request_media_type(content_type)
    key = check_idempotency_key(idempotency_key)
    check_event_size(
        body,
        is_base64_encoded=is_base64_encoded,
        max_body_bytes=settings.max_body_bytes,
        envelope_bytes=envelope_bytes,
    )
    text = body_text(body, is_base64_encoded=is_base64_encoded, max_body_bytes=settings.max_body_bytes)
    if media_type == NDJSON_MEDIA_TYPE:
        items = parse_ndjson_body(text, max_records=settings.max_records_per_request)
    else:
        items = parse_json_body(text, max_records=settings.max_records_per_request)
    try:
        records = to_user_records(
            items,
            route.limits,
            idempotency_key=key,
            explicit_hash_keys=route.explicit_hash_keys,
            caller=caller,
        )
        return PutRequest(route, records)
    except InvalidRecord as invalid:
        raise RequestRejected(validation_response(invalid.problems)) from None


def check_idempotency_key(value: str | Sequence[str] | None) -> str | None:
    """The request's `Idempotency-Key`, or None without one; 400 naming the header if it is not 1 to
    `MAX_IDEMPOTENCY_KEY_LENGTH` visible ASCII characters, or is given more than once."""
    if value is None:
        return None
    if not isinstance(value, str):
        distinct = list(dict.fromkeys(value))
        if not distinct:
            return None
        if len(distinct) > 1:
            raise _header_rejected(f"give one {IDEMPOTENCY_KEY_HEADER} header, not {len(distinct)}")
        value = distinct[0]
    if not _IDEMPOTENCY_KEY.fullmatch(value):
        raise _header_rejected(
            f"the {IDEMPOTENCY_KEY_HEADER} header must be 1 to {MAX_IDEMPOTENCY_KEY_LENGTH} visible "
            f"ASCII characters (no spaces), got {len(value)} characters"
            + ("" if value.isascii() and value.isprintable() and " " not in value else " with others")
        )
    return value


def event_body_bytes(body: str | None, *, is_base64_encoded: bool) -> int:
    """Bytes the body takes in the Lambda event API Gateway builds: a JSON string, escaped.

    Base64 text (a body API Gateway passed encoded) has nothing to escape. Otherwise a quote, a
    backslash and a control character grow to their escapes, and a non-ASCII character is counted
    as its `\\uXXXX` escapes (6 bytes; 12 beyond U+FFFF), which is at least its UTF-8 size: the
    count never falls short of what the event holds, whichever way the gateway escapes."""
    if body is None:
        return 0
    if is_base64_encoded:
        return len(body)
    return len(json.dumps(body)) - 2  # ensure_ascii: an ASCII string, so characters are bytes


def check_event_size(
    body: str | None, *, is_base64_encoded: bool, max_body_bytes: int, envelope_bytes: int
) -> None:
    """413 unless the body, as the event carries it, is at most `max_body_bytes` and the whole
    event (`envelope_bytes` beside the body) fits Lambda's invocation payload."""
    if body is None:
        return
    bound = min(max_body_bytes, LAMBDA_PAYLOAD_BYTES - envelope_bytes - 2)
    size = event_body_bytes(body, is_base64_encoded=is_base64_encoded)
    if size > bound:
        raise _rejected(
            413,
            f"the body takes {size} bytes in the Lambda event (JSON-escaped, as API Gateway passes it); "
            f"at most {bound} are accepted: send fewer records per request",
        )


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


def _header_rejected(message: str) -> RequestRejected:
    return RequestRejected(ApiResponse(400, {"message": message, "header": IDEMPOTENCY_KEY_HEADER}))


def _rejected(status: int, message: str) -> RequestRejected:
    return RequestRejected(ApiResponse(status, {"message": message}))
