"""Issue 24: a record is dead-lettered only on evidence against that record, a refused chunk loses
nothing, and a failure of the environment stalls the shard loudly instead of blaming a record.

Each bullet of the issue has its own test here, on shardline.testing (the consumer and the lease
table's code are the real ones; DynamoDB's storage and SQS are in memory; the table's clock is
virtual, so backoffs cost no time). The loss cases on the real lease table over moto, and the
missing table, are in tests/integration/test_consumer_evidence.py.
"""

from __future__ import annotations

import itertools
import signal
import time
from functools import partial
from typing import Any

import pytest
from botocore.exceptions import ClientError, ReadTimeoutError

from bench.identity import function_module
from shardline.consumer import ConsumedRecord, DeadLetterQueue, DependencyUnavailable, KinesisConsumer
from shardline.errors import ConfigurationError
from shardline.kinesis import UserRecord
from shardline.testing import (
    SEQUENCE_STEP,
    FakeLambdaContext,
    InMemoryLeaseTable,
    LeaseWrite,
    MappingReplay,
    kinesis_event,
)
from tests.support.consumer import (
    SHARD,
    SINK,
    ProcessDied,
    RecordingSQS,
    applied,
    dead_ids,
    effect,
    record_id,
    records,
    setup,
)


def client_error(code: str, operation: str = "TransactWriteItems", **response: Any) -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": f"{code} (injected)"}, **response}, operation)


def never_passes(record: ConsumedRecord) -> dict[str, Any]:
    """A write whose own condition always fails: the item it checks never exists."""
    return {
        "ConditionCheck": {
            "TableName": SINK,
            "Key": {"id": {"S": f"missing-{record_id(record)}"}},
            "ConditionExpression": "attribute_exists(id)",
        }
    }


def one_list(refused: str) -> Any:
    """A batch handler answering one list for its chunk; `refused`'s write never commits."""

    def handle(chunk: list[ConsumedRecord]) -> list[dict[str, Any]]:
        return [never_passes(r) if record_id(r) == refused else effect(r) for r in chunk]

    return handle


def drain(
    consumer: KinesisConsumer, event_records: list[dict[str, Any]], batch_size: int = 10
) -> MappingReplay:
    replay = MappingReplay(event_records, batch_size)
    replay.drain(consumer.process, max_invocations=200)
    return replay


def metric(consumer: KinesisConsumer, name: str) -> int:
    return int(consumer.metrics.snapshot()[name])


# -- loss: a refused write in a one-list chunk --------------------------------------------------


@pytest.mark.parametrize("shape", ["plain records", "one KPL aggregate"])
def test_loss_a_one_list_chunk_with_a_refused_write_is_split_until_the_refusal_is_pinned(shape: str) -> None:
    consumer, table, sqs = setup()
    consumer.batch_handler(one_list(refused="r5"))
    users = records(6)
    event = kinesis_event(users, aggregate=shape == "one KPL aggregate")
    drain(consumer, event["Records"])
    assert applied(table) == {f"r{i}": 1 for i in range(5)}, "r0-r4 applied once, none lost"
    assert dead_ids(sqs) == ["r5"], "only the record whose write was refused, after max_attempts"
    assert metric(consumer, "RecordsFailed") == 3


def test_loss_with_sink_conflicts_skip_only_the_refused_record_is_taken_as_applied() -> None:
    consumer, table, sqs = setup(sink_conflicts="skip")
    consumer.batch_handler(one_list(refused="r2"))
    drain(consumer, kinesis_event(records(6))["Records"])
    assert applied(table) == {f"r{i}": 1 for i in (0, 1, 3, 4, 5)}, "the five good writes all commit"
    assert sqs.bodies() == [] and metric(consumer, "SinkConflictsSkipped") == 1


