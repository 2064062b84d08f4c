"""Issue 8: the consumer never loses a record and never blocks a shard, whatever the handler, the
sink or the event does. Each numbered behaviour has its test here, on shardline.testing (the
consumer is the real one; DynamoDB and SQS are in memory); the ones that cross the wire to SQS
and S3 are in tests/integration/test_consumer_dead_letters.py, on moto server.

The promise checked in every case: after at most `max_attempts` deliveries of a bad record the
checkpoint is past it, the DLQ holds it whole, every good record's effect is applied exactly once,
and the metrics count what happened.
"""

from __future__ import annotations

import base64
import json
import math
import time
from typing import Any

import pytest

from shardline.consumer import ConsumedRecord, DeadLetterQueue, EventError, dead_letter_id
from shardline.kinesis import Position, UserRecord
from shardline.kpl import encode
from shardline.testing import (
    FakeLambdaContext,
    MappingReplay,
    kinesis_event,
)
from tests.support.consumer import (
    FIRST_SEQUENCE,
    SHARD,
    SINK,
    ProcessDied,
    RecordingSQS,
    _add_to,
    applied,
    dead_ids,
    effect,
    framed,
    record_id,
    records,
    setup,
    shard_event,
)

# -- 3 -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("answer", ["by record", "one list"])
def test_a_batch_handler_whose_writes_exceed_one_transaction_commits_them_exactly_once(answer: str) -> None:
    consumer, table, _ = setup()
    calls: list[int] = []

    @consumer.batch_handler
    def handle(batch: list[ConsumedRecord]) -> Any:
        calls.append(len(batch))
        if answer == "by record":
            return {record: [effect(record)] for record in batch}
        return [effect(record) for record in batch]  # too many for one transaction: split

    event = kinesis_event(records(120), records_per_aggregate=120)  # one aggregate, 120 writes
    table.fail_next("checkpoint_with", ProcessDied("killed after the first transaction landed"), landed=True)
    replay = MappingReplay(event["Records"])
    replay.drain(consumer.process)

    assert applied(table) == {f"r{i}": 1 for i in range(120)}, "every write once, none twice"
    assert replay.crashes == 1 and table.row(SHARD).checkpoint == Position(
        event["Records"][0]["kinesis"]["sequenceNumber"], 119
    )
    assert consumer.metrics.snapshot()["RecordsFailed"] == 0
    if answer == "one list":
        assert consumer.metrics.snapshot()["BatchesSplit"] >= 1 and max(calls[1:]) <= 99


# -- 4 -------------------------------------------------------------------------------------------


def test_a_batch_handler_that_keeps_raising_dead_letters_only_the_poison_record() -> None:
    consumer, table, sqs = setup()
    poison_runs = 0

    @consumer.batch_handler
    def handle(batch: list[ConsumedRecord]) -> Any:
        nonlocal poison_runs
        if any(record.json()["kind"] == "poison" for record in batch):
            poison_runs += len(batch) == 1
            raise ValueError("poison in this batch")
        return {record: [effect(record)] for record in batch}

    replay = MappingReplay(kinesis_event(records(40, r17="poison"), records_per_aggregate=10)["Records"], 2)
    replay.drain(consumer.process)

    assert applied(table) == {f"r{i}": 1 for i in range(40) if i != 17}
    assert dead_ids(sqs) == ["r17"] and sqs.bodies()[0]["attempts"] == 3
    assert poison_runs == 3, "the poison record alone, max_attempts times"
    snapshot = consumer.metrics.snapshot()
    assert (snapshot["RecordsFailed"], snapshot["RecordsSentToDLQ"]) == (3, 1), "counted against r17 only"


# -- 5 -------------------------------------------------------------------------------------------


def _put(key: str, **attributes: Any) -> dict[str, Any]:
    return {"Put": {"TableName": SINK, "Item": {"id": {"S": key}, **attributes}}}


