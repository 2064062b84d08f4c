"""Functions run as Lambda runs them (issue 11): `local.workers` with real worker processes.

Each test builds `Function` records around the purpose-built functions of tests/local/functions
(or the real producer), invokes them through `Functions`, and checks what Lambda would answer and
log. Timing checks compare timestamps the workers took; none bounds the wall clock tightly.
"""

from __future__ import annotations

import base64
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from local.model import ACCOUNT, REGION, Function
from local.workers import Functions, RequestTooLargeError

REPO = Path(__file__).resolve().parents[2]
TEST_FUNCTIONS = Path(__file__).resolve().parent / "functions"
UNUSED_ENDPOINT = "http://127.0.0.1:9"  # functions that make no AWS call
LOG_STREAM = re.compile(r"^\d{4}/\d{2}/\d{2}/\[\$LATEST\][0-9a-f]{32}$")
REPORT = re.compile(
    r"^REPORT RequestId: (?P<id>[0-9a-f-]{36})\tDuration: \d+\.\d{2} ms\tBilled Duration: \d+ ms\t"
    r"Memory Size: (?P<memory>\d+) MB\tMax Memory Used: (?P<used>\d+) MB\t"
)
TIMESTAMP = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z"
GONE_DEADLINE_S = 15.0


def function(name: str, handler: str = "app.handler", **settings: Any) -> Function:
    return Function(
        logical_id=name.title(),
        name=f"test-{name}",
        handler=handler,
        code_dir=TEST_FUNCTIONS / name,
        **settings,
    )


@pytest.fixture
def make_functions(tmp_path: Path) -> Iterator[Callable[..., Functions]]:
    """Builds a `Functions` (logs under tmp_path) and closes every one built at teardown."""
    built: list[Functions] = []

    def make(*functions: Function, endpoint_url: str = UNUSED_ENDPOINT, **options: Any) -> Functions:
        pool = Functions(functions, endpoint_url=endpoint_url, log_dir=tmp_path / "logs", **options)
        built.append(pool)
        return pool

    yield make
    for pool in built:
        pool.close()


def gone(pid: int) -> bool:
    """True once the process no longer exists (reaped, not a zombie)."""
    return not Path(f"/proc/{pid}").exists()


def wait_until(condition: Callable[[], bool], deadline_s: float = GONE_DEADLINE_S) -> bool:
    ends = time.monotonic() + deadline_s
    while not condition():
        if time.monotonic() > ends:
            return False
        time.sleep(0.05)
    return True


