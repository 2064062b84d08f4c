"""What a consumer group's batch, failed record and crash cost in DynamoDB and in deliveries —
this tree against the library of an earlier commit, measured in the same run.

    python -m bench.consumer_cost [--before REF]     # REF: a git commit (default: BEFORE_REF)

Each library runs in a process of its own (`shardline` and `functions/` from `git archive REF`,
or from this tree), the same scenarios through its own `KinesisConsumer` and its testing kit's
`InMemoryLeaseTable`, whose every DynamoDB request is counted (write requests as DynamoDB bills
them, a cancelled transaction included; GetItem reads), delivered as the event-source mapping
does (`MappingReplay`, batches of 100 user records: 10 KPL aggregates of 10):

- *successful batch*: 100 records, a record handler returning one `Update` each;
- *failed record*: the same with one poison record (raises every time), until it is
  dead-lettered (max_attempts 3) — the figure is what it adds to a successful batch;
- *crash*: the same with one record whose delivery dies once (out of memory) at the batch's
  end — what the crash adds, the careful redelivery included;
- *refusal not pinned*: one record's write updates a key attribute (DynamoDB refuses the
  transaction as invalid and names no write) — what it costs to pin it on its record;
- *key counter, hot keys*: `functions/key_counter`'s handler as its function registers it, on
  100 records over 5 keys; *re-POST*: the same 40 client ids posted again beside one new record.

Deliveries are Lambda invocations; handler calls count the user code's runs. The new library
waits out a failing record's backoff inside the invocation: `waited` is that virtual time.
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
#: The last commit before a record was dead-lettered only on evidence against it.
BEFORE_REF = "6ce288e"
BATCH = 100
SINK = "sink"
FIGURES = ("writes", "transactions", "reads", "deliveries", "handler calls", "dead letters", "waited s")


class ProcessDied(BaseException):
    """The function's process dying (out of memory): the invocation never answers."""


# -- the scenarios (run inside the measured library's process) -----------------------------------


def _scenarios(functions: Path) -> dict[str, dict[str, float]]:  # noqa: C901 -- over the gate before it existed; issue 26 cuts it
    from shardline.consumer import ConsumedRecord, DeadLetterQueue, KinesisConsumer
    from shardline.kinesis import UserRecord
    from shardline.testing import InMemoryLeaseTable, MappingReplay, kinesis_event

    class Letters:
        def __init__(self) -> None:
            self.sent = 0

        def send_message(self, **_: Any) -> dict[str, Any]:
            self.sent += 1
            return {"MessageId": str(self.sent)}

    def rid(record: ConsumedRecord) -> str:
        return record.data.decode()

    def add(record: ConsumedRecord) -> dict[str, Any]:
        return {
            "Update": {
                "TableName": SINK,
                "Key": {"id": {"S": rid(record)}},
                "UpdateExpression": "ADD n :one",
                "ExpressionAttributeValues": {":one": {"N": "1"}},
            }
        }

    def run(
        handle: Callable[[ConsumedRecord], list[dict[str, Any]]], users: list[Any] | None = None
    ) -> dict[str, float]:
        table = InMemoryLeaseTable(key_schema={SINK: ["id"]})
        letters = Letters()
        dlq = DeadLetterQueue(letters, "https://sqs/dlq")
        consumer = KinesisConsumer("bench", table, dlq=dlq, max_attempts=3)
        calls = [0]

        def counted(record: ConsumedRecord) -> list[dict[str, Any]]:
            calls[0] += 1
            return handle(record)

        consumer.handler(counted)
        users = users or [UserRecord(f"k{i}", f"r{i}".encode()) for i in range(BATCH)]
        replay = MappingReplay(kinesis_event(users, records_per_aggregate=10)["Records"], BATCH)
        replay.drain(consumer.process, max_invocations=100)
        return _figures(table, replay.invocations, calls[0], letters.sent)

    died: set[str] = set()

    def dies_once(record: ConsumedRecord) -> list[dict[str, Any]]:
        if rid(record) == "r99" and "r99" not in died:
            died.add("r99")
            raise ProcessDied("out of memory")
        return [add(record)]

    def poison(record: ConsumedRecord) -> list[dict[str, Any]]:
        if rid(record) == "r50":
            raise ValueError("poison")
        return [add(record)]

    def key_update(record: ConsumedRecord) -> list[dict[str, Any]]:
        if rid(record) == "r40":
            update = {"TableName": SINK, "Key": {"id": {"S": "r40"}}, "UpdateExpression": "SET id = :x"}
            return [{"Update": {**update, "ExpressionAttributeValues": {":x": {"S": "y"}}}}]
        return [add(record)]

    figures = {
        "successful batch": run(lambda record: [add(record)]),
        "failed record": run(poison),
        "crash": run(dies_once),
        "refusal not pinned": run(key_update),
    }
    figures.update(_key_counter(functions))
    return figures


