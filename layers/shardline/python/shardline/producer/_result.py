"""What the producer tells the caller about each user record: the outcome and every attempt.

Both are NamedTuples: immutable, cheap to create, and `._asdict()` gives a JSON-ready dict.
"""

from __future__ import annotations

from typing import NamedTuple


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
