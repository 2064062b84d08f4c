"""shardline.testing is tested like the product: the in-memory lease table against the real
LeaseTable on moto (two `LeaseStore`s: the same operations, the same outcomes), the event builder against the
consumer's own de-aggregation, and the replay driver's restart rules."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from moto import mock_aws

from shardline.consumer import LeaseLost, LeaseStore, LeaseTable, SinkConflict, SinkRejected, deaggregate
from shardline.consumer._redrive import batch_info
from shardline.kinesis import SHARD_END, Position, UserRecord
from shardline.testing import FakeLambdaContext, InMemoryLeaseTable, MappingReplay, kinesis_event

SINK = "sink"


class CountingDynamoDB:
    """A boto3 DynamoDB client that counts GetItem calls and the write requests DynamoDB evaluates
    (those that fail a condition included; those refused as malformed are not)."""

    WRITES = ("put_item", "update_item", "transact_write_items")
    EVALUATED = ("ConditionalCheckFailedException", "TransactionCanceledException")

    def __init__(self, client: Any) -> None:
        self._client = client
        self.reads = 0
        self.writes = 0

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._client, name)
        if name != "get_item" and name not in self.WRITES:
            return method

        def counted(**kwargs: Any) -> Any:
            if name == "get_item":
                self.reads += 1
                return method(**kwargs)
            try:
                answer = method(**kwargs)
            except ClientError as exc:
                self.writes += exc.response["Error"]["Code"] in self.EVALUATED
                raise
            self.writes += 1
            return answer

        return counted


def _dynamodb_with_sink() -> Any:
    dynamodb = boto3.client("dynamodb", region_name="us-east-1")
    LeaseTable.create(dynamodb, "leases")
    dynamodb.create_table(
        TableName=SINK,
        KeySchema=[{"AttributeName": "k", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "k", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    return dynamodb


def _outcome(operation: Callable[[], Any]) -> Any:
    """What an operation answered, or the kind of error it raised (a ClientError by its code)."""
    try:
        return operation()
    except ClientError as exc:
        return ("ClientError", exc.response["Error"]["Code"])
    except (LeaseLost, SinkConflict, SinkRejected) as exc:
        return (type(exc).__name__,)


def _script(table: LeaseStore) -> list[Any]:
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
        dynamodb = CountingDynamoDB(_dynamodb_with_sink())
        real = _script(LeaseTable(dynamodb, "leases", clock=lambda: 0.0))
        real_sink = dynamodb.scan(TableName=SINK)["Items"]
    memory = InMemoryLeaseTable(start=0.0)
    assert _script(memory) == real
    assert memory.items(SINK) == real_sink == [{"k": {"S": "x"}, "c": {"N": "1"}}]
    assert real[-1].checkpoint == Position(SHARD_END)
    assert [type(outcome).__name__ for outcome in real].count("tuple") == 2, "two fenced writes"
    assert (memory.reads, memory.total_writes) == (dynamodb.reads, dynamodb.writes) == (5, 9)


def _careful_and_stalled(table: LeaseStore) -> list[Any]:
    """The paths a failing environment and a crash take: deliveries begun and begun again (by the
    same owner after a lost reply, by another after a death), careful spans, stalls, a batch the
    mapping skipped, failures with details, a redrive's own row; what each answered and the row."""
    outcomes: list[Any] = []

    def step(operation: Callable[[], Any]) -> Any:
        answer = _outcome(operation)
        outcomes.extend([answer, table.get("shard-1")])
        return answer

    lease, _ = step(lambda: table.begin("shard-1", "a", "100"))
    step(lambda: table.begin("shard-1", "a", "100"))  # the same owner's retry: no crash
    lease, crashed = step(lambda: table.begin("shard-1", "b", "100"))  # a's process died
    assert crashed
    lease = step(lambda: table.mark_careful(lease, 1))
    lease = step(lambda: table.mark_careful(lease, 1, started=True))
    lease = step(lambda: table.mark_careful(lease, 1, returned=True))
    lease = step(lambda: table.checkpoint(lease, Position("100"), careful_span=2))
    lease = step(lambda: table.record_failure(lease, Position("200"), "x" * 2000, details="{}" * 3000))
    earlier = lease = step(lambda: table.stall(lease, "ResourceNotFoundException", "200"))
    lease = step(lambda: table.stall(lease, "AccessDeniedException", "200", release=True))
    step(lambda: table.stall(earlier, "stale", "200"))  # a counter written over since: fenced
    lease = step(lambda: table.note_skipped(lease, '[{"start": "200"}]'))
    lease = step(lambda: table.stall(lease, "throttled", "300"))
    lease = step(lambda: table.stall(lease, "throttled again", "300"))
    lease = step(lambda: table.release(lease, careful_done=True))  # ends the stall and careful running
    step(lambda: table.checkpoint(lease, Position("300"), release=True))  # ends the failure
    step(lambda: table.start_at("shard-1#redrive#200", Position("150", 3)))
    step(lambda: table.start_at("shard-1#redrive#200", Position("150")))  # exists: False
    outcomes.append(table.get("shard-1#redrive#200"))
    return outcomes


