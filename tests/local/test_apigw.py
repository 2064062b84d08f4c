"""The local REST API (`local.apigw.ApiServer`) against API Gateway's behaviour, over real HTTP.

Each test starts the server on a free loopback port around small Python functions (the Invoker
below is the server's collaborator, not the thing under test) and talks to it with http.client,
signing with botocore as a user's client would.
"""

from __future__ import annotations

import base64
import http.client
import json
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import jsonschema
import pytest
from botocore.auth import SigV4Auth, SigV4QueryAuth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from local._apigw_schema import compile_model
from local.apigw import ApiServer, HttpRequest, HttpResponse
from local.model import InvokeResult, Method, RestApi

pytestmark = pytest.mark.integration

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

    def invoke(self, function_name: str, event: Any) -> InvokeResult:
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
        throttle = {k: options.pop(k) for k in ("throttle_rate", "throttle_burst") if k in options}
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


# --- IAM authorization -----------------------------------------------------------------------


def test_signed_request_is_accepted_with_the_callers_identity(start):
    server, invoker = start()
    status, _, body = post_records(server)
    assert status == 200, body
    identity = json.loads(body)["event"]["requestContext"]["identity"]
    assert identity["accessKey"] == "test"
    assert identity["accountId"] == "000000000000"
    assert identity["userArn"] == "arn:aws:iam::000000000000:root"
    assert identity["caller"] == identity["user"] == "000000000000"
    assert len(invoker.events) == 1


def test_presigned_url_is_accepted(start):
    server, _ = start()
    aws = AWSRequest(method="GET", url=server.url + "/v1/private?color=blue")
    SigV4QueryAuth(Credentials("test", "test"), "execute-api", "us-east-1", expires=60).add_auth(aws)
    status, _, body = request(server, "GET", aws.url[len(server.url) :])
    assert status == 200, body
    event = json.loads(body)
    assert event["queryStringParameters"]["color"] == "blue"
    assert event["requestContext"]["identity"]["accessKey"] == "test"


def test_signature_covers_encoded_path_and_query(start):
    server, _ = start()
    path = "/v1/private/a%20b%3Ac?q=x%20y&q=z&empty=&%C3%A9=%E2%82%AC"
    status, _, body = request(server, "GET", path, sign=("test", "test"))
    assert status == 200, body
    event = json.loads(body)
    assert event["pathParameters"] == {"name": "a b:c"}
    assert event["multiValueQueryStringParameters"] == {"q": ["x y", "z"], "empty": [""], "é": ["€"]}


def test_malformed_authorization_header_gets_incomplete_signature(start):
    server, _ = start()
    status, headers, body = request(
        server, "GET", "/v1/private", headers={"Authorization": "AWS4-HMAC-SHA256 Credential=test/x"}
    )
    assert status == 403
    assert message(body) == (
        "Authorization header requires 'SignedHeaders' parameter. "
        "Authorization header requires 'Signature' parameter."
    )
    assert headers["x-amzn-errortype"] == "IncompleteSignatureException"


def test_api_key_required_methods_want_a_known_key(start):
    keyed = (Method(path="/keyed", http_method="GET", function_name="echo", api_key_required=True),)
    server, invoker = start(methods=keyed, api_keys={"key-1"})
    for headers in ({}, {"x-api-key": "other"}):
        status, answer_headers, body = request(server, "GET", "/v1/keyed", headers=headers)
        assert (status, message(body), answer_headers["x-amzn-errortype"]) == (
            403,
            "Forbidden",
            "ForbiddenException",
        )
    assert invoker.events == []
    status, _, body = request(server, "GET", "/v1/keyed", headers={"x-api-key": "key-1"})
    assert (status, json.loads(body)["requestContext"]["identity"]["apiKey"]) == (200, "key-1")


