"""The endpoint's DynamoDB locks per table: calls on one table wait for each other, not for others."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import threading

from local.endpoint.dynamodb import TableLocks


def waits(locks: TableLocks, names: list[str], *, release: threading.Event) -> bool:
    """Whether taking `names` waits while another thread holds its own tables until `release`."""
    taken = threading.Event()

    def take() -> None:
        with locks.holding(names):
            taken.set()

    thread = threading.Thread(target=take)
    thread.start()
    waited = not taken.wait(0.3)
    release.set()
    thread.join(10)
    assert taken.is_set(), "the lock was never granted after its holder let go"
    return waited


def hold(locks: TableLocks, names: list[str]) -> tuple[threading.Thread, threading.Event]:
    held, release = threading.Event(), threading.Event()

    def run() -> None:
        with locks.holding(names):
            held.set()
            release.wait(10)

    thread = threading.Thread(target=run)
    thread.start()
    assert held.wait(10)
    return thread, release


def test_a_table_held_makes_its_own_calls_wait_and_no_other_tables():
    locks = TableLocks()
    holder, release = hold(locks, ["orders"])
    assert not waits(locks, ["idempotency"], release=threading.Event())
    assert waits(locks, ["idempotency", "orders"], release=release)  # a transaction over both
    holder.join(10)


def test_a_table_named_by_its_arn_shares_the_lock_of_its_name():
    locks = TableLocks()
    holder, release = hold(locks, ["orders"])
    assert waits(locks, ["arn:aws:dynamodb:us-east-1:000000000000:table/orders"], release=release)
    holder.join(10)


def test_transactions_naming_the_same_tables_in_opposite_orders_never_deadlock():
    locks = TableLocks()
    done: list[str] = []

    def run(names: list[str]) -> None:
        for _ in range(2000):
            with locks.holding(names):
                pass
        done.append(",".join(names))

    orders = (["a", "b", "c"], ["c", "b", "a"], ["b", "a"])
    threads = [threading.Thread(target=run, args=(names,)) for names in orders]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert len(done) == 3, "a thread never finished: the locks were taken in a cycle"


_BACKEND_SCRIPT = textwrap.dedent(
    """
    import json, threading
    from moto.dynamodb.models import dynamodb_backends
    from local.endpoint import dynamodb

    dynamodb.apply()
    backend = dynamodb_backends["000000000000"]["us-east-1"]
    for name in ("sink", "idempotency"):
        backend.create_table(name, schema=[{"AttributeName": "pk", "KeyType": "HASH"}],
                             throughput=None, attr=[{"AttributeName": "pk", "AttributeType": "S"}],
                             global_indexes=None, indexes=None, streams=None, billing_mode="PAY_PER_REQUEST",
                             sse_specification=None, tags=[], deletion_protection_enabled=False,
                             warm_throughput=None)
    answers = {}

    def call(label, operation):
        done = threading.Event()
        threading.Thread(target=lambda: (operation(), done.set()), daemon=True).start()
        answers[label] = done.wait(0.5)

    put = lambda table, pk: backend.put_item(table, {"pk": {"S": pk}})
    with dynamodb.TABLE_LOCKS.holding(["sink"]):  # as a long transaction on the sink would
        call("put into the other table", lambda: put("idempotency", "a"))
        call("get from the other table", lambda: backend.get_item("idempotency", {"pk": {"S": "a"}}))
        call("put into the held table", lambda: put("sink", "b"))
        call("transaction over both", lambda: backend.transact_write_items(
            [{"Put": {"TableName": "idempotency", "Item": {"pk": {"S": "c"}}}},
             {"Put": {"TableName": "sink", "Item": {"pk": {"S": "d"}}}}]))
    print(json.dumps(answers))
    """
)


def test_the_endpoints_backend_waits_only_for_the_tables_a_call_names(tmp_path):
    """moto's backend as the endpoint patches it: a table held (a long transaction on a sink)
    does not hold up the calls of another table (the producer API's idempotency records)."""
    run = subprocess.run(
        [sys.executable, "-c", _BACKEND_SCRIPT],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env={"PYTHONPATH": ":".join(sys.path), "PATH": "/usr/bin:/bin"},
    )
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout.splitlines()[-1]) == {
        "put into the other table": True,
        "get from the other table": True,
        "put into the held table": False,
        "transaction over both": False,
    }
