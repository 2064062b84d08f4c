"""What a record's failure costs it: counting attempts, backoff, the dead-letter queue, a pinned crash.

A record is dead-lettered only on evidence against it, counted in the lease row `max_attempts`
times, on deliveries spaced by backoff (`ConsumerSettings.retry_backoff`, doubling): its handler
raised or timed out while it ran alone, DynamoDB refused its sink writes (`_checkpoint` blames
them), or its delivery died while it ran alone (`_careful`). A `ClientIdConflict` (its client id
already applied with another payload: `_once`) is evidence enough at once: running it again
cannot change the verdict, so it is dead-lettered on its first count. A `DependencyUnavailable` is no
evidence: what is done is committed and it propagates, to stall the shard (`_stalls`).

`FailurePolicy` decides, and writes its counts through the run's `Checkpoint` (the lease it
holds, and its in-flight mark): it never runs a handler and never splits a batch
(`_handler_loop`, `_chunks` do).
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Callable, Mapping
from typing import Any

from shardline.consumer._careful import CRASHED_ALONE, crash_pinned
from shardline.consumer._checkpoint import Checkpoint
from shardline.consumer._dead_letters import DeadLetterQueue
from shardline.consumer._deaggregation import ConsumedRecord
from shardline.consumer._failure_text import failure_text
from shardline.consumer._handler_deadline import HandlerTimedOut
from shardline.consumer._lease_store import Lease
from shardline.consumer._stalls import backoff
from shardline.errors import ClientIdConflict, DependencyUnavailable
from shardline.kinesis._positions import Position

logger = logging.getLogger("shardline.consumer._shard_run")  # the name operators filter on


class FailurePolicy:
    """The fate of the failing records of one shard run, decided from the lease row it holds.

    `room()`: seconds the invocation may still spend before its time margin (a backoff waits
    no longer than that)."""

    def __init__(
        self, checkpoint: Checkpoint, dlq: DeadLetterQueue | None, room: Callable[[], float]
    ) -> None:
        self.checkpoint = checkpoint
        self.dlq = dlq
        self.room = room
        self.settings = checkpoint.settings
        self.metrics = checkpoint.metrics
        self.table = checkpoint.table
        checkpoint.give_up = self.give_up_on  # a refused sink write is a failure of its record

    def retrying(self) -> bool:
        """Did a record fail before this run (so that `backed_off` may have to wait for it)?"""
        lease = self.checkpoint.lease
        return lease is not None and lease.failed_at is not None and lease.failed_time is not None

    def backed_off(self, record: ConsumedRecord) -> bool:
        """Before running a record that failed before: wait out its backoff. False when this
        invocation has no time for that wait (the mapping then retries from it; nothing counted)."""
        lease = self.checkpoint.lease
        if lease is None or lease.failed_at is None or lease.failed_time is None:
            return True  # asked of every record: the common answer without building its position
        if lease.failed_at != record.position:
            return True
        table = self.table
        wait = lease.failed_time + backoff(lease.failed_attempts, self.settings.retry_backoff) - table.now()
        if wait <= 0:
            return True
        self.metrics.count("RetriesDeferred")
        self.checkpoint.commit()
        room = self.room()
        table.sleep(min(wait, room))
        return wait <= room

    def give_up_on(
        self, record: ConsumedRecord, exc: BaseException, details: Mapping[str, Any] | None = None
    ) -> bool:
        """Count the failure of `record`, which ran alone; True if it went to the DLQ and
        processing goes on. A `DependencyUnavailable` is no failure of the record: it stalls."""
        checkpoint, settings = self.checkpoint, self.settings
        if isinstance(exc, DependencyUnavailable):
            checkpoint.commit()  # what is done stays done
            raise exc
        self.metrics.count("RecordsFailed")
        checkpoint.commit()
        lease = checkpoint.lease
        assert lease is not None
        if isinstance(exc, HandlerTimedOut):
            self.metrics.count("HandlerTimeouts")
        attempts = lease.failed_attempts + 1 if lease.failed_at == record.position else 1
        conflict = isinstance(exc, ClientIdConflict)  # the same verdict on every run: no retry
        dead_letter = self.dlq is not None and (attempts >= settings.max_attempts or conflict)
        release = checkpoint.marked and not dead_letter  # this write is the run's last
        error = failure_text(exc, settings.failure_detail).text  # bounded: never the data by default
        checkpoint.lease = self.table.record_failure(
            lease, record.position, error, release=release, details=_json(row_details(details))
        )
        checkpoint.marked = checkpoint.marked and not release
        if not dead_letter:
            return False
        self.dead_letter(record, error, attempts, details)
        return True

    def timed_out_together(self, chunk: list[ConsumedRecord]) -> str:
        """A batch handler still running at the time budget with several records: which one hung
        is unknown, so none is blamed; the next delivery runs them carefully, one first."""
        checkpoint = self.checkpoint
        self.metrics.count("HandlerTimeouts")
        checkpoint.commit()
        assert checkpoint.lease is not None
        if self.settings.detect_crashes:
            checkpoint.lease = self.table.mark_careful(checkpoint.lease, 1, release=checkpoint.marked)
            checkpoint.marked = False
        return chunk[0].sequence_number

    def dead_letter(
        self, record: ConsumedRecord, error: str, attempts: int, details: Mapping[str, Any] | None = None
    ) -> None:
        """Send `record` to the DLQ and checkpoint past it."""
        assert self.dlq is not None
        self.dlq.send(record, group=self.settings.group, error=error, attempts=attempts, details=details)
        self.metrics.count("RecordsSentToDLQ")
        logger.warning(
            "consumer group %s: record %s/%s sent to the DLQ after %d attempts: %s",
            self.settings.group,
            record.sequence_number,
            record.sub_sequence_number,
            attempts,
            error,
        )
        self.checkpoint.done = record  # the checkpoint moves past the poison record
        self.checkpoint.commit()

    def condemned(self) -> Position | None:
        """The record the lease row already sent to the DLQ's door (its failures reached
        `max_attempts`, and the delivery that counted the last one did not send it — it died, or
        the DLQ refused): it is dead-lettered without running again."""
        lease = self.checkpoint.lease
        if lease is None or lease.failed_at is None or self.dlq is None:
            return None
        if lease.failed_attempts < self.settings.max_attempts:
            return None
        return lease.failed_at

    def last_failure(self) -> tuple[str, int, Mapping[str, Any] | None]:
        """The error, attempts and details the lease row holds for the failing record."""
        lease = self.checkpoint.lease
        if lease is None:
            return "-", 0, None
        details = None
        if lease.last_error_details:
            with contextlib.suppress(ValueError):
                details = json.loads(lease.last_error_details)
        return lease.last_error or "-", lease.failed_attempts, details

    def after_crash(self, record: ConsumedRecord, previous: Lease, shard_id: str) -> None:
        """The delivery before this one died past the checkpoint. Pinned on `record` if it ran
        alone then (counted against it); otherwise nothing is counted and this delivery runs
        carefully from the checkpoint, one record first (`_careful`)."""
        checkpoint, metrics, table = self.checkpoint, self.metrics, self.table
        assert checkpoint.lease is not None
        metrics.count("CrashesDetected")
        if crash_pinned(previous):
            metrics.count("CrashesIsolated")
            metrics.count("RecordsFailed")
            checkpoint.lease = table.record_failure(checkpoint.lease, record.position, CRASHED_ALONE)
            logger.warning(
                "consumer group %s, shard %s: the last delivery died while record %s/%s ran alone "
                "(%d attempts)",
                self.settings.group,
                shard_id,
                record.sequence_number,
                record.sub_sequence_number,
                checkpoint.lease.failed_attempts,
            )
            return
        checkpoint.lease = table.mark_careful(checkpoint.lease, 1)
        logger.warning(
            "consumer group %s, shard %s: the last delivery died; running carefully to find the record",
            self.settings.group,
            shard_id,
        )


def row_details(details: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    """What the lease row keeps of a failure's details: each refused write's kind and table, never
    its item or key (record data belongs in the dead letter alone, which carries them whole)."""
    if not details or "refusedWrites" not in details:
        return details
    writes = [
        {
            kind: {"TableName": body.get("TableName")}
            for kind, body in write.items()
            if isinstance(body, Mapping)
        }
        for write in details["refusedWrites"]
        if isinstance(write, Mapping)
    ]
    return {**details, "refusedWrites": writes}


def _json(details: Mapping[str, Any] | None) -> str | None:
    """`details` as the lease row keeps them (JSON; binary as base64, anything else as text)."""
    if not details:
        return None
    return json.dumps(details, default=lambda value: str(value))
