"""`local.lambda_` logs (START/END/REPORT, EMF, no mixing) and stopping workers with no orphans left."""

import json
import re
import signal
import subprocess
import sys
import threading
import time
from typing import Any

import pytest

from tests.support.workers import (
    REPO,
    REPORT,
    TEST_FUNCTIONS,
    function,
    gone,
    in_parallel,
    wait_until,
    worker_children,
    worker_state,
)

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


def test_the_json_log_format_gives_every_line_a_level_and_the_request_id(make_functions):
    # LoggingConfig.LogFormat JSON: Lambda's runtime writes the root logger's records, and an
    # unhandled error, as JSON objects (what a Logs Insights `filter level = 'ERROR'` finds).
    functions = make_functions(
        function("printer", log_format="JSON"), function("failing", "app.raises", log_format="JSON")
    )
    printed = functions.invoke("test-printer", {"lines": 1})
    failed = functions.invoke("test-failing", {"order": 7})

    objects = [json.loads(line) for line in functions.log_path("test-printer").read_text().splitlines()
               if line.startswith("{") and '"_aws"' not in line]  # fmt: skip
    warning = next(entry for entry in objects if entry.get("message") == "a warning through the root logger")
    assert warning["level"] == "WARNING" and warning["requestId"] == printed.request_id
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", warning["timestamp"])
    assert failed.function_error == "Unhandled"
    errors = [json.loads(line) for line in functions.log_path("test-failing").read_text().splitlines()
              if line.startswith("{")]  # fmt: skip
    (error,) = [entry for entry in errors if entry.get("level") == "ERROR"]
    assert error["errorType"] == "OrderRejected" and error["message"] == "order 7 rejected"
    assert error["requestId"] == failed.request_id and any("reject" in frame for frame in error["stackTrace"])


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
import sys, os, signal, threading, time
# As a shell starts it: an xdist worker ignores SIGINT, and its children inherit that.
signal.signal(signal.SIGINT, signal.default_int_handler)
sys.path[:0] = [{str(REPO)!r}]
from pathlib import Path
from local.app.model import Function
from local.lambda_.workers import Functions, RequestTooLargeError
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
