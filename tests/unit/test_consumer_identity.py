"""Identity on the consumer, in milliseconds on shardline.testing: copies of an aggregate (a lost
PutRecords reply retried) are applied once — in one batch, across batches, a copy before its
original, in a child shard after a split, re-routed to a sibling — at every crash point; a
client's re-POST is applied once through a `once` guard; `ConsumedRecord` carries the ids; the
applied-aggregate state stays small."""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from typing import Any

import pytest

from shardline.consumer import (
    ConsumedRecord,
    KinesisConsumer,
    dead_letter_message,
    deaggregate,
    is_once_guard,
    once,
)
from shardline.consumer._dedup import DEDUP_HORIZON_S, MAX_STATE_BYTES, AppliedAggregates
from shardline.consumer._dedup_run import DedupRun, scoped
from shardline.errors import SinkConflict
from shardline.kinesis import SHARD_END, Position, UserRecord
from shardline.kpl._identity import AggregateId
from shardline.testing import (
    SEQUENCE_STEP,
    FakeLambdaContext,
    InMemoryLeaseTable,
    LeaseWrite,
    MappingReplay,
    copies,
    kinesis_event,
)
from tests.support.consumer_identity import (
    ARRIVAL,
    EXPECTED,
    HIGH,
    LOW,
    MIDDLE,
    PARENT,
    SHARD_RECORDS,
    TOP,
    Died,
    FakeKinesis,
    aggregate_id,
    applied,
    counting_sink,
    entry,
    members,
    seq,
)


def test_3_retries_after_a_lost_reply_are_never_applied_twice_in_and_across_batches() -> None:
    table = InMemoryLeaseTable()
    consumer = KinesisConsumer("g", table)
    consumer.handler(counting_sink())
    replay = MappingReplay(SHARD_RECORDS, batch_size=3)
    replay.drain(consumer.process)
    assert applied(table) == EXPECTED
    metrics = consumer.metrics.snapshot()
    assert metrics["AggregateCopiesSkipped"] == 3  # A1 in its batch, A3's slow original, A2 later
    state = AppliedAggregates.parse(table.row(PARENT).applied_aggregates)
    assert state.lanes == {"-.p1.0": [5, int(ARRIVAL) + 7]}, "every counter up to 5 applied"


@pytest.mark.parametrize("detect_crashes", [True, False])
def test_3_a_copy_is_skipped_however_the_mapping_batches_the_shard(detect_crashes: bool) -> None:
    for batch_size in (1, 2, 4, 8):
        table = InMemoryLeaseTable()
        consumer = KinesisConsumer("g", table, detect_crashes=detect_crashes)
        consumer.handler(counting_sink())
        MappingReplay(SHARD_RECORDS, batch_size=batch_size).drain(consumer.process)
        assert applied(table) == EXPECTED, batch_size


CRASH_MODES = ("handler raises", "process dies in the handler", "dies before the commit lands", "dies after")


@pytest.mark.parametrize("checkpoint_every", [1, 2, None])
@pytest.mark.parametrize("mode", CRASH_MODES)
def test_3_retries_after_a_lost_reply_are_never_applied_twice_at_every_crash_point(
    mode: str, checkpoint_every: int | None
) -> None:
    """Kill the run at each handler call k — the handler raises; the process dies in the handler;
    it dies while the checkpoint that follows is written (before it lands, or after it landed and
    before the reply) — then let the mapping redeliver: each member is applied exactly once."""
    calls = 0
    for k in range(1, 20):
        table = InMemoryLeaseTable()
        consumer = KinesisConsumer("g", table, checkpoint_every=checkpoint_every, max_attempts=1000)
        sink = counting_sink()
        calls = 0

        def handle(
            record: ConsumedRecord,
            k: int = k,
            table: InMemoryLeaseTable = table,
            sink: Callable[[ConsumedRecord], Any] = sink,
        ) -> Any:
            nonlocal calls
            calls += 1
            if calls == k:
                if mode == "handler raises":
                    raise ValueError("the handler failed")
                if mode == "process dies in the handler":
                    raise Died()
                table.fail_next("checkpoint_with", Died(), landed=mode == "dies after")
            return sink(record)

        consumer.handler(handle)
        replay = MappingReplay(SHARD_RECORDS, batch_size=3)
        replay.drain(consumer.process)
        assert applied(table) == EXPECTED, (mode, checkpoint_every, k)
        if k <= 14:  # 14 members to apply: the fault was armed
            assert replay.crashes + consumer.metrics.snapshot()["RecordsFailed"] >= 1, (mode, k)
    assert calls >= 14


