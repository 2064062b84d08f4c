"""Lambda functions run as Lambda runs them: warm worker processes, one invocation at a time each.

    functions = Functions(app.functions, endpoint_url="http://127.0.0.1:4566", log_dir=Path("logs"))
    functions.start()                      # one warm worker per function, started in parallel
    result = functions.invoke("shardline-dev-producer", event)   # an InvokeResult; thread-safe
    functions.stats()                      # per function: invocations, errors, timeouts, ...
    functions.close()                      # every worker stopped

Each worker is a process running `local/_worker.py` (Lambda's Python runtime loop) with the
function's environment plus Lambda's reserved variables and the local endpoint. A function gets
more workers as invocations overlap, up to its reserved concurrency (else `max_workers`); beyond
that an invocation waits for a free worker. At the timeout the worker is killed (SIGKILL) and a new
one started, as Lambda replaces its execution environment; a worker that dies mid-invocation is
replaced too. Events and results cross the process boundary as JSON, over a socket pair (stdout and
stderr are the function's log: `log_dir/<function name>.log`, with Lambda's START/END/REPORT lines
written around each invocation). Workers also exit by themselves when this process dies: each
holds the read end of a pipe whose only write end is here.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from local.model import ACCESS_KEY, REGION, SECRET_KEY, Function, InvokeResult

WORKER_MAIN = Path(__file__).with_name("_worker.py")
INIT_TIMEOUT_SECONDS = 10.0  # Lambda's limit on the init phase (imports and module-level code)
MAX_PAYLOAD_BYTES = 6_291_456  # synchronous Invoke: request and response, 6 MB each
MAX_RESPONSE_BYTES = 6_291_556  # the figure Lambda names in Function.ResponseSizeTooLarge
RUNTIME = "python3.12"
DURATIONS_KEPT = 10_000
EXIT_GRACE_SECONDS = (
    2.0  # for a worker whose connection closed to finish exiting  # for the percentiles in stats()
)


class RequestTooLargeError(Exception):
    """Invoke's RequestTooLargeException (HTTP 413): the event is over 6 MB; nothing was invoked."""


class TooManyRequestsError(Exception):
    """Invoke's TooManyRequestsException (HTTP 429): the function's reserved concurrency is 0."""


def log_stream_name() -> str:
    """One per execution environment, in Lambda's shape: `2026/11/23/[$LATEST]<32 hex digits>`."""
    return time.strftime("%Y/%m/%d/", time.gmtime()) + "[$LATEST]" + uuid.uuid4().hex


def timestamp() -> str:
    """Lambda's log timestamp, e.g. 2026-11-23T20:19:47.123Z."""
    now = time.time()
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + f".{int(now * 1000) % 1000:03d}Z"


def trace_header() -> str:
    """An X-Ray trace header as Lambda sets `_X_AMZN_TRACE_ID` when tracing is not active."""
    return f"Root=1-{int(time.time()):08x}-{uuid.uuid4().hex[:24]};Parent={uuid.uuid4().hex[:16]};Sampled=0"


def exit_description(returncode: int | None) -> str:
    """How Lambda (a Go program) describes a runtime's exit: `exit status 1`, `signal: killed`."""
    if returncode is None or returncode >= 0:
        return f"exit status {returncode}"
    names = {
        signal.SIGKILL: "killed",
        signal.SIGSEGV: "segmentation fault",
        signal.SIGABRT: "aborted",
        signal.SIGTERM: "terminated",
        signal.SIGINT: "interrupt",
        signal.SIGBUS: "bus error",
    }
    number = -returncode
    return "signal: " + names.get(number, signal.Signals(number).name.lower().removeprefix("sig"))


def error_result(request_id: str, error_type: str, message: str, duration_ms: float) -> InvokeResult:
    payload = {"errorMessage": message, "errorType": error_type}
    return InvokeResult(request_id, payload, "Unhandled", duration_ms)


