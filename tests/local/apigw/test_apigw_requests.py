"""The local REST API's routing, the REST v1 proxy event it builds, and its request validator."""

from __future__ import annotations

import base64
import json
import re
import time

import pytest

from tests.support.apigw import message, post_records, request

pytestmark = pytest.mark.integration

# --- routing and the proxy event -------------------------------------------------------------

REQUEST_CONTEXT_KEYS = {
    "accountId", "apiId", "resourceId", "resourcePath", "stage", "requestId", "extendedRequestId",
    "httpMethod", "path", "protocol", "requestTime", "requestTimeEpoch", "domainName", "domainPrefix",
    "identity", "deploymentId",
}  # fmt: skip
# No apiKey, apiKeyId: the method takes no API key (AWS's identity then has neither).
IDENTITY_KEYS = {
    "sourceIp", "userAgent", "accessKey", "accountId", "caller", "user", "userArn", "principalOrgId",
    "cognitoIdentityPoolId", "cognitoIdentityId", "cognitoAuthenticationType",
    "cognitoAuthenticationProvider",
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
    assert (context["domainName"], context["domainPrefix"]) == (f"127.0.0.1:{server.port}", "127")
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
