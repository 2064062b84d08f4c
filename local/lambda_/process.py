"""One Lambda execution environment seen from the runtime: a worker process and its log lines.

`start_worker` starts `local/lambda_/worker.py` for a function and waits until its handler is imported;
`Worker.invoke` hands it one event and waits for the answer until the function's timeout, killing
it then (Lambda's `Sandbox.Timedout`) or noticing that it died (`Runtime.ExitError`). Around each
invocation it writes what Lambda writes to the function's log: `START`, `END`, `REPORT` (and
`INIT_START`/`INIT_REPORT` for the init phase), between which the worker's stdout and stderr land.
The pool that decides which worker runs what is `local.lambda_.workers`.
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
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from ..app.model import Function, InvokeResult
from . import sandbox
from .runtimes import Packaging

WORKER_MAIN = Path(__file__).with_name("worker.py")
RUNTIME = "python3.12"
MAX_RESPONSE_BYTES = 6_291_556  # the figure Lambda names in Function.ResponseSizeTooLarge
EXIT_GRACE_SECONDS = 2.0  # for a worker whose connection closed to finish exiting
FIRST_SLICE_S = 0.1  # most invocations answer within it: memory is read only for longer ones
MEMORY_SLICE_S = 0.05  # then memory is read this often
PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")


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
    names: dict[int, str] = {
        signal.SIGKILL: "killed",
        signal.SIGSEGV: "segmentation fault",
        signal.SIGTERM: "terminated",
    }
    return "signal: " + names.get(-returncode, signal.Signals(-returncode).name.lower().removeprefix("sig"))


def error_result(request_id: str, error_type: str, message: str, duration_ms: float) -> InvokeResult:
    return InvokeResult(
        request_id, {"errorMessage": message, "errorType": error_type}, "Unhandled", duration_ms
    )


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

    def report(self, request_id: str, duration_ms: float, memory_mb: int, used_mb: int, *extra: str) -> None:
        fields = [
            f"REPORT RequestId: {request_id}",
            f"Duration: {duration_ms:.2f} ms",
            f"Billed Duration: {math.ceil(duration_ms)} ms",
            f"Memory Size: {memory_mb} MB",
            f"Max Memory Used: {used_mb} MB",
            *extra,
        ]
        self.write(f"END RequestId: {request_id}", "\t".join(fields) + "\t")

    def close(self) -> None:
        with self._lock:
            if self.fd >= 0:
                os.close(self.fd)
                self.fd = -1


class Outcome(Enum):
    """What became of the worker after an invocation."""

    WARM = "warm"  # answered (a result or the handler's error): it takes the next one
    TIMED_OUT = "timed out"  # killed at the deadline
    CRASHED = "crashed"  # died mid-invocation
    OUT_OF_MEMORY = "out of memory"  # killed past the function's memory size


class _OutOfMemory(Exception):
    """The worker's resident memory passed the function's memory size; it has been killed."""


@dataclass(frozen=True)
class InitFailure:
    """An execution environment that did not start: Lambda's error object for the invocation."""

    error: dict[str, Any]


