"""The end of `send`: wait until every consumer group has processed a run's records, then say where they went.

    verdict = wait_and_verify("http://127.0.0.1:4566", app, report)
    print(verdict.render()); sys.exit(0 if verdict.ok else 1)

A consumer group is a function with `SINK_TABLE` in its environment, on the stream the records were
sent to (its event-source mapping). What its sink is, is read from the table's key schema, not from
names: `pk`/`sk` is an event sink (one item per user record: checked for exactly-once, records lost
or duplicated, latency); a lone `partitionKey` hash key is a counter (checked for exact per-key
counts). Its `DLQ_URL` is read for dead letters of the run: poison records must be there, whole
(the data byte for byte, the partition key), and nothing else.

The sinks are read incrementally: each partition `<stream>#<shard>` is queried with `sk` greater
than the last item seen, starting at the lowest position the API reported for the shard, so a poll
reads only what is new. Latency is POST (the time in the payload) to the poll that first saw the
record: its resolution is the poll interval, reported with it.
"""

from __future__ import annotations

import base64
import io
import json
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError
from rich.console import Console
from rich.live import Live
from rich.table import Table
from rich.text import Text

from local import model
from local.provision import client
from local.send import SendReport, parse_payload, payload

SEQUENCE_DIGITS = 129  # the event sink's zero-padding of sequence numbers in `sk`
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


class SinkReader:
    """A run's records in an event sink, read partition by partition from the last `sk` seen."""

    def __init__(self, dynamodb: Any, table: str, stream_name: str, run_id: str) -> None:
        self._dynamodb, self._table, self._stream, self._run = dynamodb, table, stream_name, run_id
        self.after: dict[str, str] = {}  # pk -> the last sk read (exclusive lower bound)
        self.positions: dict[int, list[str]] = {}  # seq -> every "pk|sk" it was found at
        self.first_seen: dict[int, float] = {}
        self.queries = 0
        self.items_read = 0

    def add_shard(self, shard_id: str, from_sequence: str | None = None) -> None:
        """Read `shard_id`'s partition from `from_sequence` (inclusive), or from its start."""
        # "0..seq" sorts just before "0..seq#000000"; " " before every key (DynamoDB refuses "")
        start = from_sequence.zfill(SEQUENCE_DIGITS) if from_sequence else " "
        self.after.setdefault(f"{self._stream}#{shard_id}", start)  # a partition's start is set once

    def poll(self) -> None:
        """Query every partition for what is new since the last poll."""
        now = time.time()
        for pk in list(self.after):
            query: dict[str, Any] = {
                "TableName": self._table,
                "KeyConditionExpression": "pk = :pk AND sk > :after",
                "ExpressionAttributeValues": {":pk": {"S": pk}, ":after": {"S": self.after[pk]}},
                "ProjectionExpression": "sk, #data",
                "ExpressionAttributeNames": {"#data": "data"},
                "ConsistentRead": True,
            }
            while True:
                page = self._dynamodb.query(**query)
                self.queries += 1
                for item in page["Items"]:
                    self.items_read += 1
                    self.after[pk] = item["sk"]["S"]
                    fields = parse_payload(item.get("data", {}).get("B", b""))
                    if fields is None or fields["run"] != self._run:
                        continue
                    self.positions.setdefault(fields["seq"], []).append(f"{pk}|{item['sk']['S']}")
                    self.first_seen.setdefault(fields["seq"], now)
                if "LastEvaluatedKey" not in page:
                    break
                query["ExclusiveStartKey"] = page["LastEvaluatedKey"]


def read_counts(dynamodb: Any, table: str, keys: Iterable[str]) -> dict[str, int]:
    """The counter table's `count` for each of `keys` (absent: 0), by BatchGetItem."""
    counts: dict[str, int] = {}
    keys = list(keys)
    for start in range(0, len(keys), 100):
        request = {
            table: {
                "Keys": [{"partitionKey": {"S": key}} for key in keys[start : start + 100]],
                "ConsistentRead": True,
            }
        }
        while request:
            answer = dynamodb.batch_get_item(RequestItems=request)
            for item in answer["Responses"].get(table, []):
                counts[item["partitionKey"]["S"]] = int(item.get("count", {}).get("N", "0"))
            request = answer.get("UnprocessedKeys") or {}
    return counts


