"""Fault injection for a Kinesis client: what no emulator does on its own.

`FaultyKinesis` wraps a real (loopback) boto3 Kinesis client and, according to knobs that
tests and the local runtime set, throttles or fails some PutRecords entries, fails whole
requests, returns a response with the wrong record count, or denies ListShards. Entries it
fails are never sent to the server, as with real Kinesis; everything else really lands.

    kinesis = FaultyKinesis(boto3.client("kinesis", endpoint_url=...), rng=random.Random(7))
    kinesis.throttle_fraction = 0.3
"""

from __future__ import annotations

import random
import threading
from collections import Counter, deque
from typing import Any

from botocore.exceptions import ClientError

THROTTLED = "ProvisionedThroughputExceededException"
THROTTLED_MESSAGE = "Rate exceeded for shard (injected)"


def client_error(code: str, message: str, operation: str) -> ClientError:
    """The exception botocore raises for a service error `code`."""
    return ClientError({"Error": {"Code": code, "Message": message}}, operation)


class FaultyKinesis:
    """A Kinesis client that injects faults; every other call goes to the wrapped client.

    Knobs (safe to change between calls):
    - `throttle_fraction`: share of PutRecords entries answered with ProvisionedThroughputExceeded.
    - `record_error_fraction`: share answered with InternalFailure.
    - `fail_requests(code, times)`: the next `times` PutRecords calls raise `code`, sending nothing.
    - `mismatch_counts(times)`: the next `times` PutRecords calls land every entry but answer with
      one entry missing (a response whose count does not match the request).
    - `list_shards_error`: ListShards raises this code (e.g. AccessDeniedException) while set.
    `injected` counts what was injected, by kind.
    """

    def __init__(self, client: Any, *, rng: random.Random | None = None) -> None:
        self._client = client
        self._rng = rng or random.Random()
        self._lock = threading.Lock()
        self._request_errors: deque[str] = deque()
        self._mismatches = 0
        self.throttle_fraction = 0.0
        self.record_error_fraction = 0.0
        self.list_shards_error: str | None = None
        self.injected: Counter[str] = Counter()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    def fail_requests(self, code: str, times: int = 1) -> None:
        with self._lock:
            self._request_errors.extend([code] * times)

    def mismatch_counts(self, times: int = 1) -> None:
        with self._lock:
            self._mismatches += times

    def list_shards(self, **kwargs: Any) -> Any:
        code = self.list_shards_error
        if code is not None:
            self._count("ListShards:" + code)
            raise client_error(code, "ListShards denied (injected)", "ListShards")
        return self._client.list_shards(**kwargs)

    def put_records(self, **kwargs: Any) -> dict[str, Any]:
        with self._lock:
            request_error = self._request_errors.popleft() if self._request_errors else None
            mismatch = self._mismatches > 0
            self._mismatches -= int(mismatch)
            verdicts = [self._verdict() for _ in kwargs["Records"]]
        if request_error is not None:
            self._count("PutRecords:" + request_error)
            raise client_error(request_error, "request failed (injected)", "PutRecords")
        survivors = [
            entry for entry, verdict in zip(kwargs["Records"], verdicts, strict=True) if verdict is None
        ]
        landed: list[dict[str, Any]] = []
        if survivors:
            landed = list(self._client.put_records(**{**kwargs, "Records": survivors})["Records"])
        results: list[dict[str, Any]] = []
        landed_iter = iter(landed)
        for verdict in verdicts:
            if verdict is None:
                results.append(next(landed_iter))
            else:
                self._count(verdict)
                message = THROTTLED_MESSAGE if verdict == THROTTLED else "Internal service failure (injected)"
                results.append({"ErrorCode": verdict, "ErrorMessage": message})
        if mismatch:
            self._count("RecordCountMismatch")
            results = results[:-1]
        failed = sum(1 for result in results if "ErrorCode" in result)
        return {"FailedRecordCount": failed, "Records": results}

    def _verdict(self) -> str | None:
        roll = self._rng.random()
        if roll < self.throttle_fraction:
            return THROTTLED
        if roll < self.throttle_fraction + self.record_error_fraction:
            return "InternalFailure"
        return None

    def _count(self, kind: str) -> None:
        with self._lock:
            self.injected[kind] += 1
