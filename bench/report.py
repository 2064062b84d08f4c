"""Result rows, their targets, and how they are printed: a Markdown table and a JSON document."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

#: How a figure is written: user records per second, PUT payload units per million, milliseconds,
#: microseconds, a percentage, and a plain count (e.g. DynamoDB writes per batch).
Unit = Literal["rec/s", "units/M", "ms", "µs", "%", "count"]


@dataclass(frozen=True, slots=True)
class Target:
    """A goal: `subject` ("ratio": shardline ÷ peer, or "value": shardline's own figure) `op` `bound`."""

    subject: Literal["ratio", "value"]
    op: Literal[">=", "<="]
    bound: float

    def met_by(self, figure: float) -> bool:
        return figure >= self.bound if self.op == ">=" else figure <= self.bound

    def __str__(self) -> str:
        return self.text("ms")

    def text(self, unit: Unit) -> str:
        """The goal as printed in a row whose figures are in `unit`."""
        sign = "≥" if self.op == ">=" else "≤"
        if self.subject == "ratio":
            return f"{sign} {self.bound:g}×"
        if unit == "ms":
            return f"{sign} {self.bound:g} ms"
        return f"{sign} {format_figure(self.bound, unit)}"


@dataclass(frozen=True, slots=True)
class Row:
    """One comparison: shardline's figure, optionally a peer's figure, and the target if there is one."""

    measurement: str
    unit: Unit
    shardline: float
    peer: str | None = None
    peer_value: float | None = None
    target: Target | None = None

    @property
    def ratio(self) -> float | None:
        """shardline ÷ peer (throughput: how many times faster; units and ms: how many times as much)."""
        if self.peer_value is None or self.peer_value == 0:
            return None
        return self.shardline / self.peer_value

    @property
    def met(self) -> bool | None:
        """Whether the target is met; None when the row is informational."""
        if self.target is None:
            return None
        figure = self.ratio if self.target.subject == "ratio" else self.shardline
        return None if figure is None else self.target.met_by(figure)


@dataclass(slots=True)
class Report:
    """Everything one run measured: table rows, notes for the reader, and details for the JSON file."""

    meta: dict[str, Any]
    rows: list[Row] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)


def format_figure(value: float | None, unit: Unit) -> str:
    """A figure with its unit, rounded for reading."""
    if value is None:
        return "—"
    if unit == "rec/s":
        return f"{value / 1e6:.2f} M/s" if value >= 1e6 else f"{value / 1e3:.0f} k/s"
    if unit == "units/M":
        return f"{value:,.0f}"
    if unit == "count":
        return f"{value:g}"
    if unit == "%":
        return f"{value:.1f} %"
    if unit == "µs":
        return f"{value:.2f} µs"
    return f"{value:.1f} ms"


def _met_cell(met: bool | None) -> str:
    return "—" if met is None else ("yes" if met else "**NO**")


def _ratio_cell(ratio: float | None) -> str:
    if ratio is None:
        return "—"
    return f"{ratio:.2f}×" if ratio >= 0.1 else f"{ratio:.2g}×"


def markdown_table(rows: list[Row]) -> str:
    """The rows as a Markdown table (pasteable into the README)."""
    lines = [
        "| Measurement | shardline | Peer | Peer figure | shardline ÷ peer | Target | Met |",
        "|---|---:|---|---:|---:|---|---|",
    ]
    for row in rows:
        ratio = _ratio_cell(row.ratio)
        lines.append(
            f"| {row.measurement} | {format_figure(row.shardline, row.unit)} | {row.peer or '—'} "
            f"| {format_figure(row.peer_value, row.unit)} | {ratio} "
            f"| {row.target.text(row.unit) if row.target else 'info'} | {_met_cell(row.met)} |"
        )
    return "\n".join(lines)


def render(report: Report) -> str:
    """The whole printed report: context, the table, the verdict, and notes."""
    meta = report.meta
    judged = [row for row in report.rows if row.met is not None]
    missed = [row for row in judged if not row.met]
    missed_names = "; ".join(f"{row.measurement} vs {row.peer or 'target'}" for row in missed)
    out = [
        "# shardline benchmark",
        "",
        f"Python {meta['python']} on {meta['platform']}, {meta['cpus']} CPU(s); "
        f"aiokpl {meta['aiokpl']}, aws-kinesis-agg {meta['aws_kinesis_agg']} "
        f"(protobuf {meta['protobuf']}, {meta['protobuf_backend']} backend); "
        f"best of {meta['repeats']} interleaved repeats, seed {meta['seed']}"
        f"{', quick mode' if meta['quick'] else ''}; run took {meta['seconds']:.0f} s.",
        "",
        markdown_table(report.rows),
        "",
        f"Targets met: {len(judged) - len(missed)} of {len(judged)}"
        + (f" (missed: {missed_names})" if missed else "")
        + ".",
    ]
    if report.notes:
        out += ["", "Notes:", ""]
        out += [f"- {note}" for note in report.notes]
    return "\n".join(out)


def to_json(report: Report) -> dict[str, Any]:
    """The report as plain data (each row with its ratio and verdict)."""
    rows = []
    for row in report.rows:
        data = asdict(row)
        data["target"] = row.target.text(row.unit) if row.target else None
        data["ratio"] = row.ratio
        data["met"] = row.met
        rows.append(data)
    return {"meta": report.meta, "rows": rows, "notes": report.notes, "details": report.details}


def write_json(report: Report, path: Path) -> None:
    """Write `to_json(report)` to `path` (parent folders are created)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(to_json(report), indent=2, sort_keys=False) + "\n", encoding="utf-8")
