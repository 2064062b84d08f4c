"""The metrics AWS itself publishes for Kinesis and DynamoDB, recorded where the endpoint serves them.

    SERVICE_METRICS.add("AWS/Kinesis", "IncomingRecords", {"StreamName": "events"}, 500)
    GET /_shardline/metrics?after=41   # {"cursor": 57, "datapoints": [[seq, second, ns, name, dims, values]]}

Values are gathered per second and metric; a second is served once it has passed (so a reader
never sees half of one), with a sequence number the reader passes back as `after`. Ten minutes are
kept, whether or not anyone reads: the runtime's collector (`local.cloudwatch.sources`) reads
every second.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["SERVICE_METRICS", "ServiceMetrics"]

KEEP_S = 600
Key = tuple[int, str, str, tuple[tuple[str, str], ...]]


class ServiceMetrics:
    """Per-second datapoints of service metrics, served by cursor; see the module."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self._open: dict[Key, list[float]] = {}
        self._closed: deque[tuple[int, int, str, str, dict[str, str], list[float]]] = deque()
        self._seq = 0
        self._second = 0  # of the latest `add`
        self._lock = threading.Lock()

    def add(self, namespace: str, name: str, dimensions: Mapping[str, str], value: float) -> None:
        second = int(self.clock())
        key = (second, namespace, name, tuple(sorted(dimensions.items())))
        with self._lock:
            if second != self._second:  # a new second: the past ones close, read or not
                self._second = second
                self._close(second)
            self._open.setdefault(key, []).append(float(value))

    def since(self, after: int) -> dict[str, Any]:
        """Datapoints of every whole second not yet served past `after`, and the cursor to pass next."""
        with self._lock:
            self._close(int(self.clock()))
            points = [list(point) for point in self._closed if point[0] > after]
            return {"cursor": self._seq, "datapoints": points}

    def _close(self, now: int) -> None:
        """Number the seconds before `now`; forget those past `KEEP_S` (so an unread endpoint stays small)."""
        for key in sorted(k for k in self._open if k[0] < now):
            self._seq += 1
            second, namespace, name, dims = key
            self._closed.append((self._seq, second, namespace, name, dict(dims), self._open.pop(key)))
        while self._closed and self._closed[0][1] < now - KEEP_S:
            self._closed.popleft()


SERVICE_METRICS = ServiceMetrics()
