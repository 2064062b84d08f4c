"""The cost benchmark's baseline (bench/baseline: the pipeline built the usual way, without shardline)
under the local runtime: synthesized offline, started from its cloud assembly, driven by `send`
through its API unchanged, and judged by `send`'s verdict from what its consumer declares
(`SHARDLINE_SINKS`); then its tables and on-failure queue are read here, not through the verdict.

Its stream holds each record as a Kinesis record of its own, with no aggregate to carry the record's
id: the verdict knows such a record by its payload, and the whole verdict holds.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import boto3
import pytest

from bench.baseline.app import build
from local.commands.send import SendReport, send
from local.commands.verify import wait_and_verify
from local.commands.verify_render import render
from local.commands.verify_verdict import Verdict
from local.runtime import Runtime
from tests.support.runtime import start_runtime

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(600)]

RECORDS, KEYS = 400, 20


@pytest.fixture(scope="module")
def baseline(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Runtime]:
    outdir = tmp_path_factory.mktemp("baseline.out")
    app, _ = build(str(outdir), shards=2)
    app.synth()
    runtime = start_runtime(outdir, tmp_path_factory.mktemp("logs"))
    try:
        yield runtime
    finally:
        runtime.stop()


def aws(service: str, runtime: Runtime) -> Any:
    return boto3.client(service, endpoint_url=runtime.endpoint_url, region_name="us-east-1",
                        aws_access_key_id="test", aws_secret_access_key="test")  # fmt: skip


def table(runtime: Runtime, logical: str) -> str:
    (name,) = [
        r.name for r in runtime.app.resources if r.type == "AWS::DynamoDB::Table" and logical in r.name
    ]
    return name


def scan(runtime: Runtime, name: str) -> list[dict[str, Any]]:
    pages = aws("dynamodb", runtime).get_paginator("scan").paginate(TableName=name, ConsistentRead=True)
    return [item for page in pages for item in page["Items"]]


def processed(runtime: Runtime) -> int:
    """Records the consumer's mapping checkpointed past (after successful invocations)."""
    (shards,) = runtime.stats()["mappings"].values()
    return sum(shard.get("records", 0) for shard in shards.values())


@pytest.fixture(scope="module")
def first_run(baseline: Runtime) -> SendReport:
    return send(f"{baseline.api_url}/streams", "events", count=RECORDS, keys=KEYS, batch=100, progress=False)


@pytest.fixture(scope="module")
def first_verdict(baseline: Runtime, first_run: SendReport) -> Verdict:
    """The first run's verdict, once every group has drained it: what the tests after it read is
    there whichever of them runs alone (`-k`)."""
    return wait_and_verify(baseline.endpoint_url, baseline.app, first_run, timeout=300, progress=False)


def test_send_drives_it_unchanged_and_its_verdict_holds(
    baseline: Runtime, first_run: SendReport, first_verdict: Verdict
) -> None:
    report = first_run
    assert len(report.accepted) == RECORDS and not report.failed, report.as_dict()
    assert all(a.shard_id and a.sequence_number for a in report.accepted.values())
    verdict = first_verdict
    kinds = sorted((g.group.kind, g.group.source) for g in verdict.groups)
    assert kinds == [("counter", "declared"), ("records", "declared")], kinds
    assert all(g.ok for g in verdict.groups) and not verdict.timed_out, render(verdict)
    assert verdict.lost == 0 and verdict.duplicate_effects == 0
    stream = verdict.stream
    # Every accepted record in the stream, at the sequence number the API answered, as a Kinesis
    # record of its own (no aggregate: no id in the stream, none wrong).
    assert stream.read and not stream.unbacked and not stream.refused_in_stream and not stream.undecodable
    assert stream.kinesis_records == stream.user_records == stream.without_aggregate_id == RECORDS
    assert stream.aggregate_copies == stream.duplicates == 0
    assert stream.wrong_ids == 0 and verdict.ok


def test_its_tables_hold_each_record_once_and_exact_counts(
    baseline: Runtime, first_run: SendReport, first_verdict: Verdict
) -> None:
    """Read here: the events table (one item per record id, its data as sent), the counts table
    (the accepted records per key), the idempotency table (one COMPLETED record per record),
    and nothing in the on-failure queue."""
    report = first_run
    ids = {report.id_of(seq): seq for seq in report.accepted}
    events = scan(baseline, table(baseline, "EventsTable"))
    assert sorted(item["id"]["S"] for item in events) == sorted(ids)
    for item in events:
        seq = ids[item["id"]["S"]]
        assert item["data"]["B"] == report.payload_of(seq, report.accepted[seq].post_time)
        assert item["partitionKey"]["S"] == report.accepted[seq].key
    counts = {
        item["partitionKey"]["S"]: int(item["count"]["N"])
        for item in scan(baseline, table(baseline, "Counts"))
        if item["partitionKey"]["S"].startswith(report.run_id)
    }
    assert counts == dict(Counter(a.key for a in report.accepted.values()))
    assert len(counts) == KEYS
    guards = scan(baseline, table(baseline, "Idempotency"))
    assert len(guards) == RECORDS and {g["status"]["S"] for g in guards} == {"COMPLETED"}
    assert all(int(g["expiration"]["N"]) > 0 for g in guards)
    sqs = aws("sqs", baseline)
    (url,) = sqs.list_queues()["QueueUrls"]
    depth = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages"])
    assert depth["Attributes"]["ApproximateNumberOfMessages"] == "0"


def test_a_repost_with_the_same_ids_is_applied_once(
    baseline: Runtime, first_run: SendReport, first_verdict: Verdict
) -> None:
    """The same records posted again (the same run, so the same ids and keys): new Kinesis records,
    skipped by the idempotency utility — no new event item, no count moves."""
    before = processed(baseline)
    again = send(f"{baseline.api_url}/streams", "events", count=RECORDS, keys=KEYS, batch=100,
                 progress=False, run_id=first_run.run_id)  # fmt: skip
    assert len(again.accepted) == RECORDS
    deadline = time.monotonic() + 120
    while processed(baseline) < before + RECORDS:
        assert time.monotonic() < deadline, baseline.stats()["mappings"]
        time.sleep(0.5)
    events = scan(baseline, table(baseline, "EventsTable"))
    assert len(events) == RECORDS
    counts = Counter(
        {i["partitionKey"]["S"]: int(i["count"]["N"]) for i in scan(baseline, table(baseline, "Counts"))}
    )
    assert counts == Counter(a.key for a in first_run.accepted.values())
    assert len(scan(baseline, table(baseline, "Idempotency"))) == RECORDS