REFUSED_WRITES = {
    "one item twice, different content": lambda r: [_put("same", v={"N": "1"}), _put("same", v={"N": "2"})],
    "a put and an update of one key": lambda r: [_put("same"), _add_to("same")],
    "an empty-string key": lambda r: [_put("")],
    "an item over 400 KB": lambda r: [_put(record_id(r), blob={"B": b"x" * 420_000})],
    "an update of a key attribute (refused at commit)": lambda r: [
        {
            "Update": {
                "TableName": SINK,
                "Key": {"id": {"S": record_id(r)}},
                "UpdateExpression": "SET id = :v",
                "ExpressionAttributeValues": {":v": {"S": "other"}},
            }
        }
    ],
}


@pytest.mark.parametrize("case", list(REFUSED_WRITES))
def test_sink_writes_dynamodb_refuses_are_blamed_on_their_record_and_the_others_commit(case: str) -> None:
    consumer, table, sqs = setup()

    @consumer.handler
    def handle(record: ConsumedRecord) -> Any:
        if record.json()["kind"] == "bad":
            return REFUSED_WRITES[case](record)
        return [effect(record)]

    replay = MappingReplay(kinesis_event(records(30, r12="bad"), records_per_aggregate=30)["Records"])
    replay.drain(consumer.process)

    assert applied(table) == {f"r{i}": 1 for i in range(30) if i != 12}, "the good records of the aggregate"
    assert dead_ids(sqs) == ["r12"] and replay.invocations == 3
    assert consumer.metrics.snapshot()["RecordsFailed"] == 3


# -- 6 -------------------------------------------------------------------------------------------


def _create_once(record: ConsumedRecord) -> list[dict[str, Any]]:
    order = record.json()["order"]
    return [
        {
            "Put": {
                "TableName": SINK,
                "Item": {"id": {"S": order}, "from": {"S": record_id(record)}},
                "ConditionExpression": "attribute_not_exists(id)",
            }
        }
    ]


def _orders() -> list[UserRecord]:
    orders = ["o1", "o2", "o1", "o3"]  # o1 twice: the second's condition fails
    return [UserRecord("k", json.dumps({"id": f"r{i}", "order": o}).encode()) for i, o in enumerate(orders)]


def test_a_sink_write_whose_condition_fails_is_that_records_failure_then_dead_lettered() -> None:
    consumer, table, sqs = setup()
    consumer.handler(_create_once)
    replay = MappingReplay(kinesis_event(_orders(), records_per_aggregate=4)["Records"])
    replay.drain(consumer.process)

    assert sorted(item["id"]["S"] for item in table.items(SINK)) == ["o1", "o2", "o3"]
    assert table.item(SINK, {"id": {"S": "o1"}})["from"] == {"S": "r0"}, "the first o1 stands"
    [letter] = sqs.bodies()
    assert json.loads(base64.b64decode(letter["data"]))["id"] == "r2" and letter["attempts"] == 3
    assert letter["details"]["refusedWrites"][0]["Put"]["Item"] == {"id": {"S": "o1"}, "from": {"S": "r2"}}
    assert letter["details"]["reasons"], "DynamoDB's cancellation reason"
    assert consumer.metrics.snapshot()["SinkWritesRefused"] == 3


def test_with_sink_conflicts_skip_a_failed_condition_counts_as_already_applied() -> None:
    consumer, table, sqs = setup(sink_conflicts="skip")
    consumer.handler(_create_once)
    replay = MappingReplay(kinesis_event(_orders(), records_per_aggregate=4)["Records"])
    replay.drain(consumer.process)

    assert sorted(item["id"]["S"] for item in table.items(SINK)) == ["o1", "o2", "o3"]
    assert sqs.messages == [] and replay.invocations == 1
    assert consumer.metrics.snapshot()["SinkConflictsSkipped"] == 1


# -- 8 -------------------------------------------------------------------------------------------


