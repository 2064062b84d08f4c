"""The local runtime's one AWS endpoint: every service moto serves, on one port, Kinesis made right.

    python -m local.endpoint --host 127.0.0.1 --port 4566 [--no-limits]

runs moto's all-services WSGI app in this process under a threaded server, with moto's Kinesis
corrected and Kinesis's per-shard limits enforced for every client (`local.endpoint.kinesis.fixes`),
SubscribeToShard answered with an event stream (`local.endpoint.kinesis.subscribe`), moto's
DynamoDB writes made atomic and its transactions cheap (`local.endpoint.dynamodb`), and a
few routes of its own under `/_shardline/`:

- `GET /_shardline/health`: 200 once serving;
- `GET /_shardline/kinesis`: per stream and shard, open or closed, parents, records and bytes
  written, write and read throttles, GetRecords calls (for `status` and the dashboard);
- `GET|PUT /_shardline/limits`: whether writes and reads are limited, how long a reshard keeps a
  stream UPDATING, how long an iterator lives, how long a SubscribeToShard subscription lasts, how
  long a registered consumer stays CREATING; PUT `{"writes": false}` (or `reshard_seconds`,
  `iterator_ttl_seconds`, `subscription_seconds`, `consumer_creating_seconds`) changes one while
  running;
- `GET /_shardline/metrics?after=N`: the Kinesis and DynamoDB metrics AWS would publish, per second
  (`local.endpoint.service_metrics`);
- `GET /_shardline/usage[?reset=1]`, `POST /_shardline/usage`: the billable operations served
  since the start or the last reset (`local.endpoint.metering`); a reset answers the reading it zeroed;
- `GET|PUT /_shardline/iam`: the app's principals and policies (PUT, from `local.iam.principals`):
  from then on every request is SigV4-verified and authorized as AWS would (`local.iam.enforcer`);
  GET answers what it cannot evaluate, the denials, and every allowed call by principal;
- `GET /_shardline/chaos`: the chaos profile (`--chaos '<profile JSON>'`, see `local.chaos.profiles`), every
  fault injected so far by type, and the reshards done (`local.endpoint.chaos`, `local.endpoint.resharder`).

`local.endpoint.Endpoint` starts it as a child process, waits until it answers, and stops it."""

from __future__ import annotations

import argparse
import json
import os
import signal
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any, cast

from ..app.model import ACCOUNT, REGION
from ..chaos.profiles import ChaosProfile, profile_from_dict
from ..iam.enforcer import Enforcer
from .browsers import BrowserGuard
from .handle import READY_LINE
from .metering import serving
from .service_metrics import SERVICE_METRICS

_PRELOADED = ("kinesis", "dynamodb", "sqs", "s3", "logs")
#: The `State` durations `/_shardline/limits` shows and changes (seconds).
_KNOBS = ("reshard_seconds", "iterator_ttl_seconds", "subscription_seconds", "consumer_creating_seconds")


class ShardlineRoutes:
    """WSGI middleware: `/_shardline/*` here, everything else to moto."""

    def __init__(self, app: Enforcer, chaos: Any = None) -> None:
        self.app = app
        self.chaos = chaos  # the ChaosState of `local.endpoint.chaos`, when a profile is active

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        serving(environ.get("HTTP_USER_AGENT", ""))  # before moto answers: what it meters is whose
        if not path.startswith("/_shardline/"):
            return self.app(environ, start_response)
        method = environ.get("REQUEST_METHOD", "GET")
        if path == "/_shardline/health":
            return _json(start_response, {"ok": True})
        if path == "/_shardline/kinesis" and method == "GET":
            return _json(start_response, kinesis_counters())
        if path == "/_shardline/metrics" and method == "GET":
            from urllib.parse import parse_qs

            after = parse_qs(environ.get("QUERY_STRING", "")).get("after", ["0"])[0]
            return _json(start_response, SERVICE_METRICS.since(int(after) if after.isdigit() else 0))
        if path == "/_shardline/usage":
            from urllib.parse import parse_qs

            from .metering import reading

            reset = method == "POST" or parse_qs(environ.get("QUERY_STRING", "")).get("reset") == ["1"]
            return _json(start_response, reading(reset=reset))
        if path == "/_shardline/iam":
            if method == "PUT":
                length = int(environ.get("CONTENT_LENGTH") or 0)
                self.app.install(json.loads(environ["wsgi.input"].read(length) or b"{}"))
            return _json(start_response, self.app.report())
        if path == "/_shardline/chaos" and method == "GET":
            none = {"profile": "none", "active": False, "injected": {}, "reshards": []}
            return _json(start_response, self.chaos.report() if self.chaos is not None else none)
        if path == "/_shardline/limits":
            from .kinesis.fixes import STATE

            if method == "PUT":
                length = int(environ.get("CONTENT_LENGTH") or 0)
                change = json.loads(environ["wsgi.input"].read(length) or b"{}")
                STATE.writes_limited = bool(change.get("writes", STATE.writes_limited))
                STATE.reads_limited = bool(change.get("reads", STATE.reads_limited))
                for knob in _KNOBS:
                    setattr(STATE, knob, float(change.get(knob, getattr(STATE, knob))))
            return _json(start_response, {
                "writes": STATE.writes_limited, "reads": STATE.reads_limited,
                **{knob: getattr(STATE, knob) for knob in _KNOBS},
            })  # fmt: skip
        return _json(start_response, {"error": f"no route {method} {path}"}, status="404 Not Found")


