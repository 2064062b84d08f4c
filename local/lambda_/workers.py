"""Lambda functions run as Lambda runs them: warm worker processes, one invocation at a time each.

    functions = Functions(app.functions, endpoint_url="http://127.0.0.1:4566", log_dir=Path("logs"))
    functions.start()                      # one warm worker per function, started in parallel
    result = functions.invoke("shardline-dev-producer", event)   # an InvokeResult; thread-safe
    functions.stats()                      # per function: invocations, errors, timeouts, ...
    functions.close()                      # every worker stopped

Each worker is a process running `local/lambda_/worker.py` (Lambda's Python runtime loop) with the
function's environment plus Lambda's reserved variables and the local endpoint. A function gets
more workers as invocations overlap, up to `max_workers` or its reserved concurrency if lower;
beyond that an invocation waits for a free worker — unless it is a synchronous caller's
(`wait=False`, API Gateway's) and every execution the function reserved is busy: Lambda throttles
that one (`TooManyRequestsError`) where an event-source mapping's would be retried. At the
timeout the worker is killed (SIGKILL) and a new one started, as Lambda replaces its execution
environment; a worker that dies mid-invocation is replaced too. Events and results cross the
process boundary as JSON, over a socket pair (stdout and stderr are the function's log:
`log_dir/<function name>.log`, with Lambda's START/END/REPORT lines written around each
invocation, by `local.lambda_.process`). Workers also exit by themselves
when this process dies: each holds the read end of a pipe whose only write end is here.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import uuid
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..app.model import REGION, Function, InvokeResult
from ..chaos.profiles import WorkerFaults
from ..cloudwatch.metrics import Publish, no_metrics
from ..cloudwatch.usage import Usage, billed_ms
from ..iam.principals import session_credentials
from . import sandbox
from .chaos import WorkerChaos
from .process import (
    FunctionLog,
    InitFailure,
    Outcome,
    Worker,
    log_stream_name,
    start_worker,
)
from .runtimes import packaging_for

INIT_TIMEOUT_SECONDS = 10.0  # Lambda's limit on the init phase (imports and module-level code)
MAX_PAYLOAD_BYTES = 6_291_456  # synchronous Invoke: 6 MB each way
DURATIONS_KEPT = 10_000  # for the percentiles in stats()


class RequestTooLargeError(Exception):
    """Invoke's RequestTooLargeException (HTTP 413): the event is over 6 MB; nothing was invoked."""


class TooManyRequestsError(Exception):
    """Invoke's TooManyRequestsException (HTTP 429): the function's reserved concurrency is 0, or
    (a synchronous invocation) every execution it reserved is busy."""


@dataclass
class PoolStats:
    invocations: int = 0
    errors: int = 0
    timeouts: int = 0
    crashes: int = 0
    out_of_memory: int = 0
    init_errors: int = 0
    cold_starts: int = 0
    waited: int = 0
    durations: deque[float] = field(default_factory=lambda: deque(maxlen=DURATIONS_KEPT))


UNPACKAGED = "not packaged: imports from the local runtime's own site-packages"