def test_the_in_memory_table_fails_stalls_and_runs_carefully_as_the_real_table_does() -> None:
    with mock_aws():
        dynamodb = CountingDynamoDB(_dynamodb_with_sink())
        real = _careful_and_stalled(LeaseTable(dynamodb, "leases", clock=lambda: 0.0))
    memory = InMemoryLeaseTable(start=0.0)
    assert _careful_and_stalled(memory) == real
    assert (memory.reads, memory.total_writes) == (dynamodb.reads, dynamodb.writes)
    stalled = real[real.index(("LeaseLost",)) - 1]  # the row the fenced write left alone
    assert stalled.stalls == 2 and stalled.stalled_cause == "AccessDeniedException"
    assert stalled.inflight is None and stalled.failed_attempts == 1
    assert len(stalled.last_error) == 1000 and len(stalled.last_error_details) == 4000
    assert (real[-5], real[-3]) == (True, False), "the redrive row is created once"
    assert real[-1].checkpoint == Position("150", 3) and real[-1].owner == ""
    ended = real[-6]  # after the checkpoint that moved past the failure
    assert ended.stalls == 0 and ended.failed_at is None and ended.skipped_by_mapping is not None
    released = real[-8]  # after the release that ended the stall and careful running
    assert released.stalls == 0 and released.careful_span is None and not released.span_started
    assert any(getattr(row, "span_started", False) for row in real), "a started span was stored"


def _transactions(table: LeaseStore) -> list[Any]:
    """Checkpoints with sink writes of every modelled kind, and the transactions DynamoDB refuses
    or cancels; what each answered."""

    def put(key: str, **attributes: Any) -> dict[str, Any]:
        return {"Put": {"TableName": SINK, "Item": {"k": {"S": key}, **attributes}}}

    def update(key: str, expression: str, **values: Any) -> dict[str, Any]:
        operation = {"TableName": SINK, "Key": {"k": {"S": key}}, "UpdateExpression": expression}
        if values:
            operation["ExpressionAttributeValues"] = {f":{name}": value for name, value in values.items()}
        return {"Update": operation}

    def condition(entry: dict[str, Any], expression: str) -> dict[str, Any]:
        [(kind, operation)] = entry.items()
        return {
            kind: {**operation, "ConditionExpression": expression, "ExpressionAttributeNames": {"#k": "k"}}
        }

    def check(key: str, expression: str) -> dict[str, Any]:
        return condition({"ConditionCheck": {"TableName": SINK, "Key": {"k": {"S": key}}}}, expression)

    stale = table.hold("shard-1", "a")
    lease = table.take("shard-1", "b")
    outcomes: list[Any] = []

    def step(position: str, writes: list[dict[str, Any]], under: Any = None) -> None:
        nonlocal lease
        answer = _outcome(lambda: table.checkpoint_with(under or lease, Position(position), writes))
        if under is None and not isinstance(answer, tuple):
            lease = answer
        outcomes.append(answer)

    step(
        "1",
        [
            condition(put("x", v={"N": "1"}), "attribute_not_exists(#k)"),
            update("y", "ADD c :n", n={"N": "2"}),
        ],
    )
    step("2", [condition(put("x"), "attribute_not_exists(#k)")])  # x exists: cancelled
    step("2", [put("x", v={"N": "2"}), put("x", v={"N": "3"})])  # one item twice: refused
    step("2", [update("y", "SET k = :v", v={"S": "z"})])  # a key attribute: refused
    step("2", [update("y", "SET w = :w ADD c :n", n={"N": "0.5"})])  # an undefined value: refused
    step("2", [update("y", "SET w = :w ADD c :n", w={"S": "hi"}, n={"N": "0.5"}), put("x", v={"N": "4"})])
    step("3", [update("y", "REMOVE w"), check("x", "attribute_exists(#k)"), put("z")])
    step("4", [check("q", "attribute_exists(#k)"), put("s")])  # q does not exist: cancelled
    step("4", [check("q", "attribute_not_exists(#k)"), put("q")])  # one item twice: refused
    step("4", [{"Delete": {"TableName": SINK, "Key": {"k": {"S": "z"}}}}])
    step("5", [put("r")], under=stale)  # a stale lease: fenced
    step("5", [put("r"), put("r")], under=stale)  # refused, and the re-read finds the lease taken
    outcomes.append(table.get("shard-1"))
    return outcomes