def test_3_the_state_written_at_a_checkpoint_holds_exactly_what_it_wholly_passed() -> None:
    run = DedupRun(None)
    assert run.admit(aggregate_id(1), "100", ARRIVAL)
    run.ends_at(2)  # its last delivered member is sub-sequence 2
    assert run.admit(aggregate_id(2, floor=2), "200", ARRIVAL)
    run.ends_at(None)  # delivered nothing (every member out of range)
    assert not run.admit(aggregate_id(1), "300", ARRIVAL), "a copy later in the batch"
    assert run.state_at(Position("100", 1)) == "", "inside aggregate 1: not applied yet"
    at_1 = AppliedAggregates.parse(run.state_at(Position("100", 2)))
    assert at_1.lanes == {"-.p1.0": [1, int(ARRIVAL)]}
    assert AppliedAggregates.parse(run.state_at(Position("150"))).lanes == at_1.lanes
    at_2 = AppliedAggregates.parse(run.state_at(Position("200")))
    assert at_2.lanes == {"-.p1.0": [2, int(ARRIVAL)]}
    run.committed(Position("100", 2))
    assert run.state.lanes == at_1.lanes and run.state_at(Position("100", 2)) == at_1.serialize()


def test_3_a_copy_in_a_child_shard_after_a_split_is_skipped_with_the_state_handed_down() -> None:
    kinesis = FakeKinesis()
    table = InMemoryLeaseTable()
    consumer = KinesisConsumer("g", table, kinesis=kinesis)
    consumer.handler(counting_sink())
    x, y = members("x", 3, hash_key=1), members("y", 2, hash_key=MIDDLE + 5)
    parent = [entry(x, aggregate_id(1), seq(0)), entry(y, aggregate_id(2), seq(1))]
    MappingReplay(parent).drain(consumer.process)
    assert applied(table) == {**dict.fromkeys(["x-0", "x-1", "x-2"], 1), "y-0": 1, "y-1": 1}
    # The parent closed after these; lost replies of both are retried and land in the children.
    MappingReplay([entry(x, aggregate_id(1), seq(10), LOW)]).drain(consumer.process)
    MappingReplay([entry(y, aggregate_id(2), seq(11), HIGH)]).drain(consumer.process)
    assert all(count == 1 for count in applied(table).values()) and len(applied(table)) == 5
    assert consumer.metrics.snapshot()["AggregateCopiesSkipped"] == 2
    assert table.row(PARENT).checkpoint == Position(SHARD_END)
    for child in (LOW, HIGH):
        assert AppliedAggregates.parse(table.row(child).applied_aggregates).applied(
            scoped(AggregateId.parse(aggregate_id(2)), None)
        ), f"{child} starts from its parent's state"


def test_3_a_copy_re_routed_to_a_sibling_applies_only_the_members_in_its_range() -> None:
    """An aggregate built for the parent lands in the low child after the split: only its
    members in the low range are applied there; the producer re-routes the same aggregate (same
    id) to the high child, where only the others are; a further copy in the low child is skipped."""
    kinesis = FakeKinesis()
    table = InMemoryLeaseTable()
    table.place(PARENT, Position(SHARD_END))
    consumer = KinesisConsumer("g", table, kinesis=kinesis)
    consumer.handler(counting_sink())
    z = members("z-low", 2, hash_key=MIDDLE - 2) + members("z-high", 3, hash_key=MIDDLE)
    MappingReplay([entry(z, aggregate_id(7), seq(20), LOW)]).drain(consumer.process)
    assert applied(table) == {"z-low-0": 1, "z-low-1": 1}
    MappingReplay([entry(z, aggregate_id(7), seq(21), HIGH)]).drain(consumer.process)
    MappingReplay([entry(z, aggregate_id(7), seq(22), LOW)]).drain(consumer.process)
    assert applied(table) == {record.data.decode(): 1 for record in z}
    metrics = consumer.metrics.snapshot()
    assert metrics["OutOfRangeRecordsSkipped"] == 5 and metrics["OutOfRangeRecords"] == 0
    assert metrics["AggregateCopiesSkipped"] == 1