class FunctionLog:
    """`log_dir/<function>.log`, shared by the function's workers: each write is whole lines, O_APPEND."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
        self._lock = threading.Lock()  # an invocation still ending must not write to a reused fd

    def write(self, *lines: str) -> None:
        with self._lock:
            if self.fd >= 0:
                os.write(self.fd, ("\n".join(lines) + "\n").encode())

    def report(
        self, request_id: str, duration_ms: float, function: Function, worker: Worker, *extra: str
    ) -> None:
        fields = [
            f"REPORT RequestId: {request_id}",
            f"Duration: {duration_ms:.2f} ms",
            f"Billed Duration: {math.ceil(duration_ms)} ms",
            f"Memory Size: {function.memory_mb} MB",
            f"Max Memory Used: {worker.peak_memory_mb()} MB",
            *extra,
        ]
        self.write(f"END RequestId: {request_id}", "\t".join(fields) + "\t")

    def close(self) -> None:
        with self._lock:
            if self.fd >= 0:
                os.close(self.fd)
                self.fd = -1


@dataclass(eq=False)
class Worker:
    """One execution environment: a process and the connection its invocations go over."""

    process: subprocess.Popen[bytes]
    conn: Connection
    log_stream: str
    init_ms: float
    invocations: int = 0
    peak_mb: int = 0  # the last reading, for a worker that is gone

    @property
    def pid(self) -> int:
        return self.process.pid

    def peak_memory_mb(self) -> int:
        """The process's peak resident memory (VmHWM), Lambda's `Max Memory Used`."""
        with contextlib.suppress(OSError), open(f"/proc/{self.pid}/status", "rb") as status:
            for line in status:
                if line.startswith(b"VmHWM:"):
                    self.peak_mb = math.ceil(int(line.split()[1]) / 1024)
        return self.peak_mb

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        self.conn.close()


@dataclass
class InitFailure:
    """An execution environment that did not start: Lambda's error object for the invocation."""

    error: dict[str, Any]


@dataclass
class PoolStats:
    invocations: int = 0
    errors: int = 0
    timeouts: int = 0
    crashes: int = 0
    init_errors: int = 0
    cold_starts: int = 0
    waited: int = 0
    durations: deque[float] = field(default_factory=lambda: deque(maxlen=DURATIONS_KEPT))


