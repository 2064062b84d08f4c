"""Sender: one PutRecords call, timed, with every way it can fail turned into data.

The sender never raises: a client exception becomes a request-level error code (the botocore
error code, or `Internal` for anything else, as the KPL does), and the retrier decides. A call
whose outcome is unknown — no reply, or a 5xx — is first settled by reading the shards back
(`_reconciler`), within `reconcile_s` seconds: its outcome is then per record, as if answered.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from botocore.exceptions import ClientError

from shardline.producer._collector import PutRecordsBatch
from shardline.producer._reconciler import read_back

if TYPE_CHECKING:  # annotations only: the Protocols cost nothing at import
    from shardline.protocols import KinesisClient


class SendOutcome(NamedTuple):
    """What one PutRecords call returned: either a request-level error or per-record entries.
    `reconciled`: the entries were found by reading back after an unanswered call."""

    started: float
    duration: float
    entries: Sequence[Mapping[str, Any]] = ()
    error_code: str | None = None
    error_message: str | None = None
    reconciled: bool = False


def send(
    client: KinesisClient,
    stream_name: str,
    batch: PutRecordsBatch,
    clock: Callable[[], float],
    reconcile_s: float = 0.0,
) -> SendOutcome:
    """Send `batch` with PutRecords and report what happened; an unanswered call is read back for
    up to `reconcile_s` seconds (0: not at all, and the retrier retries it as before)."""
    started, wall_started = clock(), time.time()
    try:
        response = client.put_records(StreamName=stream_name, Records=[r.entry() for r in batch.records])
    except ClientError as exc:
        error = exc.response.get("Error", {})
        code, message = error.get("Code", "Unknown"), error.get("Message", "")
        unanswered = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) >= 500
    except Exception as exc:  # connection reset, timeout, a bug in a fake: all request-level
        code, message, unanswered = "Internal", f"{type(exc).__name__}: {exc}", True
    else:
        return SendOutcome(started, clock() - started, entries=response.get("Records", ()))
    duration = clock() - started
    if not unanswered or reconcile_s <= 0 or not hasattr(client, "get_records"):
        return SendOutcome(started, duration, error_code=code, error_message=message)
    entries = read_back(
        client,
        stream_name,
        batch.records,
        wall_started=wall_started,
        wall_ended=time.time(),
        budget_s=reconcile_s,
        clock=clock,
        error_code=code,
        error_message=message,
    )
    return SendOutcome(started, duration, entries=entries, reconciled=True)
