"""Lambda adapters: the producer's HTTP contract, the producer and consumer functions, the
environment contract, and metrics as CloudWatch EMF.

    from shardline.aws_lambda import ConsumerFunction, ProducerFunction

    handler = ProducerFunction().handler                                    # the producer function's app.py
    handler = ConsumerFunction(lambda sink_table: my_record_handler).handler  # a consumer group

The HTTP contract is pure Python: `_http_request` (parse and check a request: 404, 415, 413, 400;
record ids and `Idempotency-Key`), `_http_response` (200/207/503/500 answers with `written` and
`retry` on each failed entry, 404 for a missing stream or route, 405, log fields),
`_http_settings` (streams and bounds from the environment), `_http_records` (record objects to
`UserRecord`s), `_http_caller` (the authenticated caller stamped on every record: `caller_of`),
`_http_idempotency` (each written id's payload hash: an id re-used with another body is a 422).
`_environment` declares every
variable the functions read. Only `ProducerFunction`, `ConsumerFunction` and `publish_metrics`
need Powertools (the `lambda` extra); it is imported when they are used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from shardline._lazy import lazy_exports

if TYPE_CHECKING:
    from shardline.aws_lambda._consumer_function import ConsumerFunction as ConsumerFunction
    from shardline.aws_lambda._emf import publish_metrics as publish_metrics
    from shardline.aws_lambda._environment import POWERTOOLS_VARIABLES as POWERTOOLS_VARIABLES
    from shardline.aws_lambda._environment import ConsumerEnvironment as ConsumerEnvironment
    from shardline.aws_lambda._environment import ProducerEnvironment as ProducerEnvironment
    from shardline.aws_lambda._environment import SinkDeclaration as SinkDeclaration
    from shardline.aws_lambda._http_caller import UnauthenticatedEvent as UnauthenticatedEvent
    from shardline.aws_lambda._http_caller import caller_of as caller_of
    from shardline.aws_lambda._http_records import to_user_records as to_user_records
    from shardline.aws_lambda._http_request import IDEMPOTENCY_KEY_HEADER as IDEMPOTENCY_KEY_HEADER
    from shardline.aws_lambda._http_request import JSON_MEDIA_TYPE as JSON_MEDIA_TYPE
    from shardline.aws_lambda._http_request import NDJSON_MEDIA_TYPE as NDJSON_MEDIA_TYPE
    from shardline.aws_lambda._http_request import PutFunction as PutFunction
    from shardline.aws_lambda._http_request import PutRequest as PutRequest
    from shardline.aws_lambda._http_request import event_body_bytes as event_body_bytes
    from shardline.aws_lambda._http_request import handle as handle
    from shardline.aws_lambda._http_request import parse_request as parse_request
    from shardline.aws_lambda._http_response import RETRY_AFTER_SECONDS as RETRY_AFTER_SECONDS
    from shardline.aws_lambda._http_response import ApiResponse as ApiResponse
    from shardline.aws_lambda._http_response import is_unavailable as is_unavailable
    from shardline.aws_lambda._http_response import log_fields as log_fields
    from shardline.aws_lambda._http_response import result_entry as result_entry
    from shardline.aws_lambda._http_response import results_response as results_response
    from shardline.aws_lambda._http_response import validation_response as validation_response
    from shardline.aws_lambda._http_settings import DEADLINE_MARGIN_SECONDS as DEADLINE_MARGIN_SECONDS
    from shardline.aws_lambda._http_settings import LAMBDA_PAYLOAD_BYTES as LAMBDA_PAYLOAD_BYTES
    from shardline.aws_lambda._http_settings import MAX_FLUSH_SECONDS as MAX_FLUSH_SECONDS
    from shardline.aws_lambda._http_settings import MAX_IDEMPOTENCY_KEY_LENGTH as MAX_IDEMPOTENCY_KEY_LENGTH
    from shardline.aws_lambda._http_settings import ApiSettings as ApiSettings
    from shardline.aws_lambda._http_settings import StreamRoute as StreamRoute
    from shardline.aws_lambda._http_settings import parse_streams as parse_streams
    from shardline.aws_lambda._http_settings import producer_config as producer_config
    from shardline.aws_lambda._http_settings import settings_from_env as settings_from_env
    from shardline.aws_lambda._producer_function import ProducerFunction as ProducerFunction
    from shardline.aws_lambda._producer_function import client_config as client_config

_EXPORTS = {
    "ProducerFunction": "_producer_function",
    "client_config": "_producer_function",
    "ConsumerFunction": "_consumer_function",
    "publish_metrics": "_emf",
    "ProducerEnvironment": "_environment",
    "ConsumerEnvironment": "_environment",
    "SinkDeclaration": "_environment",
    "POWERTOOLS_VARIABLES": "_environment",
    "handle": "_http_request",
    "event_body_bytes": "_http_request",
    "IDEMPOTENCY_KEY_HEADER": "_http_request",
    "parse_request": "_http_request",
    "PutRequest": "_http_request",
    "PutFunction": "_http_request",
    "JSON_MEDIA_TYPE": "_http_request",
    "NDJSON_MEDIA_TYPE": "_http_request",
    "ApiResponse": "_http_response",
    "results_response": "_http_response",
    "validation_response": "_http_response",
    "result_entry": "_http_response",
    "is_unavailable": "_http_response",
    "log_fields": "_http_response",
    "RETRY_AFTER_SECONDS": "_http_response",
    "ApiSettings": "_http_settings",
    "StreamRoute": "_http_settings",
    "settings_from_env": "_http_settings",
    "parse_streams": "_http_settings",
    "producer_config": "_http_settings",
    "DEADLINE_MARGIN_SECONDS": "_http_settings",
    "MAX_FLUSH_SECONDS": "_http_settings",
    "MAX_IDEMPOTENCY_KEY_LENGTH": "_http_settings",
    "LAMBDA_PAYLOAD_BYTES": "_http_settings",
    "to_user_records": "_http_records",
    "caller_of": "_http_caller",
    "UnauthenticatedEvent": "_http_caller",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