class FunctionPool:
    """The workers of one function, up to its concurrency; see the module's description."""

    def __init__(self, function: Function, functions: Functions) -> None:
        self.function = function
        self._owner = functions
        self.limit = (
            function.reserved_concurrency
            if function.reserved_concurrency is not None
            else functions.max_workers
        )
        self.log = FunctionLog(functions.log_dir / f"{function.name}.log")
        self._cond = threading.Condition()
        self._idle: list[Worker] = []  # most recently used last: reused first, as Lambda does
        self._count = 0  # workers alive or starting, busy or idle
        self._alive: set[Worker] = set()
        self._starting: set[subprocess.Popen[bytes]] = set()
        self._closed = False
        self._stats = PoolStats()
        self._replacers: list[threading.Thread] = []

    # -- starting workers ---------------------------------------------------------------------

    def prewarm(self) -> None:
        """Start one worker now (for start() and to replace one that was killed), if there is room."""
        with self._cond:
            if self._closed or self._count >= self.limit:
                return
            self._count += 1
        self._add_idle(self._spawn())

    def _spawn(self) -> Worker | InitFailure:
        try:
            return self._start_process()
        except Exception as exc:  # e.g. a code folder that does not exist: the slot is given back
            with self._cond:
                self._stats.init_errors += 1
            return InitFailure(
                {"errorMessage": f"{type(exc).__name__}: {exc}", "errorType": "Runtime.Unknown"}
            )

    def _add_idle(self, worker: Worker | InitFailure) -> None:
        with self._cond:
            if isinstance(worker, Worker) and not self._closed:
                self._idle.append(worker)
            else:
                self._count -= 1
            self._cond.notify()
        if isinstance(worker, Worker) and self._closed:
            self._retire(worker)

    def _start_process(self) -> Worker | InitFailure:
        """A new worker process, once its handler is imported; or why it could not start."""
        function, owner = self.function, self._owner
        ours, theirs = socket.socketpair()
        stream = log_stream_name()
        config = {
            "ipc_fd": theirs.fileno(),
            "lifeline_fd": owner.lifeline_read,
            "code_dir": str(function.code_dir.resolve()),
            "layer_python_dirs": [str((layer / "python").resolve()) for layer in function.layer_dirs],
        }
        self.log.write(f"INIT_START Runtime Version: {RUNTIME} (local, CPython {sys.version.split()[0]})")
        started = time.monotonic()  # Init Duration: the runtime's start-up and the handler's import
        process = subprocess.Popen(
            [sys.executable, "-I", str(WORKER_MAIN), json.dumps(config)],
            cwd=function.code_dir,
            env=owner.environment(function, stream),
            stdin=subprocess.DEVNULL,
            stdout=self.log.fd,
            stderr=self.log.fd,
            pass_fds=(theirs.fileno(), owner.lifeline_read),
        )
        theirs.close()
        conn = Connection(ours.detach())
        with self._cond:
            self._starting.add(process)
            if self._closed:  # close() ran while this one was being started
                process.kill()
        try:
            failure = self._await_ready(process, conn, started)
        finally:
            with self._cond:
                self._starting.discard(process)
        if isinstance(failure, InitFailure):
            process.kill()
            process.wait()
            conn.close()
            with self._cond:
                self._stats.init_errors += 1
            return failure
        worker = Worker(process, conn, stream, init_ms=failure)
        with self._cond:
            self._alive.add(worker)
        return worker

    def _await_ready(
        self, process: subprocess.Popen[bytes], conn: Connection, started: float
    ) -> float | InitFailure:
        """The worker's init duration in ms, or the init failure it reported (or died or hung of)."""
        try:
            if not conn.poll(self._owner.init_timeout):
                message = f"{timestamp()} Init timed out after {self._owner.init_timeout:.2f} seconds"
                self.log.write(message)
                return InitFailure({"errorMessage": message, "errorType": "Sandbox.Timedout"})
            header_line, _, body = conn.recv_bytes().partition(b"\n")
        except (EOFError, OSError):
            process.wait()
            message = f"Error: Runtime exited with error: {exit_description(process.returncode)}"
            error = {"errorMessage": message, "errorType": "Runtime.ExitError"}
        else:
            init_ms = (time.monotonic() - started) * 1000
            if json.loads(header_line)["ready"]:
                return init_ms
            error = json.loads(body)
        self.log.write(
            f"INIT_REPORT Init Duration: {(time.monotonic() - started) * 1000:.2f} ms\tPhase: init"
            f"\tStatus: error\tError Type: {error['errorType']}"
        )
        return InitFailure(error)

    # -- invoking ------------------------------------------------------------------------------

    def invoke(self, event: bytes) -> InvokeResult:
        with self._cond:
            if self.limit <= 0:
                raise TooManyRequestsError(
                    f"Rate Exceeded. (reserved concurrency of {self.function.name} is 0)"
                )
            if not self._idle and self._count >= self.limit:
                self._stats.waited += 1
            while not self._idle and self._count >= self.limit and not self._closed:
                self._cond.wait()
            if self._closed:
                raise RuntimeError("the function pool is closed")
            if self._idle:
                worker: Worker | InitFailure | None = self._idle.pop()
            else:
                worker = None
                self._count += 1
        request_id = str(uuid.uuid4())
        if worker is None:
            worker = self._spawn()
            with self._cond:
                self._stats.cold_starts += 1
        if isinstance(worker, InitFailure):
            self._add_idle(worker)  # gives the slot back
            result = InvokeResult(request_id, {**worker.error, "requestId": ""}, "Unhandled", 0.0)
        else:
            result = self._run(worker, request_id, event)
        with self._cond:
            stats = self._stats
            stats.invocations += 1
            stats.errors += result.function_error is not None
            stats.durations.append(result.duration_ms)
        return result

    def _run(self, worker: Worker, request_id: str, event: bytes) -> InvokeResult:
        """One invocation on `worker`, which goes back to the idle list, or is killed and replaced."""
        function, log = self.function, self.log
        timeout = function.timeout_seconds
        deadline_ms = int((time.time() + timeout) * 1000)
        header = {"id": request_id, "deadline_ms": deadline_ms, "arn": function.arn, "trace": trace_header()}
        extra = [f"Init Duration: {worker.init_ms:.2f} ms"] if worker.invocations == 0 else []
        worker.invocations += 1
        log.write(f"START RequestId: {request_id} Version: $LATEST")
        started = time.monotonic()
        try:
            worker.conn.send_bytes(json.dumps(header).encode() + b"\n" + event)
            answered = worker.conn.poll(max(0.0, started + timeout - time.monotonic()))
            message = worker.conn.recv_bytes() if answered else None
        except (EOFError, OSError):
            return self._crashed(worker, request_id, (time.monotonic() - started) * 1000, extra)
        if message is None:
            return self._timed_out(worker, request_id, time.monotonic() - started, extra)
        header_line, _, body = message.partition(b"\n")
        reply = json.loads(header_line)
        duration_ms = reply["ms"]
        log.report(request_id, duration_ms, function, worker, *extra)
        self._add_idle(worker)
        if len(body) > MAX_RESPONSE_BYTES:
            return error_result(
                request_id,
                "Function.ResponseSizeTooLarge",
                f"Response payload size exceeded maximum allowed payload size ({MAX_RESPONSE_BYTES} bytes).",
                duration_ms,
            )
        if reply["ct"] != "application/json":
            return InvokeResult(request_id, body, None, duration_ms)
        return InvokeResult(request_id, json.loads(body), None if reply["ok"] else "Unhandled", duration_ms)

    def _timed_out(self, worker: Worker, request_id: str, elapsed_s: float, extra: list[str]) -> InvokeResult:
        message = f"{timestamp()} {request_id} Task timed out after {elapsed_s:.2f} seconds"
        worker.peak_memory_mb()
        worker.kill()
        self.log.write(message)
        self.log.report(request_id, elapsed_s * 1000, self.function, worker, *extra, "Status: timeout")
        self._replace(worker, timed_out=True)
        return error_result(request_id, "Sandbox.Timedout", message, elapsed_s * 1000)

    def _crashed(self, worker: Worker, request_id: str, elapsed_ms: float, extra: list[str]) -> InvokeResult:
        with contextlib.suppress(subprocess.TimeoutExpired):
            worker.process.wait(timeout=EXIT_GRACE_SECONDS)  # its own exit status, once it is done exiting
        worker.kill()
        message = f"RequestId: {request_id} Error: Runtime exited with error: " + exit_description(
            worker.process.returncode
        )
        self.log.write(message, "Runtime.ExitError")
        self.log.report(
            request_id,
            elapsed_ms,
            self.function,
            worker,
            *extra,
            "Status: error",
            "Error Type: Runtime.ExitError",
        )
        self._replace(worker, timed_out=False)
        return error_result(request_id, "Runtime.ExitError", message, elapsed_ms)

    def _replace(self, worker: Worker, *, timed_out: bool) -> None:
        """A killed worker's slot is freed and a new worker started in the background."""
        with self._cond:
            self._alive.discard(worker)
            self._count -= 1
            self._stats.timeouts += timed_out
            self._stats.crashes += not timed_out
            self._cond.notify()
            if self._closed:
                return
            replacer = threading.Thread(
                target=self.prewarm, name=f"replace-{self.function.name}", daemon=True
            )
            self._replacers = [thread for thread in self._replacers if thread.is_alive()] + [replacer]
            replacer.start()

    def _retire(self, worker: Worker) -> None:
        worker.kill()
        with self._cond:
            self._alive.discard(worker)

    # -- reporting and stopping ----------------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        with self._cond:
            stats, durations = self._stats, sorted(self._stats.durations)
            busy = len(self._alive) - len(self._idle)
            counts = {
                name: getattr(stats, name)
                for name in (
                    "invocations",
                    "errors",
                    "timeouts",
                    "crashes",
                    "init_errors",
                    "cold_starts",
                    "waited",
                )
            }
            workers = len(self._alive)

        def percentile(share: float) -> float | None:
            return (
                round(durations[min(len(durations) - 1, int(share * len(durations)))], 3)
                if durations
                else None
            )

        return {
            **counts,
            "workers": workers,
            "busy": busy,
            "concurrency": self.limit,
            "p50_ms": percentile(0.50),
            "p99_ms": percentile(0.99),
        }

    def close(self) -> None:
        with self._cond:
            self._closed = True
            workers, starting = list(self._alive), list(self._starting)
            self._idle.clear()
            self._cond.notify_all()
        for process in starting:
            if process.poll() is None:
                process.kill()
        for worker in workers:
            self._retire(worker)
        with self._cond:
            replacers = list(self._replacers)
        for thread in replacers:  # each sees the pool closed and kills what it started
            thread.join(timeout=self._owner.init_timeout + 5)


