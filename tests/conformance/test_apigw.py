"""The local REST API (API Gateway v1, Lambda proxy) against what AWS recorded: the proxy event, how
a function's answer becomes the response, and the gateway's error answers
(tests/conformance/aws_recorded/apigw.json).

A real `local.apigw.server.ApiServer` on a loopback port, set up as the recorded test set its API
up (stage, resources, methods), with Python callables as its functions; requests over HTTP.
"""

from __future__ import annotations

import base64
import http.client
import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from local.apigw.server import ApiServer
from local.app.model import Method, RestApi
from tests.support.apigw import FunctionInvoker
from tests.support.recorded import load, mismatches

pytestmark = pytest.mark.integration

RECORDED = load("apigw")
FORMAT_CASES = RECORDED["proxy_response_format"]["cases"]
# What AWS's edge (CloudFront) adds to a request and to a response: not API Gateway's, not emulated.
EDGE_REQUEST_HEADERS = (
    "CloudFront-Forwarded-Proto", "CloudFront-Is-Desktop-Viewer", "CloudFront-Is-Mobile-Viewer",
    "CloudFront-Is-SmartTV-Viewer", "CloudFront-Is-Tablet-Viewer", "CloudFront-Viewer-ASN",
    "CloudFront-Viewer-Country", "Via", "X-Amz-Cf-Id",
)  # fmt: skip
EDGE_RESPONSE_HEADERS = {
    "via",
    "x-amz-cf-id",
    "x-amz-cf-pop",
    "x-cache",
    "connection",
    "date",
    "content-length",
}


def echo(event: dict[str, Any]) -> dict[str, Any]:
    return {"statusCode": 200, "body": json.dumps(event)}


def response_from_body(event: dict[str, Any]) -> Any:
    """LocalStack's LAMBDA_RESPONSE_FROM_BODY: answers with the request's JSON body."""
    body = event["body"]
    if event.get("isBase64Encoded"):
        body = base64.b64decode(body)
    return json.loads(body)


@pytest.fixture
def api() -> Iterator[Callable[..., ApiServer]]:
    servers: list[ApiServer] = []

    def start(stage: str, methods: tuple[Method, ...], functions: dict[str, Callable[..., Any]]) -> ApiServer:
        server = ApiServer(
            RestApi("Api", "conformance", "a1b2c3d4e5", stage, methods), FunctionInvoker(functions), port=0
        )
        server.start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


def send(
    server: ApiServer, method: str, path: str, headers: list[tuple[str, str]], body: bytes | None = None
) -> tuple[int, list[tuple[str, str]], bytes]:
    """One request with exactly these headers (and Host; a body adds Content-Length)."""
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    try:
        conn.putrequest(method, path, skip_accept_encoding=True)
        for name, value in headers:
            conn.putheader(name, value)
        if body is not None:
            conn.putheader("Content-Length", str(len(body)))
        conn.endheaders(body)
        response = conn.getresponse()
        return response.status, response.getheaders(), response.read()
    finally:
        conn.close()


def test_proxy_event_has_the_recorded_keys_nulls_and_formats(api):
    """Source: apigw.json `proxy_event` — LocalStack tests/aws/services/apigateway/
    test_apigateway_lambda.snapshot.json, test_lambda_aws_proxy_integration,
    invocation-payload-without-trailing-slash-and-query-params (AWS-validated 2024-08-02):
    GET /stage/proxy-value?urlparam=test on /{proxy+} ANY, no authorization, no API key.

    The edge's CloudFront-*, Via and X-Amz-Cf-Id headers are not API Gateway's (not emulated);
    the snapshot's multiValueHeaders X-Forwarded-* are placeholders of LocalStack's (its
    transformer replaced the lists): those paths are not compared."""
    server = api(
        "stage", (Method(path="/{proxy+}", http_method="ANY", function_name="echo"),), {"echo": echo}
    )
    headers = [
        ("Accept", "*/*"),
        ("Accept-Encoding", "gzip, deflate"),
        ("Authorization", "random-value"),
        ("User-Agent", "python-requests/testing"),
        ("tEsT-HEADeR", "aValUE"),
    ]
    status, _, body = send(server, "GET", "/stage/proxy-value?urlparam=test", headers)
    assert status == 200
    event = json.loads(body)
    ignore = frozenset(
        [f"$.{where}.{name}" for where in ("headers", "multiValueHeaders") for name in EDGE_REQUEST_HEADERS]
        + [f"$.multiValueHeaders.X-Forwarded-{name}" for name in ("For", "Port", "Proto")]
    )
    assert mismatches(event, RECORDED["proxy_event"]["recorded"], ignore=ignore) == []


def _response_headers(headers: list[tuple[str, str]]) -> dict[str, str]:
    """As the recording client (requests) shows them: one entry a name, repeated values joined by ', '."""
    joined: dict[str, str] = {}
    names: dict[str, str] = {}
    for name, value in headers:
        if name.lower() in EDGE_RESPONSE_HEADERS or name.lower() == "server":
            continue
        key = names.setdefault(name.lower(), name)
        joined[key] = f"{joined[key]}, {value}" if key in joined else value
    return joined


