"""The local REST API's throttling and limits, how it maps the function's answer, and the server itself."""

from __future__ import annotations

import base64
import http.client
import re
import threading
import time
from typing import Any

import pytest

from local.apigw.server import HttpRequest, HttpResponse
from tests.support.apigw import message, request

pytestmark = pytest.mark.integration

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
        pytest.param({"statusCode": 200, "wrongValue": "value"}, id="a-key-of-no-proxy-response"),
        pytest.param({"statusCode": "test", "body": "{}"}, id="status-code-not-a-number"),
        pytest.param({"statusCode": 200, "body": {"a": 1}}, id="body-not-a-string"),
        pytest.param({"statusCode": 200, "headers": {"X-Count": 5}}, id="header-value-not-a-string"),
        pytest.param({"statusCode": 200, "headers": ["X-A"]}, id="headers-not-a-map"),
        pytest.param({"statusCode": 200, "multiValueHeaders": {"X-A": "one"}}, id="multi-value-not-a-list"),
        # The HTTP API's payload 2.0 keys are not the REST API's: the whole answer is malformed.
        pytest.param(
            {"statusCode": 200, "body": "{}", "cookies": ["a=b"]}, id="cookies-a-key-rest-does-not-know"
        ),
        pytest.param({"statusCode": 200, "body": "{}", "statusDescription": "OK"}, id="an-alb-key"),
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
    assert response.msg.get_all("X-Both") == ["a", "b", "from-headers"]  # both maps, multi first (as AWS)
    assert response.msg.get_all("Set-Cookie") == ["c=1", "d=2"]
    assert response.getheader("Content-Type") == "application/json"  # API Gateway's default
    assert re.fullmatch(r"[0-9a-f-]{36}", response.getheader("x-amzn-RequestId"))
    assert response.getheader("x-amz-apigw-id")
    conn.close()


BINARY = {
    "statusCode": 200,
    "headers": {"Content-Type": "application/octet-stream"},
    "body": base64.b64encode(bytes(range(256))).decode(),
    "isBase64Encoded": True,
}


def test_a_base64_answer_is_decoded_when_the_api_declares_the_accepted_type_binary(start):
    server, _ = start(
        functions={"answer": lambda event: BINARY}, binary_media_types=("application/octet-stream",)
    )
    status, headers, body = request(
        server, "POST", "/v1/answer", headers={"Accept": "application/octet-stream"}
    )
    assert (status, body, headers["content-type"]) == (200, bytes(range(256)), "application/octet-stream")


@pytest.mark.parametrize(
    ("declared", "accept"),
    [
        ((), "application/octet-stream"),
        (("image/png",), "application/octet-stream"),
        (("image/*",), "text/html"),
    ],
)
def test_otherwise_a_base64_answer_passes_through_as_text(start, declared, accept):
    """API Gateway decodes only for a binary media type the request accepts (AWS-recorded, conformance)."""
    server, _ = start(functions={"answer": lambda event: BINARY}, binary_media_types=declared)
    status, _, body = request(server, "POST", "/v1/answer", headers={"Accept": accept})
    assert (status, body) == (200, BINARY["body"].encode())


def test_a_body_that_is_not_base64_where_it_must_be_decoded_gets_502(start):
    bad = {**BINARY, "body": "%%%"}
    server, _ = start(functions={"answer": lambda event: bad}, binary_media_types=("*/*",))
    status, _, body = request(server, "POST", "/v1/answer", headers={"Accept": "application/octet-stream"})
    assert (status, message(body)) == (502, "Internal server error")


def test_a_wildcard_binary_type_matches_its_kind(start):
    server, _ = start(functions={"answer": lambda event: BINARY}, binary_media_types=("application/*",))
    assert request(server, "POST", "/v1/answer", headers={"Accept": "application/octet-stream"})[2] == bytes(
        range(256)
    )


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