class FunctionPool:
    """The workers of one function, up to its concurrency; see the module's description."""

    def __init__(self, function: Function, functions: Functions) -> None:
        self.function = function
        self._owner = functions
        self.reserved = function.reserved_concurrency
        # The machine's bound, or the function's own when lower: a reservation of 400 is a ceiling
        # in Lambda, not 400 processes here.
        self.limit = (
            functions.max_workers if self.reserved is None else min(self.reserved, functions.max_workers)
        )
        self.log = FunctionLog(functions.log_dir / f"{function.name}.log")
        self.packaging = packaging_for(function) if functions.packaged else None
        if self.packaging is not None and self.packaging.note:
            self.log.write(f"local runtime: not as deployed: {self.packaging.note}")
        self._cond = threading.Condition()
        self._idle: list[Worker] = []  # most recently used last: reused first, as Lambda does
        self._count = 0  # workers alive or starting, busy or idle
        self._alive: set[Worker] = set()
        self._starting: set[subprocess.Popen[bytes]] = set()
        self._closed = False
        self._stats = PoolStats()
        self._replacers: list[threading.Thread] = []
        #: Why the handler is not sandboxed (`local.lambda_.sandbox`: the machine refuses), or None.
        self._not_isolated = sandbox.refused()
        if self._not_isolated:
            self.log.write(f"local runtime: not sandboxed: {self._not_isolated}")
        self._usage = functions.usage
        self._usage.describe("lambda", function.name, memory_mb=function.memory_mb)

    # -- starting workers ---------------------------------------------------------------------

    def prewarm(self) -> None:
        """Start one worker now (for start() and to replace one that was killed), if there is room."""
        with self._cond:
            if self._closed or self._count >= self.limit:
                return
            self._count += 1
        self._add_idle(self._spawn())

    def _spawn(self) -> Worker | InitFailure:
        owner = self._owner
        try:
            worker = start_worker(
                self.function,
                owner.environment(self.function, log_stream_name()),
                self.log,
                lifeline_fd=owner.lifeline_read,
                init_timeout=owner.init_timeout,
                starting=self._starting_process,
                packaging=self.packaging,
            )
        except Exception as exc:  # e.g. a code folder that does not exist: the slot is given back
            worker = InitFailure(
                {"errorMessage": f"{type(exc).__name__}: {exc}", "errorType": "Runtime.Unknown"}
            )
        with self._cond:
            self._starting = {process for process in self._starting if process.returncode is None}
            if isinstance(worker, Worker):
                self._usage.add(
                    "lambda", self.function.name, inits=1, init_billed_ms=billed_ms(worker.init_ms)
                )
                self._starting.discard(worker.process)
                self._alive.add(worker)
            else:
                self._stats.init_errors += 1
        return worker

    def _starting_process(self, process: subprocess.Popen[bytes]) -> None:
        with self._cond:
            self._starting.add(process)
            if self._closed:  # close() ran while this one was being started
                process.kill()

    def _add_idle(self, worker: Worker | InitFailure) -> None:
        with self._cond:
            if isinstance(worker, Worker) and not self._closed:
                self._idle.append(worker)
            else:
                self._count -= 1
            self._cond.notify()
        if isinstance(worker, Worker) and self._closed:
            self._retire(worker)

    # -- invoking ------------------------------------------------------------------------------

    def invoke(self, event: bytes, *, wait: bool = True) -> InvokeResult:
        with self._cond:
            if self.limit <= 0:
                self._publish("Throttles", 1)
                raise TooManyRequestsError(
                    f"Rate Exceeded. (reserved concurrency of {self.function.name} is 0)"
                )
            if not wait and not self._idle and self.reserved is not None and self._count >= self.reserved:
                self._publish("Throttles", 1)
                raise TooManyRequestsError(
                    f"Rate Exceeded. (all {self.reserved} reserved executions of "
                    f"{self.function.name} are busy)"
                )
            if not self._idle and self._count >= self.limit:
                self._stats.waited += 1
            while not self._idle and self._count >= self.limit and not self._closed:
                self._cond.wait()
            if self._closed:
                raise RuntimeError("the function pool is closed")
            worker: Worker | InitFailure | None = self._idle.pop() if self._idle else None
            if worker is None:
                self._count += 1
                self._stats.cold_starts += 1
        request_id = str(uuid.uuid4())
        if worker is None:
            worker = self._spawn()
        if isinstance(worker, InitFailure):
            self._add_idle(worker)  # gives the slot back
            result = InvokeResult(request_id, {**worker.error, "requestId": ""}, "Unhandled", 0.0)
        else:
            chaos = self._owner.chaos
            fault = chaos.directive(self.function.name) if chaos is not None else None
            result, outcome = worker.invoke(request_id, event, fault)
            if worker.killed_at is not None and chaos is not None:
                chaos.struck(self.function.name, worker.killed_at)
            if outcome is Outcome.WARM:
                self._add_idle(worker)
            else:
                self._replace(worker, outcome)
        with self._cond:
            stats = self._stats
            stats.invocations += 1
            stats.errors += result.function_error is not None
            stats.durations.append(result.duration_ms)
        self._usage.add("lambda", self.function.name, invocations=1, billed_ms=billed_ms(result.duration_ms))
        self._publish("Invocations", 1)
        self._publish("Errors", int(result.function_error is not None))
        self._publish("Duration", result.duration_ms)
        return result

    def _publish(self, name: str, value: float) -> None:
        self._owner.publish("AWS/Lambda", name, {"FunctionName": self.function.name}, value)

    def _replace(self, worker: Worker, outcome: Outcome) -> None:
        """A killed worker's slot is freed and a new worker started in the background."""
        with self._cond:
            self._alive.discard(worker)
            self._count -= 1
            self._stats.timeouts += outcome is Outcome.TIMED_OUT
            self._stats.crashes += outcome is Outcome.CRASHED
            self._stats.out_of_memory += outcome is Outcome.OUT_OF_MEMORY
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
            counts = {name: value for name, value in vars(stats).items() if name != "durations"}
            workers = len(self._alive)

        def percentile(share: float) -> float | None:
            return (
                round(durations[min(len(durations) - 1, int(share * len(durations)))], 3)
                if durations
                else None
            )

        chaos = self._owner.chaos
        return {
            **counts,
            **({"chaos": chaos.counts(self.function.name)} if chaos is not None else {}),
            "workers": workers,
            "busy": busy,
            "concurrency": self.limit,
            "p50_ms": percentile(0.50),
            "p99_ms": percentile(0.99),
            "not_as_deployed": "; ".join(
                filter(
                    None,
                    [
                        self.packaging.note
                        if self.packaging
                        else "not packaged: imports from the runtime's own site-packages",
                        self._not_isolated and f"not sandboxed: {self._not_isolated}",
                    ],
                )
            )
            or None,
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


def function_environment(function: Function, endpoint_url: str, log_stream: str) -> dict[str, str]:
    """A worker's environment: the function's variables, then Lambda's reserved ones and the local
    endpoint on top (Lambda refuses reserved names in a function's configuration)."""
    access_key, secret = session_credentials(function.role_arn, function.name)
    return {
        "PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"),
        "LANG": "en_US.UTF-8",
        "POWERTOOLS_TRACE_DISABLED": "true",  # no X-Ray daemon here
        **function.environment,
        "_HANDLER": function.handler,
        "AWS_EXECUTION_ENV": f"AWS_Lambda_{function.runtime}",
        "AWS_LAMBDA_FUNCTION_NAME": function.name,
        "AWS_LAMBDA_FUNCTION_VERSION": "$LATEST",
        "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": str(function.memory_mb),
        "AWS_LAMBDA_INITIALIZATION_TYPE": "on-demand",
        "AWS_LAMBDA_LOG_GROUP_NAME": function.log_group or f"/aws/lambda/{function.name}",
        "AWS_LAMBDA_LOG_STREAM_NAME": log_stream,
        **({"AWS_LAMBDA_LOG_FORMAT": "JSON"} if function.log_format == "JSON" else {}),
        "AWS_REGION": REGION,
        "AWS_DEFAULT_REGION": REGION,
        "LAMBDA_TASK_ROOT": str(function.code_dir.resolve()),
        "TZ": ":UTC",
        "AWS_ENDPOINT_URL": endpoint_url,
        # Its own role's credentials, in a session of its own (`local.iam.principals`).
        "AWS_ACCESS_KEY_ID": access_key,
        "AWS_SECRET_ACCESS_KEY": secret,
        "AWS_CONFIG_FILE": os.devnull,  # as in Lambda: no profile or config file applies
        "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
    }


