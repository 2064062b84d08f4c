"""The dashboard in a real browser: headless Chromium (Debian's package, driven by playwright-core)
opens /_dashboard while `send` runs, under chaos, and with an hour of one-second data.

Screenshots go to build/test-output/; each test prints the browser's report (widgets, alarms, the
page's render times and the server's answer times).
"""

from __future__ import annotations

import contextlib
import dataclasses
import http.server
import statistics
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from local._http import HttpRequest
from local.app.template import load
from local.chaos.profiles import load_profile
from local.cloudwatch.metrics import MetricId
from local.cloudwatch.monitor import Monitor
from local.commands.send import send
from local.runtime import Runtime
from tests.support.dashboard_browser import browse
from tests.support.runtime import start_runtime

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(1200)]

TRAFFIC_AND_CONSUMERS = (
    "Traffic in: API requests",
    "Traffic in: Kinesis records",
    "Producer: user records per Kinesis record",
    "Stream health: iterator age",
    "event-sink: processed, duplicates skipped, DLQ",
    "event-sink: lag",
    "key-counter: processed, duplicates skipped, DLQ",
    "key-counter: lag",
)


def _send_in_background(
    runtime: Runtime, stop: threading.Event | None = None, **shape: Any
) -> threading.Thread:
    """`send` in a thread: once, or (with `stop`) again and again until `stop` is set."""

    def run() -> None:
        while True:
            send(f"{runtime.api_url}/streams", "events", progress=False, **shape)
            if stop is None or stop.is_set():
                return

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_the_dashboard_draws_every_widget_with_live_traffic_during_a_send(runtime: Runtime) -> None:
    sender = _send_in_background(runtime, count=6_000, rate=300, keys=200)
    url = f"{runtime.api.url}/_dashboard?range=300&period=auto"
    report = browse(url, "dashboard-traffic", "traffic", 120, TRAFFIC_AND_CONSUMERS)
    sender.join(timeout=120)
    assert report["met"], [(w["title"], w["points"]) for w in report["widgets"]]
    widgets = report["widgets"]
    assert len(widgets) == len(runtime.monitor.dashboards[0].widgets) == 19  # every widget, found
    assert {w["kind"] for w in widgets} == {"text", "chart", "log"}
    assert all(w["canvas"] for w in widgets if w["kind"] == "chart")  # drawn as charts, not tables
    assert next(w for w in widgets if w["kind"] == "text")["text"].strip() == "shardline"  # markdown drawn
    assert len(report["alarms"]) == 23


def test_a_chaos_run_trips_an_alarm_that_the_page_shows(cdk_out: Path, tmp_path: Path) -> None:
    # Heavy chaos kills consumer invocations (Lambda Errors), browns DynamoDB out (a stalled
    # shard: ShardStalled, on its first one-minute datapoint) and poison records fill a DLQ: the
    # alarms on errors and dead letters need 2 breaching periods of 5 minutes (2 of 3), so ALARM
    # comes at the first period boundary after the faults start, as in CloudWatch: within about
    # 5 minutes; a stall's within about a minute.
    heavy = load_profile("heavy")
    profile = dataclasses.replace(heavy, seed=13, workers=dataclasses.replace(heavy.workers, kill_every=8))
    runtime = start_runtime(cdk_out, tmp_path, chaos=profile)
    stop = threading.Event()
    try:
        sender = _send_in_background(runtime, stop, count=1_500, rate=150, keys=100, poison_rate=0.002)
        report = browse(f"{runtime.api.url}/_dashboard?range=900", "dashboard-chaos-alarm", "alarm", 420)
        stop.set()
        sender.join(timeout=60)
    finally:
        runtime.stop()
    assert report["met"], report["alarms"]
    tripped = [a for a in report["alarms"] if a["state"] == "ALARM"]
    print("in ALARM:", [a["text"] for a in tripped])
    expected = ("Errors", "DeadLetters", "RecordsFailed", "ShardStalled")
    assert any(word in a["id"] for a in tripped for word in expected), tripped


class _MonitorServer(http.server.ThreadingHTTPServer):
    daemon_threads = True


