"""The consumer's guarantees (README, "What `process` guarantees"), each in milliseconds on
shardline.testing: the consumer is the real one; only DynamoDB and SQS are in memory."""

from __future__ import annotations

from typing import Any

import pytest

from shardline.consumer import ConsumedRecord, DeadLetterQueue, KinesisConsumer, deaggregate
from shardline.kinesis import Position, UserRecord
from shardline.testing import FakeLambdaContext, InMemoryLeaseTable, LeaseWrite, MappingReplay, kinesis_event

SHARD = "shardId-000000000000"
RECORDS = [UserRecord(f"key-{i % 5}", f"{i}".encode()) for i in range(40)]


class RecordingSQS:
    """The SQS boundary: keeps every message the DLQ sends."""

    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []

    def send_message(self, **kwargs: Any) -> dict[str, Any]:
        self.messages.append(kwargs)
        return {"MessageId": str(len(self.messages))}


def count_per_key(table: str):
    def handle(record: ConsumedRecord) -> list[dict[str, Any]]:
        return [
            {
                "Update": {
                    "TableName": table,
                    "Key": {"key": {"S": record.partition_key}},
                    "UpdateExpression": "ADD #n :one",
                    "ExpressionAttributeNames": {"#n": "n"},
                    "ExpressionAttributeValues": {":one": {"N": "1"}},
                }
            }
        ]

    return handle


def counts(table: InMemoryLeaseTable) -> dict[str, int]:
    return {item["key"]["S"]: int(item["n"]["N"]) for item in table.items("counts")}


def test_replays_repeat_nothing() -> None:
    table = InMemoryLeaseTable()
    consumer = KinesisConsumer("g", table)
    seen: list[bytes] = []
    consumer.handler(lambda record: seen.append(record.data))
    event = kinesis_event(RECORDS, records_per_aggregate=8)
    assert consumer.process(event, FakeLambdaContext()) == {"batchItemFailures": []}
    assert consumer.process(event, FakeLambdaContext()) == {"batchItemFailures": []}
    assert seen == [record.data for record in RECORDS]
    assert consumer.metrics.snapshot()["DuplicatesSkipped"] == len(RECORDS)


def test_a_successful_batch_costs_two_writes_and_no_read_with_crash_detection() -> None:
    table = InMemoryLeaseTable()
    table.place(SHARD, Position("1"))  # the row exists, as after an earlier invocation
    consumer = KinesisConsumer("g", table)
    consumer.handler(lambda record: None)
    consumer.process(kinesis_event(RECORDS), FakeLambdaContext())
    assert table.writes == {LeaseWrite.BEGIN: 1, LeaseWrite.CHECKPOINT: 1} and table.reads == 0
    assert table.row(SHARD).inflight is None, "the checkpoint took the in-flight mark away"


def test_a_successful_batch_costs_one_write_without_crash_detection() -> None:
    table = InMemoryLeaseTable()
    table.place(SHARD, Position("1"))
    consumer = KinesisConsumer("g", table, detect_crashes=False)
    consumer.handler(lambda record: None)
    consumer.process(kinesis_event(RECORDS), FakeLambdaContext())
    assert table.writes == {LeaseWrite.CHECKPOINT: 1} and table.reads == 1


def test_a_failure_keeps_order_and_the_retry_restarts_at_the_failing_record() -> None:
    table = InMemoryLeaseTable()
    consumer = KinesisConsumer("g", table, max_attempts=10)
    seen: list[int] = []
    failures = {13: 1}  # record 13 fails once

    @consumer.handler
    def handle(record: ConsumedRecord) -> None:
        number = int(record.data)
        if failures.get(number):
            failures[number] -= 1
            raise ValueError("transient")
        seen.append(number)

    replay = MappingReplay(kinesis_event(RECORDS, records_per_aggregate=10)["Records"], batch_size=2)
    first = replay.invoke(consumer.process)
    assert first == {
        "batchItemFailures": [{"itemIdentifier": replay.records[1]["kinesis"]["sequenceNumber"]}]
    }
    assert seen == list(range(13)), "nothing after the failing record ran"
    replay.drain(consumer.process)
    assert seen == list(range(40)), "records before 13 in its aggregate were skipped on the retry"


def test_a_poison_record_goes_whole_to_the_dlq_and_the_shard_moves_on() -> None:
    table = InMemoryLeaseTable()
    sqs = RecordingSQS()
    consumer = KinesisConsumer("g", table, dlq=DeadLetterQueue(sqs, "queue-url"), max_attempts=3)
    seen: list[int] = []

    @consumer.handler
    def handle(record: ConsumedRecord) -> None:
        if record.data == b"7":
            raise ValueError("poison")
        seen.append(int(record.data))

    replay = MappingReplay(kinesis_event(RECORDS, records_per_aggregate=10)["Records"], batch_size=1)
    replay.drain(consumer.process)
    assert seen == [n for n in range(40) if n != 7]
    assert len(sqs.messages) == 1 and '"attempts": 3' in sqs.messages[0]["MessageBody"]
    assert '"data": "Nw=="' in sqs.messages[0]["MessageBody"], "the record itself, base64"