def test_3_a_batch_ending_in_a_skipped_copy_or_skipped_members_checkpoints_past_its_last_member() -> None:
    """Else a closed parent would never read as finished (its checkpoint inside its last
    aggregate) and its children would wait for it forever."""
    x = members("x", 2, hash_key=5)
    tail = members("t-low", 1, hash_key=1) + members("t-high", 2, hash_key=MIDDLE)
    table = InMemoryLeaseTable()
    consumer = KinesisConsumer("g", table, kinesis=FakeKinesis())
    consumer.handler(counting_sink())
    MappingReplay([entry(x, aggregate_id(1), seq(0), LOW), entry(x, aggregate_id(1), seq(1), LOW)]).drain(
        consumer.process
    )
    assert table.row(LOW).checkpoint == Position(str(seq(1)), 1), "past the copy's last member"
    MappingReplay([entry(tail, aggregate_id(2), seq(2), LOW)]).drain(consumer.process)
    assert applied(table) == {"x-0": 1, "x-1": 1, "t-low-0": 1}
    assert table.row(LOW).checkpoint == Position(str(seq(2)), 2), "past the members out of range"


def test_3_a_foreign_aggregate_keeps_delivering_members_outside_the_range() -> None:
    kinesis = FakeKinesis()
    table = InMemoryLeaseTable()
    table.place(PARENT, Position(SHARD_END))
    consumer = KinesisConsumer("g", table, kinesis=kinesis)
    seen: list[bytes] = []
    consumer.handler(lambda record: seen.append(record.data))
    users = members("f", 2, hash_key=MIDDLE - 1)  # one low, one high
    event = kinesis_event(users, shard_id=LOW, first_sequence=seq(30))  # no aggregate id
    consumer.process(event, FakeLambdaContext())
    assert seen == [b"f-0", b"f-1"]
    assert consumer.metrics.snapshot()["OutOfRangeRecords"] == 1


# -- 4 and 7 ------------------------------------------------------------------------------------


def guarded_sink(guard_table: str = "once") -> Callable[[ConsumedRecord], list[dict[str, Any]]]:
    count = counting_sink()

    def handle(record: ConsumedRecord) -> list[dict[str, Any]]:
        writes = count(record)
        if record.id is not None:
            writes.append(once(guard_table, {"pk": {"S": record.id}}, expires_at=2_000_000_000))
        return writes

    return handle


def test_4_a_client_re_post_is_applied_once_through_a_once_guard() -> None:
    """The same client ids re-POSTed: new records in new aggregates (new ids), in the same
    batch and in a later one; the guard's failed condition marks each as applied, even with
    sink_conflicts="fail"."""
    table = InMemoryLeaseTable()
    consumer = KinesisConsumer("g", table)  # sink_conflicts="fail"
    consumer.handler(guarded_sink())
    posted = [UserRecord("k", f"order-{i}".encode(), None, f"order-{i}") for i in range(4)]
    first = kinesis_event(posted, producer="p1", records_per_aggregate=2, first_sequence=seq(0))
    again = kinesis_event(posted[2:], producer="p2", first_sequence=seq(2))  # same batch
    later = kinesis_event(posted, producer="p3", first_sequence=seq(3))  # another batch
    consumer.process({"Records": first["Records"] + again["Records"]}, FakeLambdaContext())
    consumer.process(later, FakeLambdaContext())
    assert applied(table) == {f"order-{i}": 1 for i in range(4)}
    assert len(table.items("once")) == 4
    metrics = consumer.metrics.snapshot()
    assert metrics["ClientIdDuplicatesSkipped"] == 6 and metrics["RecordsFailed"] == 0
    assert table.row(PARENT).checkpoint == Position(later["Records"][-1]["kinesis"]["sequenceNumber"], 3)


