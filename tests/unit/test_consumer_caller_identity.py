"""Issue 39 on the consumer side, in milliseconds on shardline.testing: `ConsumedRecord`'s scoped id
and payload hash, a record handler's `once` guards telling copies from conflicts (property 3), an
id-keyed idempotent put never overwritten by another payload, and lanes keyed by caller (7)."""

from __future__ import annotations

from functools import partial
from typing import Any

from bench.identity import function_module
from shardline.consumer import ConsumedRecord, KinesisConsumer, deaggregate, idempotent_put, once
from shardline.consumer._dead_letters import DeadLetterQueue
from shardline.consumer._dedup_run import DedupRun
from shardline.kinesis import UserRecord
from shardline.kpl._identity import AggregateId, caller_scope
from shardline.testing import SEQUENCE_STEP, FakeLambdaContext, InMemoryLeaseTable, LeaseWrite, kinesis_event
from tests.support.consumer import RecordingSQS
from tests.support.consumer_identity import applied, counting_sink, seq

ALICE = "arn:aws:iam::000000000000:user/alice"
BOB = "arn:aws:iam::000000000000:user/bob"


def consumed(records: list[UserRecord], producer: str = "p1", first: int = 0) -> list[ConsumedRecord]:
    return deaggregate(kinesis_event(records, producer=producer, first_sequence=seq(first))["Records"])


def test_property_2_a_scoped_id_is_the_callers_and_tells_explicit_from_derived() -> None:
    [alice, bob, derived, anonymous, none] = consumed(
        [
            UserRecord("k", b"x", id="k:1", caller=ALICE),
            UserRecord("k", b"x", id="k:1", caller=BOB),
            UserRecord("k", b"x", id="k:1", caller=ALICE, id_derived=True),
            UserRecord("k", b"x", id="k:1"),
            UserRecord("k", b"x"),
        ]
    )
    assert (alice.caller, alice.id, alice.id_derived) == (ALICE, "k:1", False)
    assert alice.scoped_id == f"{caller_scope(ALICE)}/i/k:1" and len(caller_scope(ALICE)) == 16
    assert bob.scoped_id == f"{caller_scope(BOB)}/i/k:1" != alice.scoped_id
    assert derived.id_derived and derived.scoped_id == f"{caller_scope(ALICE)}/k/k:1"
    assert anonymous.caller is None and anonymous.scoped_id == "-/i/k:1"
    assert none.scoped_id is None


def test_property_3_the_payload_hash_covers_partition_key_hash_key_and_data() -> None:
    base = ConsumedRecord("s", "shard", "1", None, "k", None, b"data", 0.0)
    assert (
        len(base.payload_hash) == 64 and base.payload_hash == base._replace(sequence_number="2").payload_hash
    )
    others = [
        base._replace(partition_key="k2"),
        base._replace(explicit_hash_key="5"),
        base._replace(data=b"data2"),
        base._replace(partition_key="kd", data=b"ata"),  # the same bytes run together: still another
    ]
    assert len({base.payload_hash, *(record.payload_hash for record in others)}) == 5


def guarded(record: ConsumedRecord) -> list[dict[str, Any]]:
    """A user's record handler: its effect, and a `once` guard by scoped id keeping the payload hash."""
    writes = counting_sink()(record)
    if record.scoped_id is not None:
        key = {"pk": {"S": record.scoped_id}}
        writes.append(once("once", key, expires_at=2_000_000_000, payload_hash=record.payload_hash))
    return writes


def test_property_3_a_re_posted_batch_skips_its_copies_and_dead_letters_its_conflict_with_both_hashes() -> (
    None
):
    table, sqs = InMemoryLeaseTable(), RecordingSQS()
    consumer = KinesisConsumer("g", table, dlq=DeadLetterQueue(sqs, "https://sqs/dlq"))
    consumer.handler(guarded)
    posted = [UserRecord("k", f"order-{i}".encode(), id=f"order-{i}", caller=ALICE) for i in range(10)]
    consumer.process(kinesis_event(posted, producer="p1", first_sequence=seq(0)), FakeLambdaContext())
    changed = UserRecord("k", b"order-3 changed", id="order-3", caller=ALICE)  # order-3, another payload
    again = [*posted[:3], changed, *posted[4:]]
    before = table.writes[LeaseWrite.TRANSACTION]
    consumer.process(kinesis_event(again, producer="p2", first_sequence=seq(1)), FakeLambdaContext())
    assert table.writes[LeaseWrite.TRANSACTION] - before == 1, (
        "one refused transaction: the copies skipped together"
    )

    assert applied(table) == {f"order-{i}": 1 for i in range(10)}, "nothing of the conflict applied"
    [letter] = sqs.bodies()
    [first_three] = [r for r in consumed(posted[3:4]) if r.id == "order-3"]
    [second] = consumed([changed])
    assert letter["details"]["clientIdConflict"] == {
        "scopedId": second.scoped_id,
        "appliedPayloadHash": first_three.payload_hash,
        "payloadHash": second.payload_hash,
    }
    assert letter["scopedId"] == second.scoped_id and letter["caller"] == ALICE and letter["attempts"] == 1
    metrics = consumer.metrics.snapshot()
    assert metrics["ClientIdDuplicatesSkipped"] == 9 and metrics["ClientIdConflicts"] == 1
    assert metrics["RecordsSentToDLQ"] == 1


