"""The local runtime's one AWS endpoint: every service moto serves, on one port, Kinesis made right.

    python -m local.endpoint --host 127.0.0.1 --port 4566 [--no-limits]

runs moto's all-services WSGI app in this process under a threaded server, with moto's Kinesis
corrected and Kinesis's per-shard limits enforced for every client (`local.kinesis_fixes`), moto's
DynamoDB writes made atomic and its transactions cheap (`local.dynamodb_fixes`), and a
few routes of its own under `/_shardline/`:

- `GET /_shardline/health`: 200 once serving;
- `GET /_shardline/kinesis`: per stream and shard, open or closed, parents, records and bytes
  written, write and read throttles, GetRecords calls (for `status` and the dashboard);
- `GET|PUT /_shardline/limits`: whether writes and reads are limited; PUT `{"writes": false}`
  turns one off (or on) while running;
- `GET /_shardline/metrics?after=N`: the Kinesis and DynamoDB metrics AWS would publish, per second
  (`local.service_metrics`);
- `GET /_shardline/chaos`: the chaos profile (`--chaos '<profile JSON>'`, see `local.chaos`), every
  fault injected so far by type, and the reshards done (`local.endpoint_chaos`).

`Endpoint` starts it as a child process, waits until it answers, and stops it (no orphan):

    with Endpoint(port=0) as endpoint:   # port 0: a free one, chosen by the child
        boto3.client("kinesis", endpoint_url=endpoint.url, ...)
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import IO, Any

from local.chaos import ChaosProfile, profile_from_dict
from local.model import ACCOUNT, REGION
from local.service_metrics import SERVICE_METRICS

REPO_ROOT = Path(__file__).resolve().parents[1]
READY_LINE = "shardline-endpoint-ready"
_PRELOADED = ("kinesis", "dynamodb", "sqs", "s3", "logs")


class Endpoint:
    """The endpoint as a child process on `host:port` (0: any free port); `start()` waits until ready."""

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 4566,
        *,
        limits: bool = True,
        log_path: Path | None = None,
        startup_timeout: float = 60.0,
        chaos: ChaosProfile | None = None,
    ) -> None:
        self.host = host
        self.port = port
        self.limits = limits
        self.chaos = chaos
        self.log_path = log_path
        self.startup_timeout = startup_timeout
        self.started_in = 0.0  # seconds from spawn to ready
        self._process: subprocess.Popen[str] | None = None
        self._log: IO[str] | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        """The endpoint process's id while it runs (its memory is what the soak watches)."""
        return self._process.pid if self._process is not None else None

    def start(self) -> Endpoint:
        began = time.monotonic()
        command = [sys.executable, "-m", "local.endpoint", "--host", self.host, "--port", str(self.port),
                   "--parent-pid", str(os.getpid())]  # fmt: skip
        if not self.limits:
            command.append("--no-limits")
        if self.chaos is not None and self.chaos.active:
            command += ["--chaos", self.chaos.to_json()]
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")]),
        }
        if self.log_path is not None:
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
            self._log = self.log_path.open("a", encoding="utf-8")
        self._process = subprocess.Popen(
            command,
            cwd=REPO_ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=self._log,
            text=True,
        )
        try:
            self.port = self._await_ready_line()
            if not wait_ready(self.url, timeout=max(1.0, began + self.startup_timeout - time.monotonic())):
                raise RuntimeError(f"the endpoint at {self.url} did not answer")
        except BaseException:
            self.stop()
            raise
        self.started_in = time.monotonic() - began
        return self

    def _await_ready_line(self) -> int:
        """The port the child bound, from the line it prints once listening."""
        assert self._process is not None and self._process.stdout is not None
        found: list[int] = []
        ready = threading.Event()
        stdout, log = self._process.stdout, self._log

        def read() -> None:
            # Drains stdout for the child's whole life: a full pipe would block anything moto prints.
            try:
                for line in stdout:
                    if not found and line.startswith(READY_LINE):
                        found.append(int(line.split()[1]))
                        ready.set()
                    elif log is not None and not log.closed:
                        log.write(line)
            except (OSError, ValueError):
                pass  # closed by stop()
            finally:
                ready.set()

        threading.Thread(target=read, daemon=True, name="endpoint-stdout").start()
        ready.wait(self.startup_timeout)
        if not found:
            code = self._process.poll()
            raise RuntimeError(
                f"the endpoint did not start (exit code {code}); see {self.log_path or 'stderr'}"
            )
        return found[0]

    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the child (SIGTERM, then SIGKILL after `timeout`) and wait for it; safe to call twice."""
        process, self._process = self._process, None
        if process is not None:
            if process.poll() is None:
                process.terminate()
                try:
                    process.wait(timeout)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
            if process.stdout is not None:
                process.stdout.close()
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self) -> Endpoint:
        return self.start() if self._process is None else self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def wait_ready(url: str, timeout: float = 30.0) -> bool:
    """Whether `GET {url}/_shardline/health` answers 200 within `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(f"{url}/_shardline/health", timeout=2) as response:
                if response.status == 200:
                    return True
        except OSError:
            pass
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)


# --- in the child ---------------------------------------------------------------------------------------


class ShardlineRoutes:
    """WSGI middleware: `/_shardline/*` here, everything else to moto."""

    def __init__(self, app: Callable[..., Iterable[bytes]], chaos: Any = None) -> None:
        self.app = app
        self.chaos = chaos  # the ChaosState of `local.endpoint_chaos`, when a profile is active

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
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
        if path == "/_shardline/chaos" and method == "GET":
            none = {"profile": "none", "active": False, "injected": {}, "reshards": []}
            return _json(start_response, self.chaos.report() if self.chaos is not None else none)
        if path == "/_shardline/limits":
            from local.kinesis_fixes import STATE

            if method == "PUT":
                length = int(environ.get("CONTENT_LENGTH") or 0)
                change = json.loads(environ["wsgi.input"].read(length) or b"{}")
                STATE.writes_limited = bool(change.get("writes", STATE.writes_limited))
                STATE.reads_limited = bool(change.get("reads", STATE.reads_limited))
            return _json(start_response, {"writes": STATE.writes_limited, "reads": STATE.reads_limited})
        return _json(start_response, {"error": f"no route {method} {path}"}, status="404 Not Found")


def _stop_tracking_model_instances() -> None:
    """moto keeps every model object it ever creates in a class-wide list (`instances_tracked`, for
    its reset API, which the endpoint never calls). Each DynamoDB update deep-copies its item, so
    the list grew by ~1.3 KB per update for good: 2 GB over a million counted records in the soak.
    The endpoint creates its model objects untracked."""
    from moto.core.common_models import BaseModel

    def untracked(cls: type, *args: Any, **kwargs: Any) -> Any:
        return object.__new__(cls)

    BaseModel.__new__ = untracked  # type: ignore[method-assign, assignment]
    for model_class in _subclasses(BaseModel):
        tracked = getattr(model_class, "instances_tracked", None)
        if isinstance(tracked, list):
            tracked.clear()


def _subclasses(cls: type) -> list[type]:
    found = cls.__subclasses__()
    return found + [sub for child in found for sub in _subclasses(child)]


def kinesis_counters() -> dict[str, Any]:
    """The `/_shardline/kinesis` answer: per stream, per shard, state and counts (no record is touched)."""
    from moto.kinesis.models import kinesis_backends

    from local.kinesis_fixes import COUNTER_NAMES, STATE

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
    from werkzeug.serving import make_server

    from local import dynamodb_fixes, kinesis_responses
    from local.kinesis_fixes import STATE, apply
    from local.limits import ShardLimits

    STATE.limits = ShardLimits()
    STATE.writes_limited = STATE.reads_limited = limits
    apply(STATE)  # the models first: the responses read their state
    kinesis_responses.install(kinesis_moto_responses.KinesisResponse)
    dynamodb_fixes.apply()
    # moto lists its own package folder on every request, under its dispatcher's lock (~1.3 ms each)
    moto_modules = tuple(moto_backends.list_of_moto_modules())
    moto_backends.list_of_moto_modules = lambda: moto_modules
    _stop_tracking_model_instances()

    class QuietHandler(MotoRequestHandler):
        def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
            pass  # a line per request costs the server time and says nothing a counter does not

    dispatcher = DomainDispatcherApplication(create_backend_app)
    app: Callable[..., Iterable[bytes]] = dispatcher
    chaos_state = resharder = None
    if chaos is not None and chaos.active:
        from local.endpoint_chaos import ChaosMiddleware, ChaosState, Resharder

        chaos_state = ChaosState(chaos)
        STATE.entry_fault = chaos_state.entry_fault
        app = ChaosMiddleware(dispatcher, chaos_state)
    routes = ShardlineRoutes(app, chaos_state)
    server = make_server(host, port, routes, threaded=True, request_handler=QuietHandler)
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
    from local.kinesis_fixes import STATE

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


if __name__ == "__main__":
    main()
