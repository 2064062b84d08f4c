"""Idempotent puts beside transactions, as a property: random mixes of records whose effect is an
idempotent put, a transactional count, or both, good or poison or dying, delivered by the mapping
replay with crashes before and after the puts land and before and after the checkpoint. Every good
record ends applied in full (its item there, its count exactly 1) or dead-lettered (its deliveries
died `max_attempts` times: its transaction never committed, though a put that landed stays, as
documented); a count is never there without its item; the checkpoint reaches the shard's end."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shardline.consumer import ConsumedRecord, DeadLetterQueue, KinesisConsumer, idempotent_put
from shardline.kinesis import UserRecord
from shardline.kpl import encode
from shardline.testing import InMemoryLeaseTable, MappingReplay
from tests.support.consumer import (
    SHARD,
    SINK,
    ProcessDied,
    RecordingSQS,
    applied,
    effect,
    letter_id,
    record_id,
    shard_event,
)

PUTS = "puts"
EFFECTS = ("put", "count", "both")
KINDS = ("good", "good", "good", "poison", "dies once")
RECORD = st.tuples(st.sampled_from(KINDS), st.sampled_from(EFFECTS))
CRASH = st.sampled_from(
    [
        ("put_idempotent", False),
        ("put_idempotent", True),
        ("checkpoint_with", False),
        ("checkpoint_with", True),
    ]
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    aggregates=st.lists(st.lists(RECORD, min_size=1, max_size=5), min_size=1, max_size=6),
    batch_size=st.integers(1, 4),
    crashes=st.lists(CRASH, max_size=4),
)
def test_idempotent_puts_and_transactions_apply_each_good_record_once_whatever_dies(
    aggregates: list[list[tuple[str, str]]], batch_size: int, crashes: list[tuple[str, bool]]
) -> None:
    shapes: dict[str, tuple[str, str]] = {}
    entries: list[tuple[str, bytes]] = []
    for number, records in enumerate(aggregates):
        users = []
        for index, shape in enumerate(records):
            rid = f"r{number}-{index}"
            shapes[rid] = shape
            users.append(UserRecord(f"k{index}", json.dumps({"id": rid}).encode()))
        entries.append(("a", encode(users) if len(users) > 1 else users[0].data))
    table = InMemoryLeaseTable(key_schema={SINK: ["id"], PUTS: ["id"]})
    sqs = RecordingSQS()
    consumer = KinesisConsumer("g", table, dlq=DeadLetterQueue(sqs, "https://sqs/dlq"), max_attempts=3)
    died_once: set[str] = set()

    @consumer.handler
    def run(record: ConsumedRecord) -> list[dict[str, Any]]:
        rid = record_id(record)
        kind, effects = shapes[rid]
        if kind == "poison":
            raise ValueError("poison")
        if kind == "dies once" and rid not in died_once:
            died_once.add(rid)
            raise ProcessDied("out of memory")
        writes = []
        if effects in ("put", "both"):
            writes.append(idempotent_put(PUTS, {"id": {"S": rid}, "data": {"B": record.data}}))
        if effects in ("count", "both"):
            writes.append(effect(record))
        return writes

    for operation, landed in crashes:
        table.fail_next(operation, ProcessDied("killed"), landed=landed)
    events = shard_event(entries)
    MappingReplay(events, batch_size).drain(consumer.process, max_invocations=500)

    counts = applied(table)
    items = {item["id"]["S"] for item in table.items(PUTS)}
    lettered = {letter_id(body) for body in sqs.bodies()}
    wants_item = {rid for rid, (_, effects) in shapes.items() if effects != "count"}
    wants_count = {rid for rid, (_, effects) in shapes.items() if effects != "put"}
    applied_fully = {
        rid
        for rid in shapes
        if (rid not in wants_item or rid in items) and (rid not in wants_count or rid in counts)
    }
    good = {rid for rid, (kind, _) in shapes.items() if kind != "poison"}
    assert set(counts.values()) <= {1}, "no count applied twice"
    assert set(counts) <= items | (wants_count - wants_item), "a count is never there without its item"
    assert not lettered & set(counts), "a dead-lettered record's transaction never committed"
    assert good <= applied_fully | lettered, "every good record applied in full, or dead-lettered"
    assert {rid for rid, (kind, _) in shapes.items() if kind == "poison"} <= lettered - items
    if not crashes:
        assert applied_fully & good == good and not good & lettered
    row = table.row(SHARD)
    assert row is not None and row.checkpoint.sequence == events[-1]["kinesis"]["sequenceNumber"]