@contextlib.contextmanager
def _serve(monitor: Monitor) -> Iterator[str]:
    """The monitor's routes on a free port, without a runtime (nothing else in the process)."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            path, _, query = self.path.partition("?")
            response = monitor.route(HttpRequest("GET", path, query, (), b"", "127.0.0.1"))
            self.send_response(response.status)
            for name, value in response.headers:
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(response.body)))
            self.end_headers()
            self.wfile.write(response.body)

        def log_message(self, *args: Any) -> None:
            pass

    server = _MonitorServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()


def _an_hour_of_every_metric(monitor: Monitor, now: float) -> int:
    """One value a second for an hour for every metric the dashboard and the alarms read (three
    values a second for latencies and durations, which have percentiles): the series count."""
    metrics = {alarm.metric for alarm in monitor.alarms}
    for widget in monitor.dashboards[0].widgets:
        for row in widget.get("properties", {}).get("metrics", []):
            fields = [v for v in row if not isinstance(v, dict)]
            if len(fields) >= 2:
                namespace, name, *pairs = fields
                metrics.add(MetricId.of(namespace, name, dict(zip(pairs[::2], pairs[1::2], strict=False))))
    for metric in metrics:
        per_second = 3 if metric.name in ("Latency", "Duration") else 1
        for second in range(int(now) - 3600, int(now)):
            monitor.store.put_id(metric, [float(second % 97 + i) for i in range(per_second)], second)
    return len(metrics)


def test_3_a_burst_within_one_period_is_drawn(cdk_out: Path, tmp_path: Path) -> None:
    """One datapoint in the range (a burst shorter than the period): no line joins it to anything,
    and uPlot hides points when the range holds many periods; the page draws it as a point."""
    app = load(cdk_out, endpoint_url="http://127.0.0.1:9")
    monitor = Monitor(app, endpoint_url="http://127.0.0.1:9", log_dir=tmp_path)
    title = "Traffic in: API requests"
    widget = next(w for w in monitor.dashboards[0].widgets if w.get("properties", {}).get("title") == title)
    namespace, name, *pairs = [v for v in widget["properties"]["metrics"][0] if not isinstance(v, dict)]
    metric = MetricId.of(namespace, name, dict(zip(pairs[::2], pairs[1::2], strict=False)))
    monitor.store.put_id(metric, [40.0], int(time.time()) - 30)
    with _serve(monitor) as base:
        report = browse(f"{base}/_dashboard?range=900&period=1", "dashboard-burst", "render", 60)
    (shown,) = [w for w in report["widgets"] if w["title"] == title]
    assert shown["points"] == 1, shown
    assert shown["colored"] > 0, f"the burst's one datapoint was not drawn: {shown}"
    assert not report["errors"], report["errors"]


def test_an_hour_of_one_second_data_for_every_metric_stays_responsive(cdk_out: Path, tmp_path: Path) -> None:
    app = load(cdk_out, endpoint_url="http://127.0.0.1:9")
    monitor = Monitor(app, endpoint_url="http://127.0.0.1:9", log_dir=tmp_path)
    now = time.time()
    series = _an_hour_of_every_metric(monitor, now)
    began = time.perf_counter()
    monitor.evaluate()
    evaluate_ms = (time.perf_counter() - began) * 1000
    views = (("range=3600&period=1", "dashboard-hour-1s"), ("range=3600&period=auto", "dashboard-hour-auto"))
    for query, name in views:
        with _serve(monitor) as base:
            report = browse(f"{base}/_dashboard?{query}", name, "render", 90)
        renders = report["renders"][1:] or report["renders"]  # the first render also builds the charts
        page = statistics.median(r["page_ms"] for r in renders)
        server = statistics.median(r["server_ms"] for r in renders)
        fetch = statistics.median(r["fetch_ms"] for r in renders)
        points = sum(w["points"] for w in report["widgets"])
        print(
            f"{name}: {series} series, {points:,} points drawn; server {server:.0f} ms, "
            f"fetch {fetch:.0f} ms, page render {page:.0f} ms (medians of {len(renders)}); first render "
            f"{report['first_render_s']:.2f} s after load; alarms evaluated in {evaluate_ms:.0f} ms"
        )
        assert report["met"] and points > 0
        # Responsive: a refresh (every 2 s) is answered and drawn well inside its interval.
        assert server + page < 2000, (server, page)


def test_3_a_missing_library_is_named_on_the_page_not_blamed_on_the_runtime(
    cdk_out: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An installation that lacks the chart library (a broken install): the page names the file
    and what to do, instead of "cannot reach the runtime"."""
    from local.cloudwatch import monitor as monitor_module

    monkeypatch.setitem(monitor_module.ASSETS, "uPlot.iife.min.js", tmp_path / "gone" / "uPlot.iife.min.js")
    app = load(cdk_out, endpoint_url="http://127.0.0.1:9")
    monitor = Monitor(app, endpoint_url="http://127.0.0.1:9", log_dir=tmp_path)
    with _serve(monitor) as base:
        report = browse(f"{base}/_dashboard", "dashboard-missing-library", "message", 60, allow_errors=True)
    message = report["message"]
    assert "uPlot.iife.min.js did not load" in message and "reinstall shardline[local]" in message, message
    assert "cannot reach the runtime" not in message
