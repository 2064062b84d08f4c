"""Purpose-built functions for the event-source-mapping tests, and the invoker that runs them.

`CallableInvoker` implements `local.app.model.Invoker` around plain Python callables: it is the mapping
runner's collaborator (the real one runs workers in processes), not the thing under test. It
round-trips every event and answer through JSON, as the process boundary does, and keeps a log of
the invocations for the tests to read.
"""

from __future__ import annotations

import base64
import json
import threading
import time
import traceback
import uuid
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any

from local.app.model import InvokeResult


@dataclass(frozen=True)
class Invocation:
    at: float  # time.monotonic() when the invocation began
    request_id: str
    event: dict[str, Any]
    event_bytes: int  # the JSON event's size as sent
    function_error: str | None

    @property
    def sequence_numbers(self) -> list[str]:
        return [record["kinesis"]["sequenceNumber"] for record in self.event["Records"]]

    @property
    def shard_id(self) -> str:
        return self.event["Records"][0]["eventID"].split(":")[0]


class CallableInvoker:
    """Invokes `handler(event)` for one function name; an exception is Lambda's "Unhandled" error."""

    def __init__(self, function_name: str, handler: Callable[[dict[str, Any]], Any]) -> None:
        self.function_name = function_name
        self.handler = handler
        self.invocations: list[Invocation] = []
        self._lock = threading.Lock()

    def invoke(self, function_name: str, event: Any, *, wait: bool = True) -> InvokeResult:
        if function_name != self.function_name:
            raise KeyError(function_name)
        started = time.monotonic()
        body = json.dumps(event)
        request_id = str(uuid.uuid4())
        try:
            payload, error = json.loads(json.dumps(self.handler(json.loads(body)))), None
        except Exception as exc:
            payload = {
                "errorMessage": str(exc),
                "errorType": type(exc).__name__,
                "stackTrace": traceback.format_tb(exc.__traceback__),
            }
            error = "Unhandled"
        with self._lock:
            self.invocations.append(Invocation(started, request_id, json.loads(body), len(body), error))
        return InvokeResult(request_id, payload, error, (time.monotonic() - started) * 1000)

    def batches(self) -> list[list[str]]:
        """The sequence numbers of each invocation, in order."""
        with self._lock:
            return [invocation.sequence_numbers for invocation in self.invocations]


def data_of(record: dict[str, Any]) -> bytes:
    return base64.b64decode(record["kinesis"]["data"])


def succeed(event: dict[str, Any]) -> None:
    """Processes every record."""


def fail_on(poison: bytes) -> Callable[[dict[str, Any]], None]:
    """Raises when the batch holds a record whose data is `poison`."""

    def handler(event: dict[str, Any]) -> None:
        if any(data_of(record) == poison for record in event["Records"]):
            raise ValueError(f"poison record {poison!r}")

    return handler


def fail_first(times: int) -> Callable[[dict[str, Any]], None]:
    """Raises on its first `times` invocations, then recovers."""
    calls = {"n": 0}

    def handler(event: dict[str, Any]) -> None:
        calls["n"] += 1
        if calls["n"] <= times:
            raise RuntimeError(f"failure {calls['n']} of {times}")

    return handler


def answer_once(first_answer: Callable[[dict[str, Any]], Any]) -> Callable[[dict[str, Any]], Any]:
    """Answers its first invocation with `first_answer(event)`, and every later one with success."""
    calls = {"n": 0}

    def handler(event: dict[str, Any]) -> Any:
        calls["n"] += 1
        return first_answer(event) if calls["n"] == 1 else {"batchItemFailures": []}

    return handler


def slow_on_shards(shard_ids: Collection[str], seconds: float) -> Callable[[dict[str, Any]], None]:
    """Takes `seconds` over each batch from one of `shard_ids` (so a child polled too early would show)."""

    def handler(event: dict[str, Any]) -> None:
        if event["Records"][0]["eventID"].split(":")[0] in shard_ids:
            time.sleep(seconds)

    return handler
