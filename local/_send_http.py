"""The HTTP side of `send`: one signed keep-alive connection per thread, the pacing shared by all
threads, and how long an answer says to wait before trying again."""

from __future__ import annotations

import http.client
import json
import threading
import time
import urllib.parse
from typing import Any

from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from local import model

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
    """One keep-alive connection to the API, signing each request as the AWS SDKs do."""

    def __init__(self, api_url: str, sign: bool) -> None:
        self._parts = urllib.parse.urlsplit(api_url)
        self._sign = sign
        self._signer = SigV4Auth(Credentials(model.ACCESS_KEY, model.SECRET_KEY), SERVICE, model.REGION)
        self._connection: http.client.HTTPConnection | None = None

    def post(
        self, path: str, body: bytes, content_type: str = "application/json"
    ) -> tuple[int, dict[str, str], Any]:
        url = urllib.parse.urlunsplit((self._parts.scheme, self._parts.netloc, path, "", ""))
        request = AWSRequest("POST", url, data=body, headers={"Content-Type": content_type})
        if self._sign:
            self._signer.add_auth(request)
        headers = {"Host": self._parts.netloc, **dict(request.headers.items())}
        if self._connection is None:
            kind = (
                http.client.HTTPSConnection if self._parts.scheme == "https" else http.client.HTTPConnection
            )
            self._connection = kind(self._parts.netloc, timeout=REQUEST_TIMEOUT_S)
        try:
            self._connection.request("POST", path, body=body, headers=headers)
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


def retry_after(headers: dict[str, str], attempt: int) -> float:
    try:
        return max(0.0, float(headers["retry-after"]))
    except (KeyError, ValueError):
        return min(MAX_BACKOFF_S, 0.05 * 2**attempt)