def _key_counter(functions: Path) -> dict[str, dict[str, float]]:
    import importlib.util

    from shardline.consumer import KinesisConsumer
    from shardline.kinesis import UserRecord
    from shardline.testing import SEQUENCE_STEP, FakeLambdaContext, InMemoryLeaseTable, kinesis_event

    os.environ.setdefault("POWERTOOLS_TRACE_DISABLED", "true")
    spec = importlib.util.spec_from_file_location("bench_key_counter", functions / "key_counter" / "app.py")
    assert spec is not None and spec.loader is not None
    counter = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(counter)
    per_chunk = next(iter(list(inspect.signature(counter.count).parameters)[1:])) == "records"

    def consumer_on(table: Any) -> Any:
        consumer = KinesisConsumer("key_counter", table, max_attempts=3)
        register = consumer.batch_handler if per_chunk else consumer.handler
        register(partial(counter.count, "counts"))
        return consumer

    hot = InMemoryLeaseTable(key_schema={"counts": ["partitionKey"]})
    users = [UserRecord(f"k{i % 5}", b"x") for i in range(BATCH)]
    consumer_on(hot).process(kinesis_event(users, records_per_aggregate=10), FakeLambdaContext())

    reposted = InMemoryLeaseTable(key_schema={"counts": ["partitionKey"]})
    consumer = consumer_on(reposted)
    ids = [UserRecord(f"k{i % 5}", b"x", None, f"order-{i}") for i in range(40)]
    first = kinesis_event(ids, producer="p1", records_per_aggregate=10)
    consumer.process(first, FakeLambdaContext())
    base = _figures(reposted, 0, 0, 0)
    after = int(first["Records"][-1]["kinesis"]["sequenceNumber"]) + SEQUENCE_STEP
    again = [*ids[:20], UserRecord("k9", b"x", None, "order-new"), *ids[20:]]
    consumer.process(kinesis_event(again, producer="p2", first_sequence=after), FakeLambdaContext())
    repost = {name: value - base[name] for name, value in _figures(reposted, 1, 0, 0).items()}
    return {"key counter, hot keys": _figures(hot, 1, 0, 0), "key counter, re-POST of 40": repost}


def _figures(table: Any, deliveries: int, calls: int, letters: int) -> dict[str, float]:
    writes = dict(table.writes)
    return {
        "writes": float(sum(writes.values())),
        "transactions": float(writes.get("checkpoint transaction", 0)),
        "reads": float(table.reads),
        "deliveries": float(deliveries),
        "handler calls": float(calls),
        "dead letters": float(letters),
        "waited s": float(getattr(table, "slept", 0.0)),
    }


# -- the driver -----------------------------------------------------------------------------------


def _library(ref: str, into: Path) -> tuple[Path, Path]:
    """`layers/shardline/python` and `functions/` of commit `ref`, extracted under `into`."""
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", ref, "layers/shardline/python", "functions"],
        check=True,
        capture_output=True,
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into / "layers/shardline/python", into / "functions"


def measure_in(library: Path, functions: Path) -> dict[str, dict[str, float]]:
    """The scenarios' figures with the library at `library` (a process of its own)."""
    # Run as a file, not as `bench.consumer_cost`: importing the `bench` package would put this
    # tree's library first on sys.path.
    env = {**os.environ, "PYTHONPATH": str(library)}
    answer = subprocess.run(
        [sys.executable, __file__, "--scenarios", str(functions)],
        check=True,
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
    )
    figures: dict[str, dict[str, float]] = json.loads(answer.stdout.strip().splitlines()[-1])
    return figures


def marginal(figures: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
    """Per failed record and per crash: what each adds to a successful batch."""
    base = figures["successful batch"]
    out = dict(figures)
    for scenario in ("failed record", "crash", "refusal not pinned"):
        out[scenario] = {name: value - base[name] for name, value in figures[scenario].items()}
    return out


def render(before: dict[str, dict[str, float]], after: dict[str, dict[str, float]], ref: str) -> str:
    lines = [
        f"| scenario | figure | before ({ref}) | now | now ÷ before |",
        "|---|---|---:|---:|---:|",
    ]
    for scenario, now in after.items():
        for name in FIGURES:
            old, new = before.get(scenario, {}).get(name, 0.0), now.get(name, 0.0)
            if old == new == 0:
                continue
            ratio = f"{new / old:.2f}×" if old else "—"
            lines.append(f"| {scenario} | {name} | {old:.3g} | {new:.3g} | {ratio} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.consumer_cost", description=__doc__.split("\n")[0])
    parser.add_argument("--before", default=BEFORE_REF, help="the git commit to compare with")
    parser.add_argument("--scenarios", type=Path, help=argparse.SUPPRESS)  # inside a measured process
    args = parser.parse_args(argv)
    if args.scenarios is not None:
        print(json.dumps(_scenarios(args.scenarios)))
        return 0
    with tempfile.TemporaryDirectory() as scratch:
        before = marginal(measure_in(*_library(args.before, Path(scratch))))
    after = marginal(measure_in(ROOT / "layers/shardline/python", ROOT / "functions"))
    print("DynamoDB requests and deliveries per scenario (failed record, crash, refusal: added to a batch)")
    print(render(before, after, args.before))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
