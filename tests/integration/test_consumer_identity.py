"""Identity on the consumer with the real LeaseTable over moto server's DynamoDB: the applied-
aggregate state rides with every checkpoint (plain and transactional) in `appliedAggregates`,
copies of an aggregate are applied once at every crash point (the handler raising, the process
dying, the checkpoint's reply lost after it landed), a child starts from its parent's state, and
a client's re-POST is applied once through a `once` guard."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pytest
from botocore.exceptions import ReadTimeoutError

from shardline.consumer import ConsumedRecord, KinesisConsumer, LeaseTable, once
from shardline.consumer._dedup import AppliedAggregates
from shardline.consumer._dedup_run import scoped
from shardline.kinesis import SHARD_END, Position, UserRecord
from shardline.kpl._identity import AggregateId
from shardline.testing import FakeLambdaContext, MappingReplay, kinesis_event
from tests.support.consumer_identity import (
    EXPECTED,
    HIGH,
    LOW,
    MIDDLE,
    PARENT,
    SHARD_RECORDS,
    FakeKinesis,
    aggregate_id,
    counting_sink,
    entry,
    members,
    seq,
)
from tests.support.integration import VirtualClock, aws_client


class Died(BaseException):
    """The process dies: nothing after it runs."""


@pytest.fixture(scope="module")
def dynamodb(moto_server):
    return aws_client("dynamodb", moto_server)


def new_table(dynamodb, key: str = "id") -> str:
    name = f"t-{uuid.uuid4().hex[:12]}"
    dynamodb.create_table(
        TableName=name,
        KeySchema=[{"AttributeName": key, "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": key, "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    return name


class FaultyDynamoDB:
    """The DynamoDB client, whose next write (`arm`) lands and then loses its reply: a read
    timeout (LeaseTable re-reads the row and accepts it) or the process dying (`Died`)."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self._armed: BaseException | None = None
        self.fired = 0

    def arm(self, error: BaseException) -> None:
        self._armed = error

    def __getattr__(self, name: str) -> Any:
        call = getattr(self._client, name)
        if name not in ("transact_write_items", "update_item"):
            return call

        def faulty(**request: Any) -> Any:
            answer = call(**request)
            error, self._armed = self._armed, None
            if error is not None:
                self.fired += 1
                raise error
            return answer

        return faulty


def leases(dynamodb) -> LeaseTable:
    """A new lease table on a virtual clock: a failed record's backoff costs no time."""
    name = f"leases-{uuid.uuid4().hex[:12]}"
    LeaseTable.create(dynamodb, name)
    clock = VirtualClock()
    return LeaseTable(dynamodb, name, clock=clock.now, sleep=clock.sleep)


def counts(dynamodb, table_name: str) -> dict[str, int]:
    items = dynamodb.scan(TableName=table_name, ConsistentRead=True)["Items"]
    return {item["id"]["S"]: int(item["n"]["N"]) for item in items}


def stored_state(dynamodb, table: LeaseTable, key: str = PARENT) -> str | None:
    item = dynamodb.get_item(TableName=table.table_name, Key={"leaseKey": {"S": key}}, ConsistentRead=True)
    return item["Item"].get("appliedAggregates", {}).get("S")


MODES = (
    "handler raises",
    "process dies in the handler",
    "reply lost after the commit",
    "dies after the commit",
)


@pytest.mark.parametrize("mode", MODES)
def test_3_retries_after_a_lost_reply_are_never_applied_twice_at_every_crash_point_on_dynamodb(
    dynamodb, mode: str
) -> None:
    """The shard of the unit test (copies in one batch and across batches, a copy before its
    slow original) through the real LeaseTable, a checkpoint after every record: killed at each
    record k, redelivered, every member applied exactly once."""
    for k in range(1, 16):
        faulty = FaultyDynamoDB(dynamodb)
        table = leases(faulty)
        sink = new_table(dynamodb)
        consumer = KinesisConsumer("g", table, checkpoint_every=1, max_attempts=1000)
        count = counting_sink(sink)
        calls = 0

        def handle(
            record: ConsumedRecord,
            k: int = k,
            faulty: FaultyDynamoDB = faulty,
            count: Callable[[ConsumedRecord], Any] = count,
        ) -> Any:
            nonlocal calls
            calls += 1
            if calls == k:
                if mode == "handler raises":
                    raise ValueError("the handler failed")
                if mode == "process dies in the handler":
                    raise Died()
                lost = ReadTimeoutError(endpoint_url="http://127.0.0.1/")
                faulty.arm(lost if mode == "reply lost after the commit" else Died())
            return count(record)

        consumer.handler(handle)
        MappingReplay(SHARD_RECORDS, batch_size=3).drain(consumer.process)
        assert counts(dynamodb, sink) == EXPECTED, (mode, k)
        if mode.endswith("after the commit") and k <= 14:  # 14 members: each a crash point
            assert faulty.fired == 1, (mode, k)
        state = AppliedAggregates.parse(stored_state(dynamodb, table))
        assert state.lanes["-.p1.0"][0] == 5, (mode, k)


