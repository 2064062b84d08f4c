"""`python -m bench --check`: a miss cannot land unnoticed (issue 41, property 7).

Runs the benchmark's quick sections (codec, Lambda event, PUT units, consumer, imports: about a
minute) and compares each row with the figures the README publishes (its Benchmarks table, the
output of a full `python -m bench`). It exits non-zero when

- a row whose target the README shows met now misses it, or
- a row falls more than `FALL` (20 %) below its published figure,

in every one of up to `RUNS` runs of the sections (`confirmed`: another run only while a row has
failed in every run so far): a benchmark on a shared machine has bad moments — this VM's ratios
move ±25 % from one minute to the next — a regression has them every time.

Both are judged on figures measured *in this run against a peer*, so that a loaded machine does
not flip them: a row with a peer is judged on its ratio; a throughput row without one is scaled by
a yardstick measured in the same run (`YARDSTICKS`: the consumer's rates by Powertools'
`BatchProcessor` on the same event, the codec's by aiokpl) — its figure as it would read on the
machine the README was measured on. Rows that count things (PUT units, DynamoDB writes) are
machine-independent and judged as they are; an absolute time without a peer (an import's
milliseconds) is printed and not judged (`ABSOLUTE_TIMES`). A target the README already shows
missed is printed as a known miss and fails nothing: it is its issue's, and a fall from it still
fails.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from bench.report import Row, Unit

README = Path(__file__).resolve().parents[1] / "README.md"
FALL = 0.20  # a fall of more than this, from the published figure, fails the check
RUNS = 3  # a row fails only if it fails in each of this many runs

#: Throughput rows without a peer, each with the row of the same run whose peer figure measures the
#: machine: (yardstick row's measurement, its peer's name).
YARDSTICKS: Mapping[str, str] = {
    "Consumer process, 10,000 user records in 25 aggregates": (
        "Consumer user rec/s vs Powertools Kinesis rec/s (not like for like: Powertools does not "
        "de-aggregate: it sees 25 records)"
    ),
}

#: Figures a check cannot judge without a peer: the import times are differences of two fresh
#: interpreters' start-ups, which move ±30 % from one run to the next on a shared machine; their
#: ratio rows (against aiokpl's and aws-kinesis-agg's imports, measured alike) are judged.
ABSOLUTE_TIMES: frozenset[Unit] = frozenset(("ms", "µs"))

#: How each unit reads: True when more is better.
MORE_IS_BETTER: Mapping[Unit, bool] = {
    "rec/s": True,
    "%": True,
    "units/M": False,
    "ms": False,
    "µs": False,
    "count": False,
}

_SCALE = {"k": 1e3, "M": 1e6}


@dataclass(frozen=True)
class Published:
    """One row of the README's table, as printed: the figures and whether its target was met."""

    measurement: str
    peer: str | None
    shardline: float | None
    peer_value: float | None
    ratio: float | None
    met: bool | None


@dataclass(frozen=True)
class Finding:
    """What the check says of one row: `failed` rows make it exit non-zero."""

    measurement: str
    peer: str | None
    text: str
    failed: bool


def parse_figure(cell: str) -> float | None:
    """A table cell as a number: "1.10 M/s", "404 k/s", "4,600", "97.5 %", "9.3 ms", "2.26×"."""
    cell = cell.strip()
    if cell in ("—", ""):
        return None
    match = re.fullmatch(r"([0-9][0-9,]*(?:\.[0-9]+)?(?:e[-+]?[0-9]+)?)\s*([kM])?(?:/s| %| ms| µs|×)?", cell)
    if match is None:
        raise ValueError(f"not a figure: {cell!r}")
    value = float(match.group(1).replace(",", ""))
    return value * _SCALE.get(match.group(2) or "", 1.0)


def published_rows(readme: str) -> dict[tuple[str, str | None], Published]:
    """The README's Benchmarks table (the first table under `## Benchmarks`), by (measurement, peer)."""
    start = readme.index("\n## Benchmarks")
    lines = readme[start:].splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("| Measurement | shardline |"))
    rows: dict[tuple[str, str | None], Published] = {}
    for line in lines[header + 2 :]:
        if not line.startswith("|"):
            break
        cells = [cell.strip() for cell in line.strip("|").split(" | ")]
        measurement, mine, peer, peer_value, ratio, _target, met = cells
        peer_name = None if peer == "—" else peer
        rows[(measurement, peer_name)] = Published(
            measurement,
            peer_name,
            parse_figure(mine),
            parse_figure(peer_value),
            parse_figure(ratio),
            None if met == "—" else met == "yes",
        )
    return rows


