"""Lambda adapter for the producer API: `POST /streams/{stream}/records` behind API Gateway (REST).

    function = ProducerFunction()
    handler = function.handler   # the Lambda entry point: Logger, Tracer and EMF Metrics wired

Every record is stamped with the request's authenticated caller (`_http_caller.caller_of`: the
IAM principal, or `apikey:<id>`), which scopes its id for consumers. An IAM caller over its share
(`PER_CALLER_RATE`, counted in the idempotency table by `_http_rate`) is answered 429 with
`Retry-After` before its request is read.

The HTTP contract (`_http_request`, `_http_response`, `_http_settings`) decides everything; this
adapter wires Powertools (REST resolver, Logger with the API Gateway request id as correlation id,
Tracer, EMF Metrics) and keeps one `Producer` per stream, with its shard map, across warm
invocations. Routing is the resolver's: a path the API does not serve answers 404, another method
on `/streams/{stream}/records` 405 with `Allow: POST` (neither is the 500 of an unexpected
error). Powertools is imported when a function is built, never by `shardline.aws_lambda`
itself; no AWS client is made before the first request (`AWS_ENDPOINT_URL_KINESIS` points it
elsewhere, as boto3 reads it).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from shardline.aws_lambda._emf import publish_metrics
from shardline.aws_lambda._http_caller import caller_of
from shardline.aws_lambda._http_idempotency import IdempotencyClient, IdempotencyStore
from shardline.aws_lambda._http_rate import CallerRateLimiter, RateClient, iam_caller, rate_limited_response
from shardline.aws_lambda._http_request import IDEMPOTENCY_KEY_HEADER, handle
from shardline.aws_lambda._http_response import (
    ApiResponse,
    internal_error_response,
    log_fields,
    method_not_allowed_response,
    route_not_found_response,
)
from shardline.aws_lambda._http_settings import (
    DEADLINE_MARGIN_SECONDS,
    MAX_FLUSH_SECONDS,
    ApiSettings,
    StreamRoute,
    producer_config,
    settings_from_env,
)
from shardline.errors import ConfigurationError
from shardline.kinesis._records import UserRecord
from shardline.producer._producer import Producer, deadline_from_context
from shardline.producer._result import RecordResult

if TYPE_CHECKING:
    from botocore.config import Config

    from shardline.protocols import KinesisClient

_ROUTE = "/streams/<stream>/records"
#: Every other method on `_ROUTE` gets its own route answering 405: Powertools matches routes by
#: method and path together, so without them a wrong method would fall through to "not found".
_OTHER_METHODS = ["GET", "HEAD", "PUT", "PATCH", "DELETE", "OPTIONS"]
_ALLOWED_METHODS = ("POST",)


def client_config() -> Config:
    """shardline retries; the client must not (one attempt), nor outlive the deadline margin much."""
    from botocore.config import Config

    return Config(
        retries={"total_max_attempts": 1, "mode": "standard"},
        connect_timeout=1,
        read_timeout=5,
        max_pool_connections=16,
    )


class TableClient(IdempotencyClient, RateClient, Protocol):
    """The calls the function makes on its idempotency table: the ids' hashes and the callers' counts."""


class ProducerFunction:
    """The producer function's Lambda state: the Kinesis client, one producer per stream, the last
    metrics published per producer, and `handler`, the entry point."""

    def __init__(self) -> None:
        from aws_lambda_powertools import Logger, Metrics, Tracer  # an adapter: the core never imports it
        from aws_lambda_powertools.event_handler import APIGatewayRestResolver, Response
        from aws_lambda_powertools.logging import correlation_paths
        from aws_lambda_powertools.metrics import MetricUnit

        self.logger = Logger()
        self.tracer = Tracer()
        self.metrics = Metrics(namespace=os.environ.get("POWERTOOLS_METRICS_NAMESPACE") or "shardline")
        self.app = APIGatewayRestResolver()
        self.producers: dict[tuple[str, int], Producer] = {}
        self._snapshots: dict[tuple[str, int], dict[str, Any]] = {}
        self._kinesis: KinesisClient | None = None
        self._dynamodb: TableClient | None = None
        self._id_store: IdempotencyStore | None = None
        self._limiter: CallerRateLimiter | None = None
        #: The clock of the per-caller windows (tests inject one; windows are wall-clock seconds, so
        #: that every execution environment counts in the same window).
        self.rate_clock: Callable[[], float] = time.time
        self._put = self.tracer.capture_method(capture_response=False)(self._put)  # type: ignore[method-assign]

        @self.app.post(_ROUTE)
        def put_records(stream: str) -> Response[str]:
            """Validate the request, put its records as its authenticated caller's, answer with one
            result per record. An event without an authenticated caller is a deployment fault:
            `UnauthenticatedEvent`, a 500, before anything is read or written."""
            event = self.app.current_event
            caller = caller_of(event.raw_event)  # API Gateway's word, never the body's or a header's
            self.tracer.put_annotation(key="stream", value=stream)
            settings = settings_from_env()
            refused = self._over_share(settings, event.raw_event)
            if refused is not None:  # before the body is read: nothing of it is sent
                return respond(refused, stream=stream, **caller_fields(event.raw_event))
            answer = handle(
                stream,
                event.body,
                content_type=event.headers.get("content-type"),
                is_base64_encoded=bool(event.is_base64_encoded),
                settings=settings,
                put=self._put,
                idempotency_key=header_values(event.raw_event, IDEMPOTENCY_KEY_HEADER),
                envelope_bytes=envelope_bytes(event.raw_event),
                request_id=request_id(event.raw_event),
                caller=caller,
                known_ids=self._known_ids(settings),
                unrecorded=self._unrecorded,
            )
            return respond(answer, stream=stream, **caller_fields(event.raw_event))

        @self.app.route(_ROUTE, method=_OTHER_METHODS)
        def wrong_method(stream: str) -> Response[str]:
            """405 with `Allow`: the path is the API's, the method is not."""
            event = self.app.current_event
            return respond(method_not_allowed_response(event.http_method, event.path, _ALLOWED_METHODS))

        # Powertools hands an unmatched request to the handler of NotFoundError, and without one of
        # its own that is `internal_error` below (NotFoundError is an Exception): a 500 for a typo.
        @self.app.not_found
        def not_found(exc: Exception) -> Response[str]:
            """404 naming the method and path that no route serves."""
            event = self.app.current_event
            return respond(route_not_found_response(event.http_method, event.path))

        def respond(answer: ApiResponse, **log_extra: str) -> Response[str]:
            """Count a 4xx as rejected, log the answer (never a payload: who called, and the shard and
            sequence numbers of what it wrote), and shape it for the resolver."""
            if 400 <= answer.status < 500:
                self.metrics.add_metric(name="RejectedRequests", unit=MetricUnit.Count, value=1)
            self.logger.info("answered", extra={**log_extra, **log_fields(answer)})
            return Response(
                answer.status,
                content_type="application/json",
                body=answer.json(),
                headers=dict(answer.headers),
            )

        @self.app.exception_handler(Exception)  # type: ignore[untyped-decorator]  # Powertools leaves it untyped
        def internal_error(exc: Exception) -> Response[str]:
            """Log the failure (with its traceback) and answer 500 with the request id, no details."""
            self.logger.exception("request failed")
            self.metrics.add_metric(name="InternalErrors", unit=MetricUnit.Count, value=1)
            answer = internal_error_response(request_id(self.app.current_event.raw_event))
            return Response(answer.status, content_type="application/json", body=answer.json())

        @self.logger.inject_lambda_context(
            correlation_id_path=correlation_paths.API_GATEWAY_REST, log_event=False
        )
        @self.tracer.capture_lambda_handler(capture_response=False)
        @self.metrics.log_metrics
        def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
            """The Lambda entry point."""
            return self.app.resolve(event, context)

        self.handler = handler

    def _known_ids(self, settings: ApiSettings) -> IdempotencyStore | None:
        """The idempotency table's store (None without one), kept across warm invocations."""
        if not settings.idempotency_table:
            return None
        store = self._id_store
        if store is None or store.table != settings.idempotency_table:
            store = IdempotencyStore(
                self._dynamodb_client,
                settings.idempotency_table,
                ttl_seconds=settings.idempotency_ttl_seconds,
            )
            self._id_store = store
        store.ttl_seconds = settings.idempotency_ttl_seconds
        return store

    def _over_share(self, settings: ApiSettings, event: Mapping[str, Any]) -> ApiResponse | None:
        """429 when the event's IAM caller is over its share of requests (`_http_rate`); None: go on
        (no limit configured, or an API-key caller, whom its usage plan limits)."""
        from aws_lambda_powertools.metrics import MetricUnit

        user_arn = iam_caller(event)
        if not settings.per_caller_rate or user_arn is None:
            return None
        if not settings.idempotency_table:
            raise ConfigurationError(
                "PER_CALLER_RATE needs IDEMPOTENCY_TABLE: the callers' counts are kept there, shared "
                "by every execution environment"
            )
        limiter = self._limiter
        if limiter is None or (limiter.table, limiter.rate) != (
            settings.idempotency_table,
            settings.per_caller_rate,
        ):
            limiter = CallerRateLimiter(
                self._dynamodb_client,
                settings.idempotency_table,
                rate=settings.per_caller_rate,
                clock=self._now,
            )
            self._limiter = limiter
        verdict = limiter.admit(user_arn)
        if verdict.unavailable is not None:
            self.logger.warning("caller's share not counted", extra={"code": verdict.unavailable})
            self.metrics.add_metric(name="PerCallerLimitUnavailable", unit=MetricUnit.Count, value=1)
        if verdict.admitted:
            return None
        self.logger.info("caller over its share", extra={"share": verdict.key, "limit": limiter.limit})
        self.metrics.add_metric(name="PerCallerThrottled", unit=MetricUnit.Count, value=1)
        return rate_limited_response(verdict.retry_after)

    def _now(self) -> float:
        return self.rate_clock()

    def _dynamodb_client(self) -> TableClient:
        if self._dynamodb is None:
            import boto3  # in the Lambda runtime; imported on first use, not at cold start

            # A short read timeout: the table is read before the send, within the API's 29 s
            # (at most 5 rounds), and the send's deadline is taken from what time is left.
            config = client_config().merge(type(client_config())(read_timeout=2))
            self._dynamodb = boto3.client("dynamodb", config=config)
        return self._dynamodb

    def _unrecorded(self, count: int) -> None:
        """Records written whose payload hash could not be kept: a later post of their id with another
        body reaches the consumers, which catch it as a conflict. Logged and counted (alarmable)."""
        from aws_lambda_powertools.metrics import MetricUnit

        self.logger.warning("payload hashes not recorded", extra={"unrecorded": count})
        self.metrics.add_metric(name="IdempotencyHashesNotRecorded", unit=MetricUnit.Count, value=count)

    def set_kinesis_client(self, client: KinesisClient | None) -> None:
        """Use `client` for Kinesis from now on (None: a default boto3 client, made on first use)."""
        self._kinesis = client
        self.producers.clear()
        self._snapshots.clear()

    def _kinesis_client(self) -> KinesisClient:
        if self._kinesis is None:
            import boto3  # in the Lambda runtime; imported on first use, not at cold start

            self._kinesis = boto3.client("kinesis", config=client_config())
        return self._kinesis

    def _producer(self, route: StreamRoute) -> tuple[tuple[str, int], Producer]:
        key = (route.stream_name, route.limits.max_record_size)
        producer = self.producers.get(key)
        if producer is None:
            give_up = settings_from_env().throttled_give_up_seconds
            config = producer_config(route, give_up)
            producer = Producer(self._kinesis_client(), route.stream_name, config=config)
            self.producers[key] = producer
        return key, producer

    def _put(self, route: StreamRoute, records: list[UserRecord]) -> Sequence[RecordResult]:
        key, producer = self._producer(route)
        deadline = min(
            deadline_from_context(self.app.lambda_context, margin=DEADLINE_MARGIN_SECONDS), MAX_FLUSH_SECONDS
        )
        try:
            return producer.put_many(records, deadline=deadline)
        finally:
            snapshot = producer.metrics.snapshot()
            self.metrics.add_dimension(name="StreamName", value=route.stream_name)
            publish_metrics(self.metrics, snapshot, since=self._snapshots.get(key))
            self._snapshots[key] = snapshot


