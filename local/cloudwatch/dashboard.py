"""The synthesized dashboard's widgets, read from the template, with their data from the store.

    board = Dashboard.from_resource(resource)            # an AWS::CloudWatch::Dashboard, resolved
    board.render(store, log_events, now=..., range_s=900, period=None)   # what the page draws

Nothing is declared a second time: each widget keeps its place on the 24-column grid, its title,
and its metrics with their stat, period, label and visibility, as in `DashboardBody`. A metric row is
`[namespace, name, dim, value, ..., {options}]` (`"."` repeats the row above's value, as in the
console's source view) or `[{"expression": ..., "id": ...}]` (metric math: `+ - * /`, numbers,
ids, and SUM/AVG/MIN/MAX of a list of ids). Statistic and period default to the widget's, then to
CloudWatch's (Average, 300 s). `period` overrides every widget's period, as the console's period
override does. Each widget says what it is: a chart, text (markdown), a log table, or unsupported
with the reason.
"""

from __future__ import annotations

import ast
import json
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from ..app import model
from .insights import InsightsError, parse
from .metrics import MetricId, MetricStore
from .sources import LogEvent
from .statistics import StatisticError, check_statistic

__all__ = ["Dashboard", "ExpressionError"]

DEFAULT_STAT, DEFAULT_PERIOD = "Average", 300
CHART_VIEWS = ("timeSeries", "singleValue", "bar")
_AGGREGATES: dict[str, Callable[[list[float]], float]] = {
    "SUM": math.fsum, "AVG": lambda v: math.fsum(v) / len(v), "MIN": min, "MAX": max,
}  # fmt: skip


class ExpressionError(ValueError):
    """A metric-math expression outside the subset evaluated locally; the message says which part."""


@dataclass(frozen=True)
class Dashboard:
    name: str
    widgets: tuple[dict[str, Any], ...]

    @classmethod
    def from_resource(cls, resource: model.Resource) -> Dashboard:
        body = resource.properties.get("DashboardBody", "{}")
        parsed = json.loads(body) if isinstance(body, str) else body
        name = resource.properties.get("DashboardName") or resource.name
        return cls(name, tuple(parsed.get("widgets", [])))

    def render(
        self,
        store: MetricStore,
        log_events: Iterable[LogEvent],
        *,
        now: float,
        range_s: int,
        period: int | None = None,
    ) -> dict[str, Any]:
        events = list(log_events)
        widgets = []
        for index, widget in enumerate(self.widgets):
            out = {
                "index": index,
                "type": widget.get("type"),
                "x": widget.get("x", 0),
                "y": widget.get("y", 0),
                "width": widget.get("width", 6),
                "height": widget.get("height", 6),
                "title": widget.get("properties", {}).get("title", ""),
            }
            out.update(_content(widget, store, events, now=now, range_s=range_s, period=period))
            widgets.append(out)
        return {"name": self.name, "now": now, "range_s": range_s, "widgets": widgets}


def _content(
    widget: dict[str, Any], store: MetricStore, events: list[LogEvent], *, now: float, range_s: int,
    period: int | None,
) -> dict[str, Any]:  # fmt: skip
    kind, properties = widget.get("type"), widget.get("properties", {})
    if kind == "text":
        return {"kind": "text", "markdown": properties.get("markdown", "")}
    if kind == "log":
        recent = (event for event in events if event.timestamp >= now - range_s)
        try:
            rows = parse(properties.get("query", "")).run(recent)
        except InsightsError as exc:
            return {"kind": "unsupported", "reason": f"log query: {exc}"}
        return {"kind": "log", "rows": rows}
    if kind != "metric":
        return {"kind": "unsupported", "reason": f"widget type {kind!r} is not drawn locally"}
    view = properties.get("view", "timeSeries")
    if view not in CHART_VIEWS:
        return {"kind": "unsupported", "reason": f"view {view!r} is not drawn locally"}
    try:
        series = _series(properties, store, now=now, range_s=range_s, period=period)
    except (ExpressionError, StatisticError) as exc:
        return {"kind": "unsupported", "reason": str(exc)}
    return {"kind": "chart", "view": view, "stacked": bool(properties.get("stacked")), "series": series}