@dataclass(eq=False)
class Worker:
    """One execution environment: a process and the connection its invocations go over."""

    function: Function
    process: subprocess.Popen[bytes]
    conn: Connection
    log: FunctionLog
    init_ms: float
    invocations: int = 0
    peak_mb: int = 0  # the last reading, for a worker that is gone
    #: Where an injected kill struck (`local.chaos.profiles.KILL_POINTS`, or "no_commit"), told by the worker
    #: just before it died; None when no kill was injected into the last invocation.
    killed_at: str | None = None
    _kill_lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def pid(self) -> int:
        return self.process.pid

    def peak_memory_mb(self) -> int:
        """The process's peak resident memory (VmHWM), Lambda's `Max Memory Used`."""
        with contextlib.suppress(OSError, ValueError), open(f"/proc/{self.pid}/status", "rb") as status:
            text = status.read()
            start = text.index(b"VmHWM:") + 6
            self.peak_mb = math.ceil(int(text[start : text.index(b"kB", start)]) / 1024)
        return self.peak_mb

    def kill(self) -> None:
        """Kill and reap the process; safe from two threads (close() and a failing invocation)."""
        with self._kill_lock:
            if self.process.poll() is None:
                self.process.kill()
            self.process.wait()
            self.conn.close()

    def invoke(
        self, request_id: str, event: bytes, fault: dict[str, Any] | None = None
    ) -> tuple[InvokeResult, Outcome]:
        """Run one invocation; a worker that timed out, crashed or ran out of memory is killed and
        reaped on return. `fault`: a chaos directive the worker carries out (`local.lambda_.chaos`)."""
        function = self.function
        timeout = function.timeout_seconds
        deadline_ms = int((time.time() + timeout) * 1000)
        header = {"id": request_id, "deadline_ms": deadline_ms, "arn": function.arn, "trace": trace_header()}
        if fault is not None:
            header["fault"] = fault
        extra = [f"Init Duration: {self.init_ms:.2f} ms"] if self.invocations == 0 else []
        self.invocations += 1
        self.killed_at = None
        self.log.write(f"START RequestId: {request_id} Version: $LATEST")
        started = time.monotonic()
        try:
            self.conn.send_bytes(json.dumps(header).encode() + b"\n" + event)
            message = self._await_answer(started + timeout)
        except _OutOfMemory:
            elapsed_ms = (time.monotonic() - started) * 1000
            return self._out_of_memory(request_id, elapsed_ms, extra), Outcome.OUT_OF_MEMORY
        except (EOFError, OSError):
            return self._crashed(request_id, (time.monotonic() - started) * 1000, extra), Outcome.CRASHED
        if message is None:
            return self._timed_out(request_id, time.monotonic() - started, extra), Outcome.TIMED_OUT
        header_line, _, body = message.partition(b"\n")
        reply = json.loads(header_line)
        duration_ms = reply["ms"]
        self.log.report(request_id, duration_ms, function.memory_mb, self.peak_memory_mb(), *extra)
        if len(body) > MAX_RESPONSE_BYTES:
            too_large = (
                f"Response payload size exceeded maximum allowed payload size ({MAX_RESPONSE_BYTES} bytes)."
            )
            return error_result(
                request_id, "Function.ResponseSizeTooLarge", too_large, duration_ms
            ), Outcome.WARM
        if reply["ct"] != "application/json":  # a handler that returned bytes: passed through, as Lambda does
            return InvokeResult(request_id, body, None, duration_ms), Outcome.WARM
        error = None if reply["ok"] else "Unhandled"
        return InvokeResult(request_id, json.loads(body), error, duration_ms), Outcome.WARM

    def _await_answer(self, deadline: float) -> bytes | None:
        """The worker's answer, or None at `deadline` (monotonic). Past the first slice its resident
        memory is watched, as Lambda's does: over the function's memory size, it is killed."""
        limit_bytes = self.function.memory_mb * 1024 * 1024
        wait = FIRST_SLICE_S
        while True:
            if self.conn.poll(max(0.0, min(wait, deadline - time.monotonic()))):
                message = self.conn.recv_bytes()
                if not message.startswith(b'{"dying"'):
                    return message
                self.killed_at = json.loads(message)["dying"]  # a chaos kill, about to happen
                continue
            if time.monotonic() >= deadline:
                return None
            if self.resident_bytes() > limit_bytes:
                self.peak_memory_mb()
                self.kill()
                raise _OutOfMemory
            wait = MEMORY_SLICE_S

    def resident_bytes(self) -> int:
        try:
            with open(f"/proc/{self.pid}/statm", "rb") as statm:
                return int(statm.read().split()[1]) * PAGE_SIZE
        except (OSError, ValueError, IndexError):
            return 0

    def _out_of_memory(self, request_id: str, elapsed_ms: float, extra: list[str]) -> InvokeResult:
        message = f"RequestId: {request_id} Error: Runtime exited with error: signal: killed"
        self.log.write(message, "Runtime.OutOfMemory")
        extra += ["Status: error", "Error Type: Runtime.OutOfMemory"]
        used_mb = max(self.peak_mb, self.function.memory_mb)
        self.log.report(request_id, elapsed_ms, self.function.memory_mb, used_mb, *extra)
        return error_result(request_id, "Runtime.OutOfMemory", message, elapsed_ms)

    def _timed_out(self, request_id: str, elapsed_s: float, extra: list[str]) -> InvokeResult:
        message = f"{timestamp()} {request_id} Task timed out after {elapsed_s:.2f} seconds"
        used_mb = self.peak_memory_mb()
        self.kill()
        self.log.write(message)
        self.log.report(
            request_id, elapsed_s * 1000, self.function.memory_mb, used_mb, *extra, "Status: timeout"
        )
        return error_result(request_id, "Sandbox.Timedout", message, elapsed_s * 1000)

    def _crashed(self, request_id: str, elapsed_ms: float, extra: list[str]) -> InvokeResult:
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=EXIT_GRACE_SECONDS)  # its own exit status, once it is done exiting
        self.kill()
        exit_error = f"Runtime exited with error: {exit_description(self.process.returncode)}"
        message = f"RequestId: {request_id} Error: {exit_error}"
        self.log.write(message, "Runtime.ExitError")
        extra += ["Status: error", "Error Type: Runtime.ExitError"]
        self.log.report(request_id, elapsed_ms, self.function.memory_mb, self.peak_mb, *extra)
        return error_result(request_id, "Runtime.ExitError", message, elapsed_ms)


