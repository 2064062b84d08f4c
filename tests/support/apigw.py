"""Shared fixtures and helpers of the REST API tests: methods, a function invoker, HTTP requests."""

from __future__ import annotations

import http.client
import json
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from local.apigw.server import ApiServer
from local.app.model import InvokeResult, Method, RestApi

# The producer's model as `cdk synth` renders it (cdk.out, AWS::ApiGateway::Model "Records").
RECORDS_MODEL = {
    "$schema": "http://json-schema.org/draft-04/schema#",
    "type": "object",
    "required": ["records"],
    "properties": {
        "records": {
            "type": "array",
            "minItems": 1,
            "items": {
                "type": "object",
                "required": ["partitionKey"],
                "properties": {
                    "partitionKey": {"type": "string", "minLength": 1, "maxLength": 256},
                    "data": {"type": "string"},
                    "explicitHashKey": {"type": "string", "pattern": "^(0|[1-9][0-9]{0,38})$"},
                },
            },
        }
    },
}
RECORDS = Method(
    path="/streams/{stream}/records",
    http_method="POST",
    function_name="producer",
    authorization="AWS_IAM",
    validate_body=True,
    validate_parameters=True,
    request_models={"application/json": RECORDS_MODEL},
    required_parameters={"method.request.path.stream": True},
)
OPEN_METHODS = (
    Method(path="/echo", http_method="ANY", function_name="echo"),
    Method(path="/items/{item}", http_method="GET", function_name="echo"),
    Method(path="/files/{proxy+}", http_method="GET", function_name="echo"),
    Method(
        path="/search",
        http_method="GET",
        function_name="echo",
        validate_parameters=True,
        required_parameters={"method.request.querystring.q": True, "method.request.header.X-Tenant": True},
    ),
    Method(path="/answer", http_method="POST", function_name="answer"),
    Method(path="/private", http_method="GET", function_name="echo", authorization="AWS_IAM"),
    Method(path="/private/{name}", http_method="GET", function_name="echo", authorization="AWS_IAM"),
)
GOOD_BODY = json.dumps({"records": [{"partitionKey": "k1", "data": "aGVsbG8="}]}).encode()


class FunctionInvoker:
    """An Invoker around plain Python functions; an exception becomes Lambda's Unhandled error."""

    def __init__(self, functions: dict[str, Callable[[dict[str, Any]], Any]]) -> None:
        self.functions = functions
        self.events: list[dict[str, Any]] = []

    def invoke(self, function_name: str, event: Any, *, wait: bool = True) -> InvokeResult:
        self.events.append(event)
        function = self.functions[function_name]
        request_id = str(uuid.uuid4())
        try:
            payload = json.loads(json.dumps(function(event)))
        except Exception as error:
            payload = {"errorMessage": str(error), "errorType": type(error).__name__}
            return InvokeResult(request_id, payload, function_error="Unhandled")
        return InvokeResult(request_id, payload)


def echo(event: dict[str, Any]) -> dict[str, Any]:
    return {"statusCode": 200, "body": json.dumps(event)}


def accepted(event: dict[str, Any]) -> dict[str, Any]:
    return {"statusCode": 200, "body": json.dumps({"event": event})}


@pytest.fixture
def start() -> Iterator[Callable[..., tuple[ApiServer, FunctionInvoker]]]:
    servers: list[ApiServer] = []

    def start(
        methods: tuple[Method, ...] = (RECORDS, *OPEN_METHODS),
        functions: dict[str, Callable[[dict[str, Any]], Any]] | None = None,
        **options: Any,
    ) -> tuple[ApiServer, FunctionInvoker]:
        throttle = {
            k: options.pop(k)
            for k in ("throttle_rate", "throttle_burst", "policy", "keys", "binary_media_types")
            if k in options
        }
        api = RestApi("Api", "shardline-producer", "a1b2c3d4e5", "v1", methods, **throttle)
        invoker = FunctionInvoker(functions or {"producer": accepted, "echo": echo})
        server = ApiServer(api, invoker, port=0, **options)
        server.start()
        servers.append(server)
        return server, invoker

    yield start
    for server in servers:
        server.stop()


def request(
    server: ApiServer,
    method: str,
    path: str,
    body: bytes = b"",
    headers: dict[str, str] | None = None,
    sign: tuple[str, str] | None = None,
    connection: http.client.HTTPConnection | None = None,
) -> tuple[int, dict[str, str], bytes]:
    """One HTTP request; `sign=(access key, secret)` signs it with botocore's SigV4 as the SDKs do."""
    headers = {"Content-Type": "application/json", **(headers or {})}
    if sign is not None:
        aws = AWSRequest(method=method, url=server.url + path, data=body, headers=headers)
        SigV4Auth(Credentials(*sign), "execute-api", "us-east-1").add_auth(aws)
        headers = dict(aws.headers.items())
    conn = connection or http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    try:
        conn.request(method, path, body=body, headers=headers)
        response = conn.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        if connection is None:
            conn.close()


def message(body: bytes) -> str:
    return json.loads(body)["message"]


def post_records(
    server: ApiServer, body: bytes = GOOD_BODY, **kwargs: Any
) -> tuple[int, dict[str, str], bytes]:
    return request(server, "POST", "/v1/streams/events/records", body, sign=("test", "test"), **kwargs)


def post_records_with(server: ApiServer, credentials: tuple[str, str]) -> tuple[int, dict[str, str], bytes]:
    return request(server, "POST", "/v1/streams/events/records", GOOD_BODY, sign=credentials)
