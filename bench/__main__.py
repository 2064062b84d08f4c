"""Command line: `python -m bench [--quick] [--json PATH] [--seed N] [--profile]`; prints the report."""

from __future__ import annotations

import argparse
import os
import platform
import random
import sys
import time
from pathlib import Path
from typing import Any

from bench import codec, consumer, identity, imports, lambda_event, notes, peers, producer_backlog, units
from bench.inputs import partition_keys, user_records
from bench.report import Report, Row, Target, render, write_json

LAMBDA_EVENT_AGGREGATES = 80  # ~4.1 MB of data, ~5.5 MB base64: under Lambda's 6 MB invocation payload


def _log(message: str) -> None:
    print(f"[bench] {message}", file=sys.stderr, flush=True)


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench",
        description="shardline against aiokpl and aws-kinesis-agg in one run: figures, ratios, targets.",
    )
    parser.add_argument("--quick", action="store_true", help="fewer repeats and smaller inputs (a smoke run)")
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write the results as JSON to PATH")
    parser.add_argument("--seed", type=int, default=20_240_601, help="seed of every generated input")
    parser.add_argument(
        "--profile", action="store_true", help="also print cProfile tables of shardline's hot paths"
    )
    parser.add_argument(
        "--no-local",
        action="store_true",
        help="leave out the local runtime's section (it has its own command: python -m bench.local_runtime)",
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="the quick sections only, judged against the README's figures: "
        "exit 1 on a miss or a fall (bench/check.py)",
    )
    return parser.parse_args(argv)


def _codec_section(report: Report, problems: list[str], seed: int, repeats: int) -> list[codec.Workload]:
    workloads = [
        codec.make_workload("100 B records, 1,000 keys", seed=seed, data_size=100),
        codec.make_workload("1 KiB records, 1,000 keys", seed=seed + 1, data_size=1024),
    ]
    for workload in workloads:
        _log(f"codec: {workload.label}")
        findings = codec.sanity(workload)
        problems += findings["problems"]
        rows, details = codec.measure(workload, repeats)
        report.rows += rows
        report.details[f"codec {workload.label}"] = details | {"sanity": findings}
    return workloads


def _lambda_section(report: Report, problems: list[str], seed: int, repeats: int) -> None:
    _log("Lambda event")
    workload = codec.make_workload(
        "100 B records", seed=seed, data_size=100, aggregates=LAMBDA_EVENT_AGGREGATES
    )
    event = lambda_event.lambda_event(workload.payloads)
    expected = [(r.partition_key, r.data) for batch in workload.batches for r in batch]
    problems += lambda_event.sanity(event, expected)
    label = f"{LAMBDA_EVENT_AGGREGATES} aggregates of 100 B records"
    rows, details = lambda_event.measure(label, event, workload.record_count, repeats)
    report.rows += rows
    report.details["lambda event"] = details


def _units_section(report: Report, problems: list[str], seed: int, record_count: int) -> None:
    _log(f"PUT units: shardline Producer over {record_count:,} records")
    rows, details = units.measure(seed=seed, record_count=record_count, per_request_records=20_000)
    report.rows += rows
    report.details["put units"] = details
    for scenario in ("bulk", "per_request_500"):
        sent = details[scenario]["shardline"]
        if sent["failed"]:
            problems.append(f"PUT units ({scenario}): {sent['failed']} records failed in the fake stream")
        problems += [f"PUT units ({scenario}): {violation}" for violation in sent["violations"]]
        if sent["problem"]:
            problems.append(f"PUT units ({scenario}): {sent['problem']}")


def _identity_section(report: Report, problems: list[str], seed: int, quick: bool) -> None:
    count, sink_count = (20_000, 5_000) if quick else (100_000, 20_000)
    _log(f"identity: bytes and PUT units over {count:,} records, DynamoDB writes of the sinks")
    rows, details, found = identity.measure(seed=seed, record_count=count, sink_records=sink_count)
    report.rows += rows
    report.details["identity"] = details
    report.notes += identity.notes(details)
    problems += found


def _consumer_section(
    report: Report, problems: list[str], workload: consumer.ConsumerWorkload, repeats: int
) -> None:
    _log("consumer: KinesisConsumer.process against Powertools BatchProcessor")
    rows, details, found = consumer.measure(workload, repeats)
    report.rows += rows
    report.details["consumer"] = details
    problems += found


