"""The HTTP request and response of the local API server, below both of its users: the API Gateway
emulator (`local.apigw.server`) and the routes added beside the API (the dashboard, `local.cloudwatch`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class HttpRequest:
    """An incoming request, as an extra route (`ApiServer.add_route`) receives it."""

    method: str
    path: str  # still percent-encoded
    query: str
    headers: tuple[tuple[str, str], ...]
    body: bytes
    client_ip: str


@dataclass(frozen=True)
class HttpResponse:
    """An answer: status, headers and body."""

    status: int
    headers: tuple[tuple[str, str], ...] = ()
    body: bytes = b""


RouteHandler = Callable[[HttpRequest], HttpResponse]
