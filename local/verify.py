"""The end of `send`: wait until every consumer group has processed a run's records, then say where they went.

    verdict = wait_and_verify("http://127.0.0.1:4566", app, report)
    print(verdict.render()); sys.exit(0 if verdict.ok else 1)

A consumer group is a function with `SINK_TABLE` in its environment, on the stream the records were
sent to (its event-source mapping). What its sink is, is read from the table's key schema, not from
names: `pk`/`sk` is an event sink (one item per user record: checked for exactly-once, records lost
or duplicated, latency); a lone `partitionKey` hash key is a counter (checked for exact per-key
counts). Its `DLQ_URL` is read for dead letters of the run: an event sink's poison records (over a
DynamoDB item) must be there, whole (the data byte for byte, the partition key), and nothing else;
a counter counts poison records like the others, and its DLQ must hold none of the run's.

Record by record: every accepted record is in each event sink exactly once and counted exactly
once; every refused record is in no sink; a record whose outcome was unknown is in a sink at most
once, and a counter counts it exactly when an event sink holds it (without an event sink, it may).

The sinks are read incrementally: each partition `<stream>#<shard>` is queried with `sk` greater
than the last item seen, starting at the lowest position the API reported for the shard, so a poll
reads only what is new. Latency is POST (the time in the payload) to the poll that first saw the
record: its resolution is the poll interval, reported with it.
"""

from __future__ import annotations

import io
import json
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError
from rich.console import Console
from rich.live import Live
from rich.table import Table
from rich.text import Text

from local import model
from local._verify_readers import DeadLetterReader, SinkReader, read_counts
from local.provision import client
from local.send import SendReport

POLL_INTERVAL_S = 0.5


@dataclass(frozen=True)
class Group:
    """A consumer group as the verdict checks it."""

    name: str
    function: str
    kind: str  # "records" (pk/sk sink), "counter" (partitionKey -> count) or "unknown"
    sink_table: str
    stream_name: str
    dlq_url: str


def _sink_kind(resource: model.Resource | None) -> str:
    schema = {
        key["AttributeName"]: key["KeyType"]
        for key in (resource.properties if resource else {}).get("KeySchema", [])
    }
    if schema == {"pk": "HASH", "sk": "RANGE"}:
        return "records"
    if schema == {"partitionKey": "HASH"}:
        return "counter"
    return "unknown"


def physical_stream(app: model.LocalApp, route: str) -> str:
    """The Kinesis stream behind the API's `route` (the producer's SHARDLINE_STREAMS), else `route`."""
    for function in app.functions:
        routes = json.loads(function.environment.get("SHARDLINE_STREAMS") or "{}")
        if route in routes:
            return str(routes[route].get("streamName", route))
    return app.streams[0].name if len(app.streams) == 1 else route


def consumer_groups(app: model.LocalApp, stream_name: str) -> list[Group]:
    """The functions with a SINK_TABLE whose event-source mapping reads `stream_name`."""
    tables = {r.name: r for r in app.resources if r.type == "AWS::DynamoDB::Table"}
    groups = []
    for function in app.functions:
        env = function.environment
        mapped = {m.stream_name for m in app.mappings if m.function_name == function.name}
        if "SINK_TABLE" in env and stream_name in mapped:
            name, table = env.get("SHARDLINE_GROUP", function.name), env["SINK_TABLE"]
            kind = _sink_kind(tables.get(table))
            groups.append(Group(name, function.name, kind, table, stream_name, env.get("DLQ_URL", "")))
    return groups


@dataclass
class GroupResult:
    """One group's end-to-end result."""

    group: Group
    expected: int = 0  # accepted records (poison included)
    processed: int = 0  # found in the sink (distinct) or counted, plus the run's dead letters
    done_at: float | None = None
    drain_s: float | None = None  # done_at - the last POST answer
    lost: list[int] = field(default_factory=list)
    duplicated: dict[int, int] = field(default_factory=dict)  # seq -> times found
    refused_present: list[int] = field(default_factory=list)  # in the sink although the API refused it
    unknown_present: int = 0  # records of unknown outcome found in the sink (at most once each: ok)
    wrong_counts: dict[str, tuple[int, int]] = field(default_factory=dict)  # key -> (expected, counted)
    dlq_depth: int = 0
    dead_lettered: list[int] = field(default_factory=list)  # non-poison records of the run in the DLQ
    poison_whole: int = 0  # poison records found in the DLQ with data and key as sent
    poison_altered: list[int] = field(default_factory=list)
    poison_missing: list[int] = field(default_factory=list)
    poison_in_sink: list[int] = field(default_factory=list)
    latency_s: dict[str, float] = field(default_factory=dict)  # p50, p99, max (records groups)
    queries: int = 0
    items_read: int = 0

    @property
    def ok(self) -> bool:
        if self.group.kind == "unknown":
            return True
        problems = (self.lost, self.duplicated, self.wrong_counts, self.dead_lettered, self.refused_present)
        poison_problems = (self.poison_altered, self.poison_missing, self.poison_in_sink)
        return self.done_at is not None and not any(problems + poison_problems)

    def as_dict(self) -> dict[str, Any]:
        out = {k: v for k, v in self.__dict__.items() if k != "group"}
        out["wrong_counts"] = {k: list(v) for k, v in self.wrong_counts.items()}
        out["duplicated"] = {str(k): v for k, v in self.duplicated.items()}
        group = {"group": self.group.name, "kind": self.group.kind, "sink_table": self.group.sink_table}
        return {**group, "ok": self.ok, **out}


