"""The HTTP side of `send`: one signed keep-alive connection per thread, the pacing shared by all
threads, and how long to wait before posting a request again (its `Retry-After`, else a growing
pause with jitter)."""

from __future__ import annotations

import http.client
import json
import random
import threading
import time
import urllib.parse
from typing import Any

from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from ..app import model

SERVICE = "execute-api"
MAX_BACKOFF_S = 2.0
REQUEST_TIMEOUT_S = 60.0


class Pacer:
    """At most `rate` records/s across all threads: each request waits for its records' share of time."""

    def __init__(self, rate: float | None) -> None:
        self._rate = rate
        self._next = time.monotonic()
        self._lock = threading.Lock()

    def wait(self, records: int) -> None:
        if not self._rate:
            return
        with self._lock:
            now = time.monotonic()
            start = max(now, self._next)
            self._next = start + records / self._rate
        time.sleep(max(0.0, start - now))


class Client:
    """One keep-alive connection to the API, signing each request as the AWS SDKs do — with the
    local credentials, or `credentials` (access key, secret key) — and with a client's API key when
    given."""

    def __init__(
        self,
        api_url: str,
        sign: bool,
        api_key: str | None = None,
        credentials: tuple[str, str] = (model.ACCESS_KEY, model.SECRET_KEY),
    ) -> None:
        self._parts = urllib.parse.urlsplit(api_url)
        self._sign = sign
        self._api_key = api_key  # sent as x-api-key (a client's key of a usage plan)
        self._signer = SigV4Auth(Credentials(*credentials), SERVICE, model.REGION)
        self._connection: http.client.HTTPConnection | None = None

    def post(
        self,
        path: str,
        body: bytes,
        content_type: str = "application/json",
        headers: dict[str, str] | None = None,
    ) -> tuple[int, dict[str, str], Any]:
        """POST `body` (signed with `headers`, e.g. `Idempotency-Key`); (status, headers, JSON answer).
        Raises OSError or HTTPException when no answer came (the connection is closed then)."""
        url = urllib.parse.urlunsplit((self._parts.scheme, self._parts.netloc, path, "", ""))
        extra = {"Content-Type": content_type, **(headers or {})}
        if self._api_key is not None:
            extra["x-api-key"] = self._api_key
        request = AWSRequest("POST", url, data=body, headers=extra)
        if self._sign:
            self._signer.add_auth(request)
        sent = {"Host": self._parts.netloc, **dict(request.headers.items())}
        if self._connection is None:
            kind = (
                http.client.HTTPSConnection if self._parts.scheme == "https" else http.client.HTTPConnection
            )
            self._connection = kind(self._parts.netloc, timeout=REQUEST_TIMEOUT_S)
        try:
            self._connection.request("POST", path, body=body, headers=sent)
            response = self._connection.getresponse()
            raw = response.read()
        except (OSError, http.client.HTTPException):
            self.close()
            raise
        try:
            answer = json.loads(raw) if raw else {}
        except ValueError:
            answer = {"message": raw[:200].decode(errors="replace")}
        return response.status, {k.lower(): v for k, v in response.getheaders()}, answer

    def close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None


def backoff(attempt: int, rng: random.Random | None = None) -> float:
    """The pause after the `attempt`-th failed try (1, 2, ...): 50 ms doubling up to MAX_BACKOFF_S,
    less up to half of it at random (so threads that failed together do not come back together)."""
    ceiling: float = min(MAX_BACKOFF_S, 0.05 * 2 ** max(0, attempt - 1))
    return ceiling * (1 - 0.5 * (rng.random() if rng is not None else random.random()))


def retry_after(headers: dict[str, str], attempt: int, rng: random.Random | None = None) -> float:
    """The answer's `Retry-After` (seconds), else `backoff(attempt)`."""
    try:
        return max(0.0, float(headers["retry-after"]))
    except (KeyError, ValueError):
        return backoff(attempt, rng)