def _stop_tracking_model_instances() -> None:
    """moto keeps every model object it ever creates in a class-wide list (`instances_tracked`, for
    its reset API, which the endpoint never calls). Each DynamoDB update deep-copies its item, so
    the list grew by ~1.3 KB per update for good: 2 GB over a million counted records in the soak.
    The endpoint creates its model objects untracked."""
    from moto.core.common_models import BaseModel

    def untracked(cls: type, *args: Any, **kwargs: Any) -> Any:
        return object.__new__(cls)

    BaseModel.__new__ = untracked  # type: ignore[method-assign]
    for model_class in _subclasses(BaseModel):
        tracked = getattr(model_class, "instances_tracked", None)
        if isinstance(tracked, list):
            tracked.clear()


def _cache_action_names() -> None:
    """moto finds a request's action among its response class's methods with `inspect.getmembers`
    on every request (~0.15 ms of each call's CPU, a GetItem's or a PutRecord's alike). The methods
    are all in place before the endpoint serves (moto's, and the ones `serve` installs first): the
    names are listed once per class."""
    from moto.core import responses

    core_responses: Any = responses  # the name is moto's import, not its export
    listed = core_responses.method_names_from_class
    names: dict[type, list[str]] = {}

    def method_names_from_class(clazz: Any) -> list[str]:
        found = names.get(clazz)
        if found is None:
            found = names[clazz] = listed(clazz)
        return found

    core_responses.method_names_from_class = method_names_from_class


def _backend_lookups_without_the_lock() -> None:
    """moto's `BackendDict[account]` takes its process-wide backend lock on every request of every
    service, lists the dict's keys, and checks its registration with `in` over every BackendDict
    (a Python `__eq__` each): a tenth of the endpoint's busy CPU in a drain, and a lock every
    request thread queued on. An account's backend in the dict was registered when it was created
    (`_create_account_specific_backend` does both under the lock; only moto's reset undoes them, and
    the endpoint never resets: `/moto-api/` is 404): that look-up is answered from the dict, any
    other goes through moto's own."""
    from moto.core.base_backend import BackendDict

    create_and_get = BackendDict.__getitem__

    def getitem(self: Any, account_id: str) -> Any:
        try:
            return dict.__getitem__(self, account_id)
        except KeyError:
            return create_and_get(self, account_id)

    BackendDict.__getitem__ = getitem  # type: ignore[method-assign]


def _subclasses(cls: type) -> list[type]:
    found: list[type] = cls.__subclasses__()
    return found + [sub for child in found for sub in _subclasses(child)]


def kinesis_counters() -> dict[str, Any]:
    """The `/_shardline/kinesis` answer: per stream, per shard, state and counts (no record is touched)."""
    from moto.kinesis.models import kinesis_backends

    from .kinesis.fixes import COUNTER_NAMES, STATE

    streams: dict[str, Any] = {}
    with STATE.lock:
        for account, regions in list(kinesis_backends.items()):
            for region, backend in list(regions.items()):
                for name, stream in backend.streams.items():
                    shards = {}
                    for shard_id, shard in stream.shards.items():
                        counts = STATE.counters.get((account, name, shard_id), [0] * len(COUNTER_NAMES))
                        shards[shard_id] = {
                            "open": shard.is_open,
                            "parents": [p for p in (shard.parent, shard.adjacent_parent) if p],
                            "hash_key_range": [str(shard.starting_hash), str(shard.ending_hash)],
                            **dict(zip(COUNTER_NAMES, counts, strict=True)),
                        }
                    streams[name] = {
                        "account": account,
                        "region": region,
                        "status": stream.status,
                        "open_shards": sum(1 for shard in stream.shards.values() if shard.is_open),
                        "shards": shards,
                    }
    limited = {"writes": STATE.writes_limited, "reads": STATE.reads_limited}
    return {"limits": limited, "streams": streams}


def _json(start_response: Callable[..., Any], body: Any, status: str = "200 OK") -> list[bytes]:
    payload = json.dumps(body).encode()
    start_response(status, [("Content-Type", "application/json"), ("Content-Length", str(len(payload)))])
    return [payload]


