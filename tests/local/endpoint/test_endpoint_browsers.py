"""Issue 40's review: the local endpoint refuses what a web page could send it — a cross-origin
request, a DNS-rebinding Host, moto's control API — and still serves the SDKs and the CLI."""

from __future__ import annotations

import http.client
from urllib.parse import urlsplit

import pytest

from local.app.provision import client

pytestmark = pytest.mark.integration


def request(url: str, path: str, headers: dict[str, str], method: str = "POST") -> tuple[int, bytes]:
    where = urlsplit(url)
    connection = http.client.HTTPConnection(where.hostname, where.port, timeout=10)
    try:
        connection.request(
            method, path, body=b"{}", headers={"Content-Type": "application/x-amz-json-1.0", **headers}
        )
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


LIST_TABLES = {"X-Amz-Target": "DynamoDB_20120810.ListTables"}


def test_the_endpoint_refuses_a_cross_origin_request_and_its_preflight(local_endpoint: str) -> None:
    status, body = request(local_endpoint, "/", {**LIST_TABLES, "Origin": "https://evil.example"})
    assert status == 403 and b"cross-origin" in body
    status, _ = request(local_endpoint, "/", {"Origin": "https://evil.example"}, method="OPTIONS")
    assert status == 403


def test_the_endpoint_refuses_a_host_that_is_not_loopback(local_endpoint: str) -> None:
    port = urlsplit(local_endpoint).port
    status, body = request(local_endpoint, "/", {**LIST_TABLES, "Host": f"rebound.evil.example:{port}"})
    assert status == 403 and b"not loopback" in body


def test_motos_control_api_is_closed(local_endpoint: str) -> None:
    for path in ("/moto-api/", "/moto-api/reset", "/moto-api/data.json"):
        status, _ = request(local_endpoint, path, {}, method="GET" if "reset" not in path else "POST")
        assert status == 404, path


def test_sdks_and_the_cli_still_reach_it(local_endpoint: str) -> None:
    assert "TableNames" in client("dynamodb", local_endpoint).list_tables()
    port = urlsplit(local_endpoint).port
    status, _ = request(local_endpoint, "/", {**LIST_TABLES, "Host": f"localhost:{port}"})
    assert status != 403  # a loopback name is the endpoint's own (unsigned: the service's own answer)
