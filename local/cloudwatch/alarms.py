"""The template's alarms, evaluated on the metric store as CloudWatch evaluates them.

    alarm = Alarm.from_properties("ProducerErrors", resolved_properties)
    alarm.evaluate(store, now)          # -> "OK" | "ALARM" | "INSUFFICIENT_DATA"; history kept

Each evaluation takes the alarm's last `EvaluationPeriods` periods, aligned as CloudWatch aligns
them, the newest being the period in progress (its datapoint grows as data arrives, as the newest
datapoint does in CloudWatch). A datapoint breaches when it compares with `Threshold` by
`ComparisonOperator`. The alarm is in ALARM when at least `DatapointsToAlarm` of them breach.
Missing datapoints follow `TreatMissingData`:

- `notBreaching`: a missing datapoint is good; `breaching`: it breaches;
- `missing` (the default) and `ignore`: it is not counted; with no datapoint at all in the range,
  `missing` goes to INSUFFICIENT_DATA and `ignore` keeps the state it had.

Not evaluated (and said so in `unsupported`): metric-math alarms (`Metrics`), anomaly detection.
"""

from __future__ import annotations

import operator
import threading
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .metrics import MetricId, MetricStore
from .statistics import check_statistic

__all__ = ["ALARM", "INSUFFICIENT_DATA", "OK", "Alarm", "AlarmError", "Transition"]

OK, ALARM, INSUFFICIENT_DATA = "OK", "ALARM", "INSUFFICIENT_DATA"
COMPARISONS: dict[str, Callable[[float, float], bool]] = {
    "GreaterThanThreshold": operator.gt,
    "GreaterThanOrEqualToThreshold": operator.ge,
    "LessThanThreshold": operator.lt,
    "LessThanOrEqualToThreshold": operator.le,
}
SYMBOLS = {"GreaterThanThreshold": ">", "GreaterThanOrEqualToThreshold": ">=",
           "LessThanThreshold": "<", "LessThanOrEqualToThreshold": "<="}  # fmt: skip
MISSING_TREATMENTS = ("missing", "notBreaching", "breaching", "ignore")
HISTORY = 100


class AlarmError(ValueError):
    """An alarm this evaluator cannot evaluate; the message names the alarm and the property."""


@dataclass(frozen=True)
class Transition:
    """One state change: when (epoch s), from, to, and why (CloudWatch's state reason)."""

    at: float
    old: str
    new: str
    reason: str


@dataclass
class Alarm:
    """One metric alarm and its state; `evaluate` is thread-safe."""

    logical_id: str
    name: str
    metric: MetricId
    statistic: str
    period: int
    evaluation_periods: int
    datapoints_to_alarm: int
    threshold: float
    comparison: str
    treat_missing_data: str = "missing"
    description: str = ""
    state: str = INSUFFICIENT_DATA
    reason: str = "Unchecked: Initial alarm creation"
    last_datapoints: list[float | None] = field(default_factory=list)
    history: deque[Transition] = field(default_factory=lambda: deque(maxlen=HISTORY))
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @classmethod
    def from_properties(cls, logical_id: str, properties: Mapping[str, Any], name: str = "") -> Alarm:
        """From an `AWS::CloudWatch::Alarm`'s resolved properties; AlarmError naming what is not
        supported or not valid."""

        def fail(what: str) -> AlarmError:
            return AlarmError(f"alarm {logical_id}: {what}")

        if "Metrics" in properties:
            raise fail("Metrics (metric math) is not evaluated locally")
        comparison = properties.get("ComparisonOperator", "")
        if comparison not in COMPARISONS:
            raise fail(f"ComparisonOperator {comparison!r} is not evaluated locally (anomaly detection?)")
        stat = properties.get("Statistic") or properties.get("ExtendedStatistic")
        if not stat:
            raise fail("neither Statistic nor ExtendedStatistic")
        try:
            check_statistic(stat)
        except ValueError as exc:
            raise fail(str(exc)) from None
        treatment = properties.get("TreatMissingData", "missing")
        if treatment not in MISSING_TREATMENTS:
            raise fail(f"TreatMissingData {treatment!r}: expected one of {', '.join(MISSING_TREATMENTS)}")
        period = int(properties.get("Period", 0))
        if period < 1 or (period >= 60 and period % 60) or (period < 60 and period not in (10, 30)):
            raise fail(f"Period {period}: expected 10, 30 or a multiple of 60 seconds")
        evaluation = int(properties.get("EvaluationPeriods", 0))
        datapoints = int(properties.get("DatapointsToAlarm", evaluation))
        if not 1 <= datapoints <= evaluation:
            raise fail(f"DatapointsToAlarm {datapoints} of EvaluationPeriods {evaluation}")
        dimensions = {d["Name"]: str(d["Value"]) for d in properties.get("Dimensions", [])}
        return cls(
            logical_id=logical_id,
            name=properties.get("AlarmName") or name or logical_id,
            metric=MetricId.of(properties["Namespace"], properties["MetricName"], dimensions),
            statistic=stat,
            period=period,
            evaluation_periods=evaluation,
            datapoints_to_alarm=datapoints,
            threshold=float(properties["Threshold"]),
            comparison=comparison,
            treat_missing_data=treatment,
            description=properties.get("AlarmDescription", ""),
        )

    def evaluate(self, store: MetricStore, now: float) -> str:
        """The state after evaluating at `now` (epoch s); a change is appended to `history`."""
        start = now - (self.evaluation_periods - 1) * self.period
        points = [value for _, value in store.query(self.metric, self.statistic,
                                                    start=start, end=now, period=self.period)]  # fmt: skip
        new, reason = self._judge(points)
        with self._lock:
            self.last_datapoints = points
            if new is not None and new != self.state:
                self.history.append(Transition(now, self.state, new, reason))
                self.state, self.reason = new, reason
            elif new is not None:
                self.reason = reason
            return self.state

    def _judge(self, points: list[float | None]) -> tuple[str | None, str]:
        """(new state or None to keep it, reason) for the range's datapoints, oldest first."""
        compare = COMPARISONS[self.comparison]
        present = [p for p in points if p is not None]
        missing = len(points) - len(present)
        breaching = sum(1 for p in present if compare(p, self.threshold))
        treatment = self.treat_missing_data
        if treatment == "breaching":
            breaching += missing
        if not present and treatment in ("missing", "ignore"):
            if treatment == "ignore":
                return None, self.reason
            return INSUFFICIENT_DATA, f"no datapoints in the last {len(points)} periods of {self.period} s"
        shown = ", ".join("missing" if p is None else f"{p:g}" for p in points)
        rule = f"{self.statistic} {SYMBOLS[self.comparison]} {self.threshold:g}"
        verdict = f"{breaching} of the last {len(points)} datapoints [{shown}] breached {rule}"
        if breaching >= self.datapoints_to_alarm:
            return ALARM, verdict
        return OK, f"{verdict} (ALARM at {self.datapoints_to_alarm})"

    def as_dict(self) -> dict[str, Any]:
        with self._lock:
            return {
                "id": self.logical_id,
                "name": self.name,
                "state": self.state,
                "reason": self.reason,
                "metric": self.metric.label(),
                "rule": f"{self.statistic} {SYMBOLS[self.comparison]} {self.threshold:g} for "
                f"{self.datapoints_to_alarm} of {self.evaluation_periods} periods of {self.period} s "
                f"(missing data: {self.treat_missing_data})",
                "datapoints": list(self.last_datapoints),
                "description": self.description,
                "history": [t.__dict__ for t in reversed(self.history)],
            }
