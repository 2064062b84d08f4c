"""The end of `send`: wait until every consumer group has settled a run's records, then say where they went.

    verdict = wait_and_verify("http://127.0.0.1:4566", app, report)
    print(render(verdict)); sys.exit(0 if verdict.ok else 1)   # render: local.commands.verify_render

This module waits and reads; the verdict it returns is data (`local.commands.verify_verdict`), the
readers of sinks, DLQs and the stream are `local.commands.verify_readers`.

Which consumer groups are checked, and how, is what each declares its sinks hold
(`SHARDLINE_SINKS`; `local.commands.verify_groups` says how to declare): a `records` sink is checked
by identity (every accepted record's id exactly once: lost, duplicated, latency), a `counts` sink
for exact per-key counts, and a group that declares nothing (or has no sink) by lag and errors
(`local.commands.verify_lag`: caught up with every shard the run wrote to, no function error, no
healthy record dead-lettered, nothing in its on-failure queue from the run). Its `DLQ_URL` is read
for dead letters of the run: an event sink's poison records (over a DynamoDB item) must be there,
whole (the data byte for byte, the partition key), and nothing else; a counter counts poison
records like the others, and its DLQ must hold none of the run's.

By identity, record by record: every accepted record (its id) is in each event sink exactly once,
with its own `recordId`, and counted exactly once; every refused record is in no sink and not in
the stream; an unconfirmed one (given up after a post that may have landed) in each sink and count
at most once. A run sent without ids claims less for a re-posted record (one a post of which may
have been written, `SendReport.reposted`): at least once, and at most once per post.

Each group's records are told apart (`verify_verdict`): applied, dead-lettered (the run's letters in
its DLQ, grouped by the cause the dead letter gives) and missing; the DLQ's letters of earlier runs
are not this run's. A run whose data is the user's (a template, a file) is known by its ids alone:
in the sinks, the dead letters (`recordId`) and the stream (a KPL aggregate's record ids).

Then the stream itself is read (`StreamReader`): every accepted record must be in the Kinesis record
at the sequence number the API answered (no success without Kinesis's word), and the Kinesis-level
duplicates are counted — copies of one aggregate id (the producer resent it after a lost reply) and
records that reached the stream in more than one aggregate (a client's re-post). Under lost replies
they are above zero: it is the consumers' dedup, not luck, that keeps the sinks exact.

A `pk`/`sk` records sink (the event-sink layout) is read incrementally: each partition
`<stream>#<shard>` is queried with `sk` greater than the last item seen, starting at the first
record the shard took after the run began (an
aggregate's first copy, which the consumers apply, may precede the copy the API answered with), so
a poll reads only what is new; items keyed by a record's client id (`id#<id>`) are fetched by
BatchGetItem, each found once and not asked for again. Latency is POST (the time in the payload)
to the poll that first saw the record: its resolution is the poll interval, reported with it.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import time
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError
from rich.console import Console
from rich.live import Live

from shardline.kpl._identity import NO_CALLER_SCOPE, caller_scope

from ..app import environments, model
from ..app.provision import client
from .send import SendReport
from .send_progress import Display
from .verify_groups import consumer_groups
from .verify_lag import LagReader, OnFailureReader
from .verify_readers import (
    DeadLetterReader,
    ScanSinkReader,
    SinkReader,
    StreamCopies,
    StreamReader,
    read_counts,
)
from .verify_render import progress_line
from .verify_verdict import (
    CAUSE_IDS,
    COUNTER,
    LAG,
    RECORDS,
    DeadLetterCause,
    Group,
    GroupResult,
    StreamResult,
    Verdict,
    dead_letter_cause,
)

__all__ = ["consumer_groups", "physical_stream", "read_stream", "run_starts", "wait_and_verify"]

#: A function's errors since the run began (None: not known), by function name.
FunctionErrors = Callable[[str], int | None]

POLL_INTERVAL_S = 0.5
#: Read the stream and the sinks from this long before the run began (the clocks are one machine's).
SINCE_SLACK_S = 2.0
#: Records lost or applied twice whose copies in the stream the verdict lists, at most.
WATCHED = 50
#: The scopes a run's ids are keyed under in an event sink: the local credentials' principal (the
#: caller the producer function stamps on what `send` signs with them), and "-" (no caller stamped).
SENDER_SCOPES = (caller_scope(f"arn:aws:iam::{model.ACCOUNT}:root"), NO_CALLER_SCOPE)


def physical_stream(app: model.LocalApp, route: str) -> str:
    """The Kinesis stream behind the API's `route` (the producer's SHARDLINE_STREAMS), else `route`."""
    for function in app.functions:
        routes = environments.routes(function)
        if route in routes:
            return routes[route].stream_name
    return app.streams[0].name if len(app.streams) == 1 else route


def _stream_result(copies: StreamCopies, report: SendReport) -> StreamResult:
    result = StreamResult(
        kinesis_records=copies.kinesis_records,
        user_records=copies.user_records,
        aggregate_copies=copies.aggregate_copies,
        records_in_aggregate_copies=copies.records_in_aggregate_copies,
        reposted_records=copies.records_reposted,
        reposted_copies=copies.reposted_copies,
        records_twice=copies.records_twice,
        without_aggregate_id=copies.without_aggregate_id,
        undecodable=copies.undecodable,
        unbacked=sorted(seq for seq in report.accepted if not copies.backed[seq]),
        refused_in_stream=sorted(seq for seq in report.failed if copies.in_stream(seq)),
        wrong_ids=copies.wrong_ids,
        where=copies.where,
        duplicates=sum(n - 1 for n in copies.copies if n > 1),
    )
    return result


def _percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(fraction * len(ordered)) - 1))]


class _Watch:
    """The readers of one group, and its result as it stands."""

    def __init__(
        self,
        group: Group,
        report: SendReport,
        endpoint_url: str,
        starts: dict[str, str | None],
        function_errors: FunctionErrors | None = None,
    ) -> None:
        self.report, self.function_errors = report, function_errors
        self.dynamodb = client("dynamodb", endpoint_url)
        expected = report.id_of if report.ids else None
        seq_of_id = report.seq_of_id()
        self.sink: SinkReader | ScanSinkReader | None = None
        if group.kind == RECORDS and group.incremental:
            self.sink = SinkReader(
                self.dynamodb, group.sink_table, group.stream_name, report.run_id, expected,
                id_attribute=group.id_attribute, seq_of_id=seq_of_id, scopes=SENDER_SCOPES,
            )  # fmt: skip
            for shard_id, sequence in starts.items():
                self.sink.add_shard(shard_id, sequence)
        elif group.kind == RECORDS and report.ids:
            self.sink = ScanSinkReader(self.dynamodb, group.sink_table, group.id_attribute, seq_of_id)
        elif group.kind == RECORDS:  # no ids to know the run's items by
            group = dataclasses.replace(
                group, kind=LAG, source="records sink, run without ids: checked by lag and errors only"
            )
        self.group = group
        self.lag = (
            LagReader(self.dynamodb, group.lease_table, group.stream_name, report)
            if group.kind == LAG
            else None
        )
        self.dlq = (
            DeadLetterReader(client("sqs", endpoint_url), group.dlq_url, report.run_id, seq_of_id)
            if group.dlq_url
            else None
        )
        self.on_failure = (
            OnFailureReader(
                client("sqs", endpoint_url),
                model.queue_url(endpoint_url, group.on_failure_queue),
                model.stream_arn(group.stream_name),
                since=report.started - SINCE_SLACK_S,
            )
            if group.on_failure_queue
            else None
        )
        self.counts: dict[str, int] = {}
        self.result = GroupResult(group, expected=len(report.accepted))

    def poll(self, shard_ids: Iterable[str], *, thorough: bool = False) -> None:
        """Read what is new (`thorough`: every record not found yet, whatever it costs)."""
        result, group = self.result, self.group
        if self.dlq is not None:
            self.dlq.poll()
            result.dlq_queue_depth = self.dlq.depth
        if self.on_failure is not None:
            self.on_failure.poll()
        accepted = set(self.report.accepted)
        letters = set(self.dlq.letters) & accepted if self.dlq else set()
        result.dlq_depth = len(letters)  # the run's: earlier runs' letters are not this run's
        if isinstance(self.sink, SinkReader):
            for shard_id in shard_ids:  # shards no answer named (a child after a split): from their start
                self.sink.add_shard(shard_id)
        if self.sink is not None:
            self.sink.poll(thorough=thorough)
            result.applied = len(set(self.sink.positions) & accepted)
            result.queries, result.items_read = self.sink.queries, self.sink.items_read
        elif group.kind == COUNTER:
            self.counts = read_counts(
                self.dynamodb,
                group.sink_table,
                self.report.key_names(),
                group.key_attribute,
                group.count_attribute,
            )
            result.applied = sum(self.counts.values())
        elif self.lag is not None:
            self.lag.poll()
            # a checkpoint passes a dead-lettered record too: passed, less the run's dead letters
            result.applied, result.queries = max(0, self.lag.processed - len(letters)), self.lag.queries
        settled = result.applied + len(
            letters - set(self.sink.positions) if self.sink is not None else letters
        )
        drained = not self.lag.behind if self.lag is not None else settled >= result.expected
        if result.done_at is None and drained:
            result.done_at = time.time()
            result.drain_s = max(0.0, result.done_at - self.report.finished)

    def conclude(self) -> GroupResult:
        """Compare what the readers found with what the API answered, record by record."""
        result, report = self.result, self.report
        letters = {
            seq: letter
            for seq, letter in (self.dlq.letters if self.dlq else {}).items()
            if seq in report.accepted
        }
        result.dead_letter_causes = _causes(letters, report)
        result.on_failure = len(self.on_failure.messages) if self.on_failure else 0
        # Without ids, a re-posted record may be applied once per post that may have been written.
        extra = {} if report.ids else report.reposted
        if self.sink is not None:
            # Poison records (450 KiB) are over a DynamoDB item in the event-sink layout, which keeps
            # their data: there they must be in the DLQ. Another records sink may hold them.
            poison = (
                {seq for seq, r in report.accepted.items() if r.poison} if self.group.incremental else set()
            )
            self._check_poison(poison, letters)
            result.dead_lettered = sorted(set(letters) - poison)
            seen = self.sink.positions
            result.lost = sorted(set(report.accepted) - set(seen) - set(letters) - poison)
            result.duplicated = {
                seq: len(found) for seq, found in sorted(seen.items()) if len(found) > 1 + extra.get(seq, 0)
            }
            result.duplicated_at = {seq: seen[seq] for seq in list(result.duplicated)[:WATCHED]}
            result.refused_present = sorted(set(seen) & set(report.failed))
            result.reposted_present = len(set(seen) & set(report.reposted))
            result.poison_in_sink = sorted(poison & set(seen))
            result.wrong_ids = dict(sorted(self.sink.wrong_ids.items()))
            result.latency_s = _latencies(self.sink.first_seen, report)
        elif self.group.kind == COUNTER:
            result.dead_lettered = sorted(letters)  # a counter takes every record, poison too
            expected = report.expected_counts()
            maybe: Counter[str] = Counter()
            for seq, posts in extra.items():
                maybe[report.partition_key_of(seq)] += posts
            if report.ids:  # an unconfirmed record may have landed: once, by its id
                maybe.update(report.partition_key_of(seq) for seq in report.unconfirmed)
            for key in sorted(set(expected) | {k for k, n in self.counts.items() if n}):
                counted, low = self.counts.get(key, 0), expected.get(key, 0)
                if not low <= counted <= low + maybe.get(key, 0):
                    result.wrong_counts[key] = (low, counted)
        elif self.lag is not None:
            result.behind = dict(self.lag.behind)
            poison = {seq for seq, r in report.accepted.items() if r.poison}
            result.dead_lettered = sorted(set(letters) - poison)  # a poison record may be refused
            if self.function_errors is not None:
                result.function_errors = self.function_errors(self.group.function)
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


def _causes(letters: dict[int, dict[str, Any]], report: SendReport) -> dict[str, DeadLetterCause]:
    """The run's dead letters grouped by cause, most frequent first, with a few record ids each."""
    causes: dict[str, DeadLetterCause] = {}
    for seq, letter in sorted(letters.items()):
        cause = causes.setdefault(dead_letter_cause(letter), DeadLetterCause())
        cause.count += 1
        cause.poison += report.accepted[seq].poison
        if len(cause.ids) < CAUSE_IDS:
            cause.ids.append(letter.get("recordId") or report.id_of(seq) or f"seq {seq}")
    return dict(sorted(causes.items(), key=lambda item: -item[1].count))


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