def test_unsigned_request_gets_missing_authentication_token(start):
    server, invoker = start()
    status, headers, body = request(server, "POST", "/v1/streams/events/records", GOOD_BODY)
    assert (status, message(body)) == (403, "Missing Authentication Token")
    assert headers["x-amzn-errortype"] == "MissingAuthenticationTokenException"
    assert invoker.events == []


def test_wrong_secret_gets_invalid_signature(start):
    server, invoker = start()
    status, headers, body = post_records_with(server, ("test", "not-the-secret"))
    assert status == 403
    assert message(body).startswith(
        "The request signature we calculated does not match the signature you provided."
    )
    assert headers["x-amzn-errortype"] == "InvalidSignatureException"
    assert invoker.events == []


def test_tampered_body_gets_invalid_signature(start):
    server, _ = start()
    aws = AWSRequest(method="POST", url=server.url + "/v1/streams/events/records", data=GOOD_BODY)
    SigV4Auth(Credentials("test", "test"), "execute-api", "us-east-1").add_auth(aws)
    other = GOOD_BODY.replace(b"k1", b"k2")
    status, headers, _ = request(
        server, "POST", "/v1/streams/events/records", other, headers=dict(aws.headers)
    )
    assert (status, headers["x-amzn-errortype"]) == (403, "InvalidSignatureException")


def test_unknown_access_key_gets_unrecognized_client(start):
    server, _ = start()
    status, headers, body = post_records_with(server, ("AKIDUNKNOWN", "test"))
    assert (status, message(body)) == (403, "The security token included in the request is invalid.")
    assert headers["x-amzn-errortype"] == "UnrecognizedClientException"


def test_more_credentials_can_be_added(start):
    server, _ = start(credentials={"test": "test", "AKIDSECOND": "second-secret"})
    assert post_records_with(server, ("AKIDSECOND", "second-secret"))[0] == 200


def test_skewed_date_gets_signature_expired(start):
    server, _ = start(clock=lambda: time.time() + 600)  # the server's clock ten minutes ahead
    status, headers, body = post_records(server)
    assert status == 403
    assert re.fullmatch(
        r"Signature expired: \d{8}T\d{6}Z is now earlier than \d{8}T\d{6}Z \(\d{8}T\d{6}Z - 5 min\.\)",
        message(body),
    )
    assert headers["x-amzn-errortype"] == "InvalidSignatureException"


def post_records_with(server: ApiServer, credentials: tuple[str, str]) -> tuple[int, dict[str, str], bytes]:
    return request(server, "POST", "/v1/streams/events/records", GOOD_BODY, sign=credentials)


# --- routing and the proxy event -------------------------------------------------------------

REQUEST_CONTEXT_KEYS = {
    "accountId", "apiId", "resourceId", "resourcePath", "stage", "requestId", "extendedRequestId",
    "httpMethod", "path", "protocol", "requestTime", "requestTimeEpoch", "domainName", "domainPrefix",
    "identity", "deploymentId",
}  # fmt: skip
IDENTITY_KEYS = {
    "sourceIp", "userAgent", "accessKey", "accountId", "caller", "user", "userArn", "principalOrgId",
    "cognitoIdentityPoolId", "cognitoIdentityId", "cognitoAuthenticationType",
    "cognitoAuthenticationProvider", "apiKey", "apiKeyId",
}  # fmt: skip


