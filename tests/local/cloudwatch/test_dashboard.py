"""The synthesized dashboard drawn from the local store: every widget mapped, metric math, the log
widget's Logs Insights query, and the page's routes on a Monitor without a runtime."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from local._http import HttpRequest
from local.app import model
from local.app.template import load
from local.cloudwatch.dashboard import Dashboard, ExpressionError, _evaluate
from local.cloudwatch.emf import extract
from local.cloudwatch.insights import InsightsError, parse
from local.cloudwatch.metrics import MetricStore
from local.cloudwatch.monitor import Monitor, auto_period
from local.cloudwatch.sources import LogEvent

NOW = 1_800_000_000.0


@pytest.fixture(scope="module")
def app(cdk_out: Path) -> model.LocalApp:
    return load(cdk_out, endpoint_url="http://127.0.0.1:4566")


@pytest.fixture(scope="module")
def board(app: model.LocalApp) -> Dashboard:
    (resource,) = [r for r in app.monitoring if r.type == "AWS::CloudWatch::Dashboard"]
    return Dashboard.from_resource(resource)


def test_every_widget_of_the_synthesized_dashboard_is_drawn_in_its_place(board: Dashboard) -> None:
    rendered = board.render(MetricStore(clock=lambda: NOW), [], now=NOW, range_s=900, period=None)
    assert len(rendered["widgets"]) == len(board.widgets) == 19
    kinds = {widget["kind"] for widget in rendered["widgets"]}
    assert kinds == {"text", "chart", "log"}, [w.get("reason") for w in rendered["widgets"]]
    for source, widget in zip(board.widgets, rendered["widgets"], strict=True):
        assert (widget["x"], widget["y"], widget["width"], widget["height"]) == (
            source["x"], source["y"], source["width"], source["height"]
        )  # fmt: skip
        assert widget["title"] == source["properties"].get("title", "")
        if widget["kind"] == "chart":
            rows = source["properties"]["metrics"]
            assert len(widget["series"]) == len(rows)  # one line per metric row, expressions included


def test_a_chart_reads_its_metric_with_the_widgets_stat_and_the_chosen_period(board: Dashboard, app) -> None:
    store = MetricStore(clock=lambda: NOW)
    stream = app.streams[0].name
    for second, records in [(NOW - 130, 500), (NOW - 125, 250), (NOW - 10, 100)]:
        store.put("AWS/Kinesis", "IncomingRecords", {"StreamName": stream}, records, timestamp=second)
    store.put("AWS/Kinesis", "IncomingRecords", {"StreamName": "another"}, 999, timestamp=NOW - 10)
    rendered = board.render(store, [], now=NOW, range_s=300, period=60)
    (chart,) = [w for w in rendered["widgets"] if w["title"] == "Traffic in: Kinesis records"]
    points = [value for _, value in chart["series"][0]["points"] if value is not None]
    assert points == [750.0, 100.0]  # Sum per minute: the widget's stat; the other stream is not this metric


def test_metric_math_draws_expressions_over_hidden_metrics(board: Dashboard, app) -> None:
    store = MetricStore(clock=lambda: NOW)
    table = next(r.name for r in app.resources if "eventsinkLeases" in r.logical_id)
    throttled = {"TableName": table, "Operation": "UpdateItem"}
    store.put("AWS/DynamoDB", "ThrottledRequests", throttled, [1, 1, 1], timestamp=NOW - 30)
    rendered = board.render(store, [], now=NOW, range_s=300, period=60)
    (chart,) = [w for w in rendered["widgets"] if w["title"] == "event-sink: lease table throttles"]
    hidden = [s for s in chart["series"] if not s["visible"]]
    shown = [s for s in chart["series"] if s["visible"]]
    assert len(hidden) == len(shown) == 3  # GetItem, UpdateItem, TransactWriteItems; an expression each
    peaks = sorted(max((v or 0) for _, v in line["points"]) for line in shown)
    assert peaks == [0, 0, 3.0]  # the UpdateItem expression sums its minute


def test_metric_math_outside_the_subset_says_which_part() -> None:
    series = {"a": [1.0, None, 3.0], "b": [1.0, 2.0, 0.0]}
    assert _evaluate("a + b * 2", series) == [3.0, None, 3.0]
    assert _evaluate("SUM([a, b])", series) == [2.0, 2.0, 3.0]
    assert _evaluate("a / b", series) == [1.0, None, None]  # no datapoint where b is 0
    with pytest.raises(ExpressionError, match="'RATE\\(a\\)' is not evaluated locally"):
        _evaluate("RATE(a)", series)
    with pytest.raises(ExpressionError, match="no metric has the id 'c'"):
        _evaluate("a + c", series)


def events() -> list[LogEvent]:
    lines = [
        (NOW - 50, "g1", {"level": "ERROR", "message": "first", "request": {"id": "r1"}}),
        (NOW - 40, "g2", {"level": "INFO", "message": "fine"}),
        (NOW - 30, "g2", {"level": "ERROR", "message": "second"}),
        (NOW - 20, "g3", {"level": "ERROR", "message": "elsewhere"}),
    ]
    return [LogEvent(t, group, json.dumps(fields), fields) for t, group, fields in lines] + [
        LogEvent(NOW - 10, "g1", "START RequestId: x Version: $LATEST")
    ]


def test_the_log_widgets_query_selects_sorts_and_projects_like_logs_insights() -> None:
    query = parse(
        "SOURCE 'g1' | SOURCE 'g2' | fields @timestamp, @log, level, message, request.id\n"
        "| filter level = 'ERROR'\n| sort @timestamp desc\n| limit 50"
    )
    rows = query.run(events())
    assert [row["message"] for row in rows] == ["second", "first"]
    assert rows[1]["request.id"] == "r1" and rows[0]["request.id"] is None
    assert rows[0]["@log"] == f"{model.ACCOUNT}:g2"
    assert list(rows[0]) == ["@timestamp", "@log", "level", "message", "request.id"]
    assert [r["@message"] for r in parse("filter @message like /^START/").run(events())] == [
        "START RequestId: x Version: $LATEST"
    ]
    assert len(parse("sort @timestamp asc | limit 2").run(events())) == 2


def test_a_log_query_outside_the_subset_is_refused_naming_the_command() -> None:
    with pytest.raises(InsightsError, match="'stats'"):
        parse("fields @message | stats count(*) by bin(5m)")
    with pytest.raises(InsightsError, match="limit"):
        parse("limit many")


def test_the_auto_period_draws_at_most_120_points() -> None:
    assert [auto_period(r) for r in (60, 300, 900, 3600, 10_800)] == [1, 5, 10, 30, 300]


def test_the_page_its_assets_and_its_data_are_served_by_the_monitor(app, tmp_path: Path) -> None:
    monitor = Monitor(app, endpoint_url="http://127.0.0.1:9", log_dir=tmp_path, clock=lambda: NOW)

    def get(path: str, query: str = "") -> tuple[int, bytes]:
        response = monitor.route(HttpRequest("GET", path, query, (), b"", "127.0.0.1"))
        return response.status, response.body

    status, page = get("/_dashboard")
    assert status == 200 and b"/_dashboard/assets/uPlot.iife.min.js" in page
    for asset in ("uPlot.iife.min.js", "marked.umd.js", "dashboard.js", "dashboard.css", "uPlot.min.css"):
        assert get(f"/_dashboard/assets/{asset}")[0] == 200, asset  # from node_modules: nothing from a CDN
    assert get("/_dashboard/assets/../../README.md")[0] == 404
    status, body = get("/_dashboard/api/board", "range=300&period=auto")
    data = json.loads(body)
    assert status == 200 and data["period"] == 5 and len(data["widgets"]) == 19
    assert len(data["alarms"]) == 23 and not data["not_evaluated"]  # + each group's DedupLanesEvicted
    assert {alarm["state"] for alarm in data["alarms"]} == {"INSUFFICIENT_DATA"}  # never evaluated yet
    monitor.evaluate()
    states = {alarm.state for alarm in monitor.alarms}
    assert states == {"OK"}  # every alarm of the app treats missing data as not breaching


def consumer_emf(group: str, at: float, **counts: int) -> dict:
    """The EMF line a consumer function logs for one invocation, as `ConsumerFunction.handle` makes it:
    Powertools' Metrics with the group's service and ConsumerGroup dimension, fed by `publish_metrics`."""
    from aws_lambda_powertools import Metrics

    from shardline.aws_lambda._emf import publish_metrics

    metrics = Metrics(namespace="shardline/dev", service=f"shardline-{group}")
    metrics.add_dimension(name="ConsumerGroup", value=group)
    try:
        publish_metrics(metrics, counts)
        line = json.loads(json.dumps(metrics.serialize_metric_set()))  # as written to the log, and read back
    finally:
        metrics.clear_metrics()
    line["_aws"]["Timestamp"] = int(at * 1000)
    return line


def test_a_stalled_shard_and_a_skipped_batch_trip_their_alarms_from_the_functions_emf(app, tmp_path) -> None:
    now = [NOW]
    monitor = Monitor(app, endpoint_url="http://127.0.0.1:9", log_dir=tmp_path, clock=lambda: now[0])
    assert not monitor.not_evaluated  # the new alarms are evaluated as they are, nothing refused

    def states() -> dict[str, str]:
        monitor.evaluate()
        return {alarm.logical_id: alarm.state for alarm in monitor.alarms}

    def put(at: float, **counts: int) -> None:
        for metric, values, timestamp in extract(consumer_emf("event-sink", at, **counts)):
            monitor.store.put_id(metric, values, timestamp)

    put(NOW - 70, ShardStalls=1)
    assert "ALARM" not in states().values(), "one stalled delivery the next got past pages nobody"
    put(NOW - 10, ShardStalls=1)  # a minute later, stalled again: the stall goes on
    stalled = {k for k, state in states().items() if state == "ALARM"}
    assert len(stalled) == 1 and "eventsinkShardStalled" in next(iter(stalled))  # this group's, only
    now[0] = NOW + 50  # no stalled delivery for a minute: still stalled, no flapping to OK
    assert {k for k, state in states().items() if state == "ALARM"} == stalled
    now[0] = NOW + 170  # quiet minutes: the shard moved again
    assert set(states().values()) == {"OK"}
    (alarm,) = [a for a in monitor.alarms if a.logical_id in stalled]
    assert [(t.old, t.new) for t in alarm.history][-2:] == [("OK", "ALARM"), ("ALARM", "OK")]
    assert "stalledCause" in alarm.as_dict()["description"]

    put(now[0], BatchesSkippedByMapping=1)
    skipped = {k for k, state in states().items() if state == "ALARM"}
    assert len(skipped) == 1 and "eventsinkBatchesSkippedByMapping" in next(iter(skipped))
    now[0] += 50 * 60  # ALARM for the hour after the skip: a redrive is owed
    assert {k for k, state in states().items() if state == "ALARM"} == skipped

    (board,) = monitor.dashboards
    rendered = board.render(monitor.store, [], now=NOW, range_s=900, period=None)
    (chart,) = [w for w in rendered["widgets"] if w["title"].startswith("Consumer groups: shards stalled")]
    lines = {line["label"]: line for line in chart["series"]}
    peak = max(value or 0 for _, value in lines["event-sink ShardStalls"]["points"])
    assert peak == 1.0 and set(lines) == {
        f"{group} {metric}"
        for group in ("event-sink", "key-counter")
        for metric in ("ShardStalls", "BatchesSkippedByMapping")
    }