def test_loss_a_key_attribute_update_in_a_one_list_chunk_is_pinned_on_its_record() -> None:
    consumer, table, sqs = setup()

    def handle(chunk: list[ConsumedRecord]) -> list[dict[str, Any]]:
        writes = [effect(r) for r in chunk]
        for at, r in enumerate(chunk):
            if record_id(r) == "r3":  # DynamoDB refuses the whole request, naming no write
                writes[at] = {
                    "Update": {
                        "TableName": SINK,
                        "Key": {"id": {"S": "r3"}},
                        "UpdateExpression": "SET id = :other",
                        "ExpressionAttributeValues": {":other": {"S": "x"}},
                    }
                }
        return writes

    consumer.batch_handler(handle)
    drain(consumer, kinesis_event(records(6))["Records"])
    assert applied(table) == {f"r{i}": 1 for i in (0, 1, 2, 4, 5)}
    assert dead_ids(sqs) == ["r3"]


# -- stalled, loudly --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "refusal",
    [
        client_error("AccessDeniedException"),
        client_error(
            "TransactionCanceledException",
            CancellationReasons=[{"Code": "None"}, {"Code": "ItemCollectionSizeLimitExceeded"}],
        ),
        client_error("ResourceNotFoundException"),
    ],
    ids=["AccessDenied", "ItemCollectionSizeLimitExceeded", "missing table"],
)
def test_stalled_a_sink_refused_by_its_environment_stalls_loudly_and_blames_no_record(
    refusal: ClientError,
) -> None:
    consumer, table, sqs = setup()
    consumer.handler(lambda record: [effect(record)])
    replay = MappingReplay(kinesis_event(records(3))["Records"], 10)
    for _ in range(10):
        table.fail_next("checkpoint_with", refusal)
        replay.invoke(consumer.process)
    row = table.row(SHARD)
    assert row is not None and row.stalled_cause is not None
    assert refusal.response["Error"]["Code"] in row.stalled_cause
    assert row.stalls == 10 and row.failed_at is None, "no record counted"
    assert metric(consumer, "ShardStalls") == 10 and metric(consumer, "RecordsFailed") == 0
    assert applied(table) == {} and sqs.bodies() == []
    replay.drain(consumer.process)  # the cause is gone
    assert applied(table) == {"r0": 1, "r1": 1, "r2": 1}
    row = table.row(SHARD)
    assert row is not None and row.stalled_cause is None and row.stalls == 0


def test_stalled_a_dlq_that_refuses_stalls_the_shard_loudly_and_the_letter_goes_once_it_is_back() -> None:
    consumer, table, sqs = setup()
    refusing = {"on": True}
    send = sqs.send_message

    def flaky_send(**request: Any) -> dict[str, Any]:
        if refusing["on"]:
            raise client_error("AWS.SimpleQueueService.NonExistentQueue", "SendMessage")
        return send(**request)

    sqs.send_message = flaky_send  # type: ignore[method-assign]

    def handle(record: ConsumedRecord) -> list[dict[str, Any]]:
        if record_id(record) == "r1":
            raise ValueError("poison")
        return [effect(record)]

    consumer.handler(handle)
    replay = MappingReplay(kinesis_event(records(3))["Records"], 10)
    for _ in range(8):
        replay.invoke(consumer.process)
    row = table.row(SHARD)
    assert row is not None and row.stalled_cause is not None and "dead-letter queue" in row.stalled_cause
    assert metric(consumer, "ShardStalls") >= 1 and applied(table) == {"r0": 1}
    refusing["on"] = False
    replay.drain(consumer.process)
    assert dead_ids(sqs) == ["r1"] and applied(table) == {"r0": 1, "r2": 1}


def test_stalled_a_handler_raising_dependency_unavailable_stalls_and_its_record_is_never_counted() -> None:
    consumer, table, sqs = setup()
    outage_ends = table.now() + 300  # five minutes, far past max_attempts' backoffs

    def handle(record: ConsumedRecord) -> list[dict[str, Any]]:
        if table.now() < outage_ends:
            raise DependencyUnavailable("prices API unreachable")
        return [effect(record)]

    consumer.handler(handle)
    drain(consumer, kinesis_event(records(4))["Records"])
    assert applied(table) == {f"r{i}": 1 for i in range(4)} and sqs.bodies() == []
    assert metric(consumer, "RecordsFailed") == 0 and metric(consumer, "ShardStalls") >= 5


# -- good records dead-lettered ---------------------------------------------------------------


