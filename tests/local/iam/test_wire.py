"""`local.iam.wire.rejection`, read back by botocore itself (issue 40, properties 1 and 2: a wrong or
missing signature and a denial answer "as AWS does").

A loopback WSGI server answers every request with `rejection(...)`; a boto3 client of each service
calls it and the `ClientError` must carry the code, message, HTTP status and request id an SDK
reports for AWS's own refusal (the codes: botocore's models and parsers; the shapes: cited in
`local/iam/wire.py`). The query and CBOR forms botocore's clients do not send by default are read
with botocore's parser of that protocol.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import boto3
import botocore.config
import botocore.parsers
import botocore.session
import pytest
from botocore.exceptions import ClientError

from local.iam.wire import KINDS, rejection

REQUEST_ID = "4d5e6f70-1111-2222-3333-444455556666"
USER = "arn:aws:sts::000000000000:assumed-role/sink-role/sink-fn"


def denied(action: str, resource: str) -> str:
    return (
        f"User: {USER} is not authorized to perform: {action} on resource: {resource} "
        f"because no identity-based policy allows the {action} action"
    )


class _Quiet(WSGIRequestHandler):
    def log_message(self, *args: Any) -> None:
        pass


class Refuser:
    """A WSGI app answering every request with the rejection it is set to."""

    def __init__(self) -> None:
        self.signing = "dynamodb"
        self.kind = "AccessDenied"
        self.message = ""
        self.protocol = ""
        self.seen: list[str] = []

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
        self.seen.append(environ["REQUEST_METHOD"])
        length = int(environ.get("CONTENT_LENGTH") or 0)
        environ["wsgi.input"].read(length)
        status, headers, body = rejection(
            self.signing,
            self.kind,
            self.message,
            REQUEST_ID,
            protocol=self.protocol,
            method=environ["REQUEST_METHOD"],
        )
        start_response(status, headers)
        return [body]


@pytest.fixture(scope="module")
def refuser() -> Iterator[tuple[Refuser, str]]:
    app = Refuser()
    server: WSGIServer = make_server("127.0.0.1", 0, app, handler_class=_Quiet)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield app, f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()


def refused(
    refuser: tuple[Refuser, str], service: str, kind: str, message: str, method: str, **params: Any
) -> dict[str, Any]:
    app, url = refuser
    client = boto3.client(
        service,
        endpoint_url=url,
        region_name="us-east-1",
        aws_access_key_id="AKIDEXAMPLE",
        aws_secret_access_key="secret",
        config=botocore.config.Config(retries={"max_attempts": 1}),
    )
    app.signing, app.kind, app.message, app.protocol = (
        client.meta.service_model.signing_name,
        kind,
        message,
        "",
    )
    with pytest.raises(ClientError) as caught:
        getattr(client, method)(**params)
    response: dict[str, Any] = caught.value.response
    return response


DENIALS = [
    # (service, method, params, action, resource, code an SDK reports, HTTP status)
    (
        "dynamodb",
        "batch_write_item",
        {"RequestItems": {"t": [{"PutRequest": {"Item": {"k": {"S": "a"}}}}]}},
        "dynamodb:BatchWriteItem",
        "arn:aws:dynamodb:us-east-1:000000000000:table/t",
        "AccessDeniedException",
        400,
    ),
    (
        "kinesis",
        "put_records",
        {"StreamName": "s", "Records": [{"Data": b"x", "PartitionKey": "p"}]},
        "kinesis:PutRecords",
        "arn:aws:kinesis:us-east-1:000000000000:stream/s",
        "AccessDeniedException",
        400,
    ),
    (
        "sqs",
        "send_message",
        {"QueueUrl": "http://127.0.0.1/000000000000/q", "MessageBody": "x"},
        "sqs:sendmessage",
        "arn:aws:sqs:us-east-1:000000000000:q",
        "AccessDenied",
        403,
    ),
    (
        "s3",
        "put_object",
        {"Bucket": "b", "Key": "k", "Body": b"x"},
        "s3:PutObject",
        "arn:aws:s3:::b/k",
        "AccessDenied",
        403,
    ),
    (
        "kms",
        "generate_data_key",
        {"KeyId": "alias/k", "KeySpec": "AES_256"},
        "kms:GenerateDataKey",
        "arn:aws:kms:us-east-1:000000000000:key/k",
        "AccessDeniedException",
        400,
    ),
    (
        "logs",
        "put_log_events",
        {"logGroupName": "g", "logStreamName": "s", "logEvents": [{"timestamp": 1, "message": "m"}]},
        "logs:PutLogEvents",
        "arn:aws:logs:us-east-1:000000000000:log-group:g:log-stream:s",
        "AccessDeniedException",
        400,
    ),
    (
        "cloudwatch",
        "put_metric_data",
        {"Namespace": "n", "MetricData": [{"MetricName": "m", "Value": 1.0}]},
        "cloudwatch:PutMetricData",
        "*",
        "AccessDenied",
        403,
    ),
    (
        "lambda",
        "invoke",
        {"FunctionName": "f"},
        "lambda:InvokeFunction",
        "arn:aws:lambda:us-east-1:000000000000:function:f",
        "AccessDeniedException",
        403,
    ),
    (
        "xray",
        "put_trace_segments",
        {"TraceSegmentDocuments": ["{}"]},
        "xray:PutTraceSegments",
        "*",
        "AccessDeniedException",
        403,
    ),
    (
        "sts",
        "assume_role",
        {"RoleArn": "arn:aws:iam::000000000000:role/r", "RoleSessionName": "session"},
        "sts:AssumeRole",
        "arn:aws:iam::000000000000:role/r",
        "AccessDenied",
        403,
    ),
]


@pytest.mark.parametrize(
    ("service", "method", "params", "action", "resource", "code", "status"),
    DENIALS,
    ids=[d[0] for d in DENIALS],
)
def test_property_2_a_denial_reads_in_botocore_as_the_services_access_denied(
    refuser: tuple[Refuser, str],
    service: str,
    method: str,
    params: dict[str, Any],
    action: str,
    resource: str,
    code: str,
    status: int,
) -> None:
    message = denied(action, resource)
    response = refused(refuser, service, "AccessDenied", message, method, **params)
    assert response["Error"]["Code"] == code
    assert response["Error"]["Message"] == message
    assert response["ResponseMetadata"]["HTTPStatusCode"] == status
    assert response["ResponseMetadata"]["RequestId"] == REQUEST_ID


def test_property_2_an_s3_head_is_refused_without_a_body_as_s3_does(refuser: tuple[Refuser, str]) -> None:
    response = refused(refuser, "s3", "AccessDenied", "Access Denied", "head_object", Bucket="b", Key="k")
    assert refuser[0].seen[-1] == "HEAD"
    assert (response["Error"]["Code"], response["ResponseMetadata"]["HTTPStatusCode"]) == ("403", 403)


SIGNATURE = "The request signature we calculated does not match the signature you provided."
SIGNATURES = [
    # (service, method, params, kind, code an SDK reports, HTTP status)
    ("dynamodb", "list_tables", {}, "InvalidSignature", "InvalidSignatureException", 400),
    ("dynamodb", "list_tables", {}, "UnrecognizedClient", "UnrecognizedClientException", 400),
    ("dynamodb", "list_tables", {}, "MissingAuthentication", "MissingAuthenticationTokenException", 400),
    ("dynamodb", "list_tables", {}, "ExpiredSignature", "InvalidSignatureException", 400),
    ("kinesis", "list_streams", {}, "IncompleteSignature", "IncompleteSignatureException", 400),
    ("kinesis", "list_streams", {}, "UnrecognizedClient", "UnrecognizedClientException", 400),
    ("sqs", "list_queues", {}, "InvalidSignature", "SignatureDoesNotMatch", 403),
    ("sqs", "list_queues", {}, "UnrecognizedClient", "InvalidClientTokenId", 403),
    ("sqs", "list_queues", {}, "MissingAuthentication", "AccessDenied", 403),
    ("s3", "list_buckets", {}, "InvalidSignature", "SignatureDoesNotMatch", 403),
    ("s3", "list_buckets", {}, "UnrecognizedClient", "InvalidAccessKeyId", 403),
    ("s3", "list_buckets", {}, "MissingAuthentication", "AccessDenied", 403),
    ("s3", "list_buckets", {}, "IncompleteSignature", "AuthorizationHeaderMalformed", 400),
    ("s3", "list_buckets", {}, "ExpiredSignature", "RequestTimeTooSkewed", 403),
    ("sts", "get_caller_identity", {}, "InvalidSignature", "SignatureDoesNotMatch", 403),
    ("sts", "get_caller_identity", {}, "UnrecognizedClient", "InvalidClientTokenId", 403),
    ("sts", "get_caller_identity", {}, "MissingAuthentication", "MissingAuthenticationToken", 403),
    ("sts", "get_caller_identity", {}, "IncompleteSignature", "IncompleteSignature", 400),
    ("sts", "get_caller_identity", {}, "ExpiredSignature", "SignatureDoesNotMatch", 403),
    ("kms", "list_keys", {}, "InvalidSignature", "InvalidSignatureException", 400),
    ("logs", "describe_log_groups", {}, "UnrecognizedClient", "UnrecognizedClientException", 400),
    ("lambda", "list_functions", {}, "InvalidSignature", "InvalidSignatureException", 403),
    ("lambda", "list_functions", {}, "UnrecognizedClient", "UnrecognizedClientException", 403),
    ("cloudwatch", "list_metrics", {}, "InvalidSignature", "SignatureDoesNotMatch", 403),
]


@pytest.mark.parametrize(
    ("service", "method", "params", "kind", "code", "status"),
    SIGNATURES,
    ids=[f"{s[0]}-{s[3]}" for s in SIGNATURES],
)
def test_property_1_a_wrong_or_missing_signature_reads_in_botocore_as_the_services_error(
    refuser: tuple[Refuser, str],
    service: str,
    method: str,
    params: dict[str, Any],
    kind: str,
    code: str,
    status: int,
) -> None:
    response = refused(refuser, service, kind, SIGNATURE, method, **params)
    assert response["Error"]["Code"] == code
    assert response["Error"]["Message"] == SIGNATURE
    assert response["ResponseMetadata"]["HTTPStatusCode"] == status


def test_property_1_every_kind_is_answered_by_every_service() -> None:
    for signing in ("dynamodb", "kinesis", "sqs", "s3", "kms", "logs", "monitoring", "xray", "sts", "lambda"):
        for kind in KINDS:
            status, headers, body = rejection(signing, kind, "m", REQUEST_ID)
            assert status[:3] in ("400", "403") and body
            assert dict(headers)["Content-Length"] == str(len(body))
    with pytest.raises(ValueError, match="NoSuchKind"):
        rejection("dynamodb", "NoSuchKind", "m", REQUEST_ID)


@pytest.mark.parametrize(
    ("signing", "service", "protocol", "operation"),
    [
        ("sqs", "sqs", "query", "SendMessage"),
        ("monitoring", "cloudwatch", "query", "PutMetricData"),
        ("monitoring", "cloudwatch", "smithy-rpc-v2-cbor", "PutMetricData"),
    ],
)
def test_property_2_the_query_and_cbor_forms_read_as_access_denied(
    signing: str, service: str, protocol: str, operation: str
) -> None:
    """Forms botocore's clients here do not send: read with botocore's parser of that protocol."""
    message = denied(f"{service}:{operation}", "*")
    status, headers, body = rejection(signing, "AccessDenied", message, REQUEST_ID, protocol=protocol)
    model = botocore.session.get_session().get_service_model(service)
    parser = botocore.parsers.create_parser(protocol)
    parsed = parser.parse(
        {"status_code": int(status[:3]), "headers": {k.lower(): v for k, v in headers}, "body": body},
        model.operation_model(operation).output_shape,
    )
    assert (parsed["Error"]["Code"], parsed["Error"]["Message"]) == ("AccessDenied", message)
    assert int(status[:3]) == 403