def test_4_a_re_posted_batch_is_skipped_in_one_more_transaction_not_one_per_record() -> None:
    """DynamoDB names every guard that failed: all those records are skipped at once."""
    table = InMemoryLeaseTable()
    consumer = KinesisConsumer("g", table)
    consumer.handler(guarded_sink())
    posted = [UserRecord("k", f"order-{i}".encode(), None, f"order-{i}") for i in range(40)]
    new = [UserRecord("k", f"new-{i}".encode(), None, f"new-{i}") for i in range(5)]
    consumer.process(kinesis_event(posted, producer="p1", first_sequence=seq(0)), FakeLambdaContext())
    before = table.writes[LeaseWrite.TRANSACTION]
    again = kinesis_event([*posted[:20], *new, *posted[20:]], producer="p2", first_sequence=seq(1))
    consumer.process(again, FakeLambdaContext())
    assert applied(table) == {**{f"order-{i}": 1 for i in range(40)}, **{f"new-{i}": 1 for i in range(5)}}
    assert consumer.metrics.snapshot()["ClientIdDuplicatesSkipped"] == 40
    assert table.writes[LeaseWrite.TRANSACTION] - before == 2, "the refused one, then the 5 new records"


def test_4_once_builds_a_guarded_put() -> None:
    guard = once("once", {"pk": {"S": "order-1"}}, expires_at=1_800_000_000)
    assert guard == {
        "Put": {
            "TableName": "once",
            "Item": {"pk": {"S": "order-1"}, "shardlineOnce": {"N": "1"}, "expiresAt": {"N": "1800000000"}},
            "ConditionExpression": "attribute_not_exists(shardlineOnce)",
        }
    }
    assert is_once_guard(guard) and not is_once_guard({"Put": {"TableName": "t", "Item": {"pk": {"S": "1"}}}})
    assert "expiresAt" not in once("once", {"pk": {"S": "x"}})["Put"]["Item"]
    for bad in ({}, {"shardlineOnce": {"N": "1"}}):
        with pytest.raises(ValueError, match="once"):
            once("once", bad)
    with pytest.raises(ValueError, match="table_name"):
        once("", {"pk": {"S": "x"}})


def test_4_a_guard_refused_in_a_batch_handler_list_is_pinned_on_its_record_and_no_other_is_skipped() -> None:
    """A batch handler that answers one list for several records cannot say whose guard failed:
    the chunk is run again in halves until the refused guard is a lone record's — that record is
    already applied and skipped; the new record beside it is applied, never skipped with it."""
    table = InMemoryLeaseTable()
    consumer = KinesisConsumer("g", table, sink_conflicts="fail", max_attempts=2)
    guard = guarded_sink()

    @consumer.batch_handler
    def handle(records: list[ConsumedRecord]) -> list[dict[str, Any]]:
        return [write for record in records for write in guard(record)]

    posted = [UserRecord("k", f"order-{i}".encode(), None, f"order-{i}") for i in range(3)]
    consumer.process(kinesis_event(posted[:2], producer="p1", first_sequence=seq(0)), FakeLambdaContext())
    answer = consumer.process(  # order-1 re-posted beside the new order-2, in one list
        kinesis_event(posted[1:], producer="p2", first_sequence=seq(1)), FakeLambdaContext()
    )
    assert answer == {"batchItemFailures": []}
    assert consumer.metrics.snapshot()["ClientIdDuplicatesSkipped"] == 1
    assert consumer.metrics.snapshot()["RecordsFailed"] == 0
    counts = {item["id"]["S"]: item["n"]["N"] for item in table.items("applied")}
    assert counts == {"order-0": "1", "order-1": "1", "order-2": "1"}


