"""The local runtime's figures (issue 11, "Performance"): `make local`'s start-up, `send`'s ingest rate
through the REST API into the 4-shard stream, each consumer group's drain, and the emulated DynamoDB's
ceiling measured alone.

    python -m bench.local_runtime [--quick]

The app is synthesized once into a temporary cdk.out; each runtime is `python -m local up` as a child
process on free ports (run from a temporary folder, so its `.local/up.pid` never touches a real run):
1. start-up: spawn to "shardline is up" on its stdout; stop: SIGINT to exit with no process left
   whose command line names its ports (an idle runtime);
2. ingest: `send` (limits on, batches of 500) at 4, 8 and 16 requests in flight on one fresh
   runtime, after a warm-up, then a long run at the best on another. The rate is the middle 80 % of
   the bytes the endpoint's Kinesis took (`/_shardline/kinesis`, sampled), in user records per shard,
   and as a share of 1 MiB/s counting data + partition key bytes, as Kinesis's limit does;
3. drain, per consumer group: when its mapping had checkpointed every Kinesis record (the up
   process's `/_shardline/runtime`; polling the sinks would load the endpoint it measures), as
   seconds after the last POST answer and records/s from the first POST; then `wait_and_verify`'s
   verdict (lost, duplicated, counts);
4. DynamoDB alone, on a fresh `local.endpoint.handle.Endpoint`: TransactWriteItems of 100 sink-shaped Puts
   (as functions/event_sink writes) and of 100 `ADD #count :one` Updates on distinct keys (as
   functions/key_counter writes), from 1 and 4 threads, items/s.
Where the time goes is in the details: CPU seconds per process of the runtime during the send and
the drain (from /proc), invocation p50/p99 per function, and the producer's log (REPORT durations;
its EMF RequestTime is the PutRecords round trip to the endpoint).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import re
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from bench import local_dynamodb
from bench.report import Row, Target, format_figure
from bench.up_process import (
    UpProcess,
    cpu_seconds,
    get_json,
    synthesize,
)

SHARDS = 4
BYTE_LIMIT = 1024 * 1024  # per shard per second
BATCH = 500
RECORD_SIZE = 100


def _log(message: str) -> None:
    print(f"[bench] {message}", file=sys.stderr, flush=True)


def _cpu_by_role(
    up: UpProcess, before: dict[int, float], after: dict[int, float], wall: float
) -> dict[str, Any]:
    """Per role, CPU seconds spent between two readings and the share of one core that is."""
    roles = up.processes()
    spent: dict[str, float] = {}
    for pid, seconds in after.items():
        role = roles.get(pid, "worker")
        spent[role] = spent.get(role, 0.0) + seconds - before.get(pid, 0.0)
    return {role: {"cpu_s": round(s, 2), "cores": round(s / wall, 2)} for role, s in sorted(spent.items())}


# --- ingest and drain ---------------------------------------------------------------------------------


def _steady_rate(samples: list[tuple[float, int]], accepted: int) -> float:
    """User records/s over the middle 80 % of the bytes Kinesis took (ramp-up and drain left out):
    the endpoint's bytes_written, sampled, converted to user records in proportion to the run's."""
    total = samples[-1][1] - samples[0][1] if samples else 0
    if total <= 0:
        return 0.0

    def when(share: float) -> float:
        goal = samples[0][1] + share * total
        for (t0, b0), (t1, b1) in itertools.pairwise(samples):
            if b1 >= goal:
                return t0 + (t1 - t0) * (goal - b0) / (b1 - b0) if b1 > b0 else t1
        return samples[-1][0]

    span = when(0.9) - when(0.1)
    return 0.8 * accepted / span if span > 0 else 0.0


def _bytes_written(endpoint_url: str) -> int:
    shards = next(iter(get_json(f"{endpoint_url}/_shardline/kinesis")["streams"].values()))["shards"]
    return sum(shard["bytes_written"] for shard in shards.values())


def _record_bytes(report: Any) -> float:
    """Mean data + partition key bytes of the run's records (what Kinesis's 1 MiB/s counts)."""
    from local.commands.send import partition_key

    keys = [len(partition_key(report.run_id, index).encode()) for index in range(report.keys)]
    return float(report.size + statistics.fmean(keys))


def _send(up: UpProcess, count: int, concurrency: int) -> tuple[Any, dict[str, Any]]:
    """`send` with the endpoint's Kinesis byte counter sampled every 0.2 s; the report and figures."""
    from local.commands.send import send

    samples = [(time.monotonic(), _bytes_written(up.endpoint_url))]
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.2):
            samples.append((time.monotonic(), _bytes_written(up.endpoint_url)))

    sampler = threading.Thread(target=sample, daemon=True, name="kinesis-sampler")
    sampler.start()
    report = send(
        f"http://127.0.0.1:{up.api_port}/v1/streams", "events",
        count=count, size=RECORD_SIZE, batch=BATCH, concurrency=concurrency, progress=False,
    )  # fmt: skip
    done.set()
    sampler.join()
    samples.append((time.monotonic(), _bytes_written(up.endpoint_url)))
    steady = _steady_rate(samples, len(report.accepted)) / SHARDS
    record_bytes = _record_bytes(report)
    return report, {
        "accepted": len(report.accepted),
        "failed": len(report.failed),
        "unconfirmed": len(report.unconfirmed),
        "retried_records": report.retried_records,
        "whole_run_per_shard": round(report.accepted_per_second / SHARDS, 1),
        "steady_per_shard": round(steady, 1),
        "record_bytes": round(record_bytes, 1),
        "byte_limit_share": steady * record_bytes / BYTE_LIMIT,
    }


