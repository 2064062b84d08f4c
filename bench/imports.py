"""Import cost of shardline beyond boto3, measured in fresh interpreters (a Lambda cold start's view).

Each child process times `import boto3`, then what a user's handler imports from the library
(`from shardline.producer import Producer, ProducerConfig, UserRecord`: the packages re-export
lazily, so a bare `import shardline.producer` would measure almost nothing), with `time.perf_counter`.
The figure is the time of the second import (boto3 already loaded), best of several children.
The brief's formula, min(boto3 + library) − min(boto3 alone), is kept as a cross-check: with
boto3 taking hundreds of milliseconds on a noisy machine it swings by more than the figure itself.

Two ways the library can be loaded:
- "cached": compiled bytecode present (a layer built with compileall, or a warm `__pycache__`);
- "source": no bytecode, every module compiled at import (a layer zipped without `__pycache__`:
  Lambda's /opt is read-only, so nothing is ever cached there).
Both run from private copies of the package in a temporary folder, so the source tree gets no
`__pycache__` and a stray one there cannot skew the result. Peers load from site-packages (cached).

The deployed layer is also timed as Lambda loads it: the folder `shardline.cdk._layers.build_layer` makes
(unchecked-hash `.pyc` for the runtime's Python), imported by an interpreter of that version, with
and without its bytecode. boto3 and botocore come from this environment's site-packages (pure
Python, as the runtime's own copies are). Skipped when no interpreter of that version is found.
"""

from __future__ import annotations

import compileall
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import LIBRARY_PATH
from bench.report import Row, Target

#: Targets: 10 ms with bytecode (a layer built with compileall), 20 ms compiling from source.
CACHED_TARGET = Target("value", "<=", 10.0)
SOURCE_TARGET = Target("value", "<=", 20.0)
SHARDLINE_PRODUCER = "from shardline.producer import Producer, ProducerConfig, UserRecord"

_CHILD = """\
import time
t0 = time.perf_counter()
import boto3
t1 = time.perf_counter()
{statement}
t2 = time.perf_counter()
print(t1 - t0, t2 - t1)
"""


@dataclass(frozen=True, slots=True)
class Case:
    """What one kind of child imports after boto3, and from where."""

    name: str
    statement: str  # the import statement timed after boto3
    library_path: Path | str | None  # prepended to PYTHONPATH; None: site-packages only
    python: str = sys.executable


@dataclass(frozen=True, slots=True)
class ImportTiming:
    """Best-of-N milliseconds for one case."""

    boto3_ms: float
    library_ms: float  # min over children of the time spent importing the library after boto3
    difference_ms: float  # min(boto3 + library) - min(boto3 alone): the brief's formula


def _child_env(library_path: Path | str | None) -> dict[str, str]:
    env = {
        key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "PYTHONPYCACHEPREFIX")
    }
    env["PYTHONDONTWRITEBYTECODE"] = "1"  # the children never write bytecode anywhere
    if library_path is not None:
        env["PYTHONPATH"] = str(library_path)
    return env


def _run_child(case: Case) -> tuple[float, float]:
    completed = subprocess.run(
        [case.python, "-c", _CHILD.format(statement=case.statement)],
        env=_child_env(case.library_path),
        capture_output=True,
        text=True,
        check=False,
    )
    if completed.returncode != 0:
        raise RuntimeError(f"import child for {case.name} failed: {completed.stderr.strip()[-500:]}")
    boto3_s, library_s = (float(part) for part in completed.stdout.split())
    return boto3_s, library_s