def test_event_has_every_rest_v1_key(start):
    server, _ = start()
    before_ms = time.time() * 1000
    status, headers, body = request(
        server,
        "POST",
        "/v1/echo?a=1&b=2&b=3",
        b'{"x": 1}',
        headers={"User-Agent": "tester/1", "X-Multi": "one"},
    )
    assert status == 200
    event = json.loads(body)
    assert set(event) == {
        "resource", "path", "httpMethod", "headers", "multiValueHeaders", "queryStringParameters",
        "multiValueQueryStringParameters", "pathParameters", "stageVariables", "requestContext", "body",
        "isBase64Encoded",
    }  # fmt: skip
    assert (event["resource"], event["path"], event["httpMethod"]) == ("/echo", "/echo", "POST")
    assert event["queryStringParameters"] == {"a": "1", "b": "3"}  # the last value wins
    assert event["multiValueQueryStringParameters"] == {"a": ["1"], "b": ["2", "3"]}
    assert event["headers"]["User-Agent"] == "tester/1"
    assert event["multiValueHeaders"]["X-Multi"] == ["one"]
    assert event["headers"]["X-Forwarded-For"] == "127.0.0.1"
    assert (event["pathParameters"], event["stageVariables"]) == (None, None)
    assert (event["body"], event["isBase64Encoded"]) == ('{"x": 1}', False)
    context = event["requestContext"]
    assert set(context) == REQUEST_CONTEXT_KEYS
    assert set(context["identity"]) == IDENTITY_KEYS
    assert context["accountId"] == "000000000000"
    assert (context["apiId"], context["stage"]) == ("a1b2c3d4e5", "v1")
    assert (context["resourcePath"], context["httpMethod"], context["path"]) == ("/echo", "POST", "/v1/echo")
    assert re.fullmatch(r"[0-9a-f]{6}", context["resourceId"])
    assert context["requestId"] == headers["x-amzn-requestid"]
    assert context["extendedRequestId"] == headers["x-amz-apigw-id"]
    assert context["protocol"] == "HTTP/1.1"
    assert re.fullmatch(r"\d{2}/[A-Z][a-z]{2}/\d{4}:\d{2}:\d{2}:\d{2} \+0000", context["requestTime"])
    assert before_ms - 1000 <= context["requestTimeEpoch"] <= time.time() * 1000 + 1000
    assert (context["domainName"], context["domainPrefix"]) == ("127.0.0.1", "127")
    identity = context["identity"]
    assert (identity["sourceIp"], identity["userAgent"]) == ("127.0.0.1", "tester/1")
    assert (
        identity["accessKey"] is identity["userArn"] is identity["cognitoIdentityId"] is None
    )  # no IAM here


def test_binary_request_body_is_base64_encoded(start):
    server, _ = start()
    payload = bytes(range(256))
    event = json.loads(request(server, "POST", "/v1/echo", payload)[2])
    assert event["isBase64Encoded"] is True
    assert base64.b64decode(event["body"]) == payload


def test_path_parameters_are_decoded_and_greedy_proxy_takes_the_rest(start):
    server, _ = start()
    event = json.loads(request(server, "GET", "/v1/items/a%20b")[2])
    assert (event["resource"], event["pathParameters"]) == ("/items/{item}", {"item": "a b"})
    event = json.loads(request(server, "GET", "/v1/files/deep/er/file.txt")[2])
    assert (event["resource"], event["pathParameters"]) == ("/files/{proxy+}", {"proxy": "deep/er/file.txt"})
    assert event["path"] == "/files/deep/er/file.txt"


def test_stage_path_and_root_path_serve_the_same_api(start):
    server, _ = start()
    staged = json.loads(request(server, "GET", "/v1/items/7")[2])
    root = json.loads(request(server, "GET", "/items/7")[2])
    assert staged["path"] == root["path"] == "/items/7"
    assert (staged["requestContext"]["path"], root["requestContext"]["path"]) == ("/v1/items/7", "/items/7")


def test_any_method_serves_every_verb(start):
    server, _ = start()
    for verb in ("GET", "PUT", "DELETE", "PATCH"):
        status, _, body = request(server, verb, "/v1/echo")
        assert (status, json.loads(body)["httpMethod"]) == (200, verb)


def test_unknown_route_gets_missing_authentication_token(start):
    server, invoker = start()
    for verb, path in [
        ("GET", "/v1/nowhere"),
        ("GET", "/v1/streams/events/records"),
        ("GET", "/"),
        ("GET", "/v1"),
    ]:
        status, headers, body = request(server, verb, path)
        assert (status, message(body)) == (403, "Missing Authentication Token"), (verb, path)
        assert headers["x-amzn-errortype"] == "MissingAuthenticationTokenException"
    assert invoker.events == []


