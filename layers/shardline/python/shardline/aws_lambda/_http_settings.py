"""Settings of the producer's HTTP API: the streams it serves and its request bounds.

Read from the function's environment (`ProducerEnvironment`, now, not at import); a bad value is a
deployment bug: `ConfigurationError` naming the variable or route, and the function answers 500.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

from shardline.aws_lambda._environment import (
    DEFAULT_IDEMPOTENCY_TTL_SECONDS,
    DEFAULT_MAX_BODY_BYTES,
    DEFAULT_MAX_RECORDS_PER_REQUEST,
    DEFAULT_THROTTLED_GIVE_UP_SECONDS,
    ProducerEnvironment,
)
from shardline.errors import ConfigurationError
from shardline.kinesis._limits import DEFAULT_LIMITS, MAX_RECORD_ID_LENGTH, Limits
from shardline.producer._config import ProducerConfig

#: API Gateway (REST) gives up on an integration after 29 s: flushing longer is wasted work.
API_GATEWAY_TIMEOUT_SECONDS = 29.0
#: Seconds of the invocation kept free when flushing: a request in flight at the deadline is
#: awaited, and the producer function's client gives up reading after 5 s.
DEADLINE_MARGIN_SECONDS = 6.0
#: Longest a flush may run: the API Gateway timeout minus the margin.
MAX_FLUSH_SECONDS = API_GATEWAY_TIMEOUT_SECONDS - DEADLINE_MARGIN_SECONDS
#: Lambda's synchronous invocation payload ("6 MB"): the whole event API Gateway sends, as JSON.
LAMBDA_PAYLOAD_BYTES = 6 * 1024 * 1024
#: What a REST proxy event holds beside its body when the adapter cannot measure it: headers twice
#: (`headers` and `multiValueHeaders`, API Gateway takes 10 KiB of them), the query string twice,
#: and the request context. The producer function measures the event it was given instead.
DEFAULT_EVENT_ENVELOPE_BYTES = 64 * 1024
#: `Idempotency-Key` is at most this long, so that `<key>:<index>` stays a valid record id
#: (`MAX_RECORD_ID_LENGTH`) for any index a request can hold (7 digits and the colon).
MAX_IDEMPOTENCY_KEY_LENGTH = MAX_RECORD_ID_LENGTH - 8


@dataclass(frozen=True, slots=True)
class StreamRoute:
    """One `{stream}` the API serves: the physical Kinesis stream behind it, that stream's limits,
    and whether callers may choose a record's shard with `explicitHashKey` (False: refused, so no
    caller can aim all its records at one shard, nor at another tenant's)."""

    name: str
    stream_name: str
    limits: Limits = DEFAULT_LIMITS
    explicit_hash_keys: bool = True


@dataclass(frozen=True, slots=True)
class ApiSettings:
    """What the function's environment configures: the streams, the request bounds, how long a
    throttling shard may hold a request (`throttled_give_up_seconds`), and each IAM caller's share
    of requests (`per_caller_rate`, counted in the idempotency table)."""

    streams: Mapping[str, StreamRoute]
    max_records_per_request: int = DEFAULT_MAX_RECORDS_PER_REQUEST
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    throttled_give_up_seconds: float = DEFAULT_THROTTLED_GIVE_UP_SECONDS
    idempotency_table: str = ""  # the table of ids' payload hashes; "": not checked
    idempotency_ttl_seconds: int = DEFAULT_IDEMPOTENCY_TTL_SECONDS
    per_caller_rate: float = 0.0  # each IAM caller's requests per second (`_http_rate`); 0: none


def settings_from_env(environ: Mapping[str, str] | None = None) -> ApiSettings:
    """The API's settings from the function's environment (see `ProducerEnvironment`)."""
    env = ProducerEnvironment.from_environ(environ)
    return ApiSettings(
        streams=parse_streams(env.streams_json),
        max_records_per_request=env.max_records_per_request,
        max_body_bytes=env.max_body_bytes,
        throttled_give_up_seconds=env.throttled_give_up_seconds,
        idempotency_table=env.idempotency_table,
        idempotency_ttl_seconds=env.idempotency_ttl_seconds,
        per_caller_rate=env.per_caller_rate,
    )


def parse_streams(text: str) -> dict[str, StreamRoute]:
    """Parse `SHARDLINE_STREAMS`: `{"<route name>": {"streamName": ..., "maxRecordSize": ...,
    "explicitHashKeys": true|false}}` (the last two optional)."""
    if not text.strip():
        return {}
    try:
        document = json.loads(text)
    except ValueError as exc:
        raise ConfigurationError(f"SHARDLINE_STREAMS is not valid JSON: {exc}") from None
    if not isinstance(document, dict):
        raise ConfigurationError("SHARDLINE_STREAMS must be a JSON object of route name to stream")
    return {name: _stream_route(name, spec) for name, spec in document.items()}


def producer_config(
    route: StreamRoute, throttled_give_up_seconds: float | None = DEFAULT_THROTTLED_GIVE_UP_SECONDS
) -> ProducerConfig:
    """The producer settings for a route: its stream's limits, requests as large as they allow, and
    records given up once their shard has throttled them for `throttled_give_up_seconds`."""
    return ProducerConfig(
        limits=route.limits,
        collection_max_size=route.limits.max_request_size,
        throttled_give_up=throttled_give_up_seconds,
    )


def _stream_route(name: str, spec: object) -> StreamRoute:
    where = f"SHARDLINE_STREAMS[{name!r}]"
    if not isinstance(spec, dict):
        raise ConfigurationError(f'{where} must be an object with "streamName"')
    unknown = sorted(set(spec) - {"streamName", "maxRecordSize", "explicitHashKeys"})
    if unknown:
        raise ConfigurationError(f"{where} has unknown keys {unknown}")
    stream_name = spec.get("streamName")
    if not isinstance(stream_name, str) or not stream_name:
        raise ConfigurationError(f'{where}["streamName"] must be a non-empty string')
    explicit = spec.get("explicitHashKeys", True)
    if not isinstance(explicit, bool):
        raise ConfigurationError(f'{where}["explicitHashKeys"] must be true or false')
    size = spec.get("maxRecordSize")
    if size is None:
        return StreamRoute(name, stream_name, explicit_hash_keys=explicit)
    if not isinstance(size, int) or isinstance(size, bool):
        raise ConfigurationError(f'{where}["maxRecordSize"] must be an integer number of bytes')
    try:
        limits = Limits.for_max_record_size(size)
    except ValueError as exc:
        raise ConfigurationError(f'{where}["maxRecordSize"]: {exc}') from None
    return StreamRoute(name, stream_name, limits, explicit)