def _kinesis(endpoint_url: str) -> Any:
    return client("kinesis", endpoint_url, retries={"max_attempts": 1})


def _shard_ids(endpoint_url: str, stream_name: str) -> list[str]:
    """Every shard of the stream (children of a split included); none if the endpoint cannot say."""
    try:
        return [
            shard["ShardId"] for shard in _kinesis(endpoint_url).list_shards(StreamName=stream_name)["Shards"]
        ]
    except (ClientError, BotoCoreError):
        return []


def run_starts(endpoint_url: str, stream_name: str, since: float) -> dict[str, str | None]:
    """Per shard, the sequence number of the first record it took at or after `since` (epoch s), or
    None (read the shard's sink partition from its start): where the run's items can begin."""
    kinesis = _kinesis(endpoint_url)
    moment = datetime.datetime.fromtimestamp(since, datetime.UTC)
    starts: dict[str, str | None] = {}
    for shard_id in _shard_ids(endpoint_url, stream_name):
        try:
            iterator = kinesis.get_shard_iterator(
                StreamName=stream_name, ShardId=shard_id, ShardIteratorType="AT_TIMESTAMP", Timestamp=moment
            )["ShardIterator"]
            records = kinesis.get_records(ShardIterator=iterator, Limit=1)["Records"]
        except (ClientError, BotoCoreError):
            records = []
        starts[shard_id] = records[0]["SequenceNumber"] if records else None
    return starts


