"""Consumer metrics as a plain snapshot (emitted as CloudWatch EMF by the Lambda adapters)."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any


class ConsumerMetrics:
    """Counters of one consumer group, and how far behind the newest processed record was."""

    COUNTERS = (
        "RecordsReceived",  # Kinesis records in events
        "UserRecords",  # after de-aggregation
        "DuplicatesSkipped",  # at or below the checkpoint
        "RecordsProcessed",
        "RecordsFailed",  # failed attempts, each blamed on one record
        "RecordsSentToDLQ",
        "HandlerTimeouts",  # handlers interrupted at the time budget
        "CrashesDetected",  # deliveries found to have died (timeout, out of memory)
        "BatchesSplit",  # batch-handler chunks split to find the record that fails
        "SinkWritesRefused",  # records whose sink writes DynamoDB refused or whose condition failed
        "SinkConflictsSkipped",  # failed conditions taken as "already applied" (sink_conflicts="skip")
        "CheckpointsWritten",
        "IdempotentPutsWritten",  # sink items written with BatchWriteItem before a checkpoint
        "LeaseLosses",
        "BatchesWaitingForParent",
        "OutOfRangeRecords",  # members of foreign aggregates outside the shard's range (delivered)
        "CorruptAggregatesPassedThrough",
        "AggregateCopiesSkipped",  # Kinesis records skipped as copies of aggregates already applied
        "OutOfRangeRecordsSkipped",  # members of shardline aggregates outside the shard's range
        "ClientIdDuplicatesSkipped",  # records whose `once` guard was already there
        "ClientIdConflicts",  # records whose client id was applied with another payload (dead-lettered)
        "DedupLanesEvicted",  # producer lanes dropped from the dedup state to bound its size
        "ShardStalls",  # deliveries stalled on the environment (a missing table, a refusing DLQ, ...)
        "BatchesSkippedByMapping",  # stalled batches the mapping discarded: redrive them
        "RedriveCopiesSkipped",  # aggregates skipped because a redrive (or the group's run) applied them
        "RedriveClaimsMoved",  # commits that found a redrive row's claims moved (re-read, retried)
        "CrashesIsolated",  # crashes pinned on a record that ran alone (counted against it)
        "RetriesDeferred",  # waits for a failing record's backoff, or for room to run a careful record alone
        "TimeBudgetDisarmed",  # a handler replaced shardline's SIGALRM timer (re-armed)
    )

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._lock = threading.Lock()
        self._counters: Counter[str] = Counter()
        self._clock = clock
        self._millis_behind: float | None = None

    def count(self, name: str, value: int = 1) -> None:
        if value:
            with self._lock:
                self._counters[name] += value

    def set_behind(self, arrival: float) -> None:
        """Record how old (by its arrival time) the newest record of a batch is."""
        if arrival:
            self._millis_behind = max(0.0, (self._clock() - arrival) * 1000.0)

    def snapshot(self) -> dict[str, Any]:
        """Counters as ints, and `MillisBehindLatest` (None before any record)."""
        with self._lock:
            snapshot: dict[str, Any] = {name: self._counters[name] for name in self.COUNTERS}
        snapshot["MillisBehindLatest"] = self._millis_behind
        return snapshot