@pytest.mark.parametrize(
    "case",
    [c for c in FORMAT_CASES],
)
def test_a_functions_answer_becomes_the_recorded_response(api, case):
    """Source: apigw.json `proxy_response_format` — test_apigateway_lambda.snapshot.json,
    test_aws_proxy_response_payload_format_validation (AWS-validated 2024-11-15): the function
    answers the request's JSON body; the status each case got is the test's expected_status_code,
    the content and (where recorded) the headers its snapshot. A malformed answer is 502
    {"message": "Internal server error"}; a statusCode "201" is 201, a missing one 200; a boolean
    header value is written `true`; headers and multiValueHeaders of one name both reach the client."""
    recorded = FORMAT_CASES[case]
    server = api(
        "test", (Method(path="/{proxy+}", http_method="ANY", function_name="f"),), {"f": response_from_body}
    )
    answer = recorded["answer"]
    body = (
        None
        if isinstance(answer, str) and answer.startswith("the request has no body")
        else json.dumps(answer)
    )
    headers = [("User-Agent", "python/test")] + ([("Content-Type", "application/json")] if body else [])
    status, response_headers, content = send(
        server, "POST", "/test/test", headers, body.encode() if body is not None else None
    )
    assert status == recorded["status"]
    try:
        got: dict[str, Any] = {"content": json.loads(content)}
    except ValueError:
        got = {"content": content.decode()}
    if "headers" in recorded["recorded"]:
        got["headers"] = _response_headers(response_headers)
    ignore = frozenset(
        f"$.headers.{name}"
        for name in recorded["recorded"].get("headers", {})
        if name.lower() in EDGE_RESPONSE_HEADERS
    )
    assert mismatches(got, recorded["recorded"], ignore=ignore) == []


@pytest.mark.parametrize(
    ("case", "method", "path"),
    [
        ("missing_authentication_token", "GET", "/dev/random-non-existing"),
        ("missing_authentication_token_wrong_method", "POST", "/dev/existing"),
    ],
)
def test_no_such_resource_or_method_is_the_recorded_missing_token_answer(api, case, method, path):
    """Source: apigw.json `missing_authentication_token*` — test_apigateway_common.snapshot.json,
    TestApigatewayRouting::test_routing_not_found (AWS-validated 2024-07-23): the body
    {"message": "Missing Authentication Token"} and x-amzn-ErrorType
    MissingAuthenticationTokenException; the test asserts the answer is not ok."""
    server = api("dev", (Method(path="/existing", http_method="GET", function_name="echo"),), {"echo": echo})
    status, headers, body = send(server, method, path, [])
    recorded = RECORDED[case]["recorded"]
    assert status >= 400
    error_type = next((v for k, v in headers if k.lower() == "x-amzn-errortype"), None)
    assert mismatches({"content": json.loads(body), "errorType": error_type}, recorded) == []


VALIDATED = Method(
    path="/nested/{test}",
    http_method="GET",
    function_name="echo",
    validate_parameters=True,
    validate_body=True,
    required_parameters={
        "method.request.path.test": True,
        "method.request.querystring.qs1": True,
        "method.request.header.x-header-param": True,
    },
)
SCHEMA = {
    "$schema": "http://json-schema.org/draft-04/schema#",
    "title": "testSchema",
    "type": "object",
    "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
    "required": ["a", "b"],
}


@pytest.mark.parametrize(
    ("case", "path", "headers"),
    [
        ("missing_required_parameters", "/local/nested/value", [("x-header-param", "test")]),
    ],
)
def test_a_missing_required_parameter_is_the_recorded_400(api, case, path, headers):
    """Source: apigw.json `missing_required_parameters` — test_apigateway_common.snapshot.json,
    TestApiGatewayCommon::test_api_gateway_request_validator, missing-required-qs-request-params-get
    (AWS-validated 2024-01-10): 400 {"message": "Missing required request parameters: [qs1]"};
    and the gateway response table (BAD_REQUEST_PARAMETERS: 400)."""
    server = api("local", (VALIDATED,), {"echo": echo})
    status, _, body = send(server, "GET", path, headers)
    assert (
        status
        == RECORDED[case]["status"]
        == RECORDED["gateway_response_status"]["recorded"]["BAD_REQUEST_PARAMETERS"]
    )
    assert mismatches(json.loads(body), RECORDED[case]["recorded"]) == []


def test_a_body_that_fails_the_model_is_the_recorded_400(api):
    """Source: apigw.json `invalid_request_body` — test_apigateway_common.snapshot.json,
    TestApiGatewayCommon::test_api_gateway_request_validator, invalid-request-body (AWS-validated
    2024-01-10): 400 {"message": "Invalid request body"}; and the gateway response table
    (BAD_REQUEST_BODY: 400)."""
    method = Method(
        path="/nested/{test}",
        http_method="POST",
        function_name="echo",
        validate_body=True,
        request_models={"application/json": SCHEMA},
    )
    server = api("local", (method,), {"echo": echo})
    body = json.dumps({"a": 1, "b": "not a number"}).encode()
    status, _, answer = send(
        server, "POST", "/local/nested/value", [("Content-Type", "application/json")], body
    )
    assert status == RECORDED["invalid_request_body"]["status"]
    assert status == RECORDED["gateway_response_status"]["recorded"]["BAD_REQUEST_BODY"]
    assert mismatches(json.loads(answer), RECORDED["invalid_request_body"]["recorded"]) == []