def _private_copies(root: Path) -> tuple[Path, Path]:
    """Two copies of the shardline package: one with compiled bytecode, one without."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    cached, source = root / "cached", root / "source"
    for target in (cached, source):
        shutil.copytree(LIBRARY_PATH / "shardline", target / "shardline", ignore=ignore)
    compileall.compile_dir(cached, quiet=1)
    return cached, source


def measure_cases(cases: list[Case], runs: int) -> dict[str, ImportTiming]:
    """Best of `runs` fresh children per case, the cases interleaved in each round."""
    samples: dict[str, list[tuple[float, float]]] = {case.name: [] for case in cases}
    for case in cases:  # warm the OS file cache; not counted
        _run_child(case)
    for _ in range(runs):
        for case in cases:
            samples[case.name].append(_run_child(case))
    timings = {}
    for name, pairs in samples.items():
        boto3_best = min(b for b, _ in pairs)
        timings[name] = ImportTiming(
            boto3_ms=boto3_best * 1e3,
            library_ms=min(lib for _, lib in pairs) * 1e3,
            difference_ms=(min(b + lib for b, lib in pairs) - boto3_best) * 1e3,
        )
    return timings


def importtime_breakdown(
    library_path: Path, statement: str = SHARDLINE_PRODUCER, top: int = 6
) -> list[dict[str, Any]]:
    """`python -X importtime`: the modules first imported after boto3, largest self time first."""
    completed = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", f"import boto3; {statement}"],
        env=_child_env(library_path),
        capture_output=True,
        text=True,
        check=False,
    )
    entries: list[dict[str, Any]] = []
    after_boto3 = False
    for line in completed.stderr.splitlines():
        if not line.startswith("import time:") or "|" not in line:
            continue
        _, self_us, cumulative_us, name = (
            part.strip() for part in line.replace("import time:", "|", 1).split("|")
        )
        if not self_us.isdigit():
            continue  # the header line
        if name == "boto3":
            after_boto3 = True
            continue
        if after_boto3:
            entries.append(
                {"module": name, "self_ms": int(self_us) / 1e3, "cumulative_ms": int(cumulative_us) / 1e3}
            )
    entries.sort(key=lambda entry: entry["self_ms"], reverse=True)
    return entries[:top]


def _deployed_layer_cases(tmp: Path) -> list[Case]:
    """The layer as deployed (and the same without its bytecode), for the runtime's interpreter."""
    from shardline.cdk._layers import RUNTIME, build_layer, runtime_python

    python = runtime_python()
    if python is None:
        return []
    folder, _ = build_layer()
    bare = tmp / "layer-without-pyc"
    shutil.copytree(folder, bare, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    site = sysconfig.get_paths()["purelib"]
    return [
        Case(
            f"deployed layer ({RUNTIME.name}, .pyc)",
            SHARDLINE_PRODUCER,
            f"{folder / 'python'}:{site}",
            python,
        ),
        Case(
            f"deployed layer ({RUNTIME.name}, no .pyc)",
            SHARDLINE_PRODUCER,
            f"{bare / 'python'}:{site}",
            python,
        ),
    ]


def measure(runs: int) -> tuple[list[Row], dict[str, Any]]:
    """Import cost rows: shardline with and without bytecode against the 20 ms target, peers for context."""
    with tempfile.TemporaryDirectory(prefix="shardline-bench-") as tmp:
        cached, source = _private_copies(Path(tmp))
        cases = [
            Case("shardline (cached .pyc)", SHARDLINE_PRODUCER, cached),
            Case("shardline (source, no .pyc)", SHARDLINE_PRODUCER, source),
            Case("aiokpl", "import aiokpl.producer", None),
            Case("aws-kinesis-agg", "import aws_kinesis_agg.aggregator, aws_kinesis_agg.deaggregator", None),
        ]
        deployed = _deployed_layer_cases(Path(tmp))
        timings = measure_cases(cases + deployed, runs)
        breakdown = importtime_breakdown(cached)
    shardline_cached = timings["shardline (cached .pyc)"].library_ms
    shardline_source = timings["shardline (source, no .pyc)"].library_ms
    rows = [
        Row(
            "Import beyond boto3, shardline.producer, cached .pyc",
            "ms",
            shardline_cached,
            target=CACHED_TARGET,
        ),
        Row("Import beyond boto3, shardline.producer, no .pyc", "ms", shardline_source, target=SOURCE_TARGET),
        Row(
            "Import beyond boto3, cached .pyc (vs aiokpl.producer)",
            "ms",
            shardline_cached,
            "aiokpl",
            timings["aiokpl"].library_ms,
        ),
        Row(
            "Import beyond boto3, cached .pyc (vs aggregator + deaggregator)",
            "ms",
            shardline_cached,
            "aws-kinesis-agg",
            timings["aws-kinesis-agg"].library_ms,
        ),
    ]
    for case in deployed:
        with_pyc = ".pyc)" in case.name and "no .pyc" not in case.name
        rows.append(
            Row(
                f"Import beyond boto3, {case.name}",
                "ms",
                timings[case.name].library_ms,
                target=SOURCE_TARGET if with_pyc else None,
            )
        )
    details = {
        "runs": runs,
        "timings_ms": {
            name: {"boto3": t.boto3_ms, "library": t.library_ms, "difference_formula": t.difference_ms}
            for name, t in timings.items()
        },
        "largest_self_times_cached": breakdown,
    }
    return rows, details