def test_good_a_record_that_failed_twice_then_succeeded_is_not_struck_by_a_later_crash() -> None:
    consumer, table, sqs = setup()
    failures = {"r0": 2}
    died: set[str] = set()

    def handle(record: ConsumedRecord) -> list[dict[str, Any]]:
        rid = record_id(record)
        if failures.get(rid, 0) > 0:
            failures[rid] -= 1
            raise ConnectionError("transient")
        if rid == "r5" and rid not in died:
            died.add(rid)
            raise ProcessDied("out of memory")
        return [effect(record)]

    consumer.handler(handle)
    drain(consumer, kinesis_event(records(8))["Records"])
    assert sqs.bodies() == [] and applied(table) == {f"r{i}": 1 for i in range(8)}


def test_good_slow_commits_that_kill_four_deliveries_in_a_row_blame_no_record() -> None:
    consumer, table, sqs = setup()
    consumer.handler(lambda record: [effect(record)])
    for _ in range(4):  # the function timed out in shardline's own write, four times
        table.fail_next("checkpoint_with", ProcessDied("timed out in the commit"))
    drain(consumer, kinesis_event(records(5))["Records"])
    assert sqs.bodies() == [] and applied(table) == {f"r{i}": 1 for i in range(5)}
    assert metric(consumer, "RecordsFailed") == 0


@pytest.mark.parametrize("environment", ["same process", "another process"])
def test_good_a_brownout_failing_commit_and_release_counts_no_crash(environment: str) -> None:
    consumer, table, sqs = setup()
    consumer.handler(lambda record: [effect(record)])
    brownout = client_error("InternalServerError")
    for operation in ("checkpoint_with", "stall", "release"):
        table.fail_next(operation, brownout)
    replay = MappingReplay(kinesis_event(records(3))["Records"], 10)
    replay.invoke(consumer.process)
    row = table.row(SHARD)
    assert row is not None and row.inflight is not None, "the brownout left the in-flight mark"
    if environment == "another process":
        consumer = KinesisConsumer("g", table, dlq=DeadLetterQueue(sqs, "https://sqs/dlq"), max_attempts=2)
        consumer.handler(lambda record: [effect(record)])
    replay.drain(consumer.process)
    assert sqs.bodies() == [] and applied(table) == {"r0": 1, "r1": 1, "r2": 1}
    assert metric(consumer, "RecordsFailed") == 0


def test_good_max_attempts_below_two_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="max_attempts must be at least 2"):
        KinesisConsumer("g", InMemoryLeaseTable(), max_attempts=1)


def test_good_an_overlapping_delivery_blames_no_record() -> None:
    consumer, table, sqs = setup(max_attempts=2)
    event = kinesis_event(records(3))
    overlapped: list[Any] = []

    def handle(record: ConsumedRecord) -> list[dict[str, Any]]:
        if not overlapped:  # the mapping delivers the same batch again while this one runs
            overlapped.append("running")
            overlapped.append(consumer.process(event, FakeLambdaContext()))
        return [effect(record)]

    consumer.handler(handle)
    first = consumer.process(event, FakeLambdaContext())
    assert overlapped[1] == {"batchItemFailures": []}, "the overlapping delivery applied the batch"
    assert first["batchItemFailures"], "the first delivery lost its lease and wrote nothing more"
    assert sqs.bodies() == [] and applied(table) == {"r0": 1, "r1": 1, "r2": 1}
    assert metric(consumer, "RecordsFailed") == 0


def test_good_a_three_second_downstream_outage_dead_letters_nothing() -> None:
    consumer, table, sqs = setup()
    outage_ends = table.now() + 3.0

    def handle(record: ConsumedRecord) -> list[dict[str, Any]]:
        if table.now() < outage_ends:
            raise ConnectionError("orders API: connection refused")
        return [effect(record)]

    consumer.handler(handle)
    drain(consumer, kinesis_event(records(30))["Records"])
    assert sqs.bodies() == [] and applied(table) == {f"r{i}": 1 for i in range(30)}
    assert metric(consumer, "RetriesDeferred") >= 1


