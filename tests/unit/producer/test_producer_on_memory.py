"""A real `Producer` built on `shardline.testing.InMemoryKinesis`, as a user builds one: records land
on the shard the producer predicted, aggregated, with typed results; throttles are retried (or
failed, as configured); a reply lost after the write is resent identical and loses nothing.

Time is a fake clock the producer sleeps on, shared with the stream (its write limits count it).
"""

from __future__ import annotations

from collections import Counter

from shardline.kinesis import UserRecord, hash_key
from shardline.kpl._decode import decode_aggregate
from shardline.producer import Producer, ProducerConfig, RecordResult
from shardline.testing import Fault, InMemoryKinesis
from tests.support.fakes import FakeClock

THROTTLED = "ProvisionedThroughputExceededException"


def build(
    shard_count: int = 4, *, enforce_limits: bool = False, **config
) -> tuple[Producer, InMemoryKinesis]:
    clock = FakeClock()
    kinesis = InMemoryKinesis("events", shard_count, enforce_limits=enforce_limits, clock=clock)
    producer = Producer(kinesis, "events", config=ProducerConfig(**config), clock=clock, sleep=clock.sleep)
    return producer, kinesis


def records(count: int, keys: int) -> list[UserRecord]:
    return [UserRecord(f"key-{i % keys}", f"data-{i}".encode()) for i in range(count)]


def copy_of(kinesis: InMemoryKinesis, result: RecordResult) -> UserRecord:
    """The user record a success points at: its shard, its sequence number, its place in the aggregate."""
    assert result.shard_id is not None and result.sub_sequence_number is not None
    [stored] = [r for r in kinesis.records(result.shard_id) if r.sequence_number == result.sequence_number]
    return stored.user_records()[result.sub_sequence_number]


def test_every_record_lands_on_the_shard_its_hash_key_picks_and_its_result_points_at_it():
    producer, kinesis = build(shard_count=4)
    sent = records(400, keys=40)
    results = producer.put_many(sent)
    assert all(result.success and not result.unconfirmed for result in results)
    for record, result in zip(sent, results, strict=True):
        assert result.shard_id == kinesis.shard_of(hash_key(record))
        assert copy_of(kinesis, result)[:2] == (record.partition_key, record.data)
    landed = Counter(result.shard_id for result in results)
    assert set(landed) == set(kinesis.shard_ids()), "40 keys reach every one of 4 shards"
    assert sum(len(kinesis.user_records(shard)) for shard in kinesis.shard_ids()) == 400, "once each"
    assert kinesis.calls["ListShards"] == 1, "the shard map is listed once"


def test_records_of_one_shard_go_as_one_aggregate_in_one_request():
    producer, kinesis = build(shard_count=2)
    sent = records(300, keys=1)
    results = producer.put_many(sent)
    shard = kinesis.shard_of(hash_key(sent[0]))
    [stored] = kinesis.records(shard)
    assert stored.partition_key == "a" and stored.explicit_hash_key == str(hash_key(sent[0]))
    members, aggregate_id = decode_aggregate(stored.data)
    assert [m.data for m in members] == [r.data for r in sent] and aggregate_id is not None
    assert [r.sub_sequence_number for r in results] == list(range(300))
    assert {r.sequence_number for r in results} == {stored.sequence_number}
    assert kinesis.calls["PutRecords"] == 1 and len(kinesis.requests[0]) == 1


def test_without_aggregation_each_record_goes_alone_under_its_own_keys():
    producer, kinesis = build(shard_count=1, aggregation_enabled=False)
    sent = records(5, keys=5)
    producer.put_many(sent)
    stored = kinesis.records(kinesis.shard_ids()[0])
    assert [s.partition_key for s in stored] == [r.partition_key for r in sent]
    assert [s.user_records() for s in stored] == [[r] for r in sent], "one-record aggregates"


def test_sequence_numbers_increase_within_each_shard():
    producer, kinesis = build(shard_count=2, aggregation_enabled=False)
    producer.put_many(records(50, keys=10))
    for shard in kinesis.shard_ids():
        numbers = [int(r.sequence_number) for r in kinesis.records(shard)]
        assert numbers == sorted(numbers) and len(set(numbers)) == len(numbers) > 0


def test_a_throttled_request_is_retried_and_the_result_says_so():
    producer, kinesis = build(shard_count=1)
    kinesis.fail_next(Fault.THROTTLE, times=2)
    [result] = producer.put_many(records(1, keys=1))
    assert result.success and result.shard_id == kinesis.shard_ids()[0]
    assert [a.error_code for a in result.attempts] == [THROTTLED, THROTTLED, None]
    assert [a.success for a in result.attempts] == [False, False, True]
    assert kinesis.calls["PutRecords"] == 3 and len(kinesis.records(result.shard_id)) == 1


