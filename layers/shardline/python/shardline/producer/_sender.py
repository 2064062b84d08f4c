"""Sender: one PutRecords call, timed, with every way it can fail turned into data.

The sender never raises: a client exception becomes a request-level error code (the botocore
error code, or `Internal` for anything else, as the KPL does), and the retrier decides. It says
whether the call went `unanswered` — no reply (a read timeout, a reset or closed connection), or
a 5xx — so that the retrier seals its aggregates: any of them may have landed. It never reads
the stream to find out; only Kinesis's answer to a PutRecords makes a success.

An answer's per-record entries are read once, here, into typed outcomes: `Accepted` (the shard and
sequence number Kinesis returned), `Refused` (its error code and message: nothing was written) or
`Malformed` (a success entry without a shard or sequence number: it may have landed).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from botocore.exceptions import ClientError

from shardline.producer._collector import PutRecordsBatch

if TYPE_CHECKING:  # annotations only: the Protocols cost nothing at import
    from shardline.protocols import KinesisClient


class Accepted(NamedTuple):
    """Kinesis wrote the record: where, and at which sequence number."""

    shard_id: str
    sequence_number: str


class Refused(NamedTuple):
    """Kinesis refused the record (nothing of it was written), saying why."""

    error_code: str
    error_message: str


class Malformed(NamedTuple):
    """A success entry without a `ShardId` or a `SequenceNumber`: the record may have landed."""

    keys: tuple[str, ...]  # the entry's keys, sorted

    @property
    def message(self) -> str:
        return f"a success entry without ShardId or SequenceNumber: {list(self.keys)}"


#: One record's outcome in a PutRecords answer.
Entry = Accepted | Refused | Malformed


def read_entry(entry: Mapping[str, Any]) -> Entry:
    """The typed outcome of one entry of a PutRecords response's `Records`."""
    code = entry.get("ErrorCode")
    if code:
        return Refused(code, entry.get("ErrorMessage") or "")
    shard_id, sequence_number = entry.get("ShardId"), entry.get("SequenceNumber")
    if isinstance(shard_id, str) and isinstance(sequence_number, str):
        return Accepted(shard_id, sequence_number)
    return Malformed(tuple(sorted(entry)))


class SendOutcome(NamedTuple):
    """What one PutRecords call returned: either a request-level error or per-record entries.
    `unanswered`: the request-level error may have followed a write (no reply, or a 5xx)."""

    started: float
    duration: float
    entries: Sequence[Entry] = ()
    error_code: str | None = None
    error_message: str | None = None
    unanswered: bool = False


def send(
    client: KinesisClient, stream_name: str, batch: PutRecordsBatch, clock: Callable[[], float]
) -> SendOutcome:
    """Send `batch` with PutRecords and report what happened."""
    started = clock()
    try:
        response = client.put_records(StreamName=stream_name, Records=[r.entry() for r in batch.records])
    except ClientError as exc:
        error = exc.response.get("Error", {})
        code, message = error.get("Code", "Unknown"), error.get("Message", "")
        unanswered = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) >= 500
    except Exception as exc:  # connection reset, timeout, a bug in a fake: all request-level
        code, message, unanswered = "Internal", f"{type(exc).__name__}: {exc}", True
    else:
        duration = clock() - started
        entries = tuple(read_entry(entry) for entry in response.get("Records", ()))
        return SendOutcome(started, duration, entries=entries)
    return SendOutcome(
        started, clock() - started, error_code=code, error_message=message, unanswered=unanswered
    )
