"""The request a boto3 client would send, signed, captured before it leaves (for `calls` and `sigv4`).

`signed_request("kinesis", "put_records", Records=[...], StreamName="s")` builds the call with a
real botocore client, lets botocore sign it, and stops it at `before-send`: nothing reaches the
network. What the local endpoint's enforcer reads from a request is then read from the very bytes
botocore produces — used by the call-mapping tests and `bench.iam_calls`.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import boto3
import botocore.config
from botocore.exceptions import ClientError

ACCOUNT = "000000000000"
REGION = "us-east-1"
ENDPOINT = "http://127.0.0.1:4566"


@dataclass(frozen=True)
class SignedRequest:
    """What a client sends: the signing service's name and the HTTP request's parts."""

    signing_name: str
    method: str
    path: str
    query: str
    headers: dict[str, str]
    body: bytes


class _Captured(Exception):
    """Raised from `before-send` to stop the request once signed."""


def signed_request(
    service: str,
    method: str,
    endpoint: str = ENDPOINT,
    config: dict[str, Any] | None = None,
    **params: Any,
) -> SignedRequest:
    """What `boto3.client(service).method(**params)` sends to `endpoint`, signed with a fixed
    example key (`config`: botocore `Config` options, e.g. an S3 addressing style)."""
    client = boto3.client(
        service,
        endpoint_url=endpoint,
        region_name=REGION,
        aws_access_key_id="AKIDEXAMPLE",
        aws_secret_access_key="secret",
        config=botocore.config.Config(retries={"max_attempts": 1}, **(config or {})),
    )
    sent: list[Any] = []

    def capture(request: Any, **_: Any) -> None:
        sent.append(request)
        raise _Captured

    client.meta.events.register("before-send", capture)
    with contextlib.suppress(_Captured, ClientError):
        getattr(client, method)(**params)
    if not sent:
        raise RuntimeError(f"{service}.{method}: botocore refused the call before signing it")
    request = sent[-1]
    body = request.body
    if hasattr(body, "read"):
        body = body.read()
    if isinstance(body, str):
        body = body.encode()
    url = urlsplit(request.url)
    headers = {k: v.decode() if isinstance(v, bytes) else v for k, v in request.headers.items()}
    return SignedRequest(
        client.meta.service_model.signing_name, request.method, url.path, url.query, headers, body or b""
    )