def test_with_too_little_time_left_it_checkpoints_and_reports_the_rest() -> None:
    table = InMemoryLeaseTable()
    consumer = KinesisConsumer("g", table, time_margin=2.0)
    remaining = {"ms": 60_000}
    seen: list[int] = []

    @consumer.handler
    def handle(record: ConsumedRecord) -> None:
        seen.append(int(record.data))
        if len(seen) == 5:
            remaining["ms"] = 1_000  # below the margin from now on

    event = kinesis_event(RECORDS, aggregate=False)
    answer = consumer.process(event, FakeLambdaContext(lambda: remaining["ms"]))
    assert seen == [0, 1, 2, 3, 4]
    assert answer == {
        "batchItemFailures": [{"itemIdentifier": event["Records"][5]["kinesis"]["sequenceNumber"]}]
    }
    assert table.row(SHARD).checkpoint == Position(event["Records"][4]["kinesis"]["sequenceNumber"])


def test_an_invocation_whose_lease_was_taken_stops_and_writes_nothing_more() -> None:
    table = InMemoryLeaseTable()
    consumer = KinesisConsumer("g", table, checkpoint_every=1)
    event = kinesis_event(RECORDS, aggregate=False)
    count = count_per_key("counts")
    seen: list[int] = []
    taken: dict[str, Any] = {}

    @consumer.handler
    def handle(record: ConsumedRecord) -> list[dict[str, Any]]:
        seen.append(int(record.data))
        if record.data == b"3":
            taken["row"] = table.take(SHARD, "a newer invocation")  # fences this one
            taken["counts"] = counts(table)
        return count(record)

    answer = consumer.process(event, FakeLambdaContext())
    stored = table.row(SHARD)
    assert seen == [0, 1, 2, 3], "it stopped at its next write"
    assert stored == taken["row"], "the row is as the newer invocation left it"
    assert counts(table) == taken["counts"] == {"key-0": 1, "key-1": 1, "key-2": 1}, "record 3 not committed"
    assert stored.checkpoint == Position(event["Records"][2]["kinesis"]["sequenceNumber"])
    # The retry starts at the Kinesis record holding the stored checkpoint (a checkpoint can stop
    # inside an aggregate); what is at or below it is skipped, so nothing is lost or repeated.
    retry_from = answer["batchItemFailures"][0]["itemIdentifier"]
    assert retry_from == stored.checkpoint.sequence
    assert consumer.metrics.snapshot()["LeaseLosses"] == 1


def test_sink_writes_commit_with_the_checkpoint_exactly_once_through_crashes_and_replays() -> None:
    table = InMemoryLeaseTable()
    consumer = KinesisConsumer("g", table, checkpoint_every=3)
    handle = count_per_key("counts")
    crashes = iter([11, 25])
    next_crash = next(crashes)

    @consumer.handler
    def crashing(record: ConsumedRecord) -> list[dict[str, Any]]:
        nonlocal next_crash
        if int(record.data) == next_crash:
            next_crash = next(crashes, -1)
            raise Crash
        return handle(record)

    replay = MappingReplay(kinesis_event(RECORDS, records_per_aggregate=6)["Records"], batch_size=3)
    replay.drain(consumer.process)
    replay.position = 0
    replay.drain(consumer.process)  # the whole shard delivered again
    assert replay.crashes == 2
    assert counts(table) == {f"key-{k}": 8 for k in range(5)}, "every record counted exactly once"


class Crash(BaseException):
    """The process dying: not an Exception, so nothing in the consumer or the table catches it."""


@pytest.mark.parametrize("landed", [False, True], ids=["before-the-transaction-lands", "after-it-landed"])
def test_a_crash_around_the_checkpoint_transaction_leaves_both_or_neither(landed: bool) -> None:
    table = InMemoryLeaseTable()
    consumer = KinesisConsumer("g", table, checkpoint_every=4)
    count = count_per_key("counts")
    event_records = kinesis_event(RECORDS, records_per_aggregate=6)["Records"]
    every_record = deaggregate(event_records)
    crash_at = {9, 22, 31}  # the transaction after each of these records crashes

    @consumer.handler
    def handle(record: ConsumedRecord) -> list[dict[str, Any]]:
        if int(record.data) in crash_at:
            crash_at.discard(int(record.data))
            table.fail_next("checkpoint_with", Crash(), landed=landed)
        return count(record)

    def invocation(event: dict[str, Any], context: FakeLambdaContext) -> Any:
        try:
            return consumer.process(event, context)
        finally:  # both or neither: the counts are exactly the records the checkpoint covers
            row = table.row(SHARD)
            covered = sum(
                1 for record in every_record if row is not None and record.position <= row.checkpoint
            )
            assert sum(counts(table).values()) == covered

    replay = MappingReplay(event_records, batch_size=3)
    replay.drain(invocation)
    replay.position = 0
    replay.drain(invocation)  # the whole shard delivered again
    assert replay.crashes == 3 and not crash_at
    assert counts(table) == {f"key-{k}": 8 for k in range(5)}, "every record counted exactly once"
