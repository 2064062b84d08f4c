"""Worker faults of a chaos profile: kills at each commit boundary, hangs, out of memory — and the
memory limit every function runs under. Shown by what the DynamoDB server holds afterwards.

The `committer` function writes its event's key with one TransactWriteItems (its commit) to a table
on a moto server; kills take turns before → during → after the commit (one turn for all functions).
"""

from __future__ import annotations

import dataclasses
import uuid

import pytest

from local.app.provision import client
from local.chaos.profiles import WorkerFaults
from tests.support.workers import function

pytestmark = pytest.mark.integration


@pytest.fixture
def table(moto_server: str) -> str:
    name = f"commits-{uuid.uuid4().hex[:8]}"
    client("dynamodb", moto_server).create_table(
        TableName=name,
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    return name


def written(moto_server: str, table: str, key: str) -> bool:
    answer = client("dynamodb", moto_server).get_item(TableName=table, Key={"pk": {"S": key}})
    return "Item" in answer


def committers(make_functions, moto_server, faults: WorkerFaults, *names: str):
    """`committer` functions under `faults`, named test-<name> (default: test-committer)."""
    code = function("committer", timeout_seconds=10)
    chosen = [dataclasses.replace(code, name=f"test-{name}") for name in names or ("committer",)]
    return make_functions(*chosen, endpoint_url=moto_server, chaos=faults)


def run_until_point(functions, moto_server, table, point_index: int) -> tuple[list, str]:
    """Invoke (kill_every=1) until the turn reaches `point_index`: every (result, key), and the last key."""
    results = []
    for index in range(point_index + 1):
        key = f"k{index}-{uuid.uuid4().hex[:6]}"
        results.append((functions.invoke("test-committer", {"table": table, "key": key}), key))
    return results, results[-1][1]


def test_a_kill_before_the_commit_leaves_nothing_written(make_functions, moto_server, table):
    functions = committers(make_functions, moto_server, WorkerFaults(functions=("test-*",), kill_every=2))
    first = functions.invoke("test-committer", {"table": table, "key": "a"})
    killed = functions.invoke("test-committer", {"table": table, "key": "b"})
    after = functions.invoke("test-committer", {"table": table, "key": "c"})
    assert first.function_error is None and after.function_error is None  # a new worker took over
    assert killed.payload["errorType"] == "Runtime.ExitError"
    assert "signal: killed" in killed.payload["errorMessage"]
    assert (written(moto_server, table, "a"), written(moto_server, table, "b")) == (True, False)
    stats = functions.stats()["test-committer"]
    assert stats["chaos"]["kill_before_commit"] == 1 and stats["crashes"] == 1


def test_a_kill_during_the_commit_strikes_while_the_call_is_in_flight(make_functions, moto_server, table):
    functions = committers(make_functions, moto_server, WorkerFaults(functions=("test-*",), kill_every=1))
    results, key = run_until_point(functions, moto_server, table, 1)
    result = results[-1][0]
    assert result.payload["errorType"] == "Runtime.ExitError"  # the handler never answered
    assert functions.stats()["test-committer"]["chaos"]["kill_during_commit"] == 1
    # Landed or not, the transaction is whole: the item is there entirely or not at all.
    item = client("dynamodb", moto_server).get_item(TableName=table, Key={"pk": {"S": key}}).get("Item")
    assert item in (None, {"pk": {"S": key}})


def test_a_kill_after_the_commit_leaves_the_write_landed_and_unanswered(make_functions, moto_server, table):
    functions = committers(make_functions, moto_server, WorkerFaults(functions=("test-*",), kill_every=1))
    results, key = run_until_point(functions, moto_server, table, 2)
    assert [r.payload["errorType"] for r, _ in results] == ["Runtime.ExitError"] * 3
    assert written(moto_server, table, key)  # the commit landed; its caller never heard
    assert not written(moto_server, table, results[0][1])  # the first kill came before its commit
    chaos = functions.stats()["test-committer"]["chaos"]
    assert (chaos["kill_before_commit"], chaos["kill_during_commit"], chaos["kill_after_commit"]) == (1, 1, 1)


def test_kill_points_take_turns_across_functions(make_functions, moto_server, table):
    faults = WorkerFaults(functions=("test-left", "test-right"), kill_every=1)
    functions = committers(make_functions, moto_server, faults, "left", "right")
    for name in ("test-left", "test-right", "test-left"):
        functions.invoke(name, {"table": table, "key": f"{name}-{uuid.uuid4().hex[:6]}"})
    stats = functions.stats()
    assert stats["test-left"]["chaos"]["kill_before_commit"] == 1
    assert stats["test-right"]["chaos"]["kill_during_commit"] == 1
    assert stats["test-left"]["chaos"]["kill_after_commit"] == 1


def test_a_kill_in_an_invocation_without_a_commit_strikes_as_it_returns(make_functions, moto_server, table):
    functions = committers(make_functions, moto_server, WorkerFaults(functions=("test-*",), kill_every=1))
    result = functions.invoke("test-committer", {"table": table, "key": "x", "commit": False})
    assert result.payload["errorType"] == "Runtime.ExitError"
    assert functions.stats()["test-committer"]["chaos"]["kill_no_commit"] == 1


def test_a_hang_ends_at_the_timeout_and_the_next_invocation_works(make_functions):
    faults = WorkerFaults(functions=("test-echo",), hang_every=2)
    functions = make_functions(function("echo", timeout_seconds=2), chaos=faults)
    assert functions.invoke("test-echo", {"n": 1}).function_error is None
    hung = functions.invoke("test-echo", {"n": 2})
    assert hung.payload["errorType"] == "Sandbox.Timedout"
    assert hung.duration_ms >= 2000
    assert functions.invoke("test-echo", {"n": 3}).function_error is None
    stats = functions.stats()["test-echo"]
    assert stats["chaos"]["hang"] == 1 and stats["timeouts"] == 1


def test_an_injected_out_of_memory_is_killed_at_the_memory_size(make_functions):
    faults = WorkerFaults(functions=("test-echo",), oom_every=1)
    functions = make_functions(function("echo", timeout_seconds=30, memory_mb=128), chaos=faults)
    result = functions.invoke("test-echo", {"n": 1})
    assert result.payload["errorType"] == "Runtime.OutOfMemory"
    assert result.payload["errorMessage"].endswith("Error: Runtime exited with error: signal: killed")
    stats = functions.stats()["test-echo"]
    assert stats["chaos"]["oom"] == 1 and stats["out_of_memory"] == 1


def test_a_function_past_its_memory_size_is_killed_as_lambda_kills_it(make_functions, tmp_path):
    functions = make_functions(function("hog", timeout_seconds=30, memory_mb=128))
    result = functions.invoke("test-hog", {"mb": 400})
    assert result.payload["errorType"] == "Runtime.OutOfMemory"
    assert functions.stats()["test-hog"]["out_of_memory"] == 1
    log = functions.log_path("test-hog").read_text()
    assert "Status: error\tError Type: Runtime.OutOfMemory" in log
    within = functions.invoke("test-hog", {"mb": 20})  # a new worker, within its memory: untouched
    assert within.function_error is None and within.payload == {"held_mb": 20}


def test_functions_the_profile_does_not_choose_are_never_touched(make_functions, moto_server, table):
    faults = WorkerFaults(functions=("test-someone-else",), kill_every=1, hang_every=1, oom_every=1)
    functions = committers(make_functions, moto_server, faults)
    for index in range(5):
        assert functions.invoke("test-committer", {"table": table, "key": f"n{index}"}).function_error is None
    assert set(functions.stats()["test-committer"]["chaos"].values()) == {0}


def test_an_inactive_profile_adds_nothing_to_the_workers(make_functions):
    functions = make_functions(function("echo"), chaos=WorkerFaults())
    assert functions.chaos is None and "chaos" not in functions.stats()["test-echo"]
