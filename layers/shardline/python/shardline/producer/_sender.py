"""Sender: one PutRecords call, timed, with every way it can fail turned into data.

The sender never raises: a client exception becomes a request-level error code (the botocore
error code, or `Internal` for anything else, as the KPL does), and the retrier decides.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from botocore.exceptions import ClientError

from shardline.producer._collector import PutRecordsBatch

if TYPE_CHECKING:  # annotations only: the Protocols cost nothing at import
    from shardline.protocols import KinesisClient


class SendOutcome(NamedTuple):
    """What one PutRecords call returned: either a request-level error or per-record entries."""

    started: float
    duration: float
    entries: Sequence[Mapping[str, Any]] = ()
    error_code: str | None = None
    error_message: str | None = None


def send(
    client: KinesisClient, stream_name: str, batch: PutRecordsBatch, clock: Callable[[], float]
) -> SendOutcome:
    """Send `batch` with PutRecords and report what happened."""
    started = clock()
    try:
        response = client.put_records(StreamName=stream_name, Records=[r.entry() for r in batch.records])
    except ClientError as exc:
        error = exc.response.get("Error", {})
        return SendOutcome(
            started,
            clock() - started,
            error_code=error.get("Code", "Unknown"),
            error_message=error.get("Message", ""),
        )
    except Exception as exc:  # connection reset, timeout, a bug in a fake: all request-level
        return SendOutcome(
            started, clock() - started, error_code="Internal", error_message=f"{type(exc).__name__}: {exc}"
        )
    return SendOutcome(started, clock() - started, entries=response.get("Records", ()))