def _series(
    properties: dict[str, Any], store: MetricStore, *, now: float, range_s: int, period: int | None
) -> list[dict[str, Any]]:
    """A line per visible-or-not metric row, then per expression (aligned on the first metric's periods)."""
    widget_stat = properties.get("stat", DEFAULT_STAT)
    widget_period = int(properties.get("period", DEFAULT_PERIOD))
    by_id: dict[str, list[float | None]] = {}
    lines: list[dict[str, Any]] = []
    expressions: list[dict[str, Any]] = []
    times: list[int] = []
    previous: list[Any] = []
    for number, row in enumerate(properties.get("metrics", [])):
        options = row[-1] if row and isinstance(row[-1], dict) else {}
        if "expression" in options:
            expressions.append(options)
            continue
        fields = [previous[i] if value == "." and i < len(previous) else value
                  for i, value in enumerate(row[: len(row) - bool(options)])]  # fmt: skip
        previous = fields
        namespace, name, *pairs = fields
        metric = MetricId.of(namespace, name, dict(zip(pairs[::2], pairs[1::2], strict=False)))
        stat = check_statistic(options.get("stat", widget_stat))
        step = max(1, period or int(options.get("period", widget_period)))
        points = store.query(metric, stat, start=now - range_s, end=now, period=step)
        times = times or [t for t, _ in points]
        by_id[options.get("id", f"m{number + 1}")] = [v for _, v in points]
        lines.append(_line(options, options.get("label") or f"{name} ({stat})", points))
    for options in expressions:
        computed = zip(times, _evaluate(options["expression"], by_id), strict=False)
        lines.append(_line(options, options.get("label") or options["expression"], computed))
    return lines


def _line(options: dict[str, Any], label: str, points: Iterable[tuple[int, float | None]]) -> dict[str, Any]:
    return {
        "label": label,
        "points": [[t, v] for t, v in points],
        "color": options.get("color"),
        "visible": options.get("visible", True),
    }


def _evaluate(expression: str, series: dict[str, list[float | None]]) -> list[float | None]:
    """Metric math on aligned series, point by point; a point with a missing input is missing."""
    try:
        tree = ast.parse(expression.strip(), mode="eval").body
    except SyntaxError:
        raise ExpressionError(f"expression {expression!r}: not valid metric math") from None
    length = max((len(values) for values in series.values()), default=0)
    return [_point(tree, series, i, expression) for i in range(length)]


def _point(node: ast.AST, series: dict[str, list[float | None]], i: int, text: str) -> float | None:
    if isinstance(node, ast.Name):
        if node.id not in series:
            raise ExpressionError(f"expression {text!r}: no metric has the id {node.id!r}")
        values = series[node.id]
        return values[i] if i < len(values) else None
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
        return float(node.value)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add | ast.Sub | ast.Mult | ast.Div):
        left, right = _point(node.left, series, i, text), _point(node.right, series, i, text)
        if left is None or right is None:
            return None
        if isinstance(node.op, ast.Add):
            return left + right
        if isinstance(node.op, ast.Sub):
            return left - right
        if isinstance(node.op, ast.Mult):
            return left * right
        return left / right if right else None
    if (
        isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _AGGREGATES
        and len(node.args) == 1 and isinstance(node.args[0], ast.List)
    ):  # fmt: skip
        present: list[float] = []
        for item in node.args[0].elts:
            value = _point(item, series, i, text)
            if value is not None:
                present.append(value)
        return float(_AGGREGATES[node.func.id](present)) if present else None
    raise ExpressionError(f"expression {text!r}: {ast.unparse(node)!r} is not evaluated locally")