def test_good_a_poison_record_still_reaches_the_dlq_after_its_spaced_attempts() -> None:
    consumer, table, sqs = setup()
    started = table.now()
    failed_at: list[float] = []

    def handle(record: ConsumedRecord) -> list[dict[str, Any]]:
        if record_id(record) == "r1":
            failed_at.append(table.now() - started)
            raise ValueError("poison")
        return [effect(record)]

    consumer.handler(handle)
    drain(consumer, kinesis_event(records(3))["Records"])
    assert dead_ids(sqs) == ["r1"] and applied(table) == {"r0": 1, "r2": 1}
    gaps = [later - earlier for earlier, later in itertools.pairwise(failed_at)]
    assert len(failed_at) == 3 and gaps[0] >= 2.0 and gaps[1] >= 4.0, "attempts spaced by doubling backoff"


def r0_pinned_once() -> tuple[KinesisConsumer, InMemoryLeaseTable, RecordingSQS, MappingReplay]:
    """max_attempts 2; r0 of three records dies twice, the second time alone (the next delivery
    pins it and counts it once): the consumer, its table and DLQ, and the replay after two deliveries."""
    consumer, table, sqs = setup(max_attempts=2)
    deaths = {"r0": 2}

    def handle(record: ConsumedRecord) -> list[dict[str, Any]]:
        if deaths.get(record_id(record), 0) > 0:
            deaths[record_id(record)] -= 1
            raise ProcessDied("out of memory")
        return [effect(record)]

    consumer.handler(handle)
    replay = MappingReplay(kinesis_event(records(3))["Records"], 10)
    replay.invoke(consumer.process)  # r0 dies among others: nothing pinned
    replay.invoke(consumer.process)  # careful: r0 alone, dies
    return consumer, table, sqs, replay


def test_good_a_death_in_the_write_counting_a_pinned_crash_is_not_pinned_again() -> None:
    """r0 dies twice, the second time alone: pinned, counted once. The function then dies in
    shardline's own write of that count, before r0 runs again: no second count (with
    max_attempts 2 it would be dead-lettered), and r0 applies when it runs."""
    consumer, table, sqs, replay = r0_pinned_once()
    table.fail_next("record_failure", ProcessDied("timed out after counting"), landed=True)
    replay.invoke(consumer.process)  # the death is pinned on r0 and counted; then the function dies
    row = table.row(SHARD)
    assert row is not None and row.failed_attempts == 1 and not row.span_started
    replay.drain(consumer.process)
    assert sqs.bodies() == [] and applied(table) == {"r0": 1, "r1": 1, "r2": 1}
    assert metric(consumer, "CrashesIsolated") == 1


def test_good_a_lost_reply_to_the_mark_that_a_careful_record_starts_is_not_pinned_on_it() -> None:
    """r0 dies twice, the second time alone: pinned, counted once. The next delivery writes that
    r0 starts alone; the write lands, its reply is lost (the client times out): the shard stalls,
    noting it on the row as it stands (its counter moved past the lease held). The delivery after
    finds no crash to pin: with max_attempts 2, r0 is not dead-lettered, and applies."""
    consumer, table, sqs, replay = r0_pinned_once()
    table.fail_next("mark_careful", ReadTimeoutError(endpoint_url="https://dynamodb"), landed=True)
    replay.invoke(consumer.process)  # pinned and counted; r0's start mark lands, its reply is lost
    row = table.row(SHARD)
    assert row is not None and row.failed_attempts == 1 and row.inflight is None and row.stalls == 1
    replay.drain(consumer.process)
    assert sqs.bodies() == [] and applied(table) == {"r0": 1, "r1": 1, "r2": 1}
    assert metric(consumer, "CrashesIsolated") == 1 and metric(consumer, "ShardStalls") == 1


# -- cost -------------------------------------------------------------------------------------