def header_values(event: Mapping[str, Any], name: str) -> list[str] | None:
    """Every value of header `name` (case-insensitive) in a REST proxy event, or None without it."""
    wanted = name.lower()
    for field in ("multiValueHeaders", "headers"):
        headers = event.get(field) or {}
        values = [value for key, value in headers.items() if key.lower() == wanted]
        if values:
            flat = [item for value in values for item in (value if isinstance(value, list) else [value])]
            return [str(item) for item in flat]
    return None


#: `requestContext.identity` fields that say who called: IAM caller, API key, organization, address.
CALLER_FIELDS = ("userArn", "accountId", "principalOrgId", "apiKeyId", "sourceIp")


def caller_fields(event: Mapping[str, Any]) -> dict[str, str]:
    """Who sent a REST proxy event, as API Gateway authenticated it (absent fields left out); the
    same request id joins this line to the API's access log."""
    context = event.get("requestContext") or {}
    identity = context.get("identity") if isinstance(context, Mapping) else None
    if not isinstance(identity, Mapping):
        return {}
    return {f"caller.{name}": str(identity[name]) for name in CALLER_FIELDS if identity.get(name)}


def envelope_bytes(event: Mapping[str, Any]) -> int:
    """Bytes of the Lambda event beside its body (the event serialized with an empty body)."""
    return len(json.dumps({**event, "body": ""}))


def request_id(event: Mapping[str, Any]) -> str | None:
    """API Gateway's request id (the correlation id of the function's logs)."""
    context = event.get("requestContext") or {}
    value = context.get("requestId") if isinstance(context, Mapping) else None
    return str(value) if value else None