# --- the request validator -------------------------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(b'{"records": [{"partitionKey": 7}]}', id="bad-types"),
        pytest.param(b'{"records": [{"partitionKey": "k", "explicitHashKey": "01"}]}', id="bad-pattern"),
        pytest.param(b'{"records": []}', id="no-records-in-list"),
        pytest.param(b'{"items": []}', id="missing-records"),
        pytest.param(b'{"records": [', id="not-json"),
        pytest.param(b"", id="empty"),
    ],
)
def test_validator_rejects_invalid_body(start, body):
    server, invoker = start()
    status, headers, answer = post_records(server, body)
    assert (status, message(answer)) == (400, "Invalid request body")
    assert headers["x-amzn-errortype"] == "BadRequestException"
    assert invoker.events == []


def test_validator_skips_content_types_without_a_model(start):
    server, invoker = start()
    status, _, _ = post_records(server, b"not json at all", headers={"Content-Type": "text/plain"})
    assert status == 200
    assert len(invoker.events) == 1


def test_missing_required_parameters_get_400(start):
    server, invoker = start()
    status, headers, body = request(server, "GET", "/v1/search")
    assert (status, message(body)) == (400, "Missing required request parameters: [q, X-Tenant]")
    assert headers["x-amzn-errortype"] == "BadRequestException"
    status, _, body = request(server, "GET", "/v1/search?q=shoes")
    assert (status, message(body)) == (400, "Missing required request parameters: [X-Tenant]")
    assert invoker.events == []
    assert request(server, "GET", "/v1/search?q=shoes", headers={"x-tenant": "t1"})[0] == 200


# --- throttling and limits -------------------------------------------------------------------


def test_throttling_allows_the_burst_then_the_rate(start):
    server, invoker = start(throttle_rate=0.5, throttle_burst=3)
    statuses = [request(server, "GET", "/v1/echo")[0] for _ in range(4)]
    assert statuses == [200, 200, 200, 429]
    status, headers, body = request(server, "GET", "/v1/echo")
    assert (status, message(body), headers["x-amzn-errortype"]) == (
        429,
        "Too Many Requests",
        "TooManyRequestsException",
    )
    deadline = time.monotonic() + 30
    while (status := request(server, "GET", "/v1/echo")[0]) == 429 and time.monotonic() < deadline:
        time.sleep(0.25)
    assert status == 200  # a token came back at the rate
    assert len(invoker.events) == 4
    assert server.stats().throttled >= 2


def test_request_over_10_mb_gets_413(start):
    server, invoker = start()
    status, headers, body = request(server, "POST", "/v1/echo", b"x" * (10 * 1024 * 1024 + 1))
    assert (status, message(body)) == (413, "Request Too Long")
    assert headers["x-amzn-errortype"] == "BadRequestException"
    assert invoker.events == []


def test_event_over_lambdas_6_mb_gets_413(start):
    server, invoker = start()
    status, _, body = request(server, "POST", "/v1/echo", b"x" * (6 * 1024 * 1024))
    assert (status, message(body)) == (413, "Request Too Long")
    assert invoker.events == []
    assert request(server, "POST", "/v1/echo", b"x" * (5 * 1024 * 1024))[0] == 200


# --- the function's answer -------------------------------------------------------------------


