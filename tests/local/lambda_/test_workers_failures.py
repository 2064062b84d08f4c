"""`local.lambda_` failures as Lambda reports them (errors, timeouts, crashes) and worker concurrency."""

import re
import threading

import pytest

from local.lambda_.workers import TooManyRequestsError
from tests.support.workers import TIMESTAMP, function, gone, in_parallel, wait_until

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
    assert "in raises" in trace and "in reject" in trace and "lambda_/worker.py" not in trace
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


def test_2_a_synchronous_invocation_past_the_reservation_is_throttled_not_queued(make_functions):
    functions = make_functions(function("sleepy", reserved_concurrency=1), max_workers=4)
    busy = threading.Thread(target=functions.invoke, args=("test-sleepy", {"seconds": 1.5}))
    busy.start()
    assert wait_until(lambda: functions.stats()["test-sleepy"]["busy"] == 1)

    with pytest.raises(TooManyRequestsError, match="all 1 reserved executions"):
        functions.invoke("test-sleepy", {"seconds": 0}, wait=False)  # API Gateway's: Lambda throttles it
    waited = functions.invoke("test-sleepy", {"seconds": 0})  # a mapping's: it waits its turn
    busy.join()

    assert waited.function_error is None
    assert functions.stats()["test-sleepy"]["invocations"] == 2


def test_2_a_reservation_above_the_machines_bound_is_a_ceiling_not_a_process_count(make_functions):
    functions = make_functions(function("sleepy", reserved_concurrency=400), max_workers=2)
    assert functions.stats()["test-sleepy"]["concurrency"] == 2