def test_7_consumers_expose_the_identity_of_real_encoded_aggregates() -> None:
    users = [
        UserRecord("k1", b"one", None, "client-1"),
        UserRecord("k2", b"two"),
        UserRecord("k3", b"3", "7", "c3"),
    ]
    ident = aggregate_id(9, floor=4, producer="abc", lane="12")
    [record] = kinesis_event(users, aggregate_ids=[ident])["Records"]
    got = deaggregate([record])
    assert [(r.aggregate_id, r.id, r.data, r.sub_sequence_number) for r in got] == [
        (ident, "client-1", b"one", 0),
        (ident, None, b"two", 1),
        (ident, "c3", b"3", 2),
    ]
    assert AggregateId.parse(got[0].aggregate_id or "") == AggregateId("abc", "12", 9, 4)
    plain = deaggregate(kinesis_event(users)["Records"])  # a foreign aggregate: ids of records only
    assert [(r.aggregate_id, r.id) for r in plain] == [(None, "client-1"), (None, None), (None, "c3")]
    single = deaggregate(kinesis_event(users[:1], aggregate=False)["Records"])  # plain: no tags
    assert (single[0].aggregate_id, single[0].id) == (None, None)


def test_7_the_testing_kit_builds_events_with_ids_and_the_handler_sees_them() -> None:
    table = InMemoryLeaseTable()
    consumer = KinesisConsumer("g", table)
    seen: list[tuple[str | None, str | None]] = []
    consumer.handler(lambda record: seen.append((record.aggregate_id, record.id)))
    users = [UserRecord("k", b"a", None, "id-a"), UserRecord("k", b"b", None, "id-b"), UserRecord("k", b"c")]
    event = kinesis_event(users, producer="prod", records_per_aggregate=2, shard_id="shardId-000000000012")
    assert consumer.process(event, FakeLambdaContext()) == {"batchItemFailures": []}
    assert seen == [("prod.12.1.1", "id-a"), ("prod.12.1.1", "id-b"), ("prod.12.2.2", None)]
    last = int(event["Records"][-1]["kinesis"]["sequenceNumber"])
    retried = copies(event["Records"], first_sequence=last + SEQUENCE_STEP)
    assert consumer.process({"Records": retried}, FakeLambdaContext()) == {"batchItemFailures": []}
    assert len(seen) == 3 and consumer.metrics.snapshot()["AggregateCopiesSkipped"] == 2


# -- the state --------------------------------------------------------------------------------------


def test_3_the_applied_state_folds_ranges_into_the_floor_and_merges_parents() -> None:
    state = AppliedAggregates()
    for counter in (1, 2, 5, 7, 6):
        state.fold(AggregateId("p", "0", counter, 1), ARRIVAL)
    assert state.lanes["p.0"] == [2, int(ARRIVAL), 5, 7]
    assert [state.applied(AggregateId("p", "0", c, 1)) for c in range(1, 9)] == [
        True, True, False, False, True, True, True, False,
    ]  # fmt: skip
    state.fold(AggregateId("p", "0", 8, 4), ARRIVAL)  # 3 settled; 4 not yet
    assert state.lanes["p.0"] == [3, int(ARRIVAL), 5, 8]
    state.fold(AggregateId("p", "0", 10, 5), ARRIVAL)  # 4 settled: the floor reaches 8
    assert state.lanes["p.0"] == [8, int(ARRIVAL), 10, 10]
    other = AppliedAggregates()
    other.fold(AggregateId("p", "0", 9, 1), ARRIVAL + 5)
    other.fold(AggregateId("q", "3", 1, 1), ARRIVAL + 5)
    merged = AppliedAggregates.merge([state, other])
    assert merged.lanes == {"p.0": [10, int(ARRIVAL) + 5], "q.3": [1, int(ARRIVAL) + 5]}
    assert AppliedAggregates.parse(merged.serialize()).lanes == merged.lanes


