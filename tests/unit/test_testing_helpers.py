"""shardline.testing is tested like the product: the in-memory lease table against the real
LeaseTable on moto (the same operations, the same outcomes), the event builder against the
consumer's own de-aggregation, and the replay driver's restart rules."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import boto3
import pytest
from moto import mock_aws

from shardline.consumer import LeaseLost, LeaseTable, deaggregate
from shardline.kinesis import SHARD_END, Position, UserRecord
from shardline.testing import FakeLambdaContext, InMemoryLeaseTable, MappingReplay, kinesis_event

SINK = "sink"


def _script(table: LeaseTable) -> list[Any]:
    """One sequence of lease operations; returns what each one answered (or the error it raised)."""
    outcomes: list[Any] = []

    def step(operation: Callable[[], Any]) -> Any:
        try:
            result = operation()
        except LeaseLost as lost:
            outcomes.append(("LeaseLost", type(lost).__name__))
            return None
        outcomes.append(result)
        return result

    first = step(lambda: table.hold("shard-1", "a"))
    moved = step(lambda: table.checkpoint(first, Position("100", 2)))
    step(lambda: table.checkpoint(moved, Position("100", 1)))  # backwards: nothing written
    step(lambda: table.checkpoint(first, Position("200")))  # a stale lease: fenced
    taken = step(lambda: table.take("shard-1", "b"))
    step(lambda: table.record_failure(moved, Position("300"), "stale"))  # fenced by b's take
    failed = step(lambda: table.record_failure(taken, Position("300"), "boom"))
    failed = step(lambda: table.record_failure(failed, Position("300"), "boom again"))
    write = {
        "Update": {
            "TableName": SINK,
            "Key": {"k": {"S": "x"}},
            "UpdateExpression": "ADD #c :one",
            "ExpressionAttributeNames": {"#c": "c"},
            "ExpressionAttributeValues": {":one": {"N": "1"}},
        }
    }
    done = step(lambda: table.checkpoint_with(failed, Position("300"), [write]))
    step(lambda: table.get("shard-1"))
    step(lambda: table.mark_shard_end(done))
    step(lambda: table.get("shard-1"))
    return outcomes


def test_the_in_memory_table_answers_every_operation_as_the_real_table_does() -> None:
    with mock_aws():
        dynamodb = boto3.client("dynamodb", region_name="us-east-1")
        LeaseTable.create(dynamodb, "leases")
        dynamodb.create_table(
            TableName=SINK,
            KeySchema=[{"AttributeName": "k", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "k", "AttributeType": "S"}],
            BillingMode="PAY_PER_REQUEST",
        )
        real = _script(LeaseTable(dynamodb, "leases", clock=lambda: 0.0))
        real_sink = dynamodb.scan(TableName=SINK)["Items"]
    memory = InMemoryLeaseTable()
    assert _script(memory) == real
    assert memory.items(SINK) == real_sink == [{"k": {"S": "x"}, "c": {"N": "1"}}]
    assert real[-1].checkpoint == Position(SHARD_END)
    assert [type(outcome).__name__ for outcome in real].count("tuple") == 2, "two fenced writes"


def test_a_transaction_that_fails_leaves_neither_the_checkpoint_nor_the_sink_writes() -> None:
    table = InMemoryLeaseTable(key_schema={SINK: ["k"]})
    lease = table.hold("shard-1", "a")
    put = {
        "Put": {
            "TableName": SINK,
            "Item": {"k": {"S": "x"}},
            "ConditionExpression": "attribute_not_exists(k)",
        }
    }
    lease = table.checkpoint_with(lease, Position("1"), [put])
    with pytest.raises(Exception, match="condition"):
        table.checkpoint_with(lease, Position("2"), [put])
    assert table.row("shard-1").checkpoint == Position("1")
    assert table.items(SINK) == [{"k": {"S": "x"}}]


def test_the_event_builder_delivers_every_record_in_order_with_increasing_sequence_numbers() -> None:
    records = [UserRecord(f"key-{i % 7}", f"payload-{i}".encode()) for i in range(250)]
    for aggregate in (True, False):
        event = kinesis_event(records, stream="orders", shard_id="shardId-000000000003", aggregate=aggregate)
        consumed = deaggregate(event["Records"])
        assert [(r.partition_key, r.data) for r in consumed] == [(r.partition_key, r.data) for r in records]
        assert {(r.stream, r.shard_id) for r in consumed} == {("orders", "shardId-000000000003")}
        sequences = [int(r["kinesis"]["sequenceNumber"]) for r in event["Records"]]
        assert sequences == sorted(set(sequences)) and all(len(str(s)) == 56 for s in sequences)
        assert len(event["Records"]) == (3 if aggregate else 250)  # 100 user records per aggregate


def test_the_replay_retries_a_crashed_batch_and_restarts_at_the_reported_failure() -> None:
    event = kinesis_event([UserRecord("k", bytes([i])) for i in range(6)], aggregate=False)
    replay = MappingReplay(event["Records"], batch_size=4)
    seen: list[list[str]] = []
    answers: list[Any] = [RuntimeError("crash"), {"batchItemFailures": []}, None]

    def handler(batch: dict[str, Any], context: FakeLambdaContext) -> Any:
        sequences = [r["kinesis"]["sequenceNumber"] for r in batch["Records"]]
        seen.append(sequences)
        answer = answers.pop(0) if answers else {"batchItemFailures": []}
        if isinstance(answer, BaseException):
            raise answer
        return answer if answer is not None else {"batchItemFailures": [{"itemIdentifier": sequences[1]}]}

    replay.drain(handler)
    all_sequences = [r["kinesis"]["sequenceNumber"] for r in event["Records"]]
    assert seen[0] == seen[1] == all_sequences[:4], "a crash delivers the same batch again"
    assert seen[2] == all_sequences[4:], "then the mapping moves past the batch"
    assert seen[3] == all_sequences[5:], "a reported failure restarts the shard at that record"
    assert len(seen) == 4 and replay.crashes == 1 and replay.finished


def test_the_fake_context_reports_the_time_it_is_given() -> None:
    left = iter([5000, 10])
    context = FakeLambdaContext(lambda: next(left))
    assert (context.get_remaining_time_in_millis(), context.get_remaining_time_in_millis()) == (5000, 10)
    assert FakeLambdaContext(1234).get_remaining_time_in_millis() == 1234
    assert FakeLambdaContext().aws_request_id != FakeLambdaContext().aws_request_id