def worker_children() -> list[int]:
    """Processes whose parent is this one and that run local/_worker.py."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            cmdline = (entry / "cmdline").read_bytes()
        except (OSError, IndexError, ValueError):
            continue
        if ppid == os.getpid() and b"_worker.py" in cmdline:
            found.append(int(entry.name))
    return found


def in_parallel(calls: list[Callable[[], Any]]) -> list[Any]:
    results: list[Any] = [None] * len(calls)

    def run(index: int) -> None:
        results[index] = calls[index]()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    return results


# -- warm workers ----------------------------------------------------------------------------------


def test_warm_reuse_imports_once_and_keeps_the_process(make_functions):
    functions = make_functions(function("echo", "app.count"))
    functions.start()

    answers = [functions.invoke("test-echo", {}).payload for _ in range(3)]

    assert [answer["count"] for answer in answers] == [1, 2, 3]
    assert len({answer["pid"] for answer in answers}) == 1
    assert functions.stats()["test-echo"]["cold_starts"] == 0


def test_echo_round_trips_the_event_as_json(make_functions):
    functions = make_functions(function("echo"))
    event = {"text": "clé ünïcode", "n": [1, 2.5, None, True], "nested": {"a": "b" * 1000}}

    result = functions.invoke("test-echo", event)

    assert result.function_error is None
    assert result.payload == event
    assert str(uuid.UUID(result.request_id, version=4)) == result.request_id


def test_start_prewarms_one_worker_per_function(make_functions):
    functions = make_functions(function("echo"), function("sleepy"), function("failing", "app.whoami"))

    functions.start()

    stats = functions.stats()
    assert {name: stats[name]["workers"] for name in stats} == dict.fromkeys(stats, 1)
    functions.invoke("test-sleepy", {})
    assert functions.stats()["test-sleepy"]["cold_starts"] == 0


def test_unknown_function_is_a_key_error(make_functions):
    functions = make_functions(function("echo"))
    with pytest.raises(KeyError):
        functions.invoke("no-such-function", {})


def test_event_over_6_mb_is_refused_before_any_worker_sees_it(make_functions):
    functions = make_functions(function("echo"))
    with pytest.raises(RequestTooLargeError, match="6291456 bytes"):
        functions.invoke("test-echo", {"data": "x" * 6_291_456})
    assert functions.stats()["test-echo"]["invocations"] == 0


def test_handler_returning_bytes_passes_them_through(make_functions):
    functions = make_functions(function("failing", "app.raw_bytes"))
    result = functions.invoke("test-failing", {})
    assert (result.payload, result.function_error) == (b"\x00not json", None)


# -- what the handler sees -------------------------------------------------------------------------


def test_context_has_lambdas_fields_and_remaining_time_decreases(make_functions):
    functions = make_functions(function("introspect", "app.context_fields", timeout_seconds=7, memory_mb=256))

    first = functions.invoke("test-introspect", {"sleep": 0.2})
    second = functions.invoke("test-introspect", {})

    fields = first.payload
    assert fields["aws_request_id"] == first.request_id != second.payload["aws_request_id"]
    assert fields["function_name"] == "test-introspect"
    assert fields["function_version"] == "$LATEST"
    assert fields["invoked_function_arn"] == f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:test-introspect"
    assert (fields["memory_limit_in_mb"], fields["memory_limit_type"]) == ("256", "str")  # as awslambdaric
    assert fields["log_group_name"] == "/aws/lambda/test-introspect"
    assert LOG_STREAM.match(fields["log_stream_name"])
    assert fields["log_stream_name"] == second.payload["log_stream_name"]  # one stream per worker
    assert fields["identity"] == [None, None] and fields["client_context"] is None
    before, after = fields["remaining_ms"]
    assert 0 < after <= before - 150 and before <= 7000


def test_log_group_from_the_function_record(make_functions):
    functions = make_functions(function("introspect", "app.context_fields", log_group="/custom/group"))
    assert functions.invoke("test-introspect", {}).payload["log_group_name"] == "/custom/group"


def test_reserved_and_endpoint_variables_are_set(make_functions):
    settings = {"environment": {"GREETING": "hello", "AWS_REGION": "eu-west-1"}, "memory_mb": 1024}
    functions = make_functions(
        function("introspect", "app.environment", **settings), endpoint_url="http://127.0.0.1:4566"
    )

    env = functions.invoke("test-introspect", {}).payload

    code_dir = str((TEST_FUNCTIONS / "introspect").resolve())
    assert env["GREETING"] == "hello"
    assert {
        name: env[name]
        for name in (
            "AWS_LAMBDA_FUNCTION_NAME",
            "AWS_LAMBDA_FUNCTION_VERSION",
            "AWS_LAMBDA_FUNCTION_MEMORY_SIZE",
            "AWS_LAMBDA_LOG_GROUP_NAME",
            "AWS_REGION",
            "AWS_DEFAULT_REGION",
            "AWS_EXECUTION_ENV",
            "LAMBDA_TASK_ROOT",
            "_HANDLER",
            "TZ",
            "AWS_ENDPOINT_URL",
            "AWS_ACCESS_KEY_ID",
            "AWS_SECRET_ACCESS_KEY",
            "POWERTOOLS_TRACE_DISABLED",
        )
    } == {
        "AWS_LAMBDA_FUNCTION_NAME": "test-introspect",
        "AWS_LAMBDA_FUNCTION_VERSION": "$LATEST",
        "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": "1024",
        "AWS_LAMBDA_LOG_GROUP_NAME": "/aws/lambda/test-introspect",
        "AWS_REGION": "us-east-1",  # reserved: the function's own value does not apply, as in Lambda
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_EXECUTION_ENV": "AWS_Lambda_python3.12",
        "LAMBDA_TASK_ROOT": code_dir,
        "_HANDLER": "app.environment",
        "TZ": ":UTC",
        "AWS_ENDPOINT_URL": "http://127.0.0.1:4566",
        "AWS_ACCESS_KEY_ID": "test",
        "AWS_SECRET_ACCESS_KEY": "test",
        "POWERTOOLS_TRACE_DISABLED": "true",
    }
    assert LOG_STREAM.match(env["AWS_LAMBDA_LOG_STREAM_NAME"])
    assert env["_X_AMZN_TRACE_ID"].startswith("Root=1-")
    assert "PYTEST_CURRENT_TEST" not in env  # nothing of this process's environment leaks in


def test_function_may_turn_powertools_tracing_on(make_functions):
    settings = {"environment": {"POWERTOOLS_TRACE_DISABLED": "false"}}
    functions = make_functions(function("introspect", "app.environment", **settings))
    assert functions.invoke("test-introspect", {}).payload["POWERTOOLS_TRACE_DISABLED"] == "false"


def test_sys_path_is_code_dir_then_layers_then_runtime_packages(make_functions, tmp_path):
    layer = tmp_path / "layer"
    (layer / "python").mkdir(parents=True)
    (layer / "python" / "layer_probe.py").write_text("")
    functions = make_functions(function("introspect", "app.paths", layer_dirs=(layer,)))

    answer = functions.invoke("test-introspect", {}).payload

    code_dir = str((TEST_FUNCTIONS / "introspect").resolve())
    sys_path = answer["sys_path"]
    assert sys_path[:2] == [code_dir, str((layer / "python").resolve())]
    site_packages = next(path for path in sys.path if path.endswith("site-packages"))
    assert site_packages in sys_path[2:]
    assert str(REPO) not in sys_path and str(REPO / "layers" / "shardline" / "python") not in sys_path
    assert answer["cwd"] == code_dir
    assert answer["layer_probe"] == str(layer / "python" / "layer_probe.py")


# -- failures, as Lambda reports them --------------------------------------------------------------


def test_handler_exception_is_an_unhandled_result_and_the_worker_survives(make_functions):
    functions = make_functions(function("failing", "app.raises"))
    functions.start()

    result = functions.invoke("test-failing", {"order": 42})

    assert result.function_error == "Unhandled"
    assert result.payload["errorType"] == "OrderRejected"
    assert result.payload["errorMessage"] == "order 42 rejected"
    assert result.payload["requestId"] == result.request_id
    trace = "".join(result.payload["stackTrace"])
    assert "in raises" in trace and "in reject" in trace and "_worker.py" not in trace
    again = functions.invoke("test-failing", {"order": 43})
    assert again.payload["errorMessage"] == "order 43 rejected"
    stats = functions.stats()["test-failing"]
    assert (stats["errors"], stats["crashes"], stats["cold_starts"], stats["workers"]) == (2, 0, 0, 1)


def test_result_that_is_not_json_is_a_marshal_error(make_functions):
    functions = make_functions(function("failing", "app.unserialisable"))

    result = functions.invoke("test-failing", {})

    assert result.function_error == "Unhandled"
    assert result.payload["errorType"] == "Runtime.MarshalError"
    assert result.payload["errorMessage"].startswith("Unable to marshal response: Object of type set")
    assert functions.invoke("test-failing", {}).payload["errorType"] == "Runtime.MarshalError"
    assert functions.stats()["test-failing"]["workers"] == 1


def test_import_error_is_runtime_import_module_error(make_functions):
    functions = make_functions(function("broken"))
    functions.start()

    result = functions.invoke("test-broken", {})

    assert result.function_error == "Unhandled"
    assert result.payload["errorType"] == "Runtime.ImportModuleError"
    assert result.payload["errorMessage"] == (
        "Unable to import module 'app': No module named 'a_module_that_does_not_exist'"
    )
    stats = functions.stats()["test-broken"]
    assert (stats["init_errors"], stats["workers"]) == (2, 0)  # start() and the invocation each tried
    assert "INIT_REPORT" in functions.log_path("test-broken").read_text()


def test_timeout_kills_the_worker_and_a_new_one_replaces_it(make_functions):
    functions = make_functions(function("sleepy", timeout_seconds=1))
    first = functions.invoke("test-sleepy", {}).payload

    result = functions.invoke("test-sleepy", {"seconds": 60})

    assert result.function_error == "Unhandled"
    assert result.payload["errorType"] == "Sandbox.Timedout"
    assert re.fullmatch(
        rf"{TIMESTAMP} {result.request_id} Task timed out after 1\.\d\d seconds",
        result.payload["errorMessage"],
    )
    assert wait_until(lambda: gone(first["pid"]))
    after = functions.invoke("test-sleepy", {})
    assert after.function_error is None and after.payload["pid"] != first["pid"]
    assert functions.stats()["test-sleepy"]["timeouts"] == 1
    log = functions.log_path("test-sleepy").read_text()
    assert result.payload["errorMessage"] in log
    assert re.search(rf"REPORT RequestId: {result.request_id}\t.*Status: timeout", log)


@pytest.mark.parametrize(("how", "described"), [("exit", "exit status 3"), ("kill", "signal: killed")])
def test_crash_mid_invocation_is_exit_error_and_the_worker_is_replaced(make_functions, how, described):
    functions = make_functions(function("crashy"))
    first = functions.invoke("test-crashy", {}).payload["pid"]

    result = functions.invoke("test-crashy", {"how": how})

    assert result.function_error == "Unhandled"
    assert result.payload == {
        "errorType": "Runtime.ExitError",
        "errorMessage": f"RequestId: {result.request_id} Error: Runtime exited with error: {described}",
    }
    assert gone(first)
    after = functions.invoke("test-crashy", {})
    assert after.function_error is None and after.payload["pid"] != first
    assert functions.stats()["test-crashy"]["crashes"] == 1


def test_sys_exit_in_the_handler_ends_the_worker_as_in_lambda(make_functions):
    functions = make_functions(function("crashy"))
    result = functions.invoke("test-crashy", {"how": "sys.exit"})
    assert result.payload["errorType"] == "Runtime.ExitError"
    assert result.payload["errorMessage"].endswith("Runtime exited with error: exit status 2")


# -- concurrency -----------------------------------------------------------------------------------


def test_two_parallel_invocations_run_in_two_workers_at_once(make_functions):
    functions = make_functions(function("sleepy"), max_workers=2)

    a, b = in_parallel([lambda: functions.invoke("test-sleepy", {"seconds": 1.5})] * 2)

    assert a.payload["pid"] != b.payload["pid"]
    assert a.payload["started"] < b.payload["ended"] and b.payload["started"] < a.payload["ended"]
    assert functions.stats()["test-sleepy"]["waited"] == 0


def test_a_third_invocation_waits_for_a_free_worker_when_max_is_two(make_functions):
    functions = make_functions(function("sleepy"), max_workers=2)

    results = in_parallel([lambda: functions.invoke("test-sleepy", {"seconds": 1.5})] * 3)

    answers = sorted((result.payload for result in results), key=lambda answer: answer["started"])
    assert len({answer["pid"] for answer in answers}) == 2
    assert answers[2]["started"] >= min(answers[0]["ended"], answers[1]["ended"])  # never three at once
    stats = functions.stats()["test-sleepy"]
    assert (stats["waited"], stats["workers"], stats["invocations"]) == (1, 2, 3)


def test_reserved_concurrency_bounds_the_workers(make_functions):
    functions = make_functions(function("sleepy", reserved_concurrency=1), max_workers=4)

    a, b = in_parallel([lambda: functions.invoke("test-sleepy", {"seconds": 0.5})] * 2)

    first, second = sorted((a.payload, b.payload), key=lambda answer: answer["started"])
    assert first["pid"] == second["pid"] and second["started"] >= first["ended"]
    assert functions.stats()["test-sleepy"]["concurrency"] == 1


# -- logs ------------------------------------------------------------------------------------------


def test_logs_have_start_end_report_and_emf_lines_verbatim(make_functions):
    functions = make_functions(function("printer", memory_mb=256))

    result = functions.invoke("test-printer", {"lines": 3})

    assert result.payload == {"printed": True}
    lines = functions.log_path("test-printer").read_text().splitlines()
    request_id = result.request_id
    start = lines.index(f"START RequestId: {request_id} Version: $LATEST")
    end = lines.index(f"END RequestId: {request_id}")
    report = REPORT.match(lines[end + 1])
    assert report and report["id"] == request_id and report["memory"] == "256" and int(report["used"]) > 0
    assert "Init Duration: " in lines[end + 1]  # the worker's first invocation
    between = lines[start + 1 : end]
    assert f"hello from {request_id}" in between and "to stderr" in between
    assert "no newline yet ... now" in between
    assert any(
        re.fullmatch(rf"\[WARNING\]\t\S+Z\t{request_id}\ta warning through the root logger", line)
        for line in between
    )
    emf = [json.loads(line) for line in between if line.startswith("{") and '"_aws"' in line]
    assert len(emf) == 1 and emf[0]["Printed"] in (3, [3])  # Powertools writes a value or a list
    assert emf[0]["_aws"]["CloudWatchMetrics"][0]["Namespace"] == "local-tests"


def test_lines_of_concurrent_workers_never_mix_in_the_log(make_functions):
    functions = make_functions(function("printer", "app.long_lines"), max_workers=2)
    in_parallel([lambda: functions.invoke("test-printer", {"count": 0, "at": 0})] * 2)  # two warm workers
    event = {"count": 2000, "size": 3000, "at": time.time() + 1.0}

    results = in_parallel([lambda: functions.invoke("test-printer", event)] * 2)

    assert [result.payload for result in results] == [{"printed": 2000}] * 2
    lines = [line for line in functions.log_path("test-printer").read_text().splitlines() if '"pad"' in line]
    parsed = [json.loads(line) for line in lines]  # a line cut by another worker's write would not parse
    assert len(parsed) == 4000 and len({blob["_aws"]["worker"] for blob in parsed}) == 2


# -- stopping --------------------------------------------------------------------------------------


def test_close_leaves_no_child_process(make_functions):
    before = set(worker_children())  # workers of other pools this process may be running
    functions = make_functions(function("sleepy"), function("echo", "app.count"), max_workers=3)
    functions.start()
    in_parallel([lambda: functions.invoke("test-sleepy", {"seconds": 0.3})] * 3)
    pids = set(worker_children()) - before
    assert len(pids) == 4

    functions.close()

    assert all(gone(pid) for pid in pids)
    assert not pids & set(worker_children())


def test_close_stops_busy_workers_too(make_functions):
    functions = make_functions(function("sleepy", timeout_seconds=120))
    pid = functions.invoke("test-sleepy", {}).payload["pid"]
    results: list[Any] = []
    busy = threading.Thread(target=lambda: results.append(functions.invoke("test-sleepy", {"seconds": 60})))
    busy.start()
    assert wait_until(lambda: functions.stats()["test-sleepy"]["busy"] == 1)

    functions.close()

    busy.join(timeout=30)
    assert results and results[0].payload["errorType"] == "Runtime.ExitError"
    assert gone(pid)
    with pytest.raises(RuntimeError):
        functions.invoke("test-sleepy", {})


@pytest.mark.parametrize("signal_number", [signal.SIGKILL, signal.SIGTERM, signal.SIGINT])
def test_workers_exit_when_their_parent_dies(tmp_path, signal_number):
    script = f"""