def test_cost_careful_running_after_a_crash_costs_log_n_checkpoints_not_n() -> None:
    consumer, table, _sqs = setup()
    died: set[str] = set()

    def handle(record: ConsumedRecord) -> list[dict[str, Any]]:
        if record_id(record) == "r99" and not died:
            died.add("r99")
            raise ProcessDied("out of memory, once")
        return [effect(record)]

    consumer.handler(handle)
    replay = MappingReplay(kinesis_event(records(100))["Records"], 100)
    replay.invoke(consumer.process)  # dies at the last record
    before = table.total_writes
    replay.invoke(consumer.process)  # the careful redelivery
    assert replay.finished and applied(table) == {f"r{i}": 1 for i in range(100)}
    careful_writes = table.total_writes - before
    assert careful_writes <= 12, f"begin, careful mark, returned, 7 spans: {careful_writes} writes"


def test_cost_a_refusal_dynamodb_does_not_pin_costs_log_n_transactions() -> None:
    consumer, table, _sqs = setup()

    def handle(record: ConsumedRecord) -> list[dict[str, Any]]:
        if record_id(record) == "r40":  # an update of a key attribute: ValidationException, no index
            return [
                {
                    "Update": {
                        "TableName": SINK,
                        "Key": {"id": {"S": "r40"}},
                        "UpdateExpression": "SET id = :x",
                        "ExpressionAttributeValues": {":x": {"S": "y"}},
                    }
                }
            ]
        return [effect(record)]

    consumer.handler(handle)
    replay = MappingReplay(kinesis_event(records(50))["Records"], 50)
    before = table.total_writes
    replay.invoke(consumer.process)
    transactions = table.total_writes - before
    assert transactions <= 12, f"{transactions} writes to pin one refusal among 50 records"
    assert applied(table) == {f"r{i}": 1 for i in range(40)}


def counter_consumer() -> tuple[KinesisConsumer, InMemoryLeaseTable, Any]:
    """functions/key_counter's handler, registered as the function registers it."""
    counter = function_module("key_counter")
    table = InMemoryLeaseTable(key_schema={"counts": ["partitionKey"]})
    consumer = KinesisConsumer("key_counter", table, max_attempts=3)
    consumer.batch_handler(partial(counter.count, "counts"))
    return consumer, table, counter


def counts(table: InMemoryLeaseTable, counter: Any) -> dict[str, int]:
    items = table.items("counts")
    return {i["partitionKey"]["S"]: int(i["count"]["N"]) for i in items if not counter.is_guard(i)}


def test_cost_the_key_counter_commits_a_batch_of_hot_keys_in_one_transaction() -> None:
    consumer, table, counter = counter_consumer()
    users = [UserRecord(f"k{i % 5}", b"x") for i in range(100)]  # 5 hot keys
    consumer.process(kinesis_event(users, records_per_aggregate=10), FakeLambdaContext())
    assert counts(table, counter) == {f"k{i}": 20 for i in range(5)}
    assert table.writes[LeaseWrite.TRANSACTION] == 1, "not one transaction per repeated key"


def test_cost_a_re_posted_batch_to_the_key_counter_costs_one_more_transaction_not_a_split() -> None:
    consumer, table, counter = counter_consumer()
    users = [UserRecord(f"k{i % 5}", b"x", None, f"order-{i}") for i in range(40)]
    first = kinesis_event(users, producer="p1", records_per_aggregate=10)
    consumer.process(first, FakeLambdaContext())
    before = table.total_writes
    fresh = [UserRecord("k9", b"x", None, "order-new")]
    again = kinesis_event(  # the client re-POSTed all 40 beside one new record: new aggregates
        [*users[:20], *fresh, *users[20:]], producer="p2", first_sequence=SEQUENCE_AFTER(first)
    )
    answer = consumer.process(again, FakeLambdaContext())
    assert answer == {"batchItemFailures": []}
    assert counts(table, counter) == {**{f"k{i}": 8 for i in range(5)}, "k9": 1}
    assert metric(consumer, "ClientIdDuplicatesSkipped") == 40
    assert table.total_writes - before <= 4, "begin, the cancelled transaction, the rerun's commit"


def SEQUENCE_AFTER(event: dict[str, Any]) -> int:
    return int(event["Records"][-1]["kinesis"]["sequenceNumber"]) + SEQUENCE_STEP


# -- smaller ----------------------------------------------------------------------------------