@pytest.mark.parametrize(
    "answer",
    [
        pytest.param("just a string", id="not-a-dict"),
        pytest.param({"body": "{}"}, id="no-status-code"),
        pytest.param({"statusCode": "200", "body": "{}"}, id="status-code-a-string"),
        pytest.param({"statusCode": 200, "body": {"a": 1}}, id="body-not-a-string"),
        pytest.param({"statusCode": 200, "headers": {"X-Count": 5}}, id="header-value-not-a-string"),
        pytest.param({"statusCode": 200, "headers": ["X-A"]}, id="headers-not-a-map"),
        pytest.param({"statusCode": 200, "multiValueHeaders": {"X-A": "one"}}, id="multi-value-not-a-list"),
        pytest.param({"statusCode": 200, "body": "%%%", "isBase64Encoded": True}, id="bad-base64"),
    ],
)
def test_malformed_answer_gets_502(start, answer):
    server, _ = start(functions={"answer": lambda event: answer})
    status, headers, body = request(server, "POST", "/v1/answer")
    assert (status, message(body)) == (502, "Internal server error")
    assert headers["x-amzn-errortype"] == "InternalServerErrorException"


def test_function_error_gets_502(start):
    def fails(event: dict[str, Any]) -> dict[str, Any]:
        raise RuntimeError("boom")

    server, _ = start(functions={"answer": fails})
    status, _, body = request(server, "POST", "/v1/answer")
    assert (status, message(body)) == (502, "Internal server error")


def test_slow_function_gets_504(start):
    release = threading.Event()

    def slow(event: dict[str, Any]) -> dict[str, Any]:
        release.wait(30)
        return {"statusCode": 200, "body": "late"}

    server, _ = start(functions={"answer": slow}, integration_timeout=0.5)
    try:
        status, headers, body = request(server, "POST", "/v1/answer")
    finally:
        release.set()
    assert (status, message(body)) == (504, "Endpoint request timed out")
    assert headers["x-amzn-errortype"] == "InternalServerErrorException"


def test_answer_becomes_the_response(start):
    answer = {
        "statusCode": 201,
        "headers": {"X-One": "1", "X-Both": "from-headers"},
        "multiValueHeaders": {"X-Both": ["a", "b"], "Set-Cookie": ["c=1", "d=2"]},
        "body": "created",
    }
    server, _ = start(functions={"answer": lambda event: answer})
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    conn.request("POST", "/v1/answer")
    response = conn.getresponse()
    assert (response.status, response.read()) == (201, b"created")
    assert response.getheader("X-One") == "1"
    assert response.msg.get_all("X-Both") == ["a", "b"]  # multiValueHeaders win for a name in both
    assert response.msg.get_all("Set-Cookie") == ["c=1", "d=2"]
    assert response.getheader("Content-Type") == "application/json"  # API Gateway's default
    assert re.fullmatch(r"[0-9a-f-]{36}", response.getheader("x-amzn-RequestId"))
    assert response.getheader("x-amz-apigw-id")
    conn.close()


def test_base64_answer_is_decoded(start):
    payload = bytes(range(256))
    answer = {
        "statusCode": 200,
        "headers": {"Content-Type": "application/octet-stream"},
        "body": base64.b64encode(payload).decode(),
        "isBase64Encoded": True,
    }
    server, _ = start(functions={"answer": lambda event: answer})
    status, headers, body = request(server, "POST", "/v1/answer")
    assert (status, body, headers["content-type"]) == (200, payload, "application/octet-stream")


# --- the server ------------------------------------------------------------------------------


def test_connection_is_kept_alive_between_requests(start):
    server, _ = start()
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    try:
        first = request(server, "GET", "/v1/items/1", connection=conn)
        sock = conn.sock
        second = request(server, "GET", "/v1/items/2", connection=conn)
        assert conn.sock is sock  # the same TCP connection served both
    finally:
        conn.close()
    assert (first[0], second[0]) == (200, 200)