import sys, os, threading, time
sys.path[:0] = [{str(REPO)!r}]
from pathlib import Path
from local.model import Function
from local.workers import Functions, RequestTooLargeError
code = Path({str(TEST_FUNCTIONS / "sleepy")!r})
functions = Functions([Function("S", "s", "app.handler", code, timeout_seconds=120)], endpoint_url="http://127.0.0.1:9",
                      log_dir=Path({str(tmp_path)!r}))
functions.start()
print(functions.invoke("s", {{}}).payload["pid"], flush=True)
threading.Thread(target=functions.invoke, args=("s", {{"seconds": 60}}), daemon=True).start()
time.sleep(0.5)  # the worker is now busy: only the lifeline can tell it that its parent is gone
print("busy", flush=True)
time.sleep(60)
"""
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        worker = int(parent.stdout.readline())
        assert parent.stdout.readline() == "busy\n"
        parent.send_signal(signal_number)
        parent.wait(timeout=30)
        assert wait_until(lambda: gone(worker) or "zombie" in worker_state(worker))
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()


def worker_state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/status").read_text().split("State:")[1].split("\n")[0].lower()
    except (OSError, IndexError):
        return "gone"


# -- the real producer -----------------------------------------------------------------------------


@pytest.mark.integration
def test_producer_handler_answers_200_and_lands_records_in_kinesis(make_functions, moto_server):
    from infra.config import load
    from tests.integration.helpers import kinesis_client, read_stream, wait_active

    config = load(json.loads((REPO / "cdk.json").read_text())["context"]["shardline"])
    stream_name = f"{config.prefix}-{config.streams[0].name}"
    kinesis = kinesis_client(moto_server)
    if stream_name in kinesis.list_streams()["StreamNames"]:
        kinesis.delete_stream(StreamName=stream_name, EnforceConsumerDeletion=True)
        wait_until(lambda: stream_name not in kinesis.list_streams()["StreamNames"], 30)
    kinesis.create_stream(StreamName=stream_name, ShardCount=2)
    wait_active(kinesis, stream_name)
    producer = Function(
        logical_id="ProducerFunction",
        name=f"{config.prefix}-producer",
        handler="app.handler",
        code_dir=REPO / "functions" / "producer",
        layer_dirs=(REPO / "layers" / "shardline",),
        timeout_seconds=29,
        memory_mb=512,
        environment={
            "POWERTOOLS_SERVICE_NAME": "shardline-producer",
            "POWERTOOLS_METRICS_NAMESPACE": config.metrics_namespace,
            "SHARDLINE_STREAMS": json.dumps(
                {"events": {"streamName": stream_name, "maxRecordSize": 1048576}}
            ),
            "MAX_RECORDS_PER_REQUEST": str(config.api.max_records_per_request),
            "MAX_BODY_BYTES": str(config.api.max_body_bytes),
        },
    )
    functions = make_functions(producer, endpoint_url=moto_server)
    functions.start()
    records = [
        {"data": base64.b64encode(f"event-{i}".encode()).decode(), "partitionKey": f"key-{i}"}
        for i in range(25)
    ]

    result = functions.invoke(producer.name, rest_event("events", json.dumps({"records": records})))

    assert result.function_error is None, result.payload
    assert result.payload["statusCode"] == 200, result.payload
    answer = json.loads(result.payload["body"])
    assert answer["failedRecordCount"] == 0 and len(answer["records"]) == 25
    landed = sorted(
        user.data for entries in read_stream(kinesis, stream_name).values() for _, _, user in entries
    )
    assert landed == sorted(f"event-{i}".encode() for i in range(25))
    log = functions.log_path(producer.name).read_text()
    assert '"_aws"' in log and "REPORT RequestId: " + result.request_id in log


def rest_event(route: str, body: str) -> dict[str, Any]:
    """The REST (v1) proxy event API Gateway sends for POST /streams/{stream}/records."""
    now = time.time()
    headers = {"Content-Type": "application/json", "Host": "abc123.execute-api.us-east-1.amazonaws.com"}
    return {
        "resource": "/streams/{stream}/records",
        "path": f"/streams/{route}/records",
        "httpMethod": "POST",
        "headers": headers,
        "multiValueHeaders": {name: [value] for name, value in headers.items()},
        "queryStringParameters": None,
        "multiValueQueryStringParameters": None,
        "pathParameters": {"stream": route},
        "stageVariables": None,
        "requestContext": {
            "resourceId": "a1b2c3",
            "resourcePath": "/streams/{stream}/records",
            "httpMethod": "POST",
            "requestTime": time.strftime("%d/%b/%Y:%H:%M:%S +0000", time.gmtime(now)),
            "path": f"/v1/streams/{route}/records",
            "accountId": ACCOUNT,
            "protocol": "HTTP/1.1",
            "stage": "v1",
            "requestTimeEpoch": int(now * 1000),
            "requestId": str(uuid.uuid4()),
            "identity": {"sourceIp": "127.0.0.1", "userAgent": "test", "accountId": ACCOUNT},
            "apiId": "abc123",
        },
        "body": body,
        "isBase64Encoded": False,
    }
