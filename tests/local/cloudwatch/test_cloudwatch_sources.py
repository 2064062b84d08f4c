"""What feeds the local CloudWatch, end to end: the endpoint's Kinesis metrics over its route, and a
function's log file (EMF lines extracted, every line kept for Logs Insights)."""

from __future__ import annotations

import json
import time
from pathlib import Path

from local.app import model
from local.cloudwatch.metrics import MetricId, MetricStore
from local.cloudwatch.sources import Collector
from tests.support.endpoint import THROTTLED, new_stream


def _collector(url: str, tmp_path: Path, functions: tuple[model.Function, ...] = ()) -> Collector:
    app = model.LocalApp(stack_name="s", functions=functions)
    return Collector(MetricStore(), app, endpoint_url=url, log_dir=tmp_path)


def _sum(collector: Collector, name: str, stream: str, began: float) -> float:
    metric = MetricId.of("AWS/Kinesis", name, {"StreamName": stream})
    points = collector.store.query(metric, "Sum", start=began - 1, end=time.time(), period=3600)
    return sum(value or 0 for _, value in points)


def test_kinesis_metrics_come_from_the_endpoint_as_kinesis_publishes_them(local_endpoint, tmp_path) -> None:
    client, name = new_stream(local_endpoint, shards=1, prefix="metrics")
    collector = _collector(local_endpoint, tmp_path)
    began = time.time()
    collector.collect_once()  # the cursor moves past what other tests left
    written = 0
    size = 3 * 1024  # 400 records of 3 KiB: 1.2 MB, over the shard's 1 MiB/s in the first request
    # alone, so some are throttled however slowly a loaded machine sends the three requests
    for _ in range(3):
        answer = client.put_records(
            StreamName=name, Records=[{"PartitionKey": "k", "Data": b"x" * size} for _ in range(400)]
        )
        written += 400 - answer["FailedRecordCount"]
        throttled = sum(1 for r in answer["Records"] if r.get("ErrorCode") == THROTTLED)
    time.sleep(1.1)  # a second is served once it has passed
    collector.collect_once()
    assert _sum(collector, "IncomingRecords", name, began) == written
    assert _sum(collector, "PutRecords.TotalRecords", name, began) == 1200
    assert _sum(collector, "PutRecords.SuccessfulRecords", name, began) == written
    refused = 1200 - written
    assert refused > 0 and throttled > 0
    assert _sum(collector, "WriteProvisionedThroughputExceeded", name, began) == refused
    assert _sum(collector, "PutRecords.ThrottledRecords", name, began) == refused
    assert _sum(collector, "IncomingBytes", name, began) == written * (size + 1)  # data and key
    collector.collect_once()
    assert _sum(collector, "IncomingRecords", name, began) == written  # nothing is served twice


def test_a_functions_log_gives_its_emf_metrics_and_every_line_to_logs_insights(local_endpoint, tmp_path):
    function = model.Function("F", "fn", "h.handler", tmp_path, log_group="/aws/lambda/fn")
    collector = _collector(local_endpoint, tmp_path, (function,))
    emf = {"_aws": {"Timestamp": int(time.time() * 1000), "CloudWatchMetrics": [
        {"Namespace": "app", "Dimensions": [["service"]], "Metrics": [{"Name": "Handled"}]}]},
        "service": "svc", "Handled": 7}  # fmt: skip
    log = tmp_path / "fn.log"
    partial = '{"level": "ERROR", "mess'
    log.write_text("START RequestId: 1 Version: $LATEST\n" + json.dumps(emf) + "\n" + partial)
    collector.collect_once()
    points = collector.store.query(MetricId.of("app", "Handled", {"service": "svc"}), "Sum",
                                   start=time.time() - 60, end=time.time(), period=60)  # fmt: skip
    assert sum(value or 0 for _, value in points) == 7
    # The partial line waits for its end.
    assert [event.message[:5] for event in collector.log_events] == ["START", '{"_aw']
    with log.open("a") as out:
        out.write('age": "boom"}\n{"_aws": {"Timestamp": "bad"}}\n')
    collector.collect_once()
    assert collector.log_events[2].fields == {"level": "ERROR", "message": "boom"}
    assert collector.log_events[2].log_group == "/aws/lambda/fn"
    assert collector.emf_errors == 1  # the malformed EMF line stays a log event, without metrics
    assert len(collector.log_events) == 4
