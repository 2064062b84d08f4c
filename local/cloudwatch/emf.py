"""Embedded Metric Format: metrics from a function's log line, extracted as CloudWatch Logs does.

    for metric, values, timestamp in extract(json.loads(line)):
        store.put_id(metric, values, timestamp)

A line is EMF when it is a JSON object with an `_aws` member. Per directive of
`_aws.CloudWatchMetrics`, every metric named in `Metrics` is read from the root (a number, or an
array of up to 100 numbers) once per dimension set of `Dimensions` (each a list of root members
holding strings; `[]` is the metric with no dimensions). `_aws.Timestamp` is epoch milliseconds.
CloudWatch does not extract a malformed line (it stays a plain log event): `extract` raises
`EmfError` saying what is wrong, and `sources` counts it and goes on.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from .metrics import MetricId

__all__ = ["EmfError", "extract", "is_emf"]

MAX_DIMENSIONS = 30
MAX_METRICS = 100
MAX_VALUES = 100


class EmfError(ValueError):
    """A line with `_aws` that CloudWatch would not extract metrics from; the message says why."""


def is_emf(record: Any) -> bool:
    return isinstance(record, Mapping) and "_aws" in record


def extract(record: Mapping[str, Any]) -> list[tuple[MetricId, list[float], float]]:
    """(metric, values, timestamp in epoch seconds) for every metric and dimension set of `record`."""
    meta = record.get("_aws")
    if not isinstance(meta, Mapping):
        raise EmfError("_aws: expected an object")
    timestamp = meta.get("Timestamp")
    if not isinstance(timestamp, int | float) or isinstance(timestamp, bool):
        raise EmfError("_aws.Timestamp: expected epoch milliseconds (a number)")
    directives = meta.get("CloudWatchMetrics")
    if not isinstance(directives, list):
        raise EmfError("_aws.CloudWatchMetrics: expected an array")
    out = []
    for d, directive in enumerate(directives):
        where = f"_aws.CloudWatchMetrics[{d}]"
        namespace = directive.get("Namespace") if isinstance(directive, Mapping) else None
        if not isinstance(namespace, str) or not 1 <= len(namespace) <= 255:
            raise EmfError(f"{where}.Namespace: expected a string of 1 to 255 characters")
        dimension_sets = _dimension_sets(record, directive.get("Dimensions"), where)
        definitions = directive.get("Metrics")
        if not isinstance(definitions, list) or len(definitions) > MAX_METRICS:
            raise EmfError(f"{where}.Metrics: expected an array of at most {MAX_METRICS} definitions")
        for m, definition in enumerate(definitions):
            name = definition.get("Name") if isinstance(definition, Mapping) else None
            if not isinstance(name, str) or not name:
                raise EmfError(f"{where}.Metrics[{m}].Name: expected a string")
            values = _values(record.get(name), name)
            for dimensions in dimension_sets:
                out.append((MetricId.of(namespace, name, dimensions), values, timestamp / 1000))
    return out


def _dimension_sets(record: Mapping[str, Any], sets: Any, where: str) -> list[dict[str, str]]:
    if not isinstance(sets, list):
        raise EmfError(f"{where}.Dimensions: expected an array of dimension sets")
    out: list[dict[str, str]] = []
    for i, keys in enumerate(sets):
        if not isinstance(keys, list) or len(keys) > MAX_DIMENSIONS:
            raise EmfError(f"{where}.Dimensions[{i}]: expected an array of at most {MAX_DIMENSIONS} names")
        dimensions: dict[str, str] = {}
        for key in keys:
            value = record.get(key) if isinstance(key, str) else None
            if not isinstance(value, str):
                raise EmfError(f"{where}.Dimensions[{i}]: {key!r} is not a string at the root")
            dimensions[key] = value
        out.append(dimensions)
    return out or [{}]


def _values(value: Any, name: str) -> list[float]:
    if _is_number(value):
        return [float(value)]
    if isinstance(value, list) and 0 < len(value) <= MAX_VALUES and all(_is_number(v) for v in value):
        return [float(v) for v in value]
    raise EmfError(f"metric {name!r}: expected a number or an array of 1 to {MAX_VALUES} numbers at the root")


def _is_number(value: Any) -> bool:
    """A finite number: CloudWatch refuses NaN and infinities (which JSON lines can carry)."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
