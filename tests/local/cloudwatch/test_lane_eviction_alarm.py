"""Issue 39, property 8: the lane bound is visible. A shard written by more producer lanes than the
applied-aggregate state holds (`MAX_STATE_BYTES`) evicts lanes; `KinesisConsumer` counts them
(`DedupLanesEvicted`), the consumer function publishes the count as EMF, and the app's alarm on it
(`<group>DedupLanesEvicted`) goes to ALARM on the local runtime's `/_dashboard`, as CloudWatch would
evaluate it, with the count drawn on the group's dashboard widget.

The world here: 5,000 producer incarnations (one lane each, 16-character ids as `new_producer_id`
draws them) write one aggregate each into one shard within the dedup horizon; the consumer runs
through the mapping's batches on the testing kit's lease table. Left out: Kinesis itself (the
events are built as the mapping hands them)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from local._http import HttpRequest
from local.app.template import load
from local.cloudwatch.emf import extract
from local.cloudwatch.monitor import Monitor
from shardline.consumer import KinesisConsumer
from shardline.consumer._dedup import DEDUP_HORIZON_S, MAX_STATE_BYTES, AppliedAggregates
from shardline.kinesis import UserRecord
from shardline.kpl._identity import AggregateId
from shardline.testing import SEQUENCE_STEP, InMemoryLeaseTable, MappingReplay, kinesis_event
from shardline.testing._events import FIRST_SEQUENCE
from tests.support.consumer_identity import ARRIVAL, PARENT, counting_sink

NOW = 1_800_000_000.0
GROUP = "key-counter"


def lanes_event(first: int, count: int, *, start: float) -> list[dict[str, Any]]:
    """`count` Kinesis records into one shard, each one aggregate of a producer of its own (ids
    `first`..), arriving a tenth of a second apart from `start` (all within the dedup horizon)."""
    records: list[dict[str, Any]] = []
    for n in range(first, first + count):
        aggregate = AggregateId(f"{n:016x}", "0", 1, 1).encode()
        [record] = kinesis_event(
            [UserRecord(f"k{n}", f"r{n}".encode())],
            shard_id=PARENT,
            aggregate_ids=[aggregate],
            first_sequence=FIRST_SEQUENCE + n * SEQUENCE_STEP,
            arrival=start + (n - first) / 10,
        )["Records"]
        records.append(record)
    assert (count - 1) / 10 < DEDUP_HORIZON_S
    return records


def consumer_emf(snapshot: dict[str, Any], since: dict[str, Any] | None, at: float) -> dict[str, Any]:
    """The EMF line the group's function logs for an invocation (`ConsumerFunction.handle`:
    Powertools' Metrics, its service and ConsumerGroup dimension, fed by `publish_metrics`)."""
    from aws_lambda_powertools import Metrics

    from shardline.aws_lambda._emf import publish_metrics

    metrics = Metrics(namespace="shardline/dev", service=f"shardline-{GROUP}")
    metrics.add_dimension(name="ConsumerGroup", value=GROUP)
    try:
        publish_metrics(metrics, snapshot, since=since)
        line: dict[str, Any] = json.loads(json.dumps(metrics.serialize_metric_set()))
    finally:
        metrics.clear_metrics()
    line["_aws"]["Timestamp"] = int(at * 1000)
    return line


def test_property_8_lane_evictions_are_counted_and_alarmed_on_the_dashboard(cdk_out: Path, tmp_path) -> None:
    table = InMemoryLeaseTable()
    consumer = KinesisConsumer(GROUP, table)
    consumer.handler(counting_sink())
    MappingReplay(lanes_event(0, 5_000, start=ARRIVAL), batch_size=100).drain(consumer.process)
    first = consumer.metrics.snapshot()
    row = table.row(PARENT).applied_aggregates
    kept = AppliedAggregates.parse(row).lanes
    assert row is not None and len(row) <= MAX_STATE_BYTES
    assert first["DedupLanesEvicted"] == 5_000 - len(kept) > 0, "every lane dropped is counted"
    assert first["RecordsProcessed"] == 5_000
    # The bound's arithmetic (README): ~38 bytes a young lane keyed by the library's caller scope
    # ("-."), so ~3,950 lanes of 16-character producers.
    assert 3_800 < len(kept) < 4_100, len(kept)

    # Five minutes later the shard is still over its bound: more lanes, more evictions.
    MappingReplay(lanes_event(5_000, 1_000, start=ARRIVAL + 300), batch_size=100).drain(consumer.process)
    second = consumer.metrics.snapshot()
    assert second["DedupLanesEvicted"] - first["DedupLanesEvicted"] >= 1_000

    app = load(cdk_out, endpoint_url="http://127.0.0.1:4566")
    now = [NOW]
    monitor = Monitor(app, endpoint_url="http://127.0.0.1:9", log_dir=tmp_path, clock=lambda: now[0])
    for line in (consumer_emf(first, None, NOW - 310), consumer_emf(second, first, NOW - 10)):
        for metric, values, timestamp in extract(line):
            monitor.store.put_id(metric, values, timestamp)
    monitor.evaluate()
    alarming = {alarm.logical_id for alarm in monitor.alarms if alarm.state == "ALARM"}
    assert len(alarming) == 1 and "keycounterDedupLanesEvicted" in next(iter(alarming)), alarming

    response = monitor.route(HttpRequest("GET", "/_dashboard/api/board", "range=900&period=60", (), b"", "1"))
    board = json.loads(response.body)
    [shown] = [alarm for alarm in board["alarms"] if alarm["state"] == "ALARM"]
    assert "DedupLanesEvicted" in shown["id"] and "README" in shown["description"]
    drawn = [
        max(value or 0 for _, value in series["points"])
        for widget in board["widgets"]
        if widget["kind"] == "chart" and widget["title"].startswith(GROUP)
        for series in widget["series"]
        if "DedupLanesEvicted" in series["label"]
    ]
    assert drawn and max(drawn) >= 1_000, "the evictions are drawn on the group's widget"

    now[0] = NOW + 20 * 60  # no eviction for a quarter of an hour: back to OK
    monitor.evaluate()
    assert {alarm.state for alarm in monitor.alarms} == {"OK"}