def test_3_lanes_past_the_horizon_are_dropped_and_bad_state_reads_as_empty() -> None:
    state = AppliedAggregates()
    state.fold(AggregateId("old", "0", 1, 1), ARRIVAL)
    state.fold(AggregateId("new", "0", 1, 1), ARRIVAL + DEDUP_HORIZON_S)
    state.prune()
    assert set(state.lanes) == {"old.0", "new.0"}, "exactly at the horizon: kept"
    state.fold(AggregateId("new", "0", 2, 1), ARRIVAL + DEDUP_HORIZON_S + 1)
    state.prune()
    assert set(state.lanes) == {"new.0"}
    for bad in ("{", '{"v":2}', '{"v":1,"t":1,"k":{"a":[1]}}', "[]"):
        assert AppliedAggregates.parse(bad).lanes == {}


def test_3_the_serialized_state_stays_bounded_over_100000_aggregates_from_50_producers() -> None:
    """50 producers, 2 lanes each, 100,000 aggregates over ~1,000 s; 3 % of sends lose their
    reply (resent 1-60 s later: the copy lands late, sometimes before the original), 2 % are
    throttled (land up to 30 s late), 1 % land in another shard; producers restart (new ids) at
    random. The floor catches up within the resend horizon. The state's size is measured after
    every batch of 25 Kinesis records, as each checkpoint writes it."""
    rng = random.Random(23)
    producers = [f"prod{n:012d}" for n in range(50)]
    counters: dict[tuple[str, str], int] = {}
    unsettled: dict[tuple[str, str], dict[int, float]] = {}
    landing: list[tuple[float, AggregateId]] = []
    now = ARRIVAL
    for _ in range(100_000):
        now += 0.01
        index = rng.randrange(50)
        if rng.random() < 0.0005:
            producers[index] = f"prod{rng.getrandbits(40):012d}"  # a new process
        lane = (producers[index], str(rng.randrange(2)))
        counter = counters[lane] = counters.get(lane, 0) + 1
        pending = unsettled.setdefault(lane, {})
        for old, since in list(pending.items()):
            if now - since > 60 and rng.random() < 0.5:
                del pending[old]  # confirmed, or given up past the horizon
        floor = min(pending, default=counter)
        ident = AggregateId(lane[0], lane[1], counter, floor)
        fate = rng.random()
        if fate < 0.03:  # lost reply: it landed (or not) and a copy follows
            pending[counter] = now
            if rng.random() < 0.7:
                landing.append((now + rng.uniform(0, 2), ident))
            landing.append((now + rng.uniform(1, 60), ident))
        elif fate < 0.05:  # throttled, resent
            pending[counter] = now
            landing.append((now + rng.uniform(0.1, 30), ident))
        elif fate < 0.06:  # landed in another shard
            continue
        else:
            landing.append((now, ident))
    landing.sort(key=lambda item: item[0])
    run = DedupRun(None)
    sizes = []
    sequence = 0
    skipped = 0
    for start in range(0, len(landing), 25):
        for arrival, ident in landing[start : start + 25]:
            sequence += 1
            if not run.admit(ident.encode(), str(sequence), arrival):
                skipped += 1
            else:
                run.ends_at(None)
        position = Position(str(sequence))
        text = run.state_at(position)
        run.committed(position)
        sizes.append(len(text))
    print(f"state bytes: max {max(sizes):,}, mean {sum(sizes) / len(sizes):,.0f}, last {sizes[-1]:,}; "
          f"lanes {len(run.state.lanes)}, copies skipped {skipped:,}")  # fmt: skip
    assert skipped > 2_000, "copies were skipped"
    assert max(sizes) < 16_000, f"the state grew to {max(sizes)} bytes"
    assert max(len(lane) for lane in run.state.lanes.values()) < 60, "gaps fold into the floor"


def test_3_a_state_near_the_item_limit_evicts_the_oldest_lanes_first() -> None:
    state = AppliedAggregates()
    for n in range(10_000):
        state.fold(AggregateId(f"producer{n:08d}", "l1", 3, 1), ARRIVAL + n / 100)
    text, evicted = state.bounded(MAX_STATE_BYTES)
    assert len(text) <= MAX_STATE_BYTES and evicted > 0
    assert "producer00000000.l1" not in state.lanes and "producer00009999.l1" in state.lanes
    assert len(json.loads(text)["k"]) == 10_000 - evicted
    print(f"{10_000} lanes: {len(state.lanes)} kept in {len(text):,} bytes, {evicted} evicted")


