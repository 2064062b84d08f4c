"""CloudWatch for the local runtime: the store, its sources, the alarms, and the dashboard page.

    monitor = Monitor(app, endpoint_url=..., log_dir=...)       # `Runtime` does this
    Functions(..., publish=monitor.publish)                       # the runtime's parts publish
    api.add_route(DASHBOARD_ROUTE, monitor.route)                 # http://127.0.0.1:3000/_dashboard
    monitor.start() ... monitor.stop()

Routes under `/_dashboard`: the page (`/`), its assets (`/assets/<file>`: the page's own files and
the chart and markdown libraries from `node_modules`, nothing from outside loopback), and its data:
`/api/board?range=900&period=auto` (every widget with its series, and the alarms) and `/api/alarms`.
Alarms are evaluated every `evaluate_every` seconds (CloudWatch evaluates every minute).
"""

from __future__ import annotations

import json
import logging
import mimetypes
import threading
import time
import urllib.request
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

from .._http import HttpRequest, HttpResponse
from ..app import model
from .alarms import Alarm, AlarmError
from .dashboard import Dashboard
from .metrics import MetricStore
from .sources import Collector
from .usage import Usage

__all__ = ["DASHBOARD_ROUTE", "Monitor", "auto_period"]

log = logging.getLogger(__name__)

DASHBOARD_ROUTE = "/_dashboard"
RANGES_S = (300, 900, 3600)
WEB = Path(__file__).with_name("web")
#: The chart and markdown libraries (uPlot, marked), kept in the source tree at package-lock.json's
#: versions: every way of installing ships them (`tests/local/cloudwatch` checks them against npm's).
VENDOR = WEB / "vendor"


ASSETS = {
    "uPlot.iife.min.js": VENDOR / "uPlot.iife.min.js",
    "uPlot.min.css": VENDOR / "uPlot.min.css",
    "marked.umd.js": VENDOR / "marked.umd.js",
    "dashboard.js": WEB / "dashboard.js",
    "dashboard.css": WEB / "dashboard.css",
    "favicon.svg": WEB / "favicon.svg",
}


def auto_period(range_s: int) -> int:
    """The page's "auto" period: the finest of 1, 5, 10, 30, 60, 300 s that draws at most 120 points."""
    return next((p for p in (1, 5, 10, 30, 60) if range_s / p <= 120), 300)


class Monitor:
    """See the module."""

    def __init__(
        self,
        app: model.LocalApp,
        *,
        endpoint_url: str,
        log_dir: Path,
        clock: Callable[[], float] = time.time,
        evaluate_every: float = 10.0,
        usage: Usage | None = None,
    ) -> None:
        self.clock, self.evaluate_every = clock, evaluate_every
        self.endpoint_url = endpoint_url
        self.store = MetricStore(clock=clock)
        self.collector = Collector(self.store, app, endpoint_url=endpoint_url, log_dir=log_dir, usage=usage)
        self.alarms: list[Alarm] = []
        self.not_evaluated: list[str] = []  # alarms this evaluator refuses, with the reason
        self.dashboards: list[Dashboard] = []
        for resource in app.monitoring:
            if resource.type == "AWS::CloudWatch::Dashboard":
                self.dashboards.append(Dashboard.from_resource(resource))
                continue
            try:
                alarm = Alarm.from_properties(resource.logical_id, resource.properties, resource.name)
                self.alarms.append(alarm)
            except AlarmError as exc:
                self.not_evaluated.append(str(exc))
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._evaluate_loop, name="cloudwatch-alarms", daemon=True)

    def publish(self, namespace: str, name: str, dimensions: Mapping[str, str], value: float) -> None:
        self.store.put(namespace, name, dimensions, value)

    def start(self) -> Monitor:
        self.collector.start()
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self.collector.stop()
        if self._thread.is_alive():
            self._thread.join(timeout=5)

    def evaluate(self) -> None:
        now = self.clock()
        for alarm in self.alarms:
            alarm.evaluate(self.store, now)

    def _evaluate_loop(self) -> None:
        while not self._stop.wait(self.evaluate_every):
            try:
                self.evaluate()
            except Exception:  # a bug must not stop the other alarms for good
                log.exception("evaluating alarms")

    # -- the page --------------------------------------------------------------------------------

    def route(self, request: HttpRequest) -> HttpResponse:
        path = request.path[len(DASHBOARD_ROUTE) :].strip("/")
        if request.method != "GET":
            return _text(405, "GET only")
        if path == "":
            html = (WEB / "index.html").read_bytes()
            return HttpResponse(200, (("Content-Type", "text/html; charset=utf-8"),), html)
        if path.startswith("assets/"):
            return _asset(path.removeprefix("assets/"))
        query = {key: values[-1] for key, values in parse_qs(request.query).items()}
        if path == "api/board":
            return _json(self.board(query))
        if path == "api/alarms":
            alarms = [alarm.as_dict() for alarm in self.alarms]
            return _json({"alarms": alarms, "not_evaluated": self.not_evaluated})
        return _text(404, f"no such page: {request.path}")

    def access_denied(self) -> list[dict[str, Any]]:
        """The endpoint's denials, one entry per (principal, action, resource) (`local.iam.enforcer`)."""
        try:
            with urllib.request.urlopen(f"{self.endpoint_url}/_shardline/iam", timeout=5) as response:
                grouped: list[dict[str, Any]] = json.load(response).get("denials", {}).get("grouped", [])
        except (OSError, ValueError):
            return []  # the endpoint is gone (stopping): the page keeps what it drew
        return grouped

    def board(self, query: Mapping[str, str]) -> dict[str, Any]:
        """The page's data: the first dashboard (or `name`) rendered over `range` seconds."""
        range_s = int(query.get("range", "900")) if query.get("range", "").isdigit() else 900
        range_s = min(max(range_s, 60), 3 * 3600)
        requested = query.get("period", "auto")
        period = auto_period(range_s) if requested == "auto" else None
        if requested.isdigit():
            period = max(1, int(requested))
        board = next((d for d in self.dashboards if d.name == query.get("name")), None) or (
            self.dashboards[0] if self.dashboards else Dashboard("(none)", ())
        )
        began = time.perf_counter()
        rendered = board.render(
            self.store, list(self.collector.log_events), now=self.clock(), range_s=range_s, period=period
        )
        rendered.update(
            period=period or "widget",
            dashboards=[d.name for d in self.dashboards],
            alarms=[alarm.as_dict() for alarm in self.alarms],
            not_evaluated=self.not_evaluated,
            access_denied=self.access_denied(),
            server_ms=round((time.perf_counter() - began) * 1000, 1),
        )
        return rendered


def _asset(name: str) -> HttpResponse:
    path = ASSETS.get(name)
    if path is None:
        return _text(404, f"no such asset: {name}")
    if not path.is_file():
        return _text(503, f"{name} is missing from this installation of shardline ({path}): reinstall it")
    kind = mimetypes.guess_type(name)[0] or "application/octet-stream"
    return HttpResponse(200, (("Content-Type", kind), ("Cache-Control", "max-age=300")), path.read_bytes())


def _json(value: Any) -> HttpResponse:
    body = json.dumps(value, allow_nan=False, default=str).encode()
    return HttpResponse(200, (("Content-Type", "application/json"), ("Cache-Control", "no-store")), body)


def _text(status: int, message: str) -> HttpResponse:
    return HttpResponse(status, (("Content-Type", "text/plain; charset=utf-8"),), message.encode())
