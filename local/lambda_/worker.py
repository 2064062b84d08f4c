"""One Lambda execution environment: the main of a warm worker process started by `local.lambda_.workers`.

Run as `python -I local/lambda_/worker.py <config JSON>` (standard library only: nothing of the runtime or
the repository may be importable here, as in Lambda). It does what Lambda's Python runtime
(awslambdaric's bootstrap) does: sets up `sys.path` (code folder, then layers, then the runtime's
packages), imports the handler once, then loops: take one invocation, call the handler with a
context, answer with the JSON result or Lambda's error object. The invocations come over a socket
the parent passed (stdout and stderr are the function's log, already pointing at its log file).
It is started inside Lambda's filesystem (`local.lambda_.sandbox`: a private, bounded /tmp; the
rest read-only; no power to remount or mount). It is one file, longer than the house's modules,
because it is a program run by path whose own folder must not be importable by the function.

Messages are framed by `multiprocessing.connection` (4-byte length); each is a JSON header line,
then the body bytes: in, `{"id", "deadline_ms", "arn", "trace"}` + the event's JSON; out,
`{"ok", "ct", "ms"}` + the result (or the error object when `ok` is false). The first message out
is `{"ready": true}` or `{"ready": false}` + the init error object (then the
process exits, as the runtime does after an init error). A chaos profile's directive may ride in
the header (`fault`: a kill at the commit, a hang, running out of memory; `local.lambda_.chaos`
decides which invocation gets one); a worker about to kill itself first sends `{"dying": point}`.
"""

from __future__ import annotations

import decimal
import importlib
import io
import json
import logging
import math
import os
import random
import signal
import sys
import threading
import time
import traceback
from multiprocessing.connection import Connection

#: typing.TYPE_CHECKING without importing typing: the worker's types are for mypy only, and at run time
#: it imports no more than it did (the handler's process starts as lean as Lambda's).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from types import TracebackType
    from typing import Any, NotRequired, TypedDict

    #: A handler: the event (JSON decoded) and the context in, the result (JSON encodable, or bytes) out.
    Handler = Callable[[Any, "LambdaContext"], object]

    class WorkerConfig(TypedDict):
        """The config JSON `local.lambda_.process` starts the worker with (argv[1])."""

        ipc_fd: int
        lifeline_fd: int
        code_dir: str
        layer_python_dirs: list[str]
        runtime_site: str | None  # the runtime's own packages (boto3, ...); None: not installed
        sandboxed: bool  # started by local.lambda_.sandbox: /tmp private and bounded, the rest read-only

    class FaultDirective(TypedDict):
        """A chaos profile's directive for one invocation: kind "hang", "oom" or "kill" (at `point`,
        armed for the first call of one of `operations`)."""

        kind: str
        point: NotRequired[str]
        operations: NotRequired[list[str]]

    class InvocationHeader(TypedDict):
        """The header of one invocation message in."""

        id: str
        deadline_ms: int
        arn: str
        trace: str
        fault: NotRequired[FaultDirective]

    class LambdaError(TypedDict):
        """Lambda's error object (as the runtime answers and logs it)."""

        errorMessage: str
        errorType: str
        requestId: str
        stackTrace: list[str]


_request_id = ""  # the invocation in progress, for the runtime's log format


class Fault(Exception):
    """A runtime error of Lambda's own kind (`Runtime.*`), reported with its type and message."""

    def __init__(self, error_type: str, message: str, trace: list[str] | None = None) -> None:
        super().__init__(message)
        self.error_type, self.message, self.trace = error_type, message, trace


class CognitoIdentity:
    __slots__ = ("cognito_identity_id", "cognito_identity_pool_id")
    cognito_identity_id: str | None
    cognito_identity_pool_id: str | None

    def __init__(self) -> None:
        self.cognito_identity_id = self.cognito_identity_pool_id = None