class Functions:
    """Every function of the app in warm workers: the local `Invoker` (see `local.app.model`)."""

    def __init__(
        self,
        functions: Iterable[Function],
        *,
        endpoint_url: str,
        log_dir: Path,
        max_workers: int = 4,
        init_timeout: float = INIT_TIMEOUT_SECONDS,
        chaos: WorkerFaults | None = None,
        consumers: Iterable[str] = (),
        publish: Publish = no_metrics,
        packaged: bool = True,
        usage: Usage | None = None,
    ) -> None:
        """`chaos`: a profile's worker faults, for the functions it chooses (`consumers`: the names
        its `@consumers` stands for, the event-source mappings' targets). `publish`: Lambda's
        Invocations, Errors, Throttles and Duration per function, as CloudWatch would have them.
        `packaged`: each function runs as Lambda packages it (`local.lambda_.runtimes`); False runs
        it on this interpreter with its site-packages (tests of the runtime's own machinery).
        `usage`: the ledger each invocation's billed duration and each init go to
        (`local.cloudwatch.usage`)."""
        self.packaged = packaged
        self.usage = usage if usage is not None else Usage()
        self.endpoint_url = endpoint_url
        self.publish = publish
        self.chaos = WorkerChaos(chaos, consumers) if chaos is not None and chaos.active else None
        self.log_dir = Path(log_dir)
        self.max_workers = max_workers
        self.init_timeout = init_timeout
        self.lifeline_read, self._lifeline_write = os.pipe()
        self._pools = {function.name: FunctionPool(function, self) for function in functions}

    def environment(self, function: Function, log_stream: str) -> dict[str, str]:
        """The function's variables, then Lambda's reserved ones and the local endpoint on top."""
        return function_environment(function, self.endpoint_url, log_stream)

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

    def invoke(self, function_name: str, event: Any, *, wait: bool = True) -> InvokeResult:
        """Invoke synchronously (RequestResponse). `event` is any JSON value, or bytes already JSON.
        Raises KeyError for an unknown function, RequestTooLargeError over 6 MB, TooManyRequestsError
        when throttled (`wait=False`: a synchronous caller's invocation, see the module's description)."""
        pool = self._pools[function_name]
        payload = (
            event if isinstance(event, bytes | bytearray) else json.dumps(event, ensure_ascii=False).encode()
        )
        if len(payload) > MAX_PAYLOAD_BYTES:
            raise RequestTooLargeError(
                f"Request must be smaller than {MAX_PAYLOAD_BYTES} bytes for the InvokeFunction operation"
            )
        return pool.invoke(bytes(payload), wait=wait)

    def stats(self) -> dict[str, dict[str, Any]]:
        """Per function: invocations, errors, timeouts, crashes, out_of_memory, init_errors,
        cold_starts, waited (invocations that found every worker busy at the concurrency limit),
        workers, busy, concurrency, p50_ms and p99_ms (durations of the last 10,000 invocations),
        and under a chaos profile `chaos`: the faults injected, by kind (`local.lambda_.chaos`)."""
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