def test_a_handler_still_running_at_the_time_budget_is_interrupted_and_counted() -> None:
    consumer, table, sqs = setup(time_margin=1.0)
    runs: list[str] = []

    @consumer.handler
    def handle(record: ConsumedRecord) -> Any:
        runs.append(record_id(record))
        if record.json()["kind"] == "hangs":
            time.sleep(60)  # interrupted about 0.5 s in
        return [effect(record)]

    replay = MappingReplay(kinesis_event(records(6, r3="hangs"), records_per_aggregate=6)["Records"])
    started = time.monotonic()
    replay.drain(consumer.process, new_context=lambda: FakeLambdaContext(1_500))

    assert time.monotonic() - started < 30, "interrupted, not waited for"
    assert applied(table) == {f"r{i}": 1 for i in range(6) if i != 3}
    assert dead_ids(sqs) == ["r3"] and runs.count("r3") == 3
    assert consumer.metrics.snapshot()["HandlerTimeouts"] == 3


@pytest.mark.parametrize("handler_kind", ["record", "batch"])
def test_a_record_whose_delivery_kills_the_process_is_counted_and_dead_lettered(handler_kind: str) -> None:
    consumer, table, sqs = setup()
    runs: list[str] = []

    def run(record: ConsumedRecord) -> list[dict[str, Any]]:
        runs.append(record_id(record))
        if record.json()["kind"] == "kills":
            raise ProcessDied("out of memory")
        return [effect(record)]

    if handler_kind == "record":
        consumer.handler(run)
    else:
        consumer.batch_handler(lambda batch: {record: run(record) for record in batch})
    replay = MappingReplay(kinesis_event(records(20, r13="kills"), records_per_aggregate=10)["Records"], 2)
    replay.drain(consumer.process)

    assert applied(table) == {f"r{i}": 1 for i in range(20) if i != 13}
    assert dead_ids(sqs) == ["r13"]
    # A crash counts only once it is pinned on r13 running alone (`_careful`): doubling spans
    # from the checkpoint pin it within ceil(log2(d + 1)) + 1 crashes (d = 13: the first delivery
    # of 20 user records died at r13 before any checkpoint), the first pinned crash counted, then
    # max_attempts - 1 more pinned crashes before it is dead-lettered without running again.
    assert runs.count("r13") <= math.ceil(math.log2(13 + 1)) + 1 + (3 - 1)
    assert consumer.metrics.snapshot()["CrashesDetected"] >= 3
    assert table.row(SHARD).inflight is None and table.row(SHARD).failed_at is None


# -- 9 -------------------------------------------------------------------------------------------


def test_an_aggregate_with_no_user_records_is_passed_by_the_checkpoint() -> None:
    consumer, table, _ = setup()
    consumer.handler(lambda record: [effect(record)])
    empty = framed(b"")
    event = {"Records": shard_event([("a", encode(records(3))), ("a", empty)])}

    assert consumer.process(event, FakeLambdaContext()) == {"batchItemFailures": []}
    assert table.row(SHARD).checkpoint == Position(event["Records"][-1]["kinesis"]["sequenceNumber"], 0)
    assert applied(table) == {"r0": 1, "r1": 1, "r2": 1}

    only_empty = {"Records": shard_event([("a", empty)], first=FIRST_SEQUENCE + 10**18)}
    consumer.process(only_empty, FakeLambdaContext())
    assert table.row(SHARD).checkpoint == Position(only_empty["Records"][0]["kinesis"]["sequenceNumber"], 0)


# -- 10 ------------------------------------------------------------------------------------------