def sweep(
    cdk_out: Path, workdir: Path, count: int, concurrencies: tuple[int, ...]
) -> dict[int, dict[str, Any]]:
    """A short send at each concurrency on one fresh runtime (its consumers are left behind)."""
    results = {}
    with UpProcess(cdk_out, workdir) as up:
        up.start()
        # Each worker's first invocations are slow (imports, clients): not what a steady rate is about.
        _send(up, BATCH * 4 * max(concurrencies), max(concurrencies))
        for concurrency in concurrencies:
            _log(f"local runtime: send {count:,} records, {concurrency} requests in flight")
            results[concurrency] = _send(up, count, concurrency)[1]
    return results


def _checkpointed(up: UpProcess) -> dict[str, int]:
    """Per consumer function: Kinesis records its mapping has checkpointed (the runtime's own count)."""
    mappings = get_json(f"http://127.0.0.1:{up.api_port}/_shardline/runtime").get("mappings", {})
    return {name: sum(shard["records"] for shard in shards.values()) for name, shards in mappings.items()}


def _await_checkpoints(up: UpProcess, written: int, timeout: float) -> dict[str, float]:
    """Per consumer function, when (epoch s) its mapping had checkpointed all `written` Kinesis records.

    Read from the up process, not the sinks: Querying moto's sink table scans the whole table, so a
    reader polling the sinks would take the endpoint's CPU from the consumers it is timing."""
    done: dict[str, float] = {}
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        counts = _checkpointed(up)
        for name, records in counts.items():
            if records >= written and name not in done:
                done[name] = time.time()
        if counts and len(done) == len(counts):
            break
        time.sleep(0.25)
    return done