def test_a_throttle_fails_at_once_with_fail_if_throttled_and_nothing_lands():
    producer, kinesis = build(shard_count=1, fail_if_throttled=True)
    kinesis.fail_next(Fault.THROTTLE)
    results = producer.put_many(records(3, keys=3))
    assert all(not r.success and r.error_code == THROTTLED and not r.unconfirmed for r in results)
    assert kinesis.records(kinesis.shard_ids()[0]) == []


def test_a_shard_at_its_write_limit_refuses_records_and_the_producer_paces_to_it():
    producer, kinesis = build(shard_count=1, enforce_limits=True, aggregation_enabled=False)
    results = producer.put_many(records(2500, keys=50))
    assert all(r.success for r in results)
    stored = kinesis.records(kinesis.shard_ids()[0])
    assert len(stored) == 2500, "every record once: a refused record is not in the stream"
    throttled = sum(1 for r in results if any(a.error_code == THROTTLED for a in r.attempts))
    assert throttled > 0, "the producer's buckets allow 150 % of the limit: the shard refuses some"
    arrivals = [s.arrived for s in stored]
    assert all(arrivals[i + 1000] - arrivals[i] >= 1.0 for i in range(len(arrivals) - 1000)), (
        "never more than 1,000 records in one second"
    )


def test_a_reply_lost_after_the_write_landed_is_resent_identical_and_loses_nothing():
    producer, kinesis = build(shard_count=2)
    sent = records(60, keys=6)
    kinesis.fail_next(Fault.LOSE_REPLY)
    results = producer.put_many(sent)
    assert all(r.success and not r.unconfirmed for r in results)
    assert all(r.attempts[0].error_code == "Internal" and r.attempts[-1].success for r in results)
    for record, result in zip(sent, results, strict=True):
        assert copy_of(kinesis, result)[:2] == (record.partition_key, record.data)
    for shard in kinesis.shard_ids():
        stored = kinesis.records(shard)
        assert len(stored) == 2, "the lost copy and its resend"
        assert stored[0].data == stored[1].data, "the same aggregate: same id, same bytes"
        assert decode_aggregate(stored[0].data)[1] is not None


def test_a_reply_lost_every_time_fails_unconfirmed_within_the_ttl():
    producer, kinesis = build(shard_count=1, record_ttl=1.0)
    kinesis.fail_next(Fault.LOSE_REPLY, times=1000)
    [result] = producer.put_many(records(1, keys=1))
    assert not result.success and result.unconfirmed, "a copy may be in the stream"
    assert result.error_code == "Expired"
    assert len(kinesis.records(kinesis.shard_ids()[0])) >= 1, "and copies are"


def test_a_service_failure_is_resent_and_succeeds():
    producer, kinesis = build(shard_count=1)
    kinesis.fail_next(Fault.FAIL)
    [result] = producer.put_many(records(1, keys=1))
    assert result.success and result.attempts[0].error_code == "InternalFailure"
    assert len(kinesis.records(kinesis.shard_ids()[0])) == 1


def test_records_refused_per_record_are_released_and_go_again():
    producer, kinesis = build(shard_count=1)
    kinesis.fail_next(Fault.REFUSE)
    results = producer.put_many(records(4, keys=4))
    assert all(r.success and r.attempts[0].error_code == "InternalFailure" for r in results)
    assert len(kinesis.user_records(kinesis.shard_ids()[0])) == 4, "refused: never in the stream"


def test_after_a_split_records_land_in_the_child_that_holds_their_key():
    producer, kinesis = build(shard_count=1)
    producer.put_many(records(10, keys=10))
    [parent] = kinesis.shard_ids()
    low, high = kinesis.split_shard(parent, 2**127)
    sent = records(40, keys=20)
    results = producer.put_many(sent)
    assert all(r.success for r in results)
    for record, result in zip(sent, results, strict=True):
        assert result.shard_id == (low if hash_key(record) < 2**127 else high)
        assert copy_of(kinesis, result)[:2] == (record.partition_key, record.data)
    assert kinesis.calls["ListShards"] >= 2, "the wrong prediction refreshed the map"


def test_an_unknown_stream_fails_every_record_with_the_service_code():
    clock = FakeClock()
    kinesis = InMemoryKinesis("events", clock=clock)
    producer = Producer(kinesis, "other", clock=clock, sleep=clock.sleep)
    results = producer.put_many(records(2, keys=2))
    assert [r.error_code for r in results] == ["ResourceNotFoundException"] * 2
    assert not any(r.success or r.unconfirmed for r in results)