def test_an_aggregate_whose_hash_key_is_not_decimal_is_delivered_whole_not_a_crash_loop() -> None:
    consumer, _, _ = setup()
    seen: list[bytes] = []
    consumer.handler(lambda record: seen.append(record.data))
    record = b"\x08\x00\x10\x00\x1a\x02hi"  # key index 0, hash key index 0, data "hi"
    bad = framed(b"\x0a\x02pk" + b"\x12\x03abc" + b"\x1a" + bytes([len(record)]) + record)
    event = {"Records": shard_event([("a", bad), ("b", b"plain")])}

    assert consumer.process(event, FakeLambdaContext()) == {"batchItemFailures": []}
    assert seen == [bad, b"plain"], "the malformed aggregate passed through as one record"
    assert consumer.metrics.snapshot()["CorruptAggregatesPassedThrough"] == 1


# -- 11 ------------------------------------------------------------------------------------------


MALFORMED = {
    "kinesis.sequenceNumber": ("sequenceNumber", "49590338x"),
    "kinesis.sequenceNumber ": ("sequenceNumber", 495903382714902566),
    "kinesis.approximateArrivalTimestamp": ("approximateArrivalTimestamp", "yesterday"),
    "kinesis.partitionKey": ("partitionKey", None),
    "kinesis.data": ("data", "not base64!"),
    "kinesis.explicitHashKey": ("explicitHashKey", "-1"),
}


@pytest.mark.parametrize("field", list(MALFORMED))
def test_a_malformed_event_raises_event_error_before_any_handler_runs(field: str) -> None:
    consumer, table, _ = setup()
    ran: list[ConsumedRecord] = []
    consumer.handler(lambda record: ran.append(record))
    event = kinesis_event(records(10), records_per_aggregate=2)
    name, value = MALFORMED[field]
    event["Records"][-1]["kinesis"][name] = value  # the last record: the others would run first

    with pytest.raises(EventError) as raised:
        consumer.process(event, FakeLambdaContext())
    assert (raised.value.index, raised.value.field) == (4, field.strip())
    assert ran == [] and table.total_writes == 0 and table.rows() == {}


# -- 12 ------------------------------------------------------------------------------------------


def test_a_dead_letter_sent_twice_has_one_id_and_its_record_never_runs_again() -> None:
    consumer, table, sqs = setup()
    runs: list[str] = []

    @consumer.handler
    def handle(record: ConsumedRecord) -> Any:
        runs.append(record_id(record))
        if record.json()["kind"] == "poison":
            raise ValueError("poison")
        return [effect(record)]

    replay = MappingReplay(kinesis_event(records(6, r2="poison"), records_per_aggregate=1)["Records"], 6)
    replay.invoke(consumer.process)
    replay.invoke(consumer.process)
    # The third delivery counts the last attempt and sends the letter, then dies before its checkpoint.
    table.fail_next("checkpoint", ProcessDied("killed between SendMessage and the checkpoint"))
    replay.invoke(consumer.process)
    replay.drain(consumer.process)

    first, second = sqs.bodies()
    assert (
        first["id"]
        == second["id"]
        == dead_letter_id(
            "g",
            ConsumedRecord(
                "events", SHARD, replay.records[2]["kinesis"]["sequenceNumber"], None, "key-2", None, b"", 0.0
            ),
        )
    )
    assert (
        first["version"] == 1
        and sqs.messages[1]["MessageAttributes"]["DeadLetterId"]["StringValue"] == first["id"]
    )
    assert runs.count("r2") == 3, "decided: sent again, never run again"
    assert applied(table) == {f"r{i}": 1 for i in range(6) if i != 2}


def test_a_fifo_dead_letter_queue_deduplicates_by_the_dead_letter_id() -> None:
    sqs = RecordingSQS()
    queue = DeadLetterQueue(sqs, "https://sqs/dlq.fifo")
    record = ConsumedRecord("events", SHARD, "42", 3, "k", None, b"x", 0.0)
    sent = [queue.send(record, group="g", error="e", attempts=3) for _ in range(2)]

    assert sent[0] == sent[1] == dead_letter_id("g", record)
    assert {m["MessageDeduplicationId"] for m in sqs.messages} == {sent[0]}
    assert {m["MessageGroupId"] for m in sqs.messages} == {f"g/events/{SHARD}"}