def test_property_3_an_id_keyed_idempotent_put_keeps_the_first_payload_and_names_the_second() -> None:
    table, sqs = InMemoryLeaseTable(key_schema={"events": ["pk"]}), RecordingSQS()
    consumer = KinesisConsumer("g", table, dlq=DeadLetterQueue(sqs, "https://sqs/dlq"))

    @consumer.handler
    def handle(record: ConsumedRecord) -> list[dict[str, Any]]:
        assert record.scoped_id is not None
        item = {"pk": {"S": record.scoped_id}, "data": {"B": record.data}}
        return [idempotent_put("events", item, payload_hash=record.payload_hash)]

    first = [UserRecord("k", b"one", id="e-1", caller=BOB), UserRecord("k", b"two", id="e-2", caller=BOB)]
    consumer.process(kinesis_event(first, producer="p1", first_sequence=seq(0)), FakeLambdaContext())
    again = [first[0], UserRecord("k", b"TWO", id="e-2", caller=BOB), UserRecord("k", b"two", id="e-2")]
    consumer.process(kinesis_event(again, producer="p2", first_sequence=seq(1)), FakeLambdaContext())

    assert sorted((item["pk"]["S"][-3:], item["data"]["B"]) for item in table.items("events")) == [
        ("e-1", b"one"),
        ("e-2", b"two"),  # Bob's: the first payload, intact
        ("e-2", b"two"),  # no caller's e-2: another record
    ]
    [letter] = sqs.bodies()
    assert (
        letter["recordId"] == "e-2"
        and letter["details"]["clientIdConflict"]["payloadHash"]
        != (letter["details"]["clientIdConflict"]["appliedPayloadHash"])
    )
    assert consumer.metrics.snapshot()["ClientIdConflicts"] == 1


def test_property_7_an_aggregate_of_another_caller_never_moves_a_lanes_floor() -> None:
    run = DedupRun(None)
    victim = AggregateId("victimproducer00", "0", 1, 1)
    assert run.admit(victim.encode(), str(seq(0)), 100.0)
    forged = victim._replace(counter=2, floor=0xFFFFFF).encode()
    assert run.admit(forged, str(seq(1)), 100.0, caller="mallory")
    run.committed(run._pending[-1].passed_at)
    lanes = run.state.lanes
    assert set(lanes) == {"-.victimproducer00.0", f"{caller_scope('mallory')}.victimproducer00.0"}
    assert lanes["-.victimproducer00.0"][0] == 1, "the victim's floor did not move"
    assert run.admit(victim._replace(counter=2, floor=2).encode(), str(seq(2)), 100.0), "not taken for a copy"
    assert not run.admit(forged, str(seq(3)), 100.0, caller="mallory"), (
        "mallory's own lane is still deduplicated"
    )


def test_property_3_the_key_counter_counts_copies_once_and_dead_letters_conflicts_in_and_across_chunks() -> (
    None
):
    """functions/key_counter's batch handler (one list per chunk): a re-posted batch holding copies
    and one conflict costs one rerun, not a split; two payloads under one id in one chunk are run
    apart, the first counted, the second dead-lettered."""
    counter = function_module("key_counter")
    table, sqs = InMemoryLeaseTable(key_schema={"counts": ["partitionKey"]}), RecordingSQS()
    consumer = KinesisConsumer("key_counter", table, dlq=DeadLetterQueue(sqs, "https://sqs/dlq"))
    consumer.batch_handler(partial(counter.count, "counts"))
    users = [UserRecord(f"k{i % 5}", b"x", id=f"order-{i}", caller=ALICE) for i in range(40)]
    first = kinesis_event(users, producer="p1", records_per_aggregate=10, first_sequence=seq(0))
    consumer.process(first, FakeLambdaContext())
    changed = UserRecord("k9", b"y", id="order-7", caller=ALICE)  # order-7 again, another payload
    same_chunk = [
        UserRecord("k7", b"1", id="twice", caller=BOB),
        UserRecord("k8", b"2", id="twice", caller=BOB),
    ]
    after = int(first["Records"][-1]["kinesis"]["sequenceNumber"]) + SEQUENCE_STEP
    again = kinesis_event([*users, changed, *same_chunk], producer="p2", first_sequence=after)
    assert consumer.process(again, FakeLambdaContext()) == {"batchItemFailures": []}

    counted = {i["partitionKey"]["S"]: int(i["count"]["N"]) for i in table.items("counts") if "count" in i}
    assert counted == {**{f"k{i}": 8 for i in range(5)}, "k7": 1}, "copies once, conflicts never"
    letters = sqs.bodies()
    assert sorted((letter["partitionKey"], letter["recordId"]) for letter in letters) == [
        ("k8", "twice"),
        ("k9", "order-7"),
    ]
    assert all(
        letter["details"]["clientIdConflict"]["payloadHash"]
        != (letter["details"]["clientIdConflict"]["appliedPayloadHash"])
        for letter in letters
    )
    metrics = consumer.metrics.snapshot()
    assert metrics["ClientIdDuplicatesSkipped"] == 40 and metrics["ClientIdConflicts"] == 2


def test_property_7_a_state_written_before_lanes_were_scoped_still_skips_its_copies() -> None:
    """The lease row of a consumer before the upgrade keys lanes `<producer>.<lane>`: a copy of an
    aggregate it applied (caller-less, as every aggregate then was) is still a copy after it."""
    run = DedupRun('{"v":1,"t":100,"k":{"oldproducer0000.0":[5,100]}}')
    assert not run.admit(AggregateId("oldproducer0000", "0", 5, 5).encode(), str(seq(0)), 100.0)
    assert run.admit(AggregateId("oldproducer0000", "0", 6, 6).encode(), str(seq(1)), 100.0)
    assert run.admit(AggregateId("oldproducer0000", "0", 5, 5).encode(), str(seq(2)), 100.0, caller=ALICE)
