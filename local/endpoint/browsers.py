"""The endpoint refuses what a web page could send it: any cross-origin request, a Host that is not
loopback (a DNS-rebinding page reaches 127.0.0.1 under its own name), and moto's own control API.

The endpoint holds every table, queue and stream of the app with no password a page would need (the
account root's keys are `test`/`test`); a browser tab on any site could otherwise read and change
them. SDKs and the CLI send no `Origin` and name the endpoint as they were given it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any

__all__ = ["BrowserGuard"]

LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1", "[::1]"})


class BrowserGuard:
    """WSGI middleware: 403 for a cross-origin or foreign-Host request, 404 under `/moto-api/`."""

    def __init__(self, app: Callable[..., Iterable[bytes]]) -> None:
        self.app = app

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if environ.get("PATH_INFO", "").startswith("/moto-api"):
            return _refuse(start_response, "404 Not Found", "moto's control API is closed on this endpoint")
        host = _hostname(environ.get("HTTP_HOST", ""))
        if host and not _loopback(host):
            return _refuse(start_response, "403 Forbidden", f"Host {host!r} is not loopback: refused")
        origin = environ.get("HTTP_ORIGIN")
        if origin is not None:
            return _refuse(start_response, "403 Forbidden", f"cross-origin request from {origin!r} refused")
        return self.app(environ, start_response)


def _hostname(host: str) -> str:
    if host.startswith("["):  # [::1]:4566
        return host.split("]", 1)[0] + "]"
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def _loopback(host: str) -> bool:
    """Loopback by address or by name; S3's virtual-hosted names of a loopback host (`bucket.localhost`)."""
    return host in LOOPBACK_HOSTS or host.endswith(".localhost") or host.startswith("127.")


def _refuse(start_response: Callable[..., Any], status: str, message: str) -> list[bytes]:
    body = json.dumps({"error": message}).encode()
    start_response(status, [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
    return [body]
