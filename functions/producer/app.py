"""Producer Lambda: `POST /streams/{stream}/records` behind API Gateway (REST), kept thin.

`shardline.aws_lambda._http_api` parses, validates and shapes the answer; this module only wires Powertools
(REST resolver, Logger with the API Gateway request id as correlation id, Tracer, EMF Metrics)
and keeps one shardline `Producer` per stream (with its shard map) across warm invocations.
No AWS client is created at import time: the Kinesis client and producers are made on first use.

Environment: `SHARDLINE_STREAMS`, `MAX_RECORDS_PER_REQUEST`, `MAX_BODY_BYTES` (see
`shardline.aws_lambda._http_api.settings_from_env`), `POWERTOOLS_SERVICE_NAME`, `POWERTOOLS_METRICS_NAMESPACE`
(default "shardline"); `AWS_ENDPOINT_URL_KINESIS` points the client elsewhere (boto3 reads it).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import boto3
from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.event_handler import APIGatewayRestResolver, Response
from aws_lambda_powertools.logging import correlation_paths
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext
from botocore.config import Config

from shardline.aws_lambda import _emf as emf
from shardline.aws_lambda import _http_api as http_api
from shardline.kinesis import UserRecord
from shardline.producer import Producer, RecordResult, deadline_from_context

#: shardline retries; the client must not (one attempt), and must not outlive the deadline margin much.
CLIENT_CONFIG = Config(
    retries={"total_max_attempts": 1, "mode": "standard"},
    connect_timeout=1,
    read_timeout=5,
    max_pool_connections=16,
)

logger = Logger()
tracer = Tracer()
metrics = Metrics(namespace=os.environ.get("POWERTOOLS_METRICS_NAMESPACE") or "shardline")
app = APIGatewayRestResolver()

_kinesis: Any = None
_producers: dict[tuple[str, int], Producer] = {}
_snapshots: dict[tuple[str, int], dict[str, Any]] = {}


def set_kinesis_client(client: Any) -> None:
    """Use `client` for Kinesis from now on (None: a default boto3 client, made on first use)."""
    global _kinesis
    _kinesis = client
    _producers.clear()
    _snapshots.clear()


def _kinesis_client() -> Any:
    global _kinesis
    if _kinesis is None:
        _kinesis = boto3.client("kinesis", config=CLIENT_CONFIG)
    return _kinesis


def _producer(route: http_api.StreamRoute) -> tuple[tuple[str, int], Producer]:
    key = (route.stream_name, route.limits.max_record_size)
    producer = _producers.get(key)
    if producer is None:
        producer = Producer(_kinesis_client(), route.stream_name, config=http_api.producer_config(route))
        _producers[key] = producer
    return key, producer


@tracer.capture_method(capture_response=False)
def _put(route: http_api.StreamRoute, records: list[UserRecord]) -> Sequence[RecordResult]:
    key, producer = _producer(route)
    deadline = min(
        deadline_from_context(app.lambda_context, margin=http_api.DEADLINE_MARGIN_SECONDS),
        http_api.MAX_FLUSH_SECONDS,
    )
    try:
        return producer.put_many(records, deadline=deadline)
    finally:
        snapshot = producer.metrics.snapshot()
        metrics.add_dimension(name="StreamName", value=route.stream_name)
        emf.publish_metrics(metrics, snapshot, since=_snapshots.get(key))
        _snapshots[key] = snapshot


@app.post("/streams/<stream>/records")
def put_records(stream: str) -> Response:
    """Validate the request, put its records, answer with one result per record."""
    event = app.current_event
    tracer.put_annotation(key="stream", value=stream)
    answer = http_api.handle(
        stream,
        event.body,
        content_type=event.headers.get("content-type"),
        is_base64_encoded=event.is_base64_encoded,
        settings=http_api.settings_from_env(),
        put=_put,
    )
    if 400 <= answer.status < 500:
        metrics.add_metric(name="RejectedRequests", unit=MetricUnit.Count, value=1)
    logger.info("answered", extra={"stream": stream, **http_api.log_fields(answer)})
    return Response(
        answer.status, content_type="application/json", body=answer.json(), headers=answer.headers
    )


@app.exception_handler(Exception)
def internal_error(exc: Exception) -> Response:
    """Log the failure (with its traceback) and answer 500 without details."""
    logger.exception("request failed")
    metrics.add_metric(name="InternalErrors", unit=MetricUnit.Count, value=1)
    return Response(500, content_type="application/json", body='{"message":"internal error"}')


@logger.inject_lambda_context(correlation_id_path=correlation_paths.API_GATEWAY_REST, log_event=False)
@tracer.capture_lambda_handler(capture_response=False)
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """The Lambda entry point (`app.handler`)."""
    return app.resolve(event, context)
