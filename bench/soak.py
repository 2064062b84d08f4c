"""The soak: a long run under a chaos profile, its end-to-end verdict, and every process's memory over time.

    python -m bench.soak [--count 1000000] [--chaos heavy] [--kill-every N] [--poison-rate R]
                         [--lose-replies 0.002] [--no-ids] [--rate 2000] [--out build/soak]   # make soak
                         [--fleet-processes 3] [--fleet-per-process N] [--callers-count N]

It runs `python -m local up --chaos PROFILE` as a child (as a user would, on free ports), `send`s
`--count` records through the REST API — each with an id, each request with an `Idempotency-Key`,
and every request that failed as a whole (no answer, a 5xx, `--lose-replies` of the answers
dropped after the write) posted again as it was — waits for every consumer group, and proves the
verdict by identity (`local.commands.verify`: 0 lost, 0 duplicate effects, counts exact, poison whole in its
DLQ, every accepted record at the sequence number the API answered), printing the Kinesis-level
duplicates it read in the stream (aggregate copies of producer resends, records re-posted into the
stream again): above zero, they show the consumers' dedup kept the sinks exact. Meanwhile, every
`--sample-every` seconds, it reads each process of the runtime from /proc (resident memory; role: the
up process, the endpoint, each function's workers) with the records written and processed so far,
and appends the sample to `<out>/samples.jsonl` — a run cut short still leaves its figures.

Memory is flat when the largest process of a role at the end (median of the last quarter of the
samples) is within 10 % + 32 MiB of where it was once warm (median of the second quarter). The
endpoint is the exception by design: it holds every record written and every sink item (moto keeps
data in memory, as the services keep it on disk), so it is reported as its growth per accepted
record (about 2 KB of stream data and sink items; a leak shows as more, as moto's model tracking
did: 5.8 KB).
While `send` runs, two more senders (issue 39, `local.commands.fleet`), on by default and scaled
with `--count`: a forked producer fleet (a library `Producer` used here, then forked into
`--fleet-processes` processes that each put `--fleet-per-process` records with ids straight to the
endpoint's Kinesis, the parent as many) and two callers sharing ids (one run of `--callers-count`
records, the same ids and Idempotency-Keys, POSTed under two access keys). Their verdict: every
confirmed record applied once in every sink under its own caller, counts exact. `--no-fleet` and
`--no-callers` leave them out.
The exit code is 0 only if both verdicts are ok and every other role is flat.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

from bench.up_process import UpProcess, get_json, rss_bytes
from local.app.template import load
from local.chaos.profiles import PROFILE_NAMES
from local.commands.fleet import CallersReport, FleetReport, forked_fleet, two_callers, wait_applied
from local.commands.send import send
from local.commands.status import collect, injected_faults
from local.commands.verify import physical_stream, wait_and_verify
from local.commands.verify_render import render

MiB = 1024 * 1024
FLAT_SHARE, FLAT_SLACK = 0.10, 32 * MiB


class Sampler:
    """Every `interval` seconds: memory per role and progress, kept and appended to a JSONL file."""

    def __init__(self, up: UpProcess, path: Path, interval: float) -> None:
        self.up, self.path, self.interval = up, path, interval
        self.samples: list[dict[str, Any]] = []
        self.began = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="soak-sampler", daemon=True)

    def start(self) -> Sampler:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text("")
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        self.sample()  # the last word

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()

    def sample(self) -> None:
        roles = self.up.processes()
        memory: dict[str, dict[str, int]] = {}
        for pid, rss in rss_bytes(roles).items():
            entry = memory.setdefault(roles[pid], {"processes": 0, "rss_total": 0, "rss_max": 0})
            entry["processes"] += 1
            entry["rss_total"] += rss
            entry["rss_max"] = max(entry["rss_max"], rss)
        sample = {"t": round(time.monotonic() - self.began, 3), "memory": memory, **_progress(self.up)}
        self.samples.append(sample)
        with self.path.open("a") as out:
            out.write(json.dumps(sample) + "\n")


def _progress(up: UpProcess) -> dict[str, Any]:
    """Records the stream took and each mapping's records processed, from the runtime's own routes."""
    try:
        streams = get_json(f"{up.endpoint_url}/_shardline/kinesis")["streams"]
        shards = [shard for stream in streams.values() for shard in stream["shards"].values()]
        mappings = get_json(f"http://127.0.0.1:{up.api_port}/_shardline/runtime")["mappings"]
    except (OSError, KeyError, ValueError):
        return {}
    return {
        "records_written": sum(shard["records_written"] for shard in shards),
        "bytes_written": sum(shard["bytes_written"] for shard in shards),
        "open_shards": sum(1 for shard in shards if shard["open"]),
        "records_processed": {
            name: sum(shard.get("records", 0) for shard in by_shard.values())
            for name, by_shard in mappings.items()
        },
        # Lambda's IteratorAge: how old the last record of each shard's latest batch was when it
        # ended (MillisBehindLatest reads 0 here: the mapping reads ahead into its buffer).
        "lag_ms": {
            name: max((shard.get("iterator_age_ms") or 0 for shard in by_shard.values()), default=0)
            for name, by_shard in mappings.items()
        },
    }


def ingest(samples: list[dict[str, Any]], report: Any, window: tuple[float, float]) -> dict[str, Any]:
    """What the stream took while `send` ran (`window`, in the samples' clock): Kinesis records and
    bytes a second per open shard, and the share of Kinesis's 1 MiB/s per shard that is."""
    began, ended = window
    during = [s for s in samples if "bytes_written" in s and began <= s["t"] <= ended]
    if len(during) < 2 or during[-1]["t"] <= during[0]["t"]:
        return {}
    seconds = during[-1]["t"] - during[0]["t"]
    shards = statistics.mean(s["open_shards"] for s in during)
    per_shard = (during[-1]["bytes_written"] - during[0]["bytes_written"]) / seconds / shards
    records = (during[-1]["records_written"] - during[0]["records_written"]) / seconds / shards
    return {
        "kinesis_records_per_s_per_shard": round(records, 1),
        "bytes_per_s_per_shard": round(per_shard),
        "share_of_1_mib_per_s": round(per_shard / MiB, 3),
        "accepted_user_records_per_s": round(report.accepted_per_second, 1),
    }


def lag(samples: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Per mapping, over the samples: its shards' largest iterator age (median, max) and its backlog,
    the Kinesis records written but not yet processed (median, max)."""
    ages: dict[str, list[float]] = {}
    backlogs: dict[str, list[int]] = {}
    for sample in samples:
        for name, value in sample.get("lag_ms", {}).items():
            ages.setdefault(name, []).append(value)
        for name, processed in sample.get("records_processed", {}).items():
            backlogs.setdefault(name, []).append(max(0, sample["records_written"] - processed))
    return {
        name: {
            "iterator_age_median_ms": statistics.median(ages.get(name) or [0]),
            "iterator_age_max_ms": max(ages.get(name) or [0]),
            "backlog_median_records": statistics.median(backlog),
            "backlog_max_records": max(backlog),
        }
        for name, backlog in backlogs.items()
    }


def memory_verdict(samples: list[dict[str, Any]], accepted: int = 0) -> dict[str, dict[str, Any]]:
    """Per role: warm and final size of its largest process, and whether that is flat (see the module)."""
    out: dict[str, dict[str, Any]] = {}
    quarter = max(1, len(samples) // 4)
    roles = {role for sample in samples for role in sample["memory"]}
    for role in sorted(roles):
        series = [s["memory"][role]["rss_max"] for s in samples if role in s["memory"]]
        warm = statistics.median(series[quarter : 2 * quarter] or series)
        final = statistics.median(series[-quarter:])
        entry: dict[str, Any] = {"warm_mib": round(warm / MiB, 1), "final_mib": round(final / MiB, 1)}
        if role == "endpoint":
            # It holds the data: its growth from the first sample, per record the API accepted.
            grown = final - series[0]
            entry["grown_mib"] = round(grown / MiB, 1)
            entry["bytes_per_accepted_record"] = round(grown / accepted) if accepted else None
        else:
            entry["flat"] = final <= warm * (1 + FLAT_SHARE) + FLAT_SLACK
        out[role] = entry
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=1_000_000)
    parser.add_argument("--chaos", default="heavy", help=f"{', '.join(PROFILE_NAMES)} or a profile file")
    parser.add_argument(
        "--kill-every", type=int, default=None,
        help="consumer invocations between worker kills (default: the profile's; aggregation makes few "
        "invocations: a million 100-byte records are about 130 per consumer group)",
    )  # fmt: skip
    parser.add_argument("--poison-rate", type=float, default=0.0001, help="share of poison records (450 KiB)")
    parser.add_argument(
        "--lose-replies", type=float, default=0.002,
        help="share of the API's answers dropped after the write (those requests are posted again)",
    )  # fmt: skip
    parser.add_argument(
        "--no-ids", dest="ids", action="store_false",
        help="records without ids (the verdict then claims only at least once for re-posted records)",
    )  # fmt: skip
    parser.add_argument(
        "--seed", type=int, default=3,
        help="the same sizes, keys, poison records and lost replies, run after run (3: with the default "
        "--lose-replies, a 1M run loses 6 replies, a 20k run with --lose-replies 0.05 loses 2)",
    )  # fmt: skip
    parser.add_argument("--rate", type=float, default=None, help="records/s at most (default: unpaced)")
    parser.add_argument("--size", type=int, default=100, help="bytes of data per record")
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--fleet-processes", type=int, default=3, help="forked copies of the producer")
    parser.add_argument(
        "--fleet-per-process",
        type=int,
        default=None,
        help="records each forked copy puts (default: count/50)",
    )
    parser.add_argument("--no-fleet", dest="fleet", action="store_false", help="no forked producer fleet")
    parser.add_argument(
        "--callers-count",
        type=int,
        default=None,
        help="records each of the two callers posts (default: count/50)",
    )
    parser.add_argument(
        "--no-callers", dest="callers", action="store_false", help="no two callers sharing ids"
    )
    parser.add_argument("--cdk-out", type=Path, default=Path("cdk.out"))
    parser.add_argument("--out", type=Path, default=Path("build/soak"))
    parser.add_argument("--sample-every", type=float, default=10.0, help="seconds between memory samples")
    parser.add_argument("--timeout", type=float, default=4 * 3600, help="seconds to wait for the sinks")
    args = parser.parse_args(argv)

    cdk_out = args.cdk_out.resolve()
    chaos = args.chaos
    if args.kill_every is not None:  # the profile, with kills as often as asked
        derived = args.out.resolve() / "profile.json"
        derived.parent.mkdir(parents=True, exist_ok=True)
        derived.write_text(json.dumps({"extends": args.chaos, "workers": {"kill_every": args.kill_every}}))
        chaos = str(derived)
    with UpProcess(cdk_out, args.out.resolve() / "run", extra_args=("--chaos", chaos)) as up:
        up.start()
        app = load(cdk_out, endpoint_url=up.endpoint_url)
        api_url = f"http://127.0.0.1:{up.api_port}/{app.apis[0].stage}/streams"
        stream = next(iter(json.loads(_producer(app).environment["SHARDLINE_STREAMS"])))
        sampler = Sampler(up, args.out / "samples.jsonl", args.sample_every).start()
        began = time.monotonic()
        extras = Extras(args, up.endpoint_url, api_url, physical_stream(app, stream), stream)
        try:
            send_began = time.monotonic() - sampler.began
            extras.start()
            report = send(
                api_url, stream, count=args.count, size=args.size, rate=args.rate,
                concurrency=args.concurrency, poison_rate=args.poison_rate, progress=sys.stderr.isatty(),
                ids=args.ids, lose_replies=args.lose_replies, seed=args.seed,
            )  # fmt: skip
            extras.join()
            sampler.sample()
            send_window = (send_began, time.monotonic() - sampler.began)
            verdict = wait_and_verify(up.endpoint_url, app, report, timeout=args.timeout)
            extras.verify(app, timeout=args.timeout)
            status = collect(app, endpoint_url=up.endpoint_url, api_base=f"http://127.0.0.1:{up.api_port}")
        finally:
            sampler.stop()
        elapsed = time.monotonic() - began
    memory = memory_verdict(sampler.samples, len(report.accepted))
    result = {
        "profile": args.chaos,
        "kill_every": args.kill_every,
        "poison_rate": args.poison_rate,
        "count": args.count,
        "ids": args.ids,
        "lose_replies": args.lose_replies,
        "seed": args.seed,
        "elapsed_s": round(elapsed, 1),
        "summary": summary(verdict),
        "fleet_and_callers": extras.summary(),
        "verdict": verdict.as_dict(),
        "faults": injected_faults(status),
        "ingest": ingest(sampler.samples, report, send_window),
        "consumer_lag": lag(sampler.samples),
        "memory": memory,
        "samples": len(sampler.samples),
    }
    (args.out / "soak.json").write_text(json.dumps(result, indent=2, default=str))
    print(render(verdict))
    print(f"summary: {json.dumps(result['summary'])}")
    print(f"fleet and callers: {json.dumps(result['fleet_and_callers'])}")
    for key in ("faults", "ingest", "consumer_lag"):
        print(f"{key}: {json.dumps(result[key])}")
    for role, entry in memory.items():
        print(f"memory {role:<22} {json.dumps(entry)}")
    print(f"{elapsed:,.0f} s in all; samples in {sampler.path}, result in {args.out / 'soak.json'}")
    flat = all(entry.get("flat", True) for entry in memory.values())
    return 0 if verdict.ok and extras.ok and flat else 1


class Extras:
    """The forked producer fleet and the two callers sharing ids, beside `send`, and their verdict."""

    def __init__(
        self, args: argparse.Namespace, endpoint_url: str, api_url: str, stream_name: str, route: str
    ):
        self.args, self.endpoint_url, self.api_url = args, endpoint_url, api_url
        self.stream_name, self.route = stream_name, route
        self.fleet: FleetReport | None = None
        self.callers: CallersReport | None = None
        self.applied: Any = None
        self._threads: list[threading.Thread] = []

    def start(self) -> None:
        args = self.args
        if args.fleet and args.fleet_processes > 0:
            self._threads.append(threading.Thread(target=self._fleet, name="soak-fleet", daemon=True))
        if args.callers:
            self._threads.append(threading.Thread(target=self._callers, name="soak-callers", daemon=True))
        for thread in self._threads:
            thread.start()

    def _fleet(self) -> None:
        per_process = self.args.fleet_per_process or max(1, self.args.count // 50)
        self.fleet = forked_fleet(
            self.endpoint_url, self.stream_name, processes=self.args.fleet_processes, per_process=per_process
        )

    def _callers(self) -> None:
        count = self.args.callers_count or max(1, self.args.count // 50)
        rate = self.args.rate / 50 if self.args.rate else None
        self.callers = two_callers(
            self.api_url, self.route, count=count, rate=rate, size=self.args.size,
            lose_replies=self.args.lose_replies, seed=self.args.seed + 1,
        )  # fmt: skip

    def join(self) -> None:
        for thread in self._threads:
            thread.join()

    def verify(self, app: Any, timeout: float) -> None:
        expected = (self.fleet.confirmed if self.fleet else []) + (
            self.callers.confirmed if self.callers else []
        )
        if self._threads:
            self.applied = wait_applied(self.endpoint_url, app, self.stream_name, expected, timeout=timeout)

    @property
    def ok(self) -> bool:
        not_confirmed = (self.fleet.unconfirmed if self.fleet else 0) + sum(
            len(report.failed) + len(report.unconfirmed)
            for report in (self.callers.reports.values() if self.callers else ())
        )
        started = all(
            done is not None
            for done, wanted in ((self.fleet, self.args.fleet and self.args.fleet_processes > 0),
                                 (self.callers, self.args.callers))
            if wanted
        )  # fmt: skip
        return started and not_confirmed == 0 and (self.applied is None or self.applied.ok)

    def summary(self) -> dict[str, Any]:
        fleet, callers, applied = self.fleet, self.callers, self.applied
        return {
            "ok": self.ok,
            "fleet_processes": fleet.processes if fleet else 0,
            "fleet_confirmed": len(fleet.confirmed) if fleet else 0,
            "fleet_unconfirmed": fleet.unconfirmed if fleet else 0,
            "callers_confirmed": {c: len(r.accepted) for c, r in callers.reports.items()} if callers else {},
            "callers_refused": {c: len(r.failed) for c, r in callers.reports.items()} if callers else {},
            "callers_unconfirmed": (
                {c: len(r.unconfirmed) for c, r in callers.reports.items()} if callers else {}
            ),
            "applied": applied.describe() if applied is not None else None,
        }


def summary(verdict: Any) -> dict[str, Any]:
    """The soak's figures in one line: the verdict by identity and the Kinesis-level duplicates."""
    report, stream = verdict.report, verdict.stream
    return {
        "ok": verdict.ok,
        "accepted": len(report.accepted),
        "refused": len(report.failed),
        "unconfirmed": len(report.unconfirmed),
        "lost": verdict.lost,
        "duplicate_effects": verdict.duplicate_effects,
        "counts_exact": not any(group.wrong_counts for group in verdict.groups),
        "requests_failed_as_a_whole": sum(report.whole_failures.values()),
        "replies_lost": report.replies_lost,
        "records_reposted": len(report.reposted),
        "kinesis_duplicates": stream.duplicates,
        "aggregate_copies": stream.aggregate_copies,
        "records_in_aggregate_copies": stream.records_in_aggregate_copies,
        "records_reposted_into_the_stream": stream.reposted_records,
        "unbacked": len(stream.unbacked),
    }


def _producer(app: Any) -> Any:
    return next(f for f in app.functions if "SHARDLINE_STREAMS" in f.environment)


if __name__ == "__main__":
    sys.exit(main())