def test_sink_writes_commit_refuse_and_cancel_as_dynamodb_does() -> None:
    with mock_aws():
        dynamodb = CountingDynamoDB(_dynamodb_with_sink())
        real = _transactions(LeaseTable(dynamodb, "leases", clock=lambda: 0.0))
        real_sink = sorted(dynamodb.scan(TableName=SINK)["Items"], key=lambda item: item["k"]["S"])
    memory = InMemoryLeaseTable(key_schema={SINK: ["k"]})
    assert _transactions(memory) == real
    assert sorted(memory.items(SINK), key=lambda item: item["k"]["S"]) == real_sink
    assert real_sink == [
        {"k": {"S": "x"}, "v": {"N": "4"}},
        {"k": {"S": "y"}, "c": {"N": "2.5"}},
    ]
    assert [o for o in real if isinstance(o, tuple)] == [
        ("SinkConflict",),
        ("SinkRejected",),
        ("SinkRejected",),
        ("SinkRejected",),
        ("SinkConflict",),
        ("SinkRejected",),
        ("LeaseLost",),
        ("LeaseLost",),
    ]
    assert real[-1].checkpoint == Position("4")
    assert (memory.reads, memory.total_writes) == (dynamodb.reads, dynamodb.writes)


@pytest.mark.parametrize(
    ("entry", "named"),
    [
        ({"UpdateExpression": "SET c = c + :one"}, "SET c = c + :one"),
        ({"UpdateExpression": "SET c = if_not_exists(c, :one)"}, "if_not_exists"),
        ({"UpdateExpression": "ADD tags :one"}, "ADD tags :one"),
        ({"UpdateExpression": "DELETE tags :one"}, "DELETE tags"),
        ({"UpdateExpression": "SET c = :one", "ConditionExpression": "c < :one"}, "c < :one"),
    ],
)
def test_what_the_sink_does_not_model_is_refused_by_name(entry: dict[str, Any], named: str) -> None:
    table = InMemoryLeaseTable()
    lease = table.hold("shard-1", "a")
    values = {":one": {"SS": ["a"]} if named.startswith("ADD") else {"N": "1"}}
    write = {
        "Update": {"TableName": SINK, "Key": {"k": {"S": "x"}}, "ExpressionAttributeValues": values, **entry}
    }
    with pytest.raises(NotImplementedError, match=named.replace("(", r"\(").replace("+", r"\+")):
        table.checkpoint_with(lease, Position("1"), [write])
    assert table.row("shard-1") == lease and table.items(SINK) == []


def test_a_put_into_a_table_whose_key_was_not_declared_says_how_to_declare_it() -> None:
    table = InMemoryLeaseTable()
    lease = table.hold("shard-1", "a")
    with pytest.raises(ValueError, match=r"key_schema=\{'orders'"):
        table.checkpoint_with(
            lease, Position("1"), [{"Put": {"TableName": "orders", "Item": {"id": {"S": "1"}}}}]
        )