def ingest_and_drain(
    cdk_out: Path, workdir: Path, count: int, concurrency: int, extra_args: tuple[str, ...] = ()
) -> dict[str, Any]:
    """The long run on a fresh runtime (`up` with `extra_args`): send, the Kinesis counters, every
    group's drain, the verdict."""
    from local.app.template import load
    from local.commands.verify import wait_and_verify

    with UpProcess(cdk_out, workdir, extra_args=extra_args) as up:
        up.start()
        app = load(cdk_out, endpoint_url=up.endpoint_url)
        cpu_start, began, client_cpu = cpu_seconds(up.processes()), time.monotonic(), time.process_time()
        _log(f"local runtime: send {count:,} records, {concurrency} in flight")
        report, ingest = _send(up, count, concurrency)
        sent_at, client_cpu = time.monotonic(), time.process_time() - client_cpu
        cpu_sent = cpu_seconds(up.processes())
        shards = next(iter(get_json(f"{up.endpoint_url}/_shardline/kinesis")["streams"].values()))["shards"]
        _log("local runtime: waiting for every consumer group's checkpoints")
        timeout = max(600.0, count / 50)
        done = _await_checkpoints(up, sum(shard["records_written"] for shard in shards.values()), timeout)
        drained_at = time.monotonic()
        cpu_drained = cpu_seconds(up.processes())
        _log("local runtime: verifying every sink")
        verdict = wait_and_verify(up.endpoint_url, app, report, timeout=timeout, progress=False)
        runtime_stats = get_json(f"http://127.0.0.1:{up.api_port}/_shardline/runtime")
        during_send = _cpu_by_role(up, cpu_start, cpu_sent, sent_at - began)
        during_send["send client (this process)"] = {
            "cpu_s": round(client_cpu, 2),
            "cores": round(client_cpu / (sent_at - began), 2),
        }
        after_send = _cpu_by_role(up, cpu_sent, cpu_drained, max(1e-9, drained_at - sent_at))
        logs = {path.name.split("-")[1]: _function_log(path) for path in up.log_dir.glob("*.log")}
    groups = []
    for g in verdict.groups:
        checkpointed = done.get(g.group.function)
        groups.append(
            {
                "group": g.group.name,
                "ok": g.ok,
                "lost": len(g.lost),
                "duplicated": len(g.duplicated),
                "wrong_counts": len(g.wrong_counts),
                "expected": g.expected,
                "drain_s": checkpointed - report.finished if checkpointed else None,
                "records_per_s": g.expected / (checkpointed - report.started) if checkpointed else None,
                "drain_s_seen_by_verify": g.drain_s,
            }
        )
    keep = ("records_written", "bytes_written", "write_throttles")
    return {
        "concurrency": concurrency,
        "send": report.as_dict(),
        "ingest": ingest,
        "kinesis": {shard: {k: counts[k] for k in keep} for shard, counts in shards.items()},
        "groups": groups,
        "timed_out": verdict.timed_out or len(done) < len(verdict.groups),
        "cpu_during_send": during_send,
        "cpu_after_send": after_send,
        "functions": {name.split("-")[2][:24]: v for name, v in runtime_stats.get("functions", {}).items()},
        "api": runtime_stats.get("api"),
        "function_logs": logs,
    }


_REPORT = re.compile(r"^REPORT .*?Duration: ([\d.]+) ms")


def _function_log(path: Path) -> dict[str, Any]:
    """Medians of a function's REPORT durations, and of the producer's EMF RequestTime/BufferingTime."""
    durations: list[float] = []
    emf: dict[str, list[float]] = {"RequestTime": [], "BufferingTime": []}
    for line in path.read_text(errors="replace").splitlines():
        if match := _REPORT.match(line):
            durations.append(float(match.group(1)))
        elif line.startswith('{"_aws"'):
            fields = json.loads(line)
            for name, values in emf.items():
                values += fields.get(name, [])
    out: dict[str, Any] = {"invocations": len(durations)}
    if durations:
        out["duration_p50_ms"] = round(statistics.median(durations), 1)
        out["duration_max_ms"] = round(max(durations), 1)
    for name, values in emf.items():
        if values:
            out[f"{name}_p50_ms"] = round(statistics.median(values), 1)
    return out


# --- the whole run ------------------------------------------------------------------------------------