class LambdaContext:
    """The context awslambdaric builds (lambda_context.py): the same fields, types and sources."""

    def __init__(self, request_id: str, deadline_ms: int, invoked_function_arn: str) -> None:
        self.aws_request_id = request_id
        self.log_group_name = os.environ.get("AWS_LAMBDA_LOG_GROUP_NAME")
        self.log_stream_name = os.environ.get("AWS_LAMBDA_LOG_STREAM_NAME")
        self.function_name = os.environ.get("AWS_LAMBDA_FUNCTION_NAME")
        self.memory_limit_in_mb = os.environ.get("AWS_LAMBDA_FUNCTION_MEMORY_SIZE")  # a str, as in Lambda
        self.function_version = os.environ.get("AWS_LAMBDA_FUNCTION_VERSION")
        self.invoked_function_arn = invoked_function_arn
        self.tenant_id = None
        self.client_context = None
        self.identity = CognitoIdentity()
        self._epoch_deadline_time_in_ms = deadline_ms

    def get_remaining_time_in_millis(self) -> int:
        delta_ms = self._epoch_deadline_time_in_ms - int(time.time() * 1000)
        return delta_ms if delta_ms > 0 else 0

    def log(self, msg: object) -> None:
        sys.stdout.write(str(msg))

    def __repr__(self) -> str:
        return (
            f"LambdaContext([aws_request_id={self.aws_request_id},log_group_name={self.log_group_name},"
            f"log_stream_name={self.log_stream_name},function_name={self.function_name},"
            f"memory_limit_in_mb={self.memory_limit_in_mb},function_version={self.function_version},"
            f"invoked_function_arn={self.invoked_function_arn},client_context=None,"
            f"identity={self.identity},tenant_id=None])"
        )


def make_error(
    message: str | None, error_type: str | None, stack_trace: list[str] | None, request_id: str = ""
) -> LambdaError:
    return {
        "errorMessage": message or "",
        "errorType": error_type or "",
        "requestId": request_id,
        "stackTrace": stack_trace or [],
    }


def user_trace(tb: TracebackType | None) -> list[str]:
    """The traceback from the first frame that is not this file's (the runtime's frames are hidden)."""
    frames = traceback.extract_tb(tb)
    for index, frame in enumerate(frames):
        if frame.filename != __file__:
            return traceback.format_list(frames[index:])
    return traceback.format_list(frames)


def log_error(error: LambdaError) -> None:
    """The runtime's error log: in the text format `[ERROR] Type: message`, then the traceback;
    in the JSON format one object with level ERROR and the error's type, message and stack."""
    if os.environ.get("AWS_LAMBDA_LOG_FORMAT") == "JSON":
        now = time.time()
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + f".{int(now % 1 * 1000):03d}Z"
        entry = {"timestamp": stamp, "level": "ERROR", "message": error["errorMessage"], **error}
        sys.stdout.write(json.dumps(entry, ensure_ascii=False) + "\n")
        return
    lines = [f"[ERROR] {error['errorType']}: {error['errorMessage']}"]
    if error["stackTrace"]:
        lines.append("Traceback (most recent call last):")
        lines.extend(line for entry in error["stackTrace"] for line in entry.splitlines())
    sys.stdout.write("\n".join(lines) + "\n")


class _Encoder(json.JSONEncoder):
    """The python3.12 runtime's marshaller: UTF-8 kept, NaN allowed, Decimal as a number."""

    def __init__(self) -> None:
        super().__init__(ensure_ascii=False, allow_nan=True)

    def default(self, o: Any) -> Any:
        if isinstance(o, decimal.Decimal):
            if o.is_nan():
                return math.nan
            return int(o) if o == o.to_integral_value() else float(o)
        return super().default(o)


def load_handler(handler: str) -> Handler:
    """Import `module.attribute` as awslambdaric's `_get_handler` does, with its fault types."""
    try:
        module_name, attribute = handler.rsplit(".", 1)
    except ValueError as exc:
        raise Fault("Runtime.MalformedHandlerName", f"Bad handler '{handler}': {exc}") from None
    try:
        if module_name.split(".")[0] in sys.builtin_module_names:
            raise Fault(
                "Runtime.BuiltInModuleConflict",
                f"Cannot use built-in module {module_name} as a handler module",
            )
        module = importlib.import_module(module_name.replace("/", "."))
    except ImportError as exc:
        raise Fault("Runtime.ImportModuleError", f"Unable to import module '{module_name}': {exc}") from None
    except SyntaxError as exc:
        trace = [f'  File "{exc.filename}" Line {exc.lineno}\n    {exc.text}']
        raise Fault(
            "Runtime.UserCodeSyntaxError", f"Syntax error in module '{module_name}': {exc}", trace
        ) from None
    try:
        found: Handler = getattr(module, attribute)
    except AttributeError:
        raise Fault(
            "Runtime.HandlerNotFound", f"Handler '{attribute}' missing on module '{module_name}'"
        ) from None
    return found


# --- chaos: faults a profile injects into this invocation (local.lambda_.chaos decides which) ---------

#: The parent's connection, to say where an injected kill struck before it does.
_conn: Connection | None = None
#: (point, commit operations) while an injected kill waits for its commit.
_armed: tuple[str, frozenset[str]] | None = None