def _percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(fraction * len(ordered)) - 1))]


@dataclass
class Verdict:
    """Every group's result for one `send` run."""

    report: SendReport
    groups: list[GroupResult]
    poll_interval_s: float
    timed_out: bool

    @property
    def ok(self) -> bool:
        checked = [g for g in self.groups if g.group.kind != "unknown"]
        return bool(checked) and all(g.ok for g in checked) and not self.timed_out

    def as_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "timed_out": self.timed_out,
            "latency_resolution_s": self.poll_interval_s,
            "send": self.report.as_dict(),
            "groups": [g.as_dict() for g in self.groups],
        }

    def render(self) -> str:
        table = Table(
            title=f"run {self.report.run_id}: {len(self.report.accepted):,} accepted, "
            f"{len(self.report.failed):,} refused, {len(self.report.unknown):,} unknown, "
            f"{self.report.accepted_per_second:,.0f}/s"
        )
        columns = "group|sink|processed|lost|dup|counts|DLQ|poison in DLQ|latency p50/p99/max|drain|ok"
        for column in columns.split("|"):
            table.add_column(column)
        for g in self.groups:
            lat = g.latency_s
            table.add_row(
                g.group.name,
                g.group.kind,
                f"{g.processed:,}/{g.expected:,}",
                str(len(g.lost)),
                str(len(g.duplicated)),
                ("exact" if not g.wrong_counts else f"{len(g.wrong_counts)} wrong")
                if g.group.kind == "counter"
                else "-",
                str(g.dlq_depth),
                f"{g.poison_whole}/{g.poison_whole + len(g.poison_missing)}",
                f"{lat['p50']:.2f}/{lat['p99']:.2f}/{lat['max']:.2f} s" if lat else "-",
                f"{g.drain_s:.1f} s" if g.drain_s is not None else "not drained",
                "unchecked" if g.group.kind == "unknown" else ("yes" if g.ok else "NO"),
            )
        console = Console(width=160, record=True, file=io.StringIO())
        console.print(table)
        note = f"latency: POST -> first poll that saw it in the sink (resolution {self.poll_interval_s} s)"
        return console.export_text().rstrip() + "\n" + note + ("\ntimed out" if self.timed_out else "")


class _Watch:
    """The readers of one group, and its result as it stands."""

    def __init__(self, group: Group, report: SendReport, endpoint_url: str) -> None:
        self.group, self.report = group, report
        self.dynamodb = client("dynamodb", endpoint_url)
        self.sink = SinkReader(self.dynamodb, group.sink_table, group.stream_name, report.run_id)
        accepted = report.accepted.values()
        positions = sorted(
            (r.shard_id, int(r.sequence_number)) for r in accepted if r.shard_id and r.sequence_number
        )
        # Records refused or of unknown outcome have no position to start from: then every
        # partition is read from its start (and the stream's other shards too, in `poll`).
        whole = bool(report.failed or report.unknown)
        for shard_id, sequence in positions:  # ascending: each shard's partition starts at its lowest
            self.sink.add_shard(shard_id, None if whole else str(sequence))
        self.dlq = (
            DeadLetterReader(client("sqs", endpoint_url), group.dlq_url, report.run_id)
            if group.dlq_url
            else None
        )
        self.counts: dict[str, int] = {}
        self.result = GroupResult(group, expected=len(report.accepted))

    def poll(self, shard_ids: Iterable[str], unknown_found: set[int] | None = None) -> None:
        """Read what is new; a counter also waits for the unknown records an event sink holds."""
        result = self.result
        if self.dlq is not None:
            self.dlq.poll()
            result.dlq_depth = self.dlq.depth
        letters = set(self.dlq.letters) if self.dlq else set()
        if self.group.kind == "records":
            for shard_id in shard_ids:  # shards no answer named (a child after a split): from their start
                self.sink.add_shard(shard_id)
            self.sink.poll()
            result.processed = len((set(self.sink.positions) | letters) & set(self.report.accepted))
            result.queries, result.items_read = self.sink.queries, self.sink.items_read
        elif self.group.kind == "counter":
            self.counts = read_counts(self.dynamodb, self.group.sink_table, self.report.key_names())
            result.processed = sum(self.counts.values())
            result.expected = len(self.report.accepted) + len(unknown_found or ())
        if result.done_at is None and (self.group.kind == "unknown" or result.processed >= result.expected):
            result.done_at = time.time()
            result.drain_s = max(0.0, result.done_at - self.report.finished)

    def conclude(self, unknown_found: set[int] | None = None) -> GroupResult:
        """Compare what the readers found with what the API answered, record by record.
        `unknown_found`: records of unknown outcome an event sink holds (None: no event sink)."""
        result, report = self.result, self.report
        letters = self.dlq.letters if self.dlq else {}
        if self.group.kind == "records":
            poison = {seq for seq, record in report.accepted.items() if record.poison}
            self._check_poison(poison, letters)
            result.dead_lettered = sorted(set(letters) - poison)
            seen = self.sink.positions
            result.lost = sorted(set(report.accepted) - set(seen) - set(letters) - poison)
            result.duplicated = {seq: len(found) for seq, found in sorted(seen.items()) if len(found) > 1}
            result.refused_present = sorted(set(seen) & set(report.failed))
            result.unknown_present = len(set(seen) & set(report.unknown))
            result.poison_in_sink = sorted(poison & set(seen))
            result.latency_s = _latencies(self.sink.first_seen, report)
        elif self.group.kind == "counter":
            result.dead_lettered = sorted(letters)  # a counter takes every record, poison too
            expected = report.expected_counts()
            maybe: Counter[str] = Counter()
            for seq, record in report.unknown.items():
                if unknown_found is None:
                    maybe[record.key] += 1  # no event sink to tell: counted or not, both are right
                elif seq in unknown_found:
                    expected[record.key] += 1
            for key in sorted(set(expected) | {k for k, n in self.counts.items() if n}):
                counted, low = self.counts.get(key, 0), expected.get(key, 0)
                if not low <= counted <= low + maybe.get(key, 0):
                    result.wrong_counts[key] = (low, counted)
        return result

    def _check_poison(self, poison: set[int], letters: dict[int, dict[str, Any]]) -> None:
        """Each poison record in the DLQ, whole: its data byte for byte and its partition key."""
        result, report = self.result, self.report
        for seq in sorted(poison):
            letter, record = letters.get(seq), report.accepted[seq]
            if letter is None:
                result.poison_missing.append(seq)
            elif letter["_data"] == report.payload_of(seq, record.post_time) and (
                letter.get("partitionKey") == record.key
            ):
                result.poison_whole += 1
            else:
                result.poison_altered.append(seq)