def test_an_injected_crash_lands_or_not_and_an_injected_error_meets_the_re_read() -> None:
    class Crash(BaseException):
        pass

    put = {"Put": {"TableName": SINK, "Item": {"k": {"S": "x"}}}}
    table = InMemoryLeaseTable(key_schema={SINK: ["k"]})
    lease = table.hold("shard-1", "a")
    table.fail_next("checkpoint_with", Crash())
    with pytest.raises(Crash):
        table.checkpoint_with(lease, Position("1"), [put])
    assert (table.row("shard-1"), table.items(SINK)) == (lease, []), "neither"

    table.fail_next("checkpoint_with", Crash(), landed=True)
    with pytest.raises(Crash):
        table.checkpoint_with(lease, Position("1"), [put])
    assert (table.row("shard-1").checkpoint, table.items(SINK)) == (Position("1"), [put["Put"]["Item"]]), (
        "both"
    )

    table.fail_next("checkpoint", TimeoutError("no reply"))
    reads = table.reads
    with pytest.raises(LeaseLost):  # the re-read finds the counter moved by the landed transaction
        table.checkpoint(lease, Position("2"))
    assert table.reads == reads + 1
    with pytest.raises(ValueError, match="crash"):
        table.fail_next("checkpoint_with", TimeoutError(), landed=True)  # LeaseTable would accept it
    with pytest.raises(ValueError, match="one of"):
        table.fail_next("scan", Crash())


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


def test_a_lone_record_goes_plain_as_the_producer_sends_it() -> None:
    records = [UserRecord(f"key-{i}", bytes([i]), explicit_hash_key=str(i)) for i in range(5)]
    event = kinesis_event(records, records_per_aggregate=2)
    assert [r["kinesis"]["partitionKey"] for r in event["Records"]] == ["a", "a", "key-4"]
    consumed = deaggregate(event["Records"])
    assert [r.sub_sequence_number for r in consumed] == [0, 1, 0, 1, None]
    assert [r.explicit_hash_key for r in consumed] == ["0", "1", "2", "3", None], "a plain record has none"


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


def _batches_seen(answers: list[Any], records: int = 6, batch_size: int = 4) -> tuple[list[list[int]], Any]:
    """Which record indexes each invocation saw while the handler gave `answers` (then success);
    an answer is a response, or a function of the batch's sequence numbers returning one."""
    event = kinesis_event([UserRecord("k", bytes([i])) for i in range(records)], aggregate=False)
    sequences = [r["kinesis"]["sequenceNumber"] for r in event["Records"]]
    replay = MappingReplay(event["Records"], batch_size=batch_size)
    seen: list[list[int]] = []

    def handler(batch: dict[str, Any], context: FakeLambdaContext) -> Any:
        batch_sequences = [r["kinesis"]["sequenceNumber"] for r in batch["Records"]]
        seen.append([sequences.index(sequence) for sequence in batch_sequences])
        answer = answers.pop(0) if answers else None
        return answer(batch_sequences) if callable(answer) else answer

    replay.drain(handler)
    return seen, replay


def test_the_replay_restarts_at_the_lowest_reported_sequence_number() -> None:
    seen, _ = _batches_seen(
        [lambda s: {"batchItemFailures": [{"itemIdentifier": s[3]}, {"itemIdentifier": s[2]}]}]
    )
    assert seen == [[0, 1, 2, 3], [2, 3, 4, 5]]


@pytest.mark.parametrize(
    "failure",
    [{"itemIdentifier": ""}, {"itemIdentifier": None}, {"itemId": "1"}, {"itemIdentifier": "12345"}],
    ids=["empty", "null", "wrong key", "not in the batch"],
)
def test_an_unusable_item_identifier_fails_the_whole_batch(failure: dict[str, Any]) -> None:
    seen, replay = _batches_seen([{"batchItemFailures": [failure]}])
    assert seen == [[0, 1, 2, 3], [0, 1, 2, 3], [4, 5]]
    assert replay.whole_batch_failures == 1 and replay.crashes == 0