def die(point: str) -> None:
    """Tell the parent where the kill struck, then die as a killed process dies (SIGKILL)."""
    assert _conn is not None, "main connects before any invocation"
    send(_conn, {"dying": point})
    os.kill(os.getpid(), signal.SIGKILL)


def start_fault(fault: FaultDirective, memory_mb: int) -> None:
    """Carry out `fault` (from the invocation's header) at its start; a kill is armed for the commit."""
    global _armed
    kind = fault["kind"]
    if kind == "hang":
        while True:  # until the runtime kills it at the function's timeout
            time.sleep(3600)
    if kind == "oom":
        hoard: list[bytearray] = []
        while len(hoard) < 4 * memory_mb:  # 1 MiB blocks, touched, until the runtime kills it
            hoard.append(bytearray(b"\x01" * (1 << 20)))
        while True:
            time.sleep(3600)
    _armed = (fault["point"], frozenset(fault["operations"]))
    _patch_botocore()


def _patch_botocore() -> None:
    """Wrap botocore's API call path (once), so an armed kill strikes at its commit call."""
    try:
        import botocore.client as client  # the handler's SDK (the runtime's or its own), if it has one
    except ImportError:
        return  # no SDK, no commit: the kill strikes when the handler returns
    if getattr(client.BaseClient, "_shardline_chaos", False):
        return
    original = client.BaseClient._make_api_call

    def call(self: object, operation_name: str, api_params: dict[str, Any]) -> Any:
        armed = _armed
        if armed is None or operation_name not in armed[1]:
            return original(self, operation_name, api_params)
        point = armed[0]
        if point == "before_commit":
            die(point)
        if point == "during_commit":  # the call goes out; the kill lands 0-10 ms later, answered or not
            threading.Timer(random.uniform(0.0, 0.010), die, args=(point,)).start()
            try:
                original(self, operation_name, api_params)
            finally:
                time.sleep(3600)  # the timer kills it; the handler never sees the answer
        try:
            return original(self, operation_name, api_params)
        finally:
            die(point)  # after_commit: answered (or failed), and the handler never goes on

    client.BaseClient._make_api_call = call
    client.BaseClient._shardline_chaos = True