class DeadLetterReader:
    """The run's letters in a group's DLQ, read without consuming them (their visibility is restored)."""

    def __init__(self, sqs: Any, url: str, run_id: str) -> None:
        self._sqs, self._url, self._run = sqs, url, run_id
        self.depth = 0
        self.letters: dict[int, dict[str, Any]] = {}  # seq -> the letter (deduplicated by its id)
        self._read_at_depth = 0

    def poll(self) -> None:
        names = ["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]
        attributes = self._sqs.get_queue_attributes(QueueUrl=self._url, AttributeNames=names)["Attributes"]
        self.depth = sum(int(attributes.get(name, 0)) for name in names)
        if self.depth != self._read_at_depth:
            self._read_all()
            self._read_at_depth = self.depth

    def _read_all(self) -> None:
        handles: list[str] = []
        try:
            while True:
                messages = self._sqs.receive_message(
                    QueueUrl=self._url, MaxNumberOfMessages=10, VisibilityTimeout=20, WaitTimeSeconds=0
                ).get("Messages", [])
                if not messages:
                    break
                for message in messages:
                    handles.append(message["ReceiptHandle"])
                    self._keep(message["Body"])
        finally:
            for start in range(0, len(handles), 10):
                entries = [
                    {"Id": str(i), "ReceiptHandle": h, "VisibilityTimeout": 0}
                    for i, h in enumerate(handles[start : start + 10])
                ]
                self._sqs.change_message_visibility_batch(QueueUrl=self._url, Entries=entries)

    def _keep(self, body: str) -> None:
        try:
            letter = json.loads(body)
            data = base64.b64decode(letter["data"]) if letter.get("data") else b""
        except (ValueError, TypeError, KeyError):
            return
        fields = parse_payload(data)
        if fields is not None and fields["run"] == self._run:
            self.letters.setdefault(fields["seq"], letter | {"_data": data})


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
    unacknowledged: list[int] = field(default_factory=list)  # in the sink although the API said failed
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
        problems = (self.lost, self.duplicated, self.wrong_counts, self.dead_lettered)
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
        return bool(checked) and all(g.ok for g in checked) and not self.report.failed

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
            f"{len(self.report.failed):,} failed to send, {self.report.accepted_per_second:,.0f}/s"
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
        for shard_id, sequence in positions:  # ascending: each shard's partition starts at its lowest
            self.sink.add_shard(shard_id, str(sequence))
        self.dlq = (
            DeadLetterReader(client("sqs", endpoint_url), group.dlq_url, report.run_id)
            if group.dlq_url
            else None
        )
        self.counts: dict[str, int] = {}
        self.result = GroupResult(group, expected=len(report.accepted))

    def poll(self, shard_ids: Iterable[str]) -> None:
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
            result.processed = sum(self.counts.values()) + len(letters & set(self.report.accepted))
        if result.done_at is None and (self.group.kind == "unknown" or result.processed >= result.expected):
            result.done_at = time.time()
            result.drain_s = max(0.0, result.done_at - self.report.finished)

    def conclude(self) -> GroupResult:
        """Compare what the readers found with what the API accepted."""
        result, report = self.result, self.report
        letters = self.dlq.letters if self.dlq else {}
        poison = {seq for seq, record in report.accepted.items() if record.poison}
        for seq in sorted(poison):
            letter = letters.get(seq)
            record = report.accepted[seq]
            if letter is None:
                result.poison_missing.append(seq)
            elif letter["_data"] == payload(report.run_id, seq, record.post_time, report.size, True) and (
                letter.get("partitionKey") == record.key
            ):
                result.poison_whole += 1
            else:
                result.poison_altered.append(seq)
        result.dead_lettered = sorted(set(letters) - poison)
        if self.group.kind == "records":
            seen = self.sink.positions
            result.lost = sorted(set(report.accepted) - set(seen) - set(letters) - poison)
            result.duplicated = {seq: len(found) for seq, found in sorted(seen.items()) if len(found) > 1}
            result.unacknowledged = sorted(set(seen) - set(report.accepted))
            result.poison_in_sink = sorted(poison & set(seen))
            latencies = [
                self.sink.first_seen[seq] - report.accepted[seq].post_time
                for seq in seen
                if seq in report.accepted
            ]
            if latencies:
                result.latency_s = {
                    "p50": round(_percentile(latencies, 0.50), 3),
                    "p99": round(_percentile(latencies, 0.99), 3),
                    "max": round(max(latencies), 3),
                }
        elif self.group.kind == "counter":
            expected = report.expected_counts()
            for key in sorted(set(expected) | {k for k, n in self.counts.items() if n}):
                if self.counts.get(key, 0) != expected.get(key, 0):
                    result.wrong_counts[key] = (expected.get(key, 0), self.counts.get(key, 0))
        return result


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
    watches = [_Watch(group, report, endpoint_url) for group in consumer_groups(app, stream_name)]
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
                watch.poll(shard_ids)
            if live:
                live.update(_progress_line(watches, time.monotonic() - started))
            if all(watch.result.done_at is not None for watch in watches):
                break
            if time.monotonic() >= deadline:
                timed_out = True
                break
            time.sleep(poll_interval)
        for watch in watches:  # one more read: a duplicate may land after the last record's first copy
            watch.poll(shard_ids)
    finally:
        if live:
            live.stop()
    return Verdict(report, [watch.conclude() for watch in watches], poll_interval, timed_out)


def _progress_line(watches: list[_Watch], elapsed: float) -> Text:
    parts = [
        f"{w.group.name}: {w.result.processed:,}/{w.result.expected:,}"
        + (f" (DLQ {w.result.dlq_depth})" if w.result.dlq_depth else "")
        for w in watches
    ]
    return Text(f"waiting for the consumers: {'  '.join(parts)}  {elapsed:,.1f} s")
