"""The end of `send`: wait until every consumer group has processed a run's records, then say where they went.

    verdict = wait_and_verify("http://127.0.0.1:4566", app, report)
    print(render(verdict)); sys.exit(0 if verdict.ok else 1)   # render: local.commands.verify_render

This module waits and reads; the verdict it returns is data (`local.commands.verify_verdict`), the
readers of sinks, DLQs and the stream are `local.commands.verify_readers`.

A consumer group is a function with `SINK_TABLE` in its environment, on the stream the records were
sent to (its event-source mapping). What its sink is, is read from the table's key schema, not from
names: `pk`/`sk` is an event sink (one item per user record, carrying the record's `recordId`:
checked for exactly-once, records lost or duplicated, latency); a lone `partitionKey` hash key is a
counter (checked for exact per-key counts). Its `DLQ_URL` is read for dead letters of the run: an
event sink's poison records (over a DynamoDB item) must be there, whole (the data byte for byte,
the partition key), and nothing else; a counter counts poison records like the others, and its DLQ
must hold none of the run's.

By identity, record by record: every accepted record (its id) is in each event sink exactly once,
with its own `recordId`, and counted exactly once; every refused record is in no sink and not in
the stream. A run sent without ids claims less for a re-posted record (one a post of which may
have been written, `SendReport.reposted`): at least once, and at most once per post.

Then the stream itself is read (`StreamReader`): every accepted record must be in the Kinesis record
at the sequence number the API answered (no success without Kinesis's word), and the Kinesis-level
duplicates are counted — copies of one aggregate id (the producer resent it after a lost reply) and
records that reached the stream in more than one aggregate (a client's re-post). Under lost replies
they are above zero: it is the consumers' dedup, not luck, that keeps the sinks exact.

The sinks are read incrementally: each partition `<stream>#<shard>` is queried with `sk` greater
than the last item seen, starting at the first record the shard took after the run began (an
aggregate's first copy, which the consumers apply, may precede the copy the API answered with), so
a poll reads only what is new. Latency is POST (the time in the payload) to the poll that first saw
the record: its resolution is the poll interval, reported with it.
"""

from __future__ import annotations

import datetime
import time
from collections import Counter
from collections.abc import Iterable
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError
from rich.console import Console
from rich.live import Live

from ..app import environments, model
from ..app.provision import client
from .send import SendReport
from .verify_readers import (
    DeadLetterReader,
    SinkReader,
    StreamCopies,
    StreamReader,
    read_counts,
)
from .verify_render import progress_line
from .verify_verdict import Group, GroupResult, StreamResult, Verdict

POLL_INTERVAL_S = 0.5
#: Read the stream and the sinks from this long before the run began (the clocks are one machine's).
SINCE_SLACK_S = 2.0
#: Records lost or applied twice whose copies in the stream the verdict lists, at most.
WATCHED = 50


def _sink_kind(resource: model.Resource | None) -> str:
    schema = {
        key["AttributeName"]: key["KeyType"]
        for key in (resource.properties if resource else {}).get("KeySchema", [])
    }
    if schema == {"pk": "HASH", "sk": "RANGE"}:
        return "records"
    if schema == {"partitionKey": "HASH"}:
        return "counter"
    return "unchecked"


def physical_stream(app: model.LocalApp, route: str) -> str:
    """The Kinesis stream behind the API's `route` (the producer's SHARDLINE_STREAMS), else `route`."""
    for function in app.functions:
        routes = environments.routes(function)
        if route in routes:
            return routes[route].stream_name
    return app.streams[0].name if len(app.streams) == 1 else route