def _yardstick(row: Row) -> str | None:
    for prefix, measurement in YARDSTICKS.items():
        if row.measurement.startswith(prefix):
            return measurement
    return None


def check(rows: list[Row], published: Mapping[tuple[str, str | None], Published]) -> list[Finding]:
    """Every measured row against the README's: see the module's docstring."""
    by_name = {(row.measurement, row.peer): row for row in rows}
    findings: list[Finding] = []
    for row in rows:
        was = published.get((row.measurement, row.peer))
        if was is None:
            findings.append(Finding(row.measurement, row.peer, "not in the README's table: refresh it", True))
            continue
        if row.unit in ABSOLUTE_TIMES and row.peer is None and _yardstick(row) is None:
            text = f"{row.shardline:,.4g} {row.unit} (README {was.shardline:g}): an absolute time, not judged"
            findings.append(Finding(row.measurement, row.peer, text, False))
            continue
        findings.append(_judge(row, was, by_name, published))
    return findings


def _judge(
    row: Row,
    was: Published,
    rows: Mapping[tuple[str, str | None], Row],
    published: Mapping[tuple[str, str | None], Published],
) -> Finding:
    now, then, what = _comparable(row, was, rows, published)
    if then is None:
        return Finding(row.measurement, row.peer, "the README prints no figure for it: refresh it", True)
    change = (now - then) / then if then else 0.0
    fell = -change if MORE_IS_BETTER[row.unit] else change
    notes = [f"{what} {now:,.4g} (README {then:,.4g}, {change:+.0%})"]
    failed = fell > FALL
    if failed:
        notes.append(f"fell {fell:.0%} from the README's")
    if row.target is not None:
        figure = row.ratio if row.target.subject == "ratio" else now
        if figure is None or not row.target.met_by(figure):
            if was.met:
                failed = True
                notes.append(f"misses its target {row.target.text(row.unit)}, met in the README")
            else:
                notes.append(f"known miss of {row.target.text(row.unit)} (the README shows it missed)")
    return Finding(row.measurement, row.peer, "; ".join(notes), failed)


def _comparable(
    row: Row,
    was: Published,
    rows: Mapping[tuple[str, str | None], Row],
    published: Mapping[tuple[str, str | None], Published],
) -> tuple[float, float | None, str]:
    """(this run's figure, the README's, what they are): the ratio where the row has a peer, else
    the figure — scaled by its yardstick where it has one."""
    if row.ratio is not None and was.ratio is not None:
        return row.ratio, was.ratio, "ratio"
    yardstick = _yardstick(row)
    if yardstick is None:
        return row.shardline, was.shardline, "figure"
    stick = next(r for (name, _), r in rows.items() if name == yardstick)
    stick_was = next(p for (name, _), p in published.items() if name == yardstick)
    if not stick.peer_value or not stick_was.peer_value:
        return row.shardline, was.shardline, "figure"
    # as it would read on the README's machine: scaled by the peer's figure on the same input
    scaled = row.shardline * stick_was.peer_value / stick.peer_value
    return (
        scaled,
        was.shardline,
        f"figure scaled by {stick.peer} ({stick.peer_value:,.4g} now, {stick_was.peer_value:,.4g} then)",
    )


def confirmed(first: list[Finding], second: list[Finding]) -> list[Finding]:
    """The findings so far and another run's, row by row: a row still fails only if it failed in
    both (a fall that is the machine's moment does not repeat; a regression does), and is shown as
    its better run had it."""
    again = {(finding.measurement, finding.peer): finding for finding in second}
    return [
        finding if not finding.failed else again.get((finding.measurement, finding.peer), finding)
        for finding in first
    ]


def render(findings: list[Finding]) -> str:
    """The findings as lines: FAIL or ok, the row, what was found."""
    lines = []
    for finding in findings:
        versus = f" vs {finding.peer}" if finding.peer else ""
        lines.append(f"{'FAIL' if finding.failed else 'ok  '} {finding.measurement}{versus}: {finding.text}")
    failed = sum(finding.failed for finding in findings)
    verdict = f"{failed} of {len(findings)} rows failed" if failed else f"all {len(findings)} rows hold"
    lines.append(f"bench --check: {verdict}")
    return "\n".join(lines)