def measure(quick: bool) -> tuple[list[Row], dict[str, Any], list[str]]:
    """Every figure above, in one run: the rows, the details (for the JSON report), and problems."""
    sweep_count, long_count = (10_000, 20_000) if quick else (40_000, 100_000)
    rows: list[Row] = []
    details: dict[str, Any] = {}
    problems: list[str] = []
    details["load average before"] = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="bench-local-") as tmp:
        root = Path(tmp)
        _log("local runtime: synthesizing the app")
        cdk_out = synthesize(root / "cdk.out")

        _log("local runtime: start-up and stop of python -m local up")
        up = UpProcess(cdk_out, root / "startup")
        started = up.start()
        stopped, left = up.stop()
        details["start-up"] = {"up_s": round(started, 2), "stop_s": round(stopped, 2), "left": left}
        rows.append(
            Row(
                "make local: spawn to 'shardline is up'",
                "ms",
                started * 1000,
                target=Target("value", "<=", 10_000),
            )
        )
        rows.append(Row("make local: SIGINT to exited, no process left", "ms", stopped * 1000))
        if left:
            problems.append(f"local runtime: processes left after SIGINT: {left}")

        details["sweep"] = sweep(cdk_out, root / "sweep", sweep_count, (4, 8, 16))
        best = max(details["sweep"], key=lambda c: details["sweep"][c]["steady_per_shard"])
        for concurrency, figures in details["sweep"].items():
            rows.append(
                Row(
                    f"send {sweep_count // 1000}k × 100 B, {concurrency} in flight: user records/s per shard",
                    "rec/s",
                    figures["steady_per_shard"],
                )
            )
        run = ingest_and_drain(cdk_out, root / "long", long_count, best)
        details["long run"] = run
        ingest = run["ingest"]
        label = f"send {long_count // 1000}k × 100 B, {best} in flight"
        rows.append(
            Row(f"{label}: user records/s per shard, middle 80 %", "rec/s", ingest["steady_per_shard"])
        )
        rows.append(
            Row(
                f"{label}: share of 1 MiB/s per shard (data + key)",
                "%",
                ingest["byte_limit_share"] * 100,
                target=Target("value", ">=", 90.0),
            )
        )
        throttles = sum(shard["write_throttles"] for shard in run["kinesis"].values())
        rows.append(Row(f"{label}: Kinesis write throttles", "count", throttles))
        if ingest["failed"]:
            problems.append(f"local runtime: {ingest['failed']} records failed to send")
        for group in run["groups"]:
            name = group["group"]
            rows.append(
                Row(
                    f"{label}: {name} drain rate, first POST to complete",
                    "rec/s",
                    group["records_per_s"] or 0,
                )
            )
            if group["drain_s"] is not None:
                rows.append(
                    Row(f"{label}: {name} complete after the last POST", "ms", group["drain_s"] * 1000)
                )
            rows.append(
                Row(
                    f"{label}: {name} lost + duplicated",
                    "count",
                    group["lost"] + group["duplicated"],
                    target=Target("value", "<=", 0),
                )
            )
            if not group["ok"]:
                problems.append(f"local runtime: group {name} not ok: {group}")

    _log("local runtime: DynamoDB transactions alone")
    ceiling = local_dynamodb.dynamodb_ceiling(3.0 if quick else 10.0)
    details["dynamodb"] = ceiling
    details["load average after"] = os.getloadavg()
    for kind, by_threads in ceiling.items():
        for threads, rate in by_threads.items():
            rows.append(
                Row(
                    f"DynamoDB alone: {local_dynamodb.CALLS.get(kind, kind)}, {threads} thread(s)",
                    "rec/s",
                    rate,
                )
            )
    return rows, details, problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.local_runtime", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--quick", action="store_true", help="fewer records and shorter runs")
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write the details as JSON to PATH")
    args = parser.parse_args(argv)
    rows, details, problems = measure(args.quick)
    for row in rows:
        target = (
            f"  target {row.target.text(row.unit)}: {'met' if row.met else 'NOT MET'}" if row.target else ""
        )
        figure = format_figure(row.shardline, row.unit)
        print(f"{row.measurement:<78} {figure:>12} ({row.shardline:,.1f} {row.unit}){target}")
    for problem in problems:
        print(f"problem: {problem}")
    print(json.dumps(details, indent=1, default=str))
    if args.json:
        args.json.write_text(json.dumps(details, indent=2, default=str) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