def consumer_groups(app: model.LocalApp, stream_name: str) -> list[Group]:
    """The functions with a SINK_TABLE whose event-source mapping reads `stream_name`."""
    tables = {r.name: r for r in app.resources if r.type == "AWS::DynamoDB::Table"}
    groups = []
    for function in app.functions:
        env = environments.consumer(function)
        mapped = {m.stream_name for m in app.mappings if m.function_name == function.name}
        if env is not None and env.sink_table is not None and stream_name in mapped:
            kind = _sink_kind(tables.get(env.sink_table))
            groups.append(
                Group(env.group, function.name, kind, env.sink_table, stream_name, env.dlq_url or "")
            )
    return groups


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
        refused_in_stream=sorted(
            seq for seq in report.failed if copies.in_stream(seq) and seq not in report.reposted
        ),
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
        self, group: Group, report: SendReport, endpoint_url: str, starts: dict[str, str | None]
    ) -> None:
        self.group, self.report = group, report
        self.dynamodb = client("dynamodb", endpoint_url)
        expected = report.id_of if report.ids else None
        self.sink = SinkReader(self.dynamodb, group.sink_table, group.stream_name, report.run_id, expected)
        for shard_id, sequence in starts.items():
            self.sink.add_shard(shard_id, sequence)
        self.dlq = (
            DeadLetterReader(client("sqs", endpoint_url), group.dlq_url, report.run_id)
            if group.dlq_url
            else None
        )
        self.counts: dict[str, int] = {}
        self.result = GroupResult(group, expected=len(report.accepted))

    def poll(self, shard_ids: Iterable[str]) -> None:
        """Read what is new."""
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
        if result.done_at is None and (self.group.kind == "unchecked" or result.processed >= result.expected):
            result.done_at = time.time()
            result.drain_s = max(0.0, result.done_at - self.report.finished)

    def conclude(self) -> GroupResult:
        """Compare what the readers found with what the API answered, record by record."""
        result, report = self.result, self.report
        letters = self.dlq.letters if self.dlq else {}
        # Without ids, a re-posted record may be applied once per post that may have been written.
        extra = {} if report.ids else report.reposted
        if self.group.kind == "records":
            poison = {seq for seq, record in report.accepted.items() if record.poison}
            self._check_poison(poison, letters)
            result.dead_lettered = sorted(set(letters) - poison)
            seen = self.sink.positions
            result.lost = sorted(set(report.accepted) - set(seen) - set(letters) - poison)
            result.duplicated = {
                seq: len(found) for seq, found in sorted(seen.items()) if len(found) > 1 + extra.get(seq, 0)
            }
            result.duplicated_at = {seq: seen[seq] for seq in list(result.duplicated)[:WATCHED]}
            result.refused_present = sorted(seq for seq in set(seen) & set(report.failed) if seq not in extra)
            result.reposted_present = len(set(seen) & set(report.reposted))
            result.poison_in_sink = sorted(poison & set(seen))
            result.wrong_ids = dict(sorted(self.sink.wrong_ids.items()))
            result.latency_s = _latencies(self.sink.first_seen, report)
        elif self.group.kind == "counter":
            result.dead_lettered = sorted(letters)  # a counter takes every record, poison too
            expected = report.expected_counts()
            maybe: Counter[str] = Counter()
            for seq, posts in extra.items():
                maybe[report.partition_key_of(seq)] += posts
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
) -> Verdict:
    """Poll every consumer group of the report's stream until it has processed every accepted record
    (or `timeout` seconds pass), then compare: lost, duplicated, counts, ids, dead letters, latency,
    drain; and (`stream`) read the stream: positions, Kinesis-level duplicates."""
    stream_name = physical_stream(app, report.stream)
    groups = consumer_groups(app, stream_name)
    starts = run_starts(endpoint_url, stream_name, report.started - SINCE_SLACK_S)
    watches = [_Watch(group, report, endpoint_url, starts) for group in groups]
    deadline = time.monotonic() + timeout
    console = Console(stderr=True)
    live = Live(console=console, refresh_per_second=4) if progress and console.is_terminal else None
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
    results = [watch.conclude() for watch in watches]
    odd = sorted({seq for r in results for seq in [*r.lost, *r.duplicated, *r.refused_present]})[:WATCHED]
    copies = (
        read_stream(endpoint_url, stream_name, report, odd)
        if stream
        else StreamResult(read=False, error="off")
    )
    return Verdict(report, results, poll_interval, timed_out, copies)