def test_3_the_state_rides_with_plain_and_transactional_checkpoints_and_every_claim_returns_it(
    dynamodb,
) -> None:
    table = leases(dynamodb)
    lease = table.take(PARENT, "a")
    assert lease.applied_aggregates is None
    lease = table.checkpoint(lease, Position("100"), applied='{"v":1,"t":5,"k":{"p.0":[3,5]}}')
    assert stored_state(dynamodb, table) == '{"v":1,"t":5,"k":{"p.0":[3,5]}}'
    sink = new_table(dynamodb)
    put = {"Put": {"TableName": sink, "Item": {"id": {"S": "x"}}}}
    lease = table.checkpoint_with(lease, Position("200"), [put], applied='{"v":1,"t":6,"k":{"p.0":[4,6]}}')
    assert stored_state(dynamodb, table) == lease.applied_aggregates == '{"v":1,"t":6,"k":{"p.0":[4,6]}}'
    assert table.take(PARENT, "b").applied_aggregates == lease.applied_aggregates
    assert table.hold(PARENT, "c").applied_aggregates == lease.applied_aggregates
    began, _ = table.begin(PARENT, "d", "300")
    assert began.applied_aggregates == lease.applied_aggregates
    began = table.checkpoint(began, Position("300"))  # applied=None: left as it is
    assert stored_state(dynamodb, table) == lease.applied_aggregates
    table.checkpoint(began, Position("400"), applied="")  # the state emptied: removed
    assert stored_state(dynamodb, table) is None


def test_3_a_copy_in_a_child_shard_is_skipped_with_the_parents_state_read_from_dynamodb(dynamodb) -> None:
    table = leases(dynamodb)
    sink = new_table(dynamodb)
    consumer = KinesisConsumer("g", table, kinesis=FakeKinesis())
    consumer.handler(counting_sink(sink))
    x = members("x", 2, hash_key=1)
    z = members("z-low", 2, hash_key=MIDDLE - 2) + members("z-high", 2, hash_key=MIDDLE)
    MappingReplay([entry(x, aggregate_id(1), seq(0))]).drain(consumer.process)
    # A fresh consumer (another container): the lineage reads the parent's row from DynamoDB.
    child = KinesisConsumer("g", LeaseTable(dynamodb, table.table_name), kinesis=FakeKinesis())
    child.handler(counting_sink(sink))
    MappingReplay([entry(x, aggregate_id(1), seq(10), LOW), entry(z, aggregate_id(2), seq(11), LOW)]).drain(
        child.process
    )
    MappingReplay([entry(z, aggregate_id(2), seq(12), HIGH)]).drain(child.process)
    assert counts(dynamodb, sink) == {
        "x-0": 1,
        "x-1": 1,
        "z-low-0": 1,
        "z-low-1": 1,
        "z-high-0": 1,
        "z-high-1": 1,
    }
    assert table.get(PARENT).checkpoint == Position(SHARD_END)
    metrics = child.metrics.snapshot()
    assert metrics["AggregateCopiesSkipped"] == 1 and metrics["OutOfRangeRecordsSkipped"] == 4
    low = AppliedAggregates.parse(stored_state(dynamodb, table, LOW))
    assert low.applied(scoped(AggregateId.parse(aggregate_id(1)), None)) and low.applied(
        scoped(AggregateId.parse(aggregate_id(2)), None)
    )


def test_4_a_client_re_post_is_applied_once_through_a_once_guard_on_dynamodb(dynamodb) -> None:
    """A client re-POSTs the same ids: new aggregates from another producer, in the same batch
    and in a later one. The guard's ConditionalCheckFailed, as DynamoDB (moto) reports it,
    marks each copy as applied — with sink_conflicts="fail" — and the rest commit."""
    table = leases(dynamodb)
    sink, guards = new_table(dynamodb), new_table(dynamodb, key="pk")
    consumer = KinesisConsumer("g", table)
    count = counting_sink(sink)

    @consumer.handler
    def handle(record: ConsumedRecord) -> list[dict[str, Any]]:
        writes = count(record)
        if record.id is not None:
            writes.append(once(guards, {"pk": {"S": record.id}}, expires_at=2_000_000_000))
        return writes

    posted = [UserRecord("k", f"order-{i}".encode(), None, f"order-{i}") for i in range(4)]
    fresh = [UserRecord("k", b"no-id")]  # no client id: applied once per aggregate
    first = kinesis_event(posted, producer="p1", records_per_aggregate=2, first_sequence=seq(0))
    again = kinesis_event(posted[2:] + fresh, producer="p2", first_sequence=seq(2))
    later = kinesis_event(posted, producer="p3", first_sequence=seq(3))
    assert consumer.process({"Records": first["Records"] + again["Records"]}, FakeLambdaContext()) == {
        "batchItemFailures": []
    }
    assert consumer.process(later, FakeLambdaContext()) == {"batchItemFailures": []}
    assert counts(dynamodb, sink) == {**{f"order-{i}": 1 for i in range(4)}, "no-id": 1}
    stored = dynamodb.scan(TableName=guards, ConsistentRead=True)["Items"]
    assert sorted(item["pk"]["S"] for item in stored) == [f"order-{i}" for i in range(4)]
    assert all(item["shardlineOnce"] == {"N": "1"} and "expiresAt" in item for item in stored)
    metrics = consumer.metrics.snapshot()
    assert metrics["ClientIdDuplicatesSkipped"] == 6 and metrics["RecordsFailed"] == 0
    assert table.get(PARENT).checkpoint == Position(later["Records"][-1]["kinesis"]["sequenceNumber"], 3)