def _latencies(first_seen: dict[int, float], report: SendReport) -> dict[str, float]:
    accepted = report.accepted
    latencies = [first_seen[seq] - accepted[seq].post_time for seq in first_seen if seq in accepted]
    if not latencies:
        return {}
    return {
        "p50": round(_percentile(latencies, 0.50), 3),
        "p99": round(_percentile(latencies, 0.99), 3),
        "max": round(max(latencies), 3),
    }


def _shard_ids(endpoint_url: str, stream_name: str) -> list[str]:
    """Every shard of the stream (children of a split included); none if the endpoint cannot say."""
    kinesis = client("kinesis", endpoint_url, retries={"max_attempts": 1})
    try:
        return [shard["ShardId"] for shard in kinesis.list_shards(StreamName=stream_name)["Shards"]]
    except (ClientError, BotoCoreError):
        return []


def wait_and_verify(
    endpoint_url: str,
    app: model.LocalApp,
    report: SendReport,
    *,
    timeout: float = 300,
    progress: bool = True,
    poll_interval: float = POLL_INTERVAL_S,
) -> Verdict:
    """Poll every consumer group of the report's stream until it has processed every accepted record
    (or `timeout` seconds pass), then compare: lost, duplicated, counts, dead letters, latency, drain."""
    stream_name = physical_stream(app, report.stream)
    # Event sinks first: what they hold of the unknown records is what the counters must count.
    groups = sorted(consumer_groups(app, stream_name), key=lambda group: group.kind != "records")
    watches = [_Watch(group, report, endpoint_url) for group in groups]
    sinks = [watch for watch in watches if watch.group.kind == "records"]

    def unknown_found() -> set[int] | None:
        return {seq for w in sinks for seq in w.sink.positions if seq in report.unknown} if sinks else None

    deadline = time.monotonic() + timeout
    console = Console(stderr=True)
    live = Live(console=console, refresh_per_second=4) if progress and console.is_terminal else None
    started = time.monotonic()
    timed_out = False
    if live:
        live.start()
    try:
        while True:
            shard_ids = _shard_ids(endpoint_url, stream_name)
            for watch in watches:
                watch.poll(shard_ids, unknown_found())
            if live:
                live.update(_progress_line(watches, time.monotonic() - started))
            if all(watch.result.done_at is not None for watch in watches):
                break
            if time.monotonic() >= deadline:
                timed_out = True
                break
            time.sleep(poll_interval)
        for watch in watches:  # one more read: a duplicate may land after the last record's first copy
            watch.poll(shard_ids, unknown_found())
    finally:
        if live:
            live.stop()
    found = unknown_found()
    return Verdict(report, [watch.conclude(found) for watch in watches], poll_interval, timed_out)


def _progress_line(watches: list[_Watch], elapsed: float) -> Text:
    parts = [
        f"{w.group.name}: {w.result.processed:,}/{w.result.expected:,}"
        + (f" (DLQ {w.result.dlq_depth})" if w.result.dlq_depth else "")
        for w in watches
    ]
    return Text(f"waiting for the consumers: {'  '.join(parts)}  {elapsed:,.1f} s")
