"""What the unit tests of the shard run's parts share: records, sink writes, and one part wired
to an in-memory lease table with nothing else of the consumer around it."""

from __future__ import annotations

from typing import Any

from shardline.consumer import ConsumedRecord, ConsumerMetrics, ConsumerSettings
from shardline.consumer._checkpoint import Checkpoint, GiveUp
from shardline.consumer._deaggregation import KinesisRecord
from shardline.testing import InMemoryLeaseTable

SINK = "sink"
KEY = "shardId-000000000001"
BASE = 49590338271490256608559692538361571095921575989136588898  # 56 digits, like Kinesis


def record(n: int, *, sub: int | None = None, record_id: str | None = None) -> ConsumedRecord:
    """The n-th user record of the shard (a Kinesis record of its own unless `sub` is given)."""
    return ConsumedRecord("s", KEY, str(BASE + n), sub, f"pk-{n}", None, b"%d" % n, 0.0, id=record_id)


def kinesis_record(n: int) -> KinesisRecord:
    """The n-th Kinesis record of the shard, not aggregated."""
    return KinesisRecord("s", KEY, str(BASE + n), f"pk-{n}", None, b"%d" % n, 0.0)


def put(item_id: str, *, only_new: bool = False) -> dict[str, Any]:
    """A sink `Put` of item `item_id` (on condition it is not there yet, with `only_new`)."""
    body: dict[str, Any] = {"TableName": SINK, "Item": {"id": {"S": item_id}}}
    if only_new:
        body["ConditionExpression"] = "attribute_not_exists(id)"
    return {"Put": body}


def sink_ids(table: InMemoryLeaseTable) -> list[str]:
    return [item["id"]["S"] for item in table.items(SINK)]


class GiveUps:
    """A failure policy's verdict, recorded: each record handed over, and what it answered."""

    def __init__(self, answer: bool) -> None:
        self.answer = answer
        self.calls: list[tuple[ConsumedRecord, BaseException, Any]] = []

    def __call__(self, record: ConsumedRecord, exc: BaseException, details: Any) -> bool:
        self.calls.append((record, exc, details))
        return self.answer


def checkpoint(
    table: InMemoryLeaseTable | None = None,
    *,
    give_up: GiveUp | None = None,
    clock: float = 0.0,
    **settings: Any,
) -> Checkpoint:
    """A `Checkpoint` holding the lease of `KEY` in `table` (a fresh in-memory one by default)."""
    table = table if table is not None else InMemoryLeaseTable(key_schema={SINK: ["id"]}, start=0.0)
    part = Checkpoint(
        table,
        ConsumerMetrics(),
        ConsumerSettings("g", **settings),
        lambda: clock,
        give_up=give_up or GiveUps(False),
    )
    part.lease = table.hold(KEY, "me")
    return part


class FakeDeadLetters:
    """A dead-letter queue that keeps what it is sent: (record, error, attempts, details)."""

    def __init__(self) -> None:
        self.sent: list[tuple[ConsumedRecord, str, int, Any]] = []

    def send(
        self, record: ConsumedRecord, *, group: str, error: str, attempts: int, details: Any = None
    ) -> str:
        self.sent.append((record, error, attempts, details))
        return f"dead-letter-{len(self.sent)}"
