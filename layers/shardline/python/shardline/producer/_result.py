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

    A success carries the `shard_id` and `sequence_number` Kinesis returned for the copy of the
    record's aggregate that confirmed it — a copy that landed in a shard whose hash range holds the
    record; `sub_sequence_number` is the record's position inside that aggregate (every Kinesis
    record the producer sends is a KPL aggregate, a lone record one of one). The producer never
    reads the stream: nothing else makes a success.

    On failure `error_code`/`error_message` give the last reason, and `unconfirmed` says whether a
    copy may be in the stream all the same: True when a request carrying it went unanswered (or
    landed where the record's shard could not be verified) and no copy was confirmed; False when
    no copy can be there (never sent, or every copy refused). Either way the producer will not
    send it again; consumers apply a copy of one aggregate once. `attempts` is the full history,
    so a caller can tell one transient error from a throttle storm.
    """

    success: bool
    shard_id: str | None = None
    sequence_number: str | None = None
    sub_sequence_number: int | None = None
    error_code: str | None = None
    error_message: str | None = None
    attempts: tuple[Attempt, ...] = ()
    unconfirmed: bool = False


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