def test_extra_route_is_served_beside_the_api(start):
    server, invoker = start()
    seen: list[HttpRequest] = []

    def dashboard(req: HttpRequest) -> HttpResponse:
        seen.append(req)
        return HttpResponse(200, (("Content-Type", "text/html"),), b"<h1>dashboard</h1>")

    server.add_route("/_dashboard", dashboard)
    status, headers, body = request(server, "GET", "/_dashboard/metrics?x=1")
    assert (status, body, headers["content-type"]) == (200, b"<h1>dashboard</h1>", "text/html")
    assert (seen[0].path, seen[0].query) == ("/_dashboard/metrics", "x=1")
    assert invoker.events == []
    assert server.stats().requests == 0  # the dashboard is not the API's traffic

    def broken(req: HttpRequest) -> HttpResponse:
        raise RuntimeError("bug in a route")

    server.add_route("/_broken", broken)
    assert request(server, "GET", "/_broken")[0] == 500
    assert request(server, "GET", "/_dashboard")[0] == 200  # the server goes on


def test_stats_count_statuses_and_latency(start):
    server, _ = start()
    request(server, "GET", "/v1/echo")
    request(server, "GET", "/v1/echo")
    request(server, "GET", "/v1/nowhere")
    request(server, "POST", "/v1/answer")  # no such function here: KeyError -> 5XX
    stats = server.stats()
    assert (stats.requests, stats.status_2xx, stats.status_4xx, stats.status_5xx) == (4, 2, 1, 1)
    assert 0 < stats.latency_p50_ms <= stats.latency_p99_ms


def test_stop_ends_every_thread_it_started(start):
    before = set(threading.enumerate())
    server, _ = start()
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    request(server, "GET", "/v1/echo", connection=conn)  # leaves an idle keep-alive connection
    server.stop()
    conn.close()
    # Connection threads are joined by stop(); idle invocation threads exit once told to.
    deadline = time.monotonic() + 10
    while (
        leftover := [t.name for t in threading.enumerate() if t not in before]
    ) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert leftover == []


# --- the validator's compiled models ---------------------------------------------------------

MODEL_DOCUMENTS = [
    {"records": [{"partitionKey": "k"}]},
    {"records": [{"partitionKey": "k", "data": "d", "explicitHashKey": "0"}]},
    {"records": [{"partitionKey": "k", "explicitHashKey": "1" + "0" * 38}]},
    {"records": [{"partitionKey": "k", "explicitHashKey": "1" + "0" * 39}]},
    {"records": [{"partitionKey": "k", "explicitHashKey": "007"}]},
    {"records": [{"partitionKey": ""}]},
    {"records": [{"partitionKey": "x" * 256}]},
    {"records": [{"partitionKey": "x" * 257}]},
    {"records": [{"partitionKey": "é" * 256}]},
    {"records": [{"partitionKey": True}]},
    {"records": [{"partitionKey": "k", "data": None}]},
    {"records": [{"partitionKey": "k", "data": 1}]},
    {"records": [{"partitionKey": "k", "other": [1, 2]}]},
    {"records": [{"data": "d"}]},
    {"records": ["k"]},
    {"records": []},
    {"records": {"partitionKey": "k"}},
    {"records": None},
    {"other": 1},
    {},
    [],
    "records",
    None,
    3.5,
]
OTHER_MODEL = {
    "type": ["object", "null"],
    "additionalProperties": False,
    "properties": {"n": {"type": "integer", "minimum": 1, "maximum": 9}, "f": {"type": "number"}},
}


@pytest.mark.parametrize(
    "document", [*MODEL_DOCUMENTS, {"n": 1}, {"n": 0}, {"n": 9.0}, {"f": True}, {"x": 1}]
)
def test_compiled_models_agree_with_jsonschema(document):
    for schema in (RECORDS_MODEL, OTHER_MODEL):
        compiled = compile_model(schema)
        assert not isinstance(getattr(compiled, "__self__", None), jsonschema.Draft4Validator)  # compiled
        assert compiled(document) == jsonschema.Draft4Validator(schema).is_valid(document), (schema, document)


def test_models_with_other_keywords_use_jsonschema():
    schema = {"type": "object", "properties": {"color": {"enum": ["red", "blue"]}}}
    check = compile_model(schema)
    assert isinstance(check.__self__, jsonschema.Draft4Validator)
    assert (check({"color": "red"}), check({"color": "green"})) == (True, False)
