"""What the producer tells the caller about each user record: the outcome and every attempt.

Both are NamedTuples: immutable, cheap to create, and `._asdict()` gives a JSON-ready dict.
`RecordFuture` is the light `Future` that `Producer.put()` returns.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, NamedTuple


class Attempt(NamedTuple):
    """One trip of a record to Kinesis (or one decision about it, such as `Expired`).

    `started` is on the producer's clock (seconds); `duration` is how long the request took.
    """

    started: float
    duration: float
    success: bool
    error_code: str | None = None
    error_message: str | None = None


class RecordResult(NamedTuple):
    """The final outcome of one user record.

    On success `shard_id` and `sequence_number` say where it landed; `sub_sequence_number` is its
    position inside a KPL aggregate (None when it was sent as a plain Kinesis record). On failure
    `error_code`/`error_message` give the last reason. `attempts` is the full history, so a caller
    can tell one transient error from a throttle storm.
    """

    success: bool
    shard_id: str | None = None
    sequence_number: str | None = None
    sub_sequence_number: int | None = None
    error_code: str | None = None
    error_message: str | None = None
    attempts: tuple[Attempt, ...] = ()


class RecordFuture(Future[RecordResult]):
    """The future `Producer.put()` returns: a `concurrent.futures.Future` that shares one
    condition with the other futures of its producer instead of building its own.

    A Future's own `threading.Condition` is most of its weight (about 1 KB); a million buffered
    records would carry a gigabyte of them. Waiters on a shared condition wake on any record's
    result and re-check their own, which `Future` already does.
    """

    def __init__(self, condition: threading.Condition) -> None:
        # Future.__init__'s fields (stable since Python 3.2), with the shared condition.
        self._condition = condition
        self._state = "PENDING"
        self._result = None
        self._exception = None
        self._waiters: list[Any] = []
        self._done_callbacks: list[Callable[[Future[RecordResult]], object]] = []