def test_4_the_in_memory_lease_table_cancels_at_the_guard_index_as_dynamodb_does() -> None:
    """`once` into a table whose key schema was not declared: the guard's key is its item but
    `shardlineOnce`/`expiresAt`; a second guard of the same key fails at its own index, and the
    transaction (checkpoint, state and the other writes) is not applied."""
    table = InMemoryLeaseTable(key_schema={"applied": ["id"]})
    lease = table.take(PARENT, "a")
    put = {"Put": {"TableName": "applied", "Item": {"id": {"S": "x"}}}}
    lease = table.checkpoint_with(
        lease, Position("100"), [put, once("once", {"pk": {"S": "c-1"}}, expires_at=1)], applied="{}"
    )
    assert table.item("once", {"pk": {"S": "c-1"}}) == {
        "pk": {"S": "c-1"},
        "shardlineOnce": {"N": "1"},
        "expiresAt": {"N": "1"},
    }
    other = {"Put": {"TableName": "applied", "Item": {"id": {"S": "y"}}}}
    with pytest.raises(SinkConflict) as refused:
        table.checkpoint_with(
            lease, Position("200"), [other, once("once", {"pk": {"S": "c-1"}}, expires_at=2)], applied="[]"
        )
    assert refused.value.indexes == (1,)
    assert table.row(PARENT).checkpoint == Position("100") and table.row(PARENT).applied_aggregates == "{}"
    assert table.item("applied", {"id": {"S": "y"}}) is None


def test_7_a_dead_letter_carries_the_ids_its_record_arrived_with() -> None:
    users = [UserRecord("k", b"poison", None, "client-9"), UserRecord("k", b"plain")]
    records = deaggregate(kinesis_event(users, aggregate_ids=[aggregate_id(4)])["Records"])
    message = dead_letter_message(records[0], "g", "boom", 3, ARRIVAL)
    assert (message["aggregateId"], message["recordId"]) == (aggregate_id(4), "client-9")
    plain = dead_letter_message(deaggregate(kinesis_event(users[1:])["Records"])[0], "g", "boom", 3, ARRIVAL)
    assert "aggregateId" not in plain and "recordId" not in plain


MERGED = "shardId-000000000003"


class MergingKinesis(FakeKinesis):
    """The parent split at 2**127 into LOW and HIGH; both closed and merged again into MERGED."""

    def list_shards(self, **request: Any) -> dict[str, Any]:
        shards = super().list_shards(**request)["Shards"]
        for shard in shards:
            shard["SequenceNumberRange"]["EndingSequenceNumber"] = "2"
        merged = {
            "ShardId": MERGED,
            "ParentShardId": LOW,
            "AdjacentParentShardId": HIGH,
            "HashKeyRange": {"StartingHashKey": "0", "EndingHashKey": str(TOP)},
            "SequenceNumberRange": {"StartingSequenceNumber": "3"},
        }
        return {"Shards": [*shards, merged]}


@pytest.mark.parametrize("reroute_before_the_merge", [False, True])
def test_3_a_copy_re_routed_into_a_merged_child_applies_only_what_no_parent_applied(
    reroute_before_the_merge: bool,
) -> None:
    """An aggregate built for the parent lands in LOW after a split: LOW applies its low members
    only. LOW and HIGH then merge. The re-routed copy lands in HIGH before the merge (HIGH applies
    the high members; the merged child skips a later copy whole) or in the merged child (which
    applies only the high members: LOW's state says it applied the aggregate in LOW's range)."""
    table = InMemoryLeaseTable()
    table.place(PARENT, Position(SHARD_END))
    consumer = KinesisConsumer("g", table, kinesis=MergingKinesis())
    consumer.handler(counting_sink())
    z = members("z-low", 2, hash_key=MIDDLE - 2) + members("z-high", 3, hash_key=MIDDLE)
    whole = members("w", 2, hash_key=5)  # wholly in LOW's range: a copy in the child is skipped
    MappingReplay(
        [entry(z, aggregate_id(7), seq(20), LOW), entry(whole, aggregate_id(8), seq(21), LOW)]
    ).drain(consumer.process)
    if reroute_before_the_merge:
        MappingReplay([entry(z, aggregate_id(7), seq(22), HIGH)]).drain(consumer.process)
    else:
        MappingReplay(
            [entry(members("h", 1, hash_key=MIDDLE + 9), aggregate_id(1, producer="p2"), seq(22), HIGH)]
        ).drain(consumer.process)
    MappingReplay(
        [
            entry(z, aggregate_id(7), seq(30), MERGED),
            entry(whole, aggregate_id(8), seq(31), MERGED),
            entry(z, aggregate_id(7), seq(32), MERGED),
        ]
    ).drain(consumer.process)
    expected = {record.data.decode(): 1 for record in z + whole}
    if not reroute_before_the_merge:
        expected["h-0"] = 1
    assert applied(table) == expected
    state = AppliedAggregates.parse(table.row(MERGED).applied_aggregates)
    assert state.applied(scoped(AggregateId.parse(aggregate_id(7)), None)) and state.qualified == {}