def read_stream(
    endpoint_url: str, stream_name: str, report: SendReport, watch: Iterable[int] = ()
) -> StreamResult:
    """The stream's copies of the run's records (`StreamReader`), as a `StreamResult`; the copies of
    the records in `watch` are noted (`StreamResult.where`)."""
    positions = {
        seq: (record.shard_id, record.sequence_number)
        for seq, record in report.accepted.items()
        if record.shard_id and record.sequence_number
    }
    reader = StreamReader(
        client("kinesis", endpoint_url, retries={"max_attempts": 1}),
        stream_name,
        report.run_id,
        report.count,
        positions,
        report.id_of,
        since=report.started - SINCE_SLACK_S,
        watch=watch,
        seq_of_id=report.seq_of_id(),
    )
    try:
        return _stream_result(reader.read(), report)
    except (ClientError, BotoCoreError) as error:
        return StreamResult(read=False, error=f"{type(error).__name__}: {error}"[:200])


def wait_and_verify(
    endpoint_url: str,
    app: model.LocalApp,
    report: SendReport,
    *,
    timeout: float = 300,
    progress: bool = True,
    poll_interval: float = POLL_INTERVAL_S,
    stream: bool = True,
    function_errors: FunctionErrors | None = None,
    display: Display | None = None,
) -> Verdict:
    """Poll every consumer group of the report's stream until it has settled every accepted record
    (applied it, or dead-lettered it) or `timeout` seconds pass, then compare: lost, duplicated,
    counts, ids, dead letters, latency, drain, lag; and (`stream`) read the stream: positions,
    Kinesis-level duplicates. `function_errors` says how many errors a function had since the run
    began (a group checked by lag must have none). `display` shows each group's progress
    (`local.commands.send_progress`) instead of the live line."""
    stream_name = physical_stream(app, report.stream)
    groups = consumer_groups(app, stream_name)
    starts = run_starts(endpoint_url, stream_name, report.started - SINCE_SLACK_S)
    watches = [_Watch(group, report, endpoint_url, starts, function_errors) for group in groups]
    deadline = time.monotonic() + timeout
    console = Console(stderr=True)
    shown = progress and console.is_terminal and display is None
    live = Live(console=console, refresh_per_second=4) if shown else None
    started = time.monotonic()
    timed_out = False
    shard_ids: list[str] = []
    if live:
        live.start()
    try:
        while True:
            shard_ids = _shard_ids(endpoint_url, stream_name)
            for watch in watches:
                watch.poll(shard_ids)
            if live:
                live.update(progress_line([w.result for w in watches], time.monotonic() - started))
            if display is not None:
                display.applying([w.result for w in watches], time.monotonic() - started)
            if all(watch.result.done_at is not None for watch in watches):
                break
            if time.monotonic() >= deadline:
                timed_out = True
                break
            time.sleep(poll_interval)
        for watch in watches:  # one more read: a duplicate may land after the last record's first copy
            watch.poll(shard_ids, thorough=True)
        if display is not None:
            display.applying([w.result for w in watches], time.monotonic() - started, final=True)
    finally:
        if live:
            live.stop()
    results = [watch.conclude() for watch in watches]
    odd = sorted({seq for r in results for seq in [*r.lost, *r.duplicated, *r.refused_present]})[:WATCHED]
    copies = (
        read_stream(endpoint_url, stream_name, report, odd)
        if stream
        else StreamResult(read=False, error="off")
    )
    denied = access_denied(endpoint_url, since=report.started - SINCE_SLACK_S)
    return Verdict(report, results, poll_interval, timed_out, copies, denied)


def access_denied(endpoint_url: str, *, since: float) -> list[dict[str, Any]]:
    """The endpoint's denials since `since` (epoch s), oldest first (`local.iam.enforcer`)."""
    try:
        with urllib.request.urlopen(f"{endpoint_url}/_shardline/iam", timeout=30) as response:
            iam = json.load(response)
    except OSError:
        return []
    return [denial for denial in iam.get("denials", {}).get("recent", []) if denial["at"] >= since]
