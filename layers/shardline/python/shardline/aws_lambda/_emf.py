"""Publish a shardline metrics snapshot as CloudWatch metrics through Powertools (EMF).

A Lambda adapter, not part of the core: it imports Powertools, which the core never does.

    from aws_lambda_powertools import Metrics
    metrics = Metrics(namespace="shardline")
    publish_metrics(metrics, producer.metrics.snapshot(), since=previous_snapshot)

Counters are published as the increase since `since` (snapshots are cumulative over a warm
container's life; CloudWatch wants per-invocation counts). `ErrorsByCode` becomes one
`Errors.<code>` metric per code. Summaries publish their average for the invocation
(`<name>` in the unit of the summary) and their count where it is not implied.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from aws_lambda_powertools.metrics import MetricUnit

_MILLISECONDS = {"BufferingTime", "RequestTime", "MillisBehindLatest"}


def publish_metrics(
    metrics: Any, snapshot: Mapping[str, Any], since: Mapping[str, Any] | None = None
) -> None:
    """Add every metric of `snapshot` (minus `since`) to a Powertools `Metrics` object."""
    since = since or {}
    for name, value in snapshot.items():
        previous = since.get(name)
        if isinstance(value, bool) or value is None:
            continue
        if isinstance(value, int | float):
            if name in _MILLISECONDS:
                metrics.add_metric(name=name, unit=MetricUnit.Milliseconds, value=value)
            else:
                delta = value - (previous or 0)
                if delta:
                    metrics.add_metric(name=name, unit=MetricUnit.Count, value=delta)
        elif name == "ErrorsByCode":
            for code, count in value.items():
                delta = count - (previous or {}).get(code, 0)
                if delta:
                    metrics.add_metric(name=f"Errors.{code}", unit=MetricUnit.Count, value=delta)
        elif isinstance(value, Mapping) and {"count", "sum"} <= set(value):
            count = value["count"] - ((previous or {}).get("count", 0))
            total = value["sum"] - ((previous or {}).get("sum", 0.0))
            if count:
                unit = MetricUnit.Milliseconds if name in _MILLISECONDS else MetricUnit.Count
                metrics.add_metric(name=name, unit=unit, value=total / count)