def test_smaller_a_handler_that_takes_sigalrm_does_not_disarm_the_time_budget() -> None:
    consumer, _table, _sqs = setup(time_margin=1.0)
    previous = signal.getsignal(signal.SIGALRM)

    def handle(record: ConsumedRecord) -> list[dict[str, Any]]:
        if record_id(record) == "r0":
            signal.signal(signal.SIGALRM, lambda *_: None)  # a library of the handler's own
            signal.setitimer(signal.ITIMER_REAL, 0)
        if record_id(record) == "r1":
            time.sleep(5)  # hangs past the budget: interrupted all the same
        return [effect(record)]

    consumer.handler(handle)
    ends = time.monotonic() + 1.4  # a 0.4 s budget before the 1 s margin
    context = FakeLambdaContext(lambda: int((ends - time.monotonic()) * 1000))
    started = time.monotonic()
    try:
        consumer.process(kinesis_event(records(2)), context)
    finally:
        signal.signal(signal.SIGALRM, previous)
    assert time.monotonic() - started < 4, "r1 was interrupted, not left to sleep 5 s"
    assert metric(consumer, "TimeBudgetDisarmed") == 1 and metric(consumer, "HandlerTimeouts") == 1


def test_smaller_the_batch_path_checkpoints_on_checkpoint_interval() -> None:
    now = [0.0]
    table = InMemoryLeaseTable(key_schema={SINK: ["id"]})
    sqs = RecordingSQS()
    consumer = KinesisConsumer(
        "g", table, dlq=DeadLetterQueue(sqs, "https://sqs/dlq"), checkpoint_interval=5.0, clock=lambda: now[0]
    )

    def handle(chunk: list[ConsumedRecord]) -> dict[ConsumedRecord, list[dict[str, Any]]]:
        now[0] += 10.0  # each call takes ten seconds
        if any(record_id(r) == "r7" for r in chunk):
            raise ValueError("poison")
        return {r: [effect(r)] for r in chunk}

    consumer.batch_handler(handle)
    consumer.process(kinesis_event(records(8)), FakeLambdaContext())
    row = table.row(SHARD)
    assert row is not None and row.failed_at is not None
    assert metric(consumer, "CheckpointsWritten") >= 3, "chunks that ran past the interval were checkpointed"


def test_smaller_a_letter_sent_after_a_crash_keeps_its_error_and_details() -> None:
    consumer, table, sqs = setup(max_attempts=2)
    consumer.handler(lambda record: [never_passes(record)] if record_id(record) == "r0" else [effect(record)])
    replay = MappingReplay(kinesis_event(records(2))["Records"], 10)
    replay.invoke(consumer.process)  # attempt 1
    table.fail_next("record_failure", ProcessDied("killed before the letter"), landed=True)
    replay.drain(consumer.process)
    [letter] = sqs.bodies()
    assert letter["errorType"] == "shardline.errors.SinkConflict" and letter["attempts"] == 2
    # From the lease row, which keeps each refused write's kind and table, never its key or item.
    assert letter["details"]["refusedWrites"] == [{"ConditionCheck": {"TableName": SINK}}]


def test_5_a_lease_row_keeps_a_refused_writes_table_not_its_key_while_the_letter_has_it_whole() -> None:
    consumer, table, sqs = setup(max_attempts=2)
    consumer.handler(lambda record: [never_passes(record)] if record_id(record) == "r0" else [effect(record)])
    replay = MappingReplay(kinesis_event(records(2))["Records"], 10)
    replay.invoke(consumer.process)  # attempt 1: the row notes the failure
    row = table.row(SHARD)
    assert row is not None and row.last_error_details is not None
    assert "missing-r0" not in row.last_error_details and SINK in row.last_error_details
    replay.drain(consumer.process)
    [letter] = sqs.bodies()
    assert letter["details"]["refusedWrites"] == [never_passes_for("r0")]


def never_passes_for(rid: str) -> dict[str, Any]:
    return {
        "ConditionCheck": {
            "TableName": SINK,
            "Key": {"id": {"S": f"missing-{rid}"}},
            "ConditionExpression": "attribute_exists(id)",
        }
    }