def _suppressed_init(conn: Connection, log: FunctionLog, started: float, init_timeout: float,
                     function: Function) -> bool:  # fmt: skip
    """Whether the worker gets ready within the function's timeout once the init phase ran out."""
    log.write(f"INIT_REPORT Init Duration: {init_timeout * 1000:.2f} ms\tPhase: init\tStatus: timeout")
    return conn.poll(function.timeout_seconds)


def start_worker(
    function: Function,
    environment: dict[str, str],
    log: FunctionLog,
    *,
    lifeline_fd: int,
    init_timeout: float,
    starting: Callable[[subprocess.Popen[bytes]], None],
    packaging: Packaging | None = None,
) -> Worker | InitFailure:
    """A new worker, once its handler is imported; or why it could not start (the process is then
    gone). `starting` is told of the process as soon as it exists (so that close() can kill it).

    With `packaging` (the function's runtime here) the worker runs on the runtime's interpreter and
    imports only what Lambda would let it: its code, its layers (`public` ones included) and the
    runtime's packages, nothing of this interpreter's site-packages (`-S`). Without, it runs on this
    interpreter with its site-packages, as before packaging existed (tests of the runtime itself)."""
    ours, theirs = socket.socketpair()
    layers = [*function.layer_dirs, *(packaging.public_layers if packaging else ())]
    code_dir = str(function.code_dir.resolve())
    layer_python_dirs = [str((layer / "python").resolve()) for layer in layers]
    runtime_site = str(packaging.site) if packaging and packaging.site else None
    config = {
        "ipc_fd": theirs.fileno(),
        "lifeline_fd": lifeline_fd,
        "code_dir": code_dir,
        "layer_python_dirs": layer_python_dirs,
        "runtime_site": runtime_site,
        "sandboxed": sandbox.refused() is None,
    }
    isolated = packaging is not None and packaging.site is not None
    interpreter = packaging.interpreter if packaging else sys.executable
    version = packaging.version if packaging else sys.version.split()[0]
    argv = sandbox.wrap(
        [interpreter, "-I", *(["-S"] if isolated else []), str(WORKER_MAIN), json.dumps(config)],
        tmp_mb=function.ephemeral_storage_mb,
        keep=[code_dir, *layer_python_dirs, *filter(None, [runtime_site])],
        cwd=code_dir,
    )
    log.write(f"INIT_START Runtime Version: {function.runtime} (local, CPython {version})")
    started = time.monotonic()  # Init Duration: the runtime's start-up and the handler's import
    process = subprocess.Popen(
        argv,
        cwd=function.code_dir,
        env=environment,
        stdin=subprocess.DEVNULL,
        stdout=log.fd,
        stderr=log.fd,
        pass_fds=(theirs.fileno(), lifeline_fd),
    )
    theirs.close()
    conn = Connection(ours.detach())
    starting(process)
    try:
        # Past the init phase's limit, Lambda gives the init another go inside the first invocation,
        # under the function's own timeout ("Phase: invoke"): a slow start is slow, not broken.
        if not conn.poll(init_timeout) and not _suppressed_init(conn, log, started, init_timeout, function):
            message = f"{timestamp()} Task timed out after {function.timeout_seconds:.2f} seconds"
            log.write(message)
            error = {"errorMessage": message, "errorType": "Sandbox.Timedout"}
        else:
            header_line, _, body = conn.recv_bytes().partition(b"\n")
            header = json.loads(header_line)
            if header["ready"]:
                init_ms = (time.monotonic() - started) * 1000
                return Worker(function, process, conn, log, init_ms)
            error = json.loads(body)
    except (EOFError, OSError):
        process.wait()
        message = f"Error: Runtime exited with error: {exit_description(process.returncode)}"
        error = {"errorMessage": message, "errorType": "Runtime.ExitError"}
    process.kill()
    process.wait()
    conn.close()
    log.write(
        f"INIT_REPORT Init Duration: {(time.monotonic() - started) * 1000:.2f} ms\tPhase: init"
        f"\tStatus: error\tError Type: {error['errorType']}"
    )
    return InitFailure(error)
