"""The whole app on loopback: the AWS endpoint, the functions, the REST APIs, the event-source mappings,
the worker groups' tasks.

    with Runtime(Path("cdk.out")) as runtime:      # starts everything, in that order
        print(runtime.api_url)                     # http://127.0.0.1:3000/v1/streams ...
        ...                                        # leaving the block stops every process it started

`python -m local up` is this plus a progress display; the end-to-end tests use it directly.
Each step reports through `on_step(name, detail)` so the caller can show progress.

    runtime.usage(reset=True)   # the billable operations since the start (or the last reset), zeroed

is also served on the API port: `GET /_shardline/usage` (`?reset=1`, or POST, zeroes what it
answers), the runtime's ledger (Lambda, API Gateway, logs, EMF) merged with the endpoint's
(Kinesis, DynamoDB, SQS, PutMetricData); `local.cloudwatch.usage` says what each counter means.
"""

from __future__ import annotations

import dataclasses
import json
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ._http import HttpRequest, HttpResponse
from .apigw.server import ApiServer
from .app import model
from .app.provision import provision
from .app.template import load
from .chaos.profiles import ChaosProfile
from .cloudwatch.monitor import DASHBOARD_ROUTE, Monitor
from .cloudwatch.usage import Usage, merge
from .ecs.services import WorkerServices
from .endpoint.handle import Endpoint
from .iam.principals import endpoint_config, sessions_of
from .lambda_ import sandbox
from .lambda_.esm.runner import MappingRunner
from .lambda_.workers import Functions

DEFAULT_ENDPOINT_PORT = 4566
DEFAULT_API_PORT = 3000
STATUS_ROUTE = "/_shardline/runtime"  # on the API port: what `python -m local status` reads from this process
USAGE_ROUTE = "/_shardline/usage"  # on the API port: what `python -m local usage` reads


#: The steps `start` reports through `on_step`, in order (`shardline local up` prints each).
STEPS = ("endpoint", "resources", "iam", "functions", "sandbox", "api", "mappings", "workers", "dashboard")


@dataclass
class Settings:
    """How `Runtime` starts; the defaults are `make local`'s."""

    cdk_out: Path = Path("cdk.out")
    stack: str | None = None
    endpoint_port: int = DEFAULT_ENDPOINT_PORT
    api_port: int = DEFAULT_API_PORT
    limits: bool = True
    #: Authorize every request at the endpoint with the template's roles and policies (`local.iam`).
    iam: bool = True
    log_dir: Path = Path(".local/logs")
    max_workers: int = 4
    extra_functions: tuple[model.Function, ...] = field(default_factory=tuple)
    chaos: ChaosProfile = field(default_factory=ChaosProfile)
    #: Shards of the streams the app names by ARN but does not define (created locally; default 1).
    existing_streams: dict[str, int] = field(default_factory=dict)