def test_3_a_merged_child_inherits_the_ranges_of_partly_applied_aggregates() -> None:
    from shardline.kinesis._shard_map import HashRange

    low, high, whole = HashRange(0, MIDDLE - 1), HashRange(MIDDLE, TOP), HashRange(0, TOP)
    left, right = AppliedAggregates(), AppliedAggregates()
    left.fold(AggregateId("p", "0", 1, 1), ARRIVAL, partial=True)  # only its low members
    left.fold(AggregateId("p", "0", 2, 1), ARRIVAL)  # wholly in LOW
    right.fold(AggregateId("p", "0", 3, 1), ARRIVAL, partial=True)
    left.fold(AggregateId("p", "0", 3, 1), ARRIVAL, partial=True)  # both halves applied 3
    child = AppliedAggregates.inherit([(left, low), (right, high)], whole)
    assert child.covered(AggregateId("p", "0", 1, 1)) == [0, MIDDLE - 1]
    assert not child.applied(AggregateId("p", "0", 1, 1))
    assert child.applied(AggregateId("p", "0", 2, 1)) and child.covered(AggregateId("p", "0", 2, 1)) is None
    assert child.applied(AggregateId("p", "0", 3, 1)) and child.covered(AggregateId("p", "0", 3, 1)) is None
    split = AppliedAggregates.inherit([(left, low)], HashRange(0, 10))  # a split child: exact
    assert split.applied(AggregateId("p", "0", 1, 1)) and split.qualified == {}
    assert AppliedAggregates.parse(child.serialize()).qualified == child.qualified
    child.fold(AggregateId("p", "0", 1, 1), ARRIVAL + 1)  # the child applied the rest
    assert child.applied(AggregateId("p", "0", 1, 1)) and child.qualified == {}
    child.fold(AggregateId("q", "0", 1, 1), ARRIVAL + DEDUP_HORIZON_S + 5)
    child.prune()
    assert child.partial == {} and set(child.lanes) == {"q.0"}


@pytest.mark.parametrize("checkpoint_every", [1, None])
def test_3_copies_are_skipped_for_a_batch_handler_at_every_crash_point(checkpoint_every: int | None) -> None:
    """A batch handler answering writes by record; the process dies in the commit after its
    k-th call, once the write landed; every member applied exactly once."""
    for k in range(1, 12):
        table = InMemoryLeaseTable()
        consumer = KinesisConsumer("g", table, checkpoint_every=checkpoint_every, max_attempts=1000)
        commits = 0

        @consumer.batch_handler
        def handle(
            records: list[ConsumedRecord], k: int = k, table: InMemoryLeaseTable = table
        ) -> dict[ConsumedRecord, list[dict[str, Any]]]:
            nonlocal commits
            commits += 1
            if commits == k:
                table.fail_next("checkpoint_with", Died(), landed=True)
            return {record: counting_sink()(record) for record in records}

        MappingReplay(SHARD_RECORDS, batch_size=3).drain(consumer.process)
        assert applied(table) == EXPECTED, (checkpoint_every, k)