class Functions:
    """Every function of the app in warm workers: the local `Invoker` (see `local.model`)."""

    def __init__(
        self,
        functions: Iterable[Function],
        *,
        endpoint_url: str,
        log_dir: Path,
        max_workers: int = 4,
        init_timeout: float = INIT_TIMEOUT_SECONDS,
    ) -> None:
        self.endpoint_url = endpoint_url
        self.log_dir = Path(log_dir)
        self.max_workers = max_workers
        self.init_timeout = init_timeout
        self.lifeline_read, self._lifeline_write = os.pipe()
        self._pools = {function.name: FunctionPool(function, self) for function in functions}

    def environment(self, function: Function, log_stream: str) -> dict[str, str]:
        """The function's variables, then Lambda's reserved ones and the local endpoint on top
        (Lambda refuses reserved names in a function's configuration)."""
        environment = {
            "PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"),
            "LANG": "en_US.UTF-8",
            "POWERTOOLS_TRACE_DISABLED": "true",  # no X-Ray daemon here
            **function.environment,
            "_HANDLER": function.handler,
            "AWS_EXECUTION_ENV": f"AWS_Lambda_{RUNTIME}",
            "AWS_LAMBDA_FUNCTION_NAME": function.name,
            "AWS_LAMBDA_FUNCTION_VERSION": "$LATEST",
            "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": str(function.memory_mb),
            "AWS_LAMBDA_INITIALIZATION_TYPE": "on-demand",
            "AWS_LAMBDA_LOG_GROUP_NAME": function.log_group or f"/aws/lambda/{function.name}",
            "AWS_LAMBDA_LOG_STREAM_NAME": log_stream,
            "AWS_REGION": REGION,
            "AWS_DEFAULT_REGION": REGION,
            "LAMBDA_TASK_ROOT": str(function.code_dir.resolve()),
            "TZ": ":UTC",
            "AWS_ENDPOINT_URL": self.endpoint_url,
            "AWS_ACCESS_KEY_ID": ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
            "AWS_CONFIG_FILE": os.devnull,  # as in Lambda: no profile or config file applies
            "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
        }
        return environment

    def start(self) -> None:
        """Start one warm worker per function, all at once; returns when each is ready or failed
        (a failed one is retried by its first invocation, as Lambda re-runs init)."""
        threads = [
            threading.Thread(target=pool.prewarm, name=f"prewarm-{name}")
            for name, pool in self._pools.items()
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    def invoke(self, function_name: str, event: Any) -> InvokeResult:
        """Invoke synchronously (RequestResponse). `event` is any JSON value, or bytes already JSON.
        Raises KeyError for an unknown function, RequestTooLargeError over 6 MB."""
        pool = self._pools[function_name]
        payload = (
            event if isinstance(event, bytes | bytearray) else json.dumps(event, ensure_ascii=False).encode()
        )
        if len(payload) > MAX_PAYLOAD_BYTES:
            raise RequestTooLargeError(
                f"Request must be smaller than {MAX_PAYLOAD_BYTES} bytes for the InvokeFunction operation"
            )
        return pool.invoke(bytes(payload))

    def stats(self) -> dict[str, dict[str, Any]]:
        """Per function: invocations, errors, timeouts, crashes, init_errors, cold_starts, waited
        (invocations that found every worker busy at the concurrency limit), workers, busy,
        concurrency, p50_ms and p99_ms (durations of the last 10,000 invocations)."""
        return {name: pool.stats() for name, pool in self._pools.items()}

    def log_path(self, function_name: str) -> Path:
        return self._pools[function_name].log.path

    def close(self) -> None:
        """Stop every worker (idle, busy or starting) and wait for each; idempotent."""
        for pool in self._pools.values():
            pool.close()
        if self._lifeline_write >= 0:
            os.close(self._lifeline_write)
            os.close(self.lifeline_read)
            self._lifeline_write = -1
            for pool in self._pools.values():
                pool.log.close()

    def __enter__(self) -> Functions:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