class Runtime:
    """Starts the app of a synthesized template on loopback; `stop()` (or leaving `with`) undoes it all."""

    def __init__(self, settings: Settings, *, on_step: Callable[[str, str], None] | None = None) -> None:
        self.settings = settings
        self._report = on_step or (lambda name, detail: None)
        self.endpoint: Endpoint | None = None
        self.app: model.LocalApp | None = None
        self.functions: Functions | None = None
        self.api: ApiServer | None = None
        self.runners: list[MappingRunner] = []
        self.services: WorkerServices | None = None
        self.monitor: Monitor | None = None
        self.started_in: float = 0.0
        self.ledger = Usage()  # the runtime's part of the usage ledger (the endpoint keeps its own)

    @property
    def endpoint_url(self) -> str:
        return f"http://127.0.0.1:{self.settings.endpoint_port}"

    @property
    def api_url(self) -> str:
        """The base URL of the first REST API (its stage path included), as the ApiUrl output names it."""
        assert self.api is not None and self.app is not None
        return f"{self.api.url}/{self.app.apis[0].stage}"

    def _on_step(self, name: str, detail: str) -> None:
        if name not in STEPS:  # a caller shows each step by its name: a new one is named in STEPS first
            raise AssertionError(f"runtime step {name!r} is not in STEPS")
        self._report(name, detail)

    def start(self) -> Runtime:
        began = time.monotonic()
        settings = self.settings
        try:
            self.endpoint = Endpoint(
                port=settings.endpoint_port, limits=settings.limits, chaos=settings.chaos
            ).start()
            self._on_step("endpoint", f"{self.endpoint_url} (limits {'on' if settings.limits else 'off'})")
            self.app = load(
                settings.cdk_out,
                endpoint_url=self.endpoint_url,
                stack=settings.stack,
                shards=settings.existing_streams,
            )
            provision(self.app, self.endpoint_url)
            self._on_step("resources", _count_resources(self.app))
            if settings.iam:
                self._on_step("iam", self._enforce_iam())
            settings.log_dir.mkdir(parents=True, exist_ok=True)
            self.monitor = Monitor(
                self.app, endpoint_url=self.endpoint_url, log_dir=settings.log_dir, usage=self.ledger
            )
            publish = self.monitor.publish
            self.functions = Functions(
                self.app.functions + settings.extra_functions,
                endpoint_url=self.endpoint_url,
                log_dir=settings.log_dir,
                max_workers=settings.max_workers,
                chaos=settings.chaos.workers,
                consumers={mapping.function_name for mapping in self.app.mappings},
                publish=publish,
                usage=self.ledger,
            )
            self.functions.start()
            self._on_step("functions", f"{len(self.app.functions)} warm, logs in {settings.log_dir}")
            self._on_step("sandbox", sandbox.describe())
            if self.app.apis:
                api = self.app.apis[0]
                self.api = ApiServer(
                    api, self.functions, port=settings.api_port, publish=publish, usage=self.ledger
                )
                self.api.add_route(STATUS_ROUTE, self._status_route)
                self.api.add_route(USAGE_ROUTE, self.usage_route)
                self.api.add_route(DASHBOARD_ROUTE, self.monitor.route)
                self.api.start()
                self._on_step("api", self.api_url)
            for mapping in self.app.mappings:
                function = self.app.function(mapping.function_name)
                stream = next(s for s in self.app.streams if s.name == mapping.stream_name)
                consumer = next(
                    (c for c in self.app.stream_consumers
                     if (c.stream_name, c.name) == (mapping.stream_name, mapping.consumer_name)),
                    None,
                )  # fmt: skip
                if mapping.consumer_name is not None and consumer is None:
                    raise ValueError(
                        f"{mapping.logical_id}: its EventSourceArn names consumer {mapping.consumer_name} "
                        f"of stream {mapping.stream_name}, which the app does not register"
                    )
                runner = MappingRunner(
                    mapping,
                    self.functions,
                    endpoint_url=self.endpoint_url,
                    function_role_arn=function.role_arn,
                    retention_hours=stream.retention_hours,
                    publish=publish,
                )
                runner.start()
                self.runners.append(runner)
            self._on_step("mappings", f"{len(self.runners)} polling")
            if self.app.workers:
                self.services = WorkerServices(
                    self.app.workers,
                    endpoint_url=self.endpoint_url,
                    log_dir=settings.log_dir,
                    kill_every_s=settings.chaos.workers.task_kill_every_s,
                    seed=settings.chaos.seed,
                    publish=publish,
                ).start()
                tasks = sum(service.desired_count for service in self.app.workers)
                self._on_step("workers", f"{len(self.app.workers)} worker group(s), {tasks} tasks")
            self.monitor.start()
            self._on_step("dashboard", self.dashboard_summary())
        except BaseException:
            self.stop()
            raise
        self.started_in = time.monotonic() - began
        return self

    def _enforce_iam(self) -> str:
        """Give the endpoint every principal the app runs code as; what it says it cannot evaluate."""
        assert self.app is not None
        sessions = sessions_of(self.app, self.settings.extra_functions)
        config = json.dumps(endpoint_config(self.app, sessions)).encode()
        request = urllib.request.Request(f"{self.endpoint_url}/_shardline/iam", data=config, method="PUT")
        with urllib.request.urlopen(request, timeout=30) as response:
            report = json.load(response)
        line = f"{len(sessions)} principal(s), each under its own role; every request authorized"
        for item in report["not_evaluated"]:
            line += f"\n  not evaluated: {item}"
        return line

    def iam_report(self) -> dict[str, Any]:
        """The endpoint's IAM report (`GET /_shardline/iam`): denials, calls, what it cannot evaluate."""
        with urllib.request.urlopen(f"{self.endpoint_url}/_shardline/iam", timeout=30) as response:
            report: dict[str, Any] = json.load(response)
        return report

    def stop(self) -> None:
        """Stops everything it started; safe to call twice.

        The pollers are told to stop, then the workers are killed, so an invocation in flight (a
        mapping's or an API request's) ends at once instead of holding Ctrl-C up to its timeout;
        then the API, the pollers' threads and the endpoint are joined.
        """
        for runner in self.runners:
            runner.stop(timeout=0)
        if self.services is not None:  # while the endpoint runs: they hand their leases back
            self.services.stop()
            self.services = None
        if self.monitor is not None:
            self.monitor.stop()
            self.monitor = None
        if self.functions is not None:
            self.functions.close()
            self.functions = None
        if self.api is not None:
            self.api.stop()
            self.api = None
        for runner in self.runners:
            runner.stop(timeout=5)
        self.runners = []
        if self.endpoint is not None:
            self.endpoint.stop()
            self.endpoint = None

    def dashboard_summary(self) -> str:
        """Where the dashboard is and what it evaluates, for the banner."""
        assert self.monitor is not None
        monitor = self.monitor
        where = f"{self.api.url}{DASHBOARD_ROUTE}" if self.api else "(no API: not served)"
        widgets = sum(len(board.widgets) for board in monitor.dashboards)
        skipped = f", {len(monitor.not_evaluated)} not evaluated" if monitor.not_evaluated else ""
        return f"{where} ({widgets} widgets, {len(monitor.alarms)} alarms evaluated{skipped})"

    def __enter__(self) -> Runtime:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stats(self) -> dict[str, Any]:
        """What `status` shows from this process: invocations, API traffic, each mapping's shards."""
        return {
            "functions": _plain(self.functions.stats()) if self.functions else {},
            "api": _plain(self.api.stats()) if self.api else {},
            "mappings": {runner.mapping.function_name: _plain(runner.stats()) for runner in self.runners},
            "workers": {
                name: {**stats, "behind_ms": self._behind_ms(name)}
                for name, stats in (self.services.stats() if self.services else {}).items()
            },
        }

    def _behind_ms(self, group: str) -> float | None:
        """A worker group's latest MillisBehindLatest (its tasks publish it as EMF), or None."""
        if self.monitor is None:
            return None
        store, now = self.monitor.store, time.time()
        latest: float | None = None
        for metric in store.metrics():
            if metric.name == "MillisBehindLatest" and ("ConsumerGroup", group) in metric.dimensions:
                points = store.query(metric, "Maximum", start=now - 300, end=now, period=60)
                values = [value for _, value in points if value is not None]
                if values:
                    latest = max(latest or 0.0, values[-1])
        return latest

    def usage(self, *, reset: bool = False) -> dict[str, Any]:
        """The billable operations since the start or the last reset, every part's (see the module);
        `reset`: each ledger zeroed as it is read. The functions' logs are read first, so every line
        written so far is counted."""
        if self.monitor is not None:
            self.monitor.collector.read_logs()
        url = f"{self.endpoint_url}{USAGE_ROUTE}"
        request = urllib.request.Request(url, method="POST" if reset else "GET")
        with urllib.request.urlopen(request, timeout=60) as response:  # a big table's storage takes a while
            endpoint = json.load(response)
        return merge(self.ledger.snapshot(reset=reset), endpoint)

    def usage_route(self, request: HttpRequest) -> HttpResponse:
        reset = request.method == "POST" or "reset=1" in request.query.split("&")
        body = json.dumps(self.usage(reset=reset)).encode()
        return HttpResponse(200, (("content-type", "application/json"),), body)

    def _status_route(self, request: HttpRequest) -> HttpResponse:
        body = json.dumps(self.stats(), default=str).encode()
        return HttpResponse(200, (("content-type", "application/json"),), body)


def _plain(value: Any) -> Any:
    """Dataclasses (the stats of the runtime's parts) as JSON-able dicts."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {key: _plain(item) for key, item in dataclasses.asdict(value).items()}
    if isinstance(value, dict):
        return {str(key): _plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    return value


def _count_resources(app: model.LocalApp) -> str:
    kinds = {"AWS::DynamoDB::Table": "tables", "AWS::SQS::Queue": "queues", "AWS::S3::Bucket": "buckets"}
    counts = {label: sum(1 for r in app.resources if r.type == kind) for kind, label in kinds.items()}
    shards = sum(stream.shard_count for stream in app.streams)
    parts = [f"{n} {label}" for label, n in counts.items()]
    if app.stream_consumers:
        parts.append(f"{len(app.stream_consumers)} registered stream consumer(s) (enhanced fan-out)")
    line = ", ".join([f"{len(app.streams)} stream(s), {shards} shards", *parts])
    for stream in app.streams:
        if not stream.defined:
            line += (
                f"\n  stream {stream.name} is named by the app but not defined (an existing stream): "
                f"created locally with {stream.shard_count} shard(s) (up --stream {stream.name}=N to choose)"
            )
    return line