def test_smaller_error_text_in_lease_rows_and_letters_is_bounded() -> None:
    consumer, table, sqs = setup()

    def handle(record: ConsumedRecord) -> None:
        raise ValueError("x" * 100_000)

    consumer.handler(handle)
    replay = MappingReplay(kinesis_event(records(1))["Records"], 10)
    replay.invoke(consumer.process)
    row = table.row(SHARD)
    assert row is not None and row.last_error is not None and len(row.last_error) <= 1000
    replay.drain(consumer.process)
    [letter] = sqs.bodies()
    assert len(letter["error"]) <= 1000


def test_smaller_the_in_memory_table_takes_one_owner_beginning_twice_for_no_crash() -> None:
    table = InMemoryLeaseTable()
    table.begin(SHARD, "owner-1", "100")
    _, crashed = table.begin(SHARD, "owner-1", "100")  # the SDK retried a lost reply
    assert not crashed
    _, crashed = table.begin(SHARD, "owner-2", "100")
    assert crashed


def test_good_a_death_in_the_failure_count_of_a_careful_record_is_not_pinned_on_it() -> None:
    """The lone record of a careful span raised (its handler returned, by raising); the function
    then died in shardline's own write counting that failure: the death is not the record's."""
    consumer, table, sqs = setup(max_attempts=2)
    flaky = {"r0": 1}

    def handle(record: ConsumedRecord) -> list[dict[str, Any]]:
        if flaky.get(record_id(record), 0) > 0:
            flaky[record_id(record)] -= 1
            raise ConnectionError("orders API: connection reset")
        return [effect(record)]

    consumer.handler(handle)
    replay = MappingReplay(kinesis_event(records(3))["Records"], 10)
    table.fail_next("checkpoint_with", ProcessDied("timed out in the commit"))
    replay.invoke(consumer.process)  # dies in the commit: the next delivery runs carefully
    table.fail_next("record_failure", ProcessDied("timed out after counting"), landed=True)
    replay.invoke(consumer.process)  # r0 alone raises once; the death follows its failure count
    replay.drain(consumer.process)
    assert sqs.bodies() == [] and applied(table) == {"r0": 1, "r1": 1, "r2": 1}
    assert metric(consumer, "CrashesIsolated") == 0


def test_consumer_function_takes_one_handler_and_a_handler_for_a_sink_needs_the_sink_table() -> None:
    from shardline.aws_lambda import ConsumerFunction

    def record_handler_for(table: str) -> Any:
        return lambda record: []

    def batch_handler_for(table: str) -> Any:
        return lambda records: []

    with pytest.raises(ConfigurationError, match="exactly one of"):
        ConsumerFunction(record_handler_for, batch_handler_for=batch_handler_for)
    with pytest.raises(ConfigurationError, match="exactly one of"):
        ConsumerFunction()
    with pytest.raises(ConfigurationError, match="exactly one of"):
        ConsumerFunction(handler=lambda record: [], batch_handler=lambda records: [])
    function = ConsumerFunction(batch_handler_for=batch_handler_for)
    environment = {"SHARDLINE_GROUP": "g", "LEASE_TABLE": "leases", "SINK_TABLE": "sink"}
    with pytest.MonkeyPatch.context() as patch:
        for name, value in {**environment, "AWS_REGION": "us-east-1"}.items():
            patch.setenv(name, value)
        consumer = function.get()  # clients are made, not called
        assert consumer.group == "g" and consumer._batch_handler is not None
        assert consumer._record_handler is None
        patch.setenv("MAX_ATTEMPTS", "1")
        function.reset()
        with pytest.raises(ConfigurationError, match="MAX_ATTEMPTS must be at least 2"):
            function.get()
        patch.delenv("MAX_ATTEMPTS")
        patch.delenv("SINK_TABLE")  # a group without a sink: its handler is given itself
        function.reset()
        with pytest.raises(ConfigurationError, match="consumer group g: SINK_TABLE is not set"):
            function.get()
        plain = ConsumerFunction(handler=lambda record: [])
        assert plain.get()._record_handler is not None
