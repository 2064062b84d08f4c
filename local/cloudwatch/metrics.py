"""The metric store: every datapoint the runtime sees, at one-second resolution, for three hours.

    store = MetricStore()
    store.put("AWS/Kinesis", "IncomingRecords", {"StreamName": "events"}, 500)
    store.query(MetricId.of("AWS/Kinesis", "IncomingRecords", {"StreamName": "events"}), "Sum",
                start=now - 900, end=now, period=60)      # [(period start, value or None), ...]

A metric is its namespace, name and exact set of dimensions, as in CloudWatch: a query for
{StreamName} does not see datapoints published with {StreamName, ShardId}. Raw values are kept per
second (so a percentile over any period is computed from the values, not from summaries) and
dropped after `retention_s`. Periods are aligned to multiples of the period since the epoch, as
CloudWatch aligns them. Thread-safe: the sources put from their threads while the page queries.

Each metric keeps two flat arrays in time order (seconds, values): 16 bytes a value, where a dict
of seconds cost ~150, so three hours of a few hundred metrics stay in tens of MiB; a range is
found by bisection.
"""

from __future__ import annotations

import math
import threading
import time
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from .statistics import statistic

__all__ = ["MetricId", "MetricStore", "Point", "Publish", "no_metrics"]

RETENTION_S = 3 * 3600

#: How the runtime's parts publish what AWS would: `publish(namespace, name, dimensions, value)`.
Publish = Callable[[str, str, Mapping[str, str], float], None]


def no_metrics(namespace: str, name: str, dimensions: Mapping[str, str], value: float) -> None:
    """The `Publish` of a part started without a store (unit tests, embedders)."""


Point = tuple[int, float | None]  # (period start, epoch seconds; the statistic or None: no data)


@dataclass(frozen=True)
class MetricId:
    """One metric: namespace, name and its dimensions as sorted (name, value) pairs."""

    namespace: str
    name: str
    dimensions: tuple[tuple[str, str], ...] = ()

    @classmethod
    def of(cls, namespace: str, name: str, dimensions: Mapping[str, str] | None = None) -> MetricId:
        return cls(namespace, name, tuple(sorted((str(k), str(v)) for k, v in (dimensions or {}).items())))

    def label(self) -> str:
        dims = ", ".join(f"{k}={v}" for k, v in self.dimensions)
        return f"{self.namespace} {self.name}" + (f" ({dims})" if dims else "")


class _Series:
    """One metric's values and their seconds, in time order."""

    __slots__ = ("seconds", "values")

    def __init__(self) -> None:
        self.seconds = array("q")
        self.values = array("d")

    def add(self, second: int, values: list[float]) -> None:
        if not self.seconds or second >= self.seconds[-1]:
            self.seconds.extend([second] * len(values))
            self.values.extend(values)
        else:  # late (an EMF Timestamp in the past): into its place
            at = bisect_right(self.seconds, second)
            self.seconds[at:at] = array("q", [second] * len(values))
            self.values[at:at] = array("d", values)

    def drop_before(self, oldest: int) -> None:
        cut = bisect_left(self.seconds, oldest)
        del self.seconds[:cut], self.values[:cut]


class MetricStore:
    """Datapoints by metric and second; see the module."""

    def __init__(self, retention_s: int = RETENTION_S, clock: Callable[[], float] = time.time) -> None:
        self.retention_s, self.clock = retention_s, clock
        self._series: dict[MetricId, _Series] = {}
        self._lock = threading.Lock()
        self._pruned_at = 0

    def put(
        self,
        namespace: str,
        name: str,
        dimensions: Mapping[str, str],
        value: float | Iterable[float],
        timestamp: float | None = None,
    ) -> None:
        """One value (or several, as EMF's arrays) of a metric at `timestamp` (epoch s; default now)."""
        values = [float(value)] if isinstance(value, int | float) else [float(v) for v in value]
        self.put_id(MetricId.of(namespace, name, dimensions), values, timestamp)

    def put_id(self, metric: MetricId, values: list[float], timestamp: float | None = None) -> None:
        now = self.clock()
        second = int(now if timestamp is None else timestamp)
        if second < now - self.retention_s or not values:
            return
        with self._lock:
            series = self._series.get(metric)
            if series is None:
                series = self._series[metric] = _Series()
            series.add(second, values)
            if now - self._pruned_at > 60:
                self._prune(int(now) - self.retention_s)
                self._pruned_at = int(now)

    def metrics(self) -> list[MetricId]:
        with self._lock:
            return list(self._series)

    def query(self, metric: MetricId, stat: str, *, start: float, end: float, period: int) -> list[Point]:
        """`stat` per period from the period holding `start` to the one holding `end`, in order;
        None where a period has no value."""
        first, last = _align(start, period), _align(end, period)
        points: list[Point] = []
        with self._lock:
            series = self._series.get(metric) or _Series()
            seconds, values = series.seconds, series.values
            lo = bisect_left(seconds, first)
            for begins in range(first, last + 1, period):
                hi = bisect_left(seconds, begins + period, lo)
                points.append((begins, statistic(stat, values[lo:hi])))
                lo = hi
        return points

    def _prune(self, oldest: int) -> None:
        for metric, series in list(self._series.items()):
            series.drop_before(oldest)
            if not series.seconds:
                del self._series[metric]


def _align(t: float, period: int) -> int:
    return int(math.floor(t / period) * period)
