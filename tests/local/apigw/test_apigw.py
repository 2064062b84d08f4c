"""The local REST API's IAM authorization (`local.apigw.ApiServer`): SigV4, presigned URLs, API keys."""

from __future__ import annotations

import json
import re
import time

import pytest
from botocore.auth import SigV4Auth, SigV4QueryAuth
from botocore.awsrequest import AWSRequest, HTTPHeaders
from botocore.credentials import Credentials

from local.app.model import Method
from tests.support.apigw import GOOD_BODY, message, post_records, post_records_with, request

pytestmark = pytest.mark.integration

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


def test_a_keyed_method_without_a_usage_plan_refuses_every_key(start):
    """API Gateway checks a key against the usage plans on the stage: with none, no key opens the method."""
    keyed = (Method(path="/keyed", http_method="GET", function_name="echo", api_key_required=True),)
    server, invoker = start(methods=keyed)
    for key in ("any", "key-1"):
        status, headers, body = request(server, "GET", "/v1/keyed", headers={"x-api-key": key})
        assert (status, message(body), headers["x-amzn-errortype"]) == (
            403,
            "Forbidden",
            "ForbiddenException",
        )
    assert invoker.events == []


def test_a_signature_that_leaves_host_unsigned_is_refused(start):
    """AWS refuses SigV4 whose SignedHeaders omit `host` (the signature would hold for any host)."""
    server, invoker = start()
    aws = AWSRequest(method="POST", url=server.url + "/v1/streams/events/records", data=GOOD_BODY)
    aws.headers["X-Amz-Date"] = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    signer = SigV4Auth(Credentials("test", "test"), "execute-api", "us-east-1")
    only_date = HTTPHeaders()
    only_date["x-amz-date"] = aws.headers["X-Amz-Date"]
    signer.headers_to_sign = lambda request: only_date  # type: ignore[method-assign]
    signer.add_auth(aws)
    assert "SignedHeaders=x-amz-date," in aws.headers["Authorization"]
    status, headers, body = request(
        server, "POST", "/v1/streams/events/records", GOOD_BODY, headers=dict(aws.headers)
    )
    assert (status, headers["x-amzn-errortype"]) == (403, "InvalidSignatureException")
    assert message(body) == "'Host' or ':authority' must be a 'SignedHeader' in the AWS Authorization."
    assert invoker.events == []