def _backlog_section(report: Report, problems: list[str], quick: bool) -> None:
    scenarios = [(2, 60_000, 100), (4, 60_000, 100)]
    if not quick:
        scenarios += [
            (2, 200_000, 100),
            (4, 200_000, 100),
            (2, 60_000, 1024),
            (4, 60_000, 1024),
            (4, 200_000, 1024),
        ]
    details: dict[str, Any] = {}
    with producer_backlog.moto_server() as endpoint:
        for shards, count, size in scenarios:
            label = f"backlog {count // 1000}k × {size} B, {shards} shards"
            _log(f"producer {label} (moto server behind the shard limits)")
            mine = producer_backlog.run_shardline(endpoint, shards, count, size)
            theirs = None
            if (shards, count, size) == (2, 60_000, 100):
                _log(f"aiokpl {label}")
                theirs = producer_backlog.run_aiokpl(endpoint, shards, count, size)
            details[label] = {"shardline": mine, "aiokpl": theirs}
            report.rows.append(
                Row(
                    f"{label}: user records/s per shard",
                    "rec/s",
                    mine["records_per_shard_per_s"],
                    "aiokpl" if theirs else None,
                    theirs["records_per_shard_per_s"] if theirs else None,
                )
            )
            report.rows.append(
                Row(
                    f"{label}: share of 1 MiB/s per shard, first request to last answer",
                    "%",
                    mine["byte_limit_share"] * 100,
                    "aiokpl" if theirs else None,
                    theirs["byte_limit_share"] * 100 if theirs else None,
                )
            )
            steady = mine["steady_byte_limit_share"]
            if steady is not None:
                theirs_steady = theirs["steady_byte_limit_share"] if theirs else None
                report.rows.append(
                    Row(
                        f"{label}: share of 1 MiB/s per shard, median second",
                        "%",
                        steady * 100,
                        "aiokpl" if theirs_steady is not None else None,
                        theirs_steady * 100 if theirs_steady is not None else None,
                        Target("value", ">=", 95.0) if size == 100 else None,
                    )
                )
            report.rows.append(
                Row(f"{label}: records expired", "count", mine["expired"], target=Target("value", "<=", 0))
            )
            if mine["failed"]:
                problems.append(f"{label}: {mine['failed']} records failed")
    per_record = {}
    for count in (60_000, 200_000) if quick else (60_000, 200_000, 1_000_000):
        _log(f"producer time per record, {count:,} buffered (no server)")
        per_record[count] = producer_backlog.microseconds_per_record(count)
        report.rows.append(Row(f"producer work per record, {count:,} buffered", "µs", per_record[count]))
    largest = max(per_record)
    report.rows.append(
        Row(
            f"producer work per record, {largest:,} ÷ 60,000 buffered",
            "count",
            per_record[largest] / per_record[60_000],
            target=Target("value", "<=", 1.5),
        )
    )
    details["work per record (µs)"] = per_record
    report.details["producer backlog"] = details


def _local_section(report: Report, problems: list[str], quick: bool) -> None:
    """The local runtime (issue 11): start-up, ingest through the REST API, drains, DynamoDB alone."""
    from bench import local_runtime

    _log("local runtime (python -m local up)")
    rows, details, found = local_runtime.measure(quick)
    report.rows += rows
    report.details["local runtime"] = details
    problems += found


def _imports_section(report: Report, runs: int) -> None:
    _log("import cost (fresh interpreters)")
    rows, details = imports.measure(runs=runs)
    report.rows += rows
    report.details["imports"] = details


def run(quick: bool, seed: int, profile: bool, local: bool = True) -> tuple[Report, str | None]:
    """Every measurement, in order; returns the report and, with `profile`, the profile tables."""
    started = time.perf_counter()
    repeats = 3 if quick else 11
    meta: dict[str, Any] = {
        "python": platform.python_version(),
        "platform": f"{platform.system()} {platform.machine()}",
        "cpus": len(os.sched_getaffinity(0)),
        "repeats": repeats,
        "seed": seed,
        "quick": quick,
        **peers.versions(),
    }
    report = Report(meta=meta)
    problems: list[str] = []
    workloads = _codec_section(report, problems, seed, repeats)
    _lambda_section(report, problems, seed + 2, repeats)
    _units_section(report, problems, seed + 3, 20_000 if quick else 100_000)
    _identity_section(report, problems, seed + 9, quick)
    consumer_workload = consumer.make_workload(seed + 4)
    _consumer_section(report, problems, consumer_workload, repeats)
    _backlog_section(report, problems, quick)
    if local:
        _local_section(report, problems, quick)
    _imports_section(report, 3 if quick else 7)
    report.notes += notes.compose(report.details, problems)
    meta["seconds"] = time.perf_counter() - started

    profile_text = None
    if profile:
        _log("profiling shardline")
        from bench import profiling

        rng = random.Random(seed + 3)
        producer_records = user_records(rng, partition_keys(rng, 1000), 20_000, 100)
        profile_text = profiling.profile(workloads[0], producer_records)
        profile_text += "\n\n" + consumer.profile(consumer_workload)
    return report, profile_text


def run_check(seed: int) -> tuple[Report, list[str]]:
    """The sections `--check` judges (about a minute): codec, Lambda event, PUT units, consumer, imports."""
    started = time.perf_counter()
    repeats = 5
    report = Report(meta={"repeats": repeats, "seed": seed, "quick": True})
    problems: list[str] = []
    _codec_section(report, problems, seed, repeats)
    _lambda_section(report, problems, seed + 2, repeats)
    _units_section(report, problems, seed + 3, 20_000)
    _consumer_section(report, problems, consumer.make_workload(seed + 4), repeats)
    _imports_section(report, 3)
    report.meta["seconds"] = time.perf_counter() - started
    return report, problems


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print the report (progress goes to stderr). Exits 0 unless it crashes;
    with `--check`, 1 when a row misses or falls (`bench.check`)."""
    args = _parse(argv)
    if args.check:
        from bench import check

        published = check.published_rows(check.README.read_text(encoding="utf-8"))
        report, problems = run_check(args.seed)
        findings = check.check(report.rows, published)
        for attempt in range(2, check.RUNS + 1):
            if not any(finding.failed for finding in findings):
                break
            _log(f"bench --check: a row failed; measuring again ({attempt} of {check.RUNS}) to confirm it")
            again, _ = run_check(args.seed)
            findings = check.confirmed(findings, check.check(again.rows, published))
        print(check.render(findings))
        for problem in problems:
            print(f"FAIL sanity: {problem}")
        print(f"(took {report.meta['seconds']:.0f} s)")
        return 1 if problems or any(finding.failed for finding in findings) else 0
    report, profile_text = run(args.quick, args.seed, args.profile, local=not args.no_local)
    print(render(report))
    if profile_text:
        print()
        print(profile_text)
    if args.json:
        write_json(report, args.json)
        _log(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
