"""Producer metrics as a plain snapshot, named as the KPL names them.

The producer counts; something else (a later Lambda adapter) emits. `snapshot()` returns plain
dicts and numbers so they can be logged, asserted on, or written as CloudWatch EMF.
"""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any


class Summary:
    """Count, sum, min and max of observed values (what a CloudWatch statistic set holds)."""

    __slots__ = ("count", "maximum", "minimum", "total")

    def __init__(self) -> None:
        self.count = 0
        self.total = 0.0
        self.minimum = 0.0
        self.maximum = 0.0

    def observe(self, value: float) -> None:
        if self.count == 0 or value < self.minimum:
            self.minimum = value
        if self.count == 0 or value > self.maximum:
            self.maximum = value
        self.count += 1
        self.total += value

    def observe_many(self, values: list[float]) -> None:
        if not values:
            return
        low, high = min(values), max(values)
        if self.count == 0 or low < self.minimum:
            self.minimum = low
        if self.count == 0 or high > self.maximum:
            self.maximum = high
        self.count += len(values)
        self.total += sum(values)

    def as_dict(self) -> dict[str, float]:
        average = self.total / self.count if self.count else 0.0
        return {
            "count": self.count,
            "sum": self.total,
            "min": self.minimum,
            "max": self.maximum,
            "avg": average,
        }


class ProducerMetrics:
    """Thread-safe counters and summaries of one producer."""

    COUNTERS = (
        "UserRecordsReceived",
        "UserRecordsPut",
        "UserRecordsDataPut",
        "KinesisRecordsPut",
        "KinesisRecordsDataPut",
        "AllErrors",
        "UserRecordExpired",
        "RequestsSent",
        "UserRecordsNotLanded",  # user records whose final result is a failure
        "AggregatesSealed",  # aggregates whose outcome was unknown: from then on resent identical only
        "SealedAggregatesResent",  # sends of a sealed aggregate after its first
        "AggregatesRerouted",  # aggregates resent to another shard, members having landed out of range
    )
    SUMMARIES = ("UserRecordsPerKinesisRecord", "RetriesPerRecord", "BufferingTime", "RequestTime")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counters: Counter[str] = Counter()
        self._errors: Counter[str] = Counter()
        self._summaries = {name: Summary() for name in self.SUMMARIES}

    def after_fork(self) -> None:
        """In a forked child: the lock may have been held by a thread that did not survive."""
        self._lock = threading.Lock()

    def count(self, name: str, value: int = 1) -> None:
        with self._lock:
            self._counters[name] += value

    def error(self, code: str, value: int = 1) -> None:
        """One failed attempt with `code` (ErrorsByCode and AllErrors)."""
        with self._lock:
            self._errors[code] += value
            self._counters["AllErrors"] += value

    def observe(self, name: str, value: float) -> None:
        with self._lock:
            self._summaries[name].observe(value)

    def observe_many(self, name: str, values: list[float]) -> None:
        with self._lock:
            self._summaries[name].observe_many(values)

    def snapshot(self) -> dict[str, Any]:
        """Every metric now: counters as ints, ErrorsByCode as a dict, summaries as dicts.
        Times (BufferingTime, RequestTime) are in milliseconds."""
        with self._lock:
            snapshot: dict[str, Any] = {name: self._counters[name] for name in self.COUNTERS}
            snapshot["ErrorsByCode"] = dict(self._errors)
            for name, summary in self._summaries.items():
                snapshot[name] = summary.as_dict()
        return snapshot