@pytest.mark.parametrize("answer", [None, {}, {"batchItemFailures": None}, {"batchItemFailures": []}, "ok"])
def test_no_reported_failure_moves_past_the_batch(answer: Any) -> None:
    seen, replay = _batches_seen([answer])
    assert seen == [[0, 1, 2, 3], [4, 5]] and replay.invocations == 2


def test_the_replay_gives_a_batch_up_after_its_retries_and_keeps_the_on_failure_record() -> None:
    event = kinesis_event([UserRecord("k", bytes([i])) for i in range(6)], aggregate=False)
    sequences = [r["kinesis"]["sequenceNumber"] for r in event["Records"]]
    replay = MappingReplay(event["Records"], batch_size=4, maximum_retry_attempts=1)
    seen: list[list[str]] = []
    answers: list[Any] = [
        lambda s: {"batchItemFailures": [{"itemIdentifier": s[1]}]},  # records 0 done, 1.. failed
        RuntimeError("crash"),  # the retry of 1..4 crashes: past one retry, 1..4 are given up
    ]

    def handler(batch: dict[str, Any], context: FakeLambdaContext) -> Any:
        seen.append([r["kinesis"]["sequenceNumber"] for r in batch["Records"]])
        answer = answers.pop(0) if answers else None
        if isinstance(answer, BaseException):
            raise answer
        return answer(seen[-1]) if callable(answer) else answer

    replay.drain(handler)
    assert seen == [sequences[:4], sequences[1:5], sequences[5:]]
    [message] = replay.on_failure
    info = message["KinesisBatchInfo"]
    assert (info["startSequenceNumber"], info["endSequenceNumber"], info["batchSize"]) == (
        sequences[1],
        sequences[4],
        4,
    )
    assert info["shardId"] == event["Records"][0]["eventID"].split(":")[0]
    assert message["requestContext"]["condition"] == "RetryAttemptsExhausted"
    assert batch_info(message).stream == "events"  # what `redrive` reads


def test_the_replay_discards_records_older_than_the_maximum_age_before_invoking() -> None:
    event = kinesis_event([UserRecord("k", bytes([i])) for i in range(4)], aggregate=False, arrival=1000.0)
    late = kinesis_event([UserRecord("k", b"9")], aggregate=False, arrival=1100.0, first_sequence=2 * 10**55)[
        "Records"
    ]
    now = [1090.0]
    replay = MappingReplay(
        event["Records"] + late, batch_size=10, maximum_record_age_s=60, clock=lambda: now[0]
    )
    seen: list[int] = []
    replay.drain(lambda batch, context: seen.append(len(batch["Records"])))
    assert seen == [1] and replay.invocations == 1
    [message] = replay.on_failure
    assert message["requestContext"]["condition"] == "RecordAgeExceeded"
    assert message["KinesisBatchInfo"]["batchSize"] == 4


@pytest.mark.parametrize("options", [{"maximum_retry_attempts": -2}, {"maximum_record_age_s": -5}])
def test_the_replay_refuses_limits_lambda_would_refuse(options: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="-1"):
        MappingReplay([], **options)


def test_drain_gives_each_invocation_its_own_context() -> None:
    event = kinesis_event([UserRecord("k", bytes([i])) for i in range(5)], aggregate=False)
    owners: list[str] = []
    MappingReplay(event["Records"], batch_size=2).drain(
        lambda batch, context: owners.append(context.aws_request_id),
        new_context=lambda: FakeLambdaContext(aws_request_id=f"request-{len(owners)}"),
    )
    assert owners == ["request-0", "request-1", "request-2"]


def test_the_fake_context_reports_the_time_it_is_given() -> None:
    left = iter([5000, 10])
    context = FakeLambdaContext(lambda: next(left))
    assert (context.get_remaining_time_in_millis(), context.get_remaining_time_in_millis()) == (5000, 10)
    assert FakeLambdaContext(1234).get_remaining_time_in_millis() == 1234
    assert FakeLambdaContext().aws_request_id != FakeLambdaContext().aws_request_id
    assert FakeLambdaContext(memory_limit_in_mb=256).memory_limit_in_mb == "256", "a string, as in Lambda"