def serve(
    host: str,
    port: int,
    *,
    limits: bool = True,
    on_ready: Callable[[int], None] | None = None,
    parent_pid: int | None = None,
    chaos: ChaosProfile | None = None,
) -> None:
    """Serve until SIGTERM or SIGINT (or `parent_pid` is gone); `on_ready(port)` once listening."""
    os.environ.setdefault("MOTO_ACCOUNT_ID", ACCOUNT)  # moto reads it on every request
    os.environ.setdefault("AWS_DEFAULT_REGION", REGION)
    from moto import backends as moto_backends
    from moto.kinesis import responses as kinesis_moto_responses
    from moto.moto_server.werkzeug_app import (
        DomainDispatcherApplication,
        MotoRequestHandler,
        create_backend_app,
    )
    from werkzeug.serving import ThreadedWSGIServer, make_server

    from ..limits import ShardLimits
    from . import dynamodb, metering
    from .kinesis import control, responses, writes
    from .kinesis.fixes import STATE, apply
    from .kinesis.subscribe import Subscriptions

    STATE.limits = ShardLimits()
    STATE.writes_limited = STATE.reads_limited = limits
    apply(STATE)  # the models first: the responses read their state
    responses.install(kinesis_moto_responses.KinesisResponse)
    control.install(kinesis_moto_responses.KinesisResponse)
    writes.install()
    metering.install()  # before dynamodb.apply: its lock then holds a write with its metering
    dynamodb.apply()
    # moto lists its own package folder on every request, under its dispatcher's lock (~1.3 ms each)
    moto_modules = tuple(moto_backends.list_of_moto_modules())
    moto_backends.list_of_moto_modules = lambda: moto_modules
    _cache_action_names()
    _stop_tracking_model_instances()
    _backend_lookups_without_the_lock()

    class QuietHandler(MotoRequestHandler):
        def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
            pass  # a line per request costs the server time and says nothing a counter does not

    dispatcher = DomainDispatcherApplication(create_backend_app)
    app: Callable[..., Iterable[bytes]] = Subscriptions(dispatcher)  # under the chaos: it refuses it too
    chaos_state = resharder = None
    if chaos is not None and chaos.active:
        from .chaos import ChaosMiddleware, ChaosState
        from .resharder import Resharder

        chaos_state = ChaosState(chaos)
        STATE.entry_fault = chaos_state.entry_fault
        app = ChaosMiddleware(app, chaos_state)
    routes = BrowserGuard(ShardlineRoutes(Enforcer(app), chaos_state))
    server = cast(  # threaded: make_server's ThreadedWSGIServer, declared as its base class
        ThreadedWSGIServer, make_server(host, port, routes, threaded=True, request_handler=QuietHandler)
    )
    server.daemon_threads = True
    if chaos_state is not None:
        resharder = Resharder(chaos_state, f"http://{host}:{server.server_port}", _records_written)
        resharder.start()

    def stop(signum: int, frame: Any) -> None:
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    if parent_pid is not None:
        threading.Thread(target=_exit_with_parent, args=(parent_pid, server), daemon=True).start()
    if on_ready is not None:
        on_ready(server.server_port)
    # Build the usual services' apps while the first requests come in, not on them.
    threading.Thread(target=_preload, args=(dispatcher,), daemon=True).start()
    try:
        server.serve_forever(poll_interval=0.1)
    finally:
        if resharder is not None:
            resharder.stop()
        server.server_close()


def _records_written() -> dict[str, int]:
    """Stream name -> records written so far (every account), from the Kinesis counters."""
    from .kinesis.fixes import STATE

    totals: dict[str, int] = {}
    with STATE.lock:
        for (_, stream, _), counts in STATE.counters.items():
            totals[stream] = totals.get(stream, 0) + counts[0]
    return totals


def _exit_with_parent(parent_pid: int, server: Any) -> None:
    """Stop serving once the parent has died (we are re-parented), so a killed parent leaves no orphan."""
    while os.getppid() == parent_pid:
        time.sleep(0.5)
    server.shutdown()


def _preload(dispatcher: Any) -> None:
    for service in _PRELOADED:
        with dispatcher.lock:
            if service not in dispatcher.app_instances:
                dispatcher.app_instances[service] = dispatcher.create_app(service)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=4566, help="0: any free port (printed once ready)")
    parser.add_argument("--no-limits", action="store_true", help="do not enforce Kinesis's per-shard limits")
    parser.add_argument("--parent-pid", type=int, help="stop when this process is gone")
    parser.add_argument("--chaos", help="a chaos profile as JSON (`ChaosProfile.to_json()`)")
    args = parser.parse_args(argv)
    chaos = profile_from_dict(json.loads(args.chaos)) if args.chaos else None

    def announce(port: int) -> None:
        print(f"{READY_LINE} {port}", flush=True)

    serve(
        args.host,
        args.port,
        limits=not args.no_limits,
        on_ready=announce,
        parent_pid=args.parent_pid,
        chaos=chaos,
    )