def invoke(
    handler: Handler, encoder: json.JSONEncoder, header: InvocationHeader, body: bytes
) -> tuple[bool, str, bytes]:
    """One invocation: (ok, content type, result bytes or error object bytes)."""
    global _request_id
    request_id = _request_id = header["id"]
    fault = header.get("fault")
    if fault is not None:
        start_fault(fault, int(os.environ.get("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "128")))
    os.environ["_X_AMZN_TRACE_ID"] = header["trace"]
    try:
        context = LambdaContext(request_id, header["deadline_ms"], header["arn"])
        try:
            event = json.loads(body)
        except ValueError as exc:
            raise Fault("Runtime.UnmarshalError", f"Unable to unmarshal input: {exc}") from None
        response = handler(event, context)
        if _armed is not None:  # an injected kill whose commit never came: it dies before answering
            die("no_commit")
        if isinstance(response, bytes):
            return True, "application/unknown", response
        try:
            return True, "application/json", encoder.encode(response).encode("utf-8")
        except Exception as exc:
            raise Fault("Runtime.MarshalError", f"Unable to marshal response: {exc}") from None
    except Fault as fault:
        error = make_error(fault.message, fault.error_type, fault.trace, request_id)
    except Exception as exc:  # not BaseException: SystemExit ends the process, as in Lambda
        error = make_error(str(exc), type(exc).__name__, user_trace(exc.__traceback__), request_id)
    if _armed is not None:
        die("no_commit")
    log_error(error)
    return False, "application/json", json.dumps(error, ensure_ascii=False).encode("utf-8")


def send(conn: Connection, header: dict[str, object], body: bytes = b"") -> None:
    conn.send_bytes(json.dumps(header).encode() + b"\n" + body)


def log_streams() -> None:
    """stdout and stderr as the runtime keeps them: each line written whole (one write per line, so
    lines of workers sharing a log file never mix, and an EMF line stays verbatim), flushed per line."""
    for fd, name in ((1, "stdout"), (2, "stderr")):
        raw = io.BufferedWriter(io.FileIO(fd, "w", closefd=False), buffer_size=1 << 20)
        stream = io.TextIOWrapper(raw, encoding="utf-8", errors="backslashreplace", line_buffering=True)
        setattr(sys, name, stream)
        setattr(sys, f"__{name}__", stream)


class _RequestIdFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        record.aws_request_id = _request_id
        return True


class _JsonFormatter(logging.Formatter):
    """The runtime's JSON log format (LoggingConfig.LogFormat JSON, AWS_LAMBDA_LOG_FORMAT=JSON):
    one object per record, with the exception's type, message and stack when there is one."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "message": record.getMessage(),
            "logger": record.name,
            "requestId": vars(record)["aws_request_id"],  # set by _RequestIdFilter, on the same handler
        }
        if record.exc_info and record.exc_info[0] is not None:
            entry["errorType"] = record.exc_info[0].__name__
            entry["errorMessage"] = str(record.exc_info[1])
            entry["stackTrace"] = traceback.format_tb(record.exc_info[2])
        return json.dumps(entry, default=str) + "\n"


def setup_logging() -> None:
    """The root logger handler of the runtime's log format: text, or JSON when the function's
    LoggingConfig says so (Lambda then tells the function with AWS_LAMBDA_LOG_FORMAT)."""
    logging.Formatter.converter = time.gmtime
    handler = logging.StreamHandler(sys.stdout)
    handler.terminator = ""
    if os.environ.get("AWS_LAMBDA_LOG_FORMAT") == "JSON":
        handler.setFormatter(_JsonFormatter())
    else:
        handler.setFormatter(
            logging.Formatter(
                "[%(levelname)s]\t%(asctime)s.%(msecs)03dZ\t%(aws_request_id)s\t%(message)s\n",
                "%Y-%m-%dT%H:%M:%S",
            )
        )
    handler.addFilter(_RequestIdFilter())
    logging.getLogger().addHandler(handler)


def watch_parent(lifeline_fd: int) -> None:
    """Exit when the parent is gone: the lifeline pipe's write end lives only in the parent."""
    while True:
        try:
            if not os.read(lifeline_fd, 1):
                os._exit(0)
        except InterruptedError:
            continue
        except OSError:
            os._exit(0)


def private_tmp() -> None:
    """Without the sandbox (`local.lambda_.sandbox`, refused by this machine, and said so by the
    runtime), /tmp is at least a folder of this environment's own: TMPDIR, for tempfile."""
    import tempfile

    tempfile.tempdir = os.environ["TMPDIR"] = tempfile.mkdtemp(prefix="lambda-tmp-")


def import_path(config: WorkerConfig) -> list[str]:
    """Lambda's order: the task root, the layers (merged under /opt), then the runtime's packages."""
    layer_paths: list[str] = []
    for layer in config["layer_python_dirs"]:
        site = os.path.join(
            layer, "lib", f"python{sys.version_info[0]}.{sys.version_info[1]}", "site-packages"
        )
        layer_paths += [site, layer] if os.path.isdir(site) else [layer]
    runtime_site = config.get("runtime_site")
    return [config["code_dir"], *layer_paths, *([runtime_site] if runtime_site else [])]


def main() -> None:
    config: WorkerConfig = json.loads(sys.argv[1])
    # Run by path, this file's folder heads sys.path: the runtime's own modules are not the function's.
    if sys.path and os.path.abspath(sys.path[0]) == os.path.dirname(os.path.abspath(__file__)):
        del sys.path[0]
    if not config["sandboxed"]:
        private_tmp()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the parent; it stops the workers
    ipc_fd, lifeline_fd = config["ipc_fd"], config["lifeline_fd"]
    for fd in (ipc_fd, lifeline_fd):
        os.set_inheritable(fd, False)  # not into the handler's own subprocesses
    threading.Thread(target=watch_parent, args=(lifeline_fd,), name="lifeline", daemon=True).start()
    global _conn
    conn = _conn = Connection(ipc_fd)
    log_streams()
    setup_logging()
    sys.path[:0] = import_path(config)

    error: LambdaError | None
    try:
        handler = load_handler(os.environ["_HANDLER"])
    except Fault as fault:
        error = make_error(fault.message, fault.error_type, fault.trace)
    except Exception as exc:
        error = make_error(str(exc), type(exc).__name__, user_trace(exc.__traceback__))
    else:
        error = None
    if error is not None:
        log_error(error)
        sys.stdout.flush()
        send(conn, {"ready": False}, json.dumps(error).encode())
        sys.exit(1)
    send(conn, {"ready": True})

    encoder = _Encoder()
    while True:
        try:
            message = conn.recv_bytes()
        except (EOFError, OSError):
            return  # the parent closed the pool
        header_line, _, body = message.partition(b"\n")
        started = time.perf_counter()
        ok, content_type, result = invoke(handler, encoder, json.loads(header_line), body)
        elapsed_ms = (time.perf_counter() - started) * 1000
        sys.stdout.flush()
        sys.stderr.flush()
        send(conn, {"ok": ok, "ct": content_type, "ms": elapsed_ms}, result)


if __name__ == "__main__":
    main()
