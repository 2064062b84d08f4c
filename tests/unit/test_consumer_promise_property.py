"""Issue 8's promise, as a property: random mixes of good, poison, oversize, killer, empty and
malformed Kinesis records, delivered by the mapping replay with crashes at random points, end with
every good record applied exactly once (or, if its deliveries died `max_attempts` times, dead-
lettered — never both, never neither), every bad record whole in the DLQ, and the checkpoint at the
end of the shard."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shardline.consumer import ConsumedRecord, DeadLetterQueue, KinesisConsumer
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
    framed,
    letter_id,
    record_id,
    shard_event,
)

KINDS = ("good", "good", "good", "poison", "oversize", "killer", "dies once")
RECORD_KINDS = st.lists(st.sampled_from(KINDS), min_size=1, max_size=6)
KINESIS_RECORD = st.one_of(
    RECORD_KINDS.map(lambda kinds: ("aggregate", kinds)),
    st.just(("empty aggregate", [])),
    st.just(("malformed aggregate", [])),
)
CRASH = st.sampled_from([None, "before the commit", "after the commit", "after the failure count"])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    kinesis_records=st.lists(KINESIS_RECORD, min_size=1, max_size=8),
    batch_size=st.integers(1, 4),
    crashes=st.lists(CRASH, max_size=4),
    batch=st.booleans(),
)
def test_nothing_is_lost_nothing_is_applied_twice_and_bad_records_end_whole_in_the_dlq(  # noqa: C901 -- over the gate before it existed; issue 26 cuts it
    kinesis_records: list[tuple[str, list[str]]], batch_size: int, crashes: list[str | None], batch: bool
) -> None:
    entries: list[tuple[str, bytes]] = []
    kinds: dict[str, str] = {}
    for number, (shape, record_kinds) in enumerate(kinesis_records):
        if shape == "empty aggregate":
            entries.append(("a", framed(b"")))
        elif shape == "malformed aggregate":
            entries.append(("a", framed(b"\x0a\x01k\x12\x01x\x1a\x06\x08\x00\x10\x00\x1a\x00")))
        else:
            users = []
            for index, kind in enumerate(record_kinds):
                rid = f"r{number}-{index}"
                kinds[rid] = kind
                users.append(UserRecord(f"k{index}", json.dumps({"id": rid}).encode()))
            entries.append(("a", encode(users) if len(users) > 1 else users[0].data))
    event_records = shard_event(entries)
    raw = {
        f"raw-{r['kinesis']['sequenceNumber']}"
        for r, (shape, _) in zip(event_records, kinesis_records, strict=True)
        if shape == "malformed aggregate"
    }

    table = InMemoryLeaseTable(key_schema={SINK: ["id"]})
    sqs = RecordingSQS()
    consumer = KinesisConsumer("g", table, dlq=DeadLetterQueue(sqs, "https://sqs/dlq"), max_attempts=3)
    died_once: set[str] = set()

    def run(record: ConsumedRecord) -> list[dict[str, Any]]:
        rid = record_id(record)
        kind = kinds.get(rid, "good")
        if kind == "poison":
            raise ValueError("poison")
        if kind == "killer" or (kind == "dies once" and rid not in died_once):
            died_once.add(rid)
            raise ProcessDied("out of memory")
        if kind == "oversize":
            return [{"Put": {"TableName": SINK, "Item": {"id": {"S": rid}, "b": {"B": b"x" * 500_000}}}}]
        return [effect(record)]

    if batch:
        consumer.batch_handler(lambda records: {record: run(record) for record in records})
    else:
        consumer.handler(run)
    for crash in crashes:
        if crash == "before the commit":
            table.fail_next("checkpoint_with", ProcessDied("killed"))
        elif crash == "after the commit":
            table.fail_next("checkpoint_with", ProcessDied("killed"), landed=True)
        elif crash == "after the failure count":
            table.fail_next("record_failure", ProcessDied("killed"), landed=True)

    replay = MappingReplay(event_records, batch_size)
    replay.drain(consumer.process, max_invocations=500)

    good = {rid for rid, kind in kinds.items() if kind in ("good", "dies once")}
    bad = {rid for rid, kind in kinds.items() if kind not in ("good", "dies once")}
    lettered = {letter_id(body) for body in sqs.bodies()}
    effects = applied(table)
    assert set(effects.values()) <= {1}, "nothing applied twice"
    assert bad <= lettered and not bad & set(effects), "every bad record, whole, in the DLQ, never applied"
    # A good record whose deliveries died max_attempts times (the injected crashes land during its
    # commits) is told from a killer by nothing: it is dead-lettered — never lost, never both.
    assert set(effects) | lettered == good | bad | raw and not set(effects) & lettered
    if not crashes:
        assert set(effects) == good | raw, "without injected crashes, every good record is applied"
    assert len({body["id"] for body in sqs.bodies()}) == len(lettered), "one dead-letter id per record"
    row = table.row(SHARD)
    assert row is not None and row.checkpoint.sequence == event_records[-1]["kinesis"]["sequenceNumber"]
    assert row.failed_at is None and row.inflight is None
