"""Injected faults against real servers: each outcome follows the retrier's table, with history.

`FaultyKinesis` (local/chaos/faults.py) wraps a loopback client: the entries it fails never reach the
server, everything else really lands, and the tests read the stream back to prove it.
"""

from __future__ import annotations

import random
from collections import Counter

import pytest

from local.chaos.faults import THROTTLED, FaultyKinesis
from shardline.errors import COUNT_MISMATCH, EXPIRED
from shardline.kinesis import UserRecord
from shardline.producer import Producer, ProducerConfig
from tests.support.identity import read_copies
from tests.support.integration import (
    create_stream,
    kinesis_client,
    numbered_records,
    position,
    read_stream,
    unique_stream_name,
)

FAST_RETRIES = ProducerConfig(retry_base_delay=0.001, retry_max_delay=0.01)


@pytest.fixture
def faulty(kinesis_endpoint):
    """A fault-injecting client over a fresh 2-shard stream; yields (client, stream name)."""
    client = kinesis_client(kinesis_endpoint.endpoint_url)
    name = unique_stream_name("faults")
    create_stream(client, name, shard_count=2)
    yield FaultyKinesis(client, rng=random.Random(2024)), name
    client.delete_stream(StreamName=name, EnforceConsumerDeletion=True)


def landed_positions(client: FaultyKinesis, name: str) -> Counter[int]:
    return Counter(position(user) for entries in read_stream(client, name).values() for _, _, user in entries)


def codes(result) -> list[str | None]:
    return [attempt.error_code for attempt in result.attempts]


def test_throttled_records_are_retried_until_they_land_once(faulty):
    client, name = faulty
    client.throttle_fraction = 0.3
    # Aggregation off: each user record is its own Kinesis record, so 30% of records are throttled.
    config = ProducerConfig(aggregation_enabled=False, retry_base_delay=0.001, retry_max_delay=0.01)
    records = numbered_records(600, 60)

    results = Producer(client, name, config=config).put_many(records)

    assert all(result.success for result in results)
    throttled_attempts = sum(codes(result).count(THROTTLED) for result in results)
    assert throttled_attempts == client.injected[THROTTLED] > 100
    for result in results:
        *failures, last = result.attempts
        assert last.success and all(a.error_code == THROTTLED for a in failures)
        for before, after in zip(result.attempts, result.attempts[1:], strict=False):
            assert after.started >= before.started + before.duration, "each retry starts after the last ended"
    assert landed_positions(client, name) == Counter(range(len(records)))


def test_fail_if_throttled_fails_throttled_records_at_once(faulty):
    client, name = faulty
    client.throttle_fraction = 0.3
    config = ProducerConfig(aggregation_enabled=False, fail_if_throttled=True)
    records = numbered_records(300, 30)

    results = Producer(client, name, config=config).put_many(records)

    failed = [i for i, result in enumerate(results) if not result.success]
    assert len(failed) == client.injected[THROTTLED] > 0
    for i in failed:
        assert results[i].error_code == THROTTLED and codes(results[i]) == [THROTTLED]
    assert landed_positions(client, name) == Counter(i for i in range(len(records)) if i not in set(failed))


def test_request_errors_are_retried_with_every_attempt_recorded(faulty):
    client, name = faulty
    client.fail_requests("InternalFailure", times=2)
    records = numbered_records(50, 50)

    results = Producer(client, name, config=FAST_RETRIES).put_many(records)

    # Each record waits its own jittered backoff, so the second failing request holds only some.
    assert client.injected["PutRecords:InternalFailure"] == 2
    for result in results:
        *failures, last = codes(result)
        assert result.success and last is None and failures in (["InternalFailure"], ["InternalFailure"] * 2)
    assert landed_positions(client, name) == Counter(range(50))


def test_request_level_throttle_with_fail_if_throttled_fails_every_record(faulty):
    client, name = faulty
    client.fail_requests(THROTTLED)
    config = ProducerConfig(fail_if_throttled=True)

    results = Producer(client, name, config=config).put_many(numbered_records(40, 10))

    assert all(not r.success and r.error_code == THROTTLED and len(r.attempts) == 1 for r in results)
    assert landed_positions(client, name) == Counter()


def test_permanent_request_error_fails_at_once(faulty):
    client, name = faulty
    client.fail_requests("AccessDeniedException")

    results = Producer(client, name, config=FAST_RETRIES).put_many(numbered_records(40, 10))

    assert all(codes(r) == ["AccessDeniedException"] and not r.success for r in results)


def test_record_count_mismatch_resends_every_aggregate_of_the_request_identical(faulty):
    client, name = faulty
    client.mismatch_counts(1)  # every entry landed; the answer lost one: where they are is unknown

    results = Producer(client, name, config=FAST_RETRIES).put_many(numbered_records(40, 10))

    assert all(r.success and codes(r) == [COUNT_MISMATCH, None] for r in results)
    assert client.injected[COUNT_MISMATCH] == 1
    copies = read_copies(client, name)
    assert len(copies) == 2 * len({copy.aggregate_id for copy in copies}), "each aggregate twice, one id"
    assert landed_positions(client, name) == Counter({i: 2 for i in range(40)})


def test_denied_list_shards_sends_records_one_by_one_with_their_own_keys(faulty):
    client, name = faulty
    client.list_shards_error = "AccessDeniedException"
    records = numbered_records(200, 20)
    producer = Producer(client, name, config=FAST_RETRIES)

    results = producer.put_many(records)

    assert all(result.success and result.sub_sequence_number == 0 for result in results)
    assert not producer.shard_map.ready and "AccessDenied" in producer.shard_map.last_error
    assert client.injected["ListShards:AccessDeniedException"] == 1, "no retry before the backoff passed"
    client.list_shards_error = None  # the test reads the stream back
    copies = read_copies(client, name)  # one-record aggregates, with the records' own keys
    assert all(len(copy.records) == 1 and copy.aggregate_id for copy in copies)
    assert sorted((copy.records[0] for copy in copies), key=position) == records


def test_records_expire_when_their_ttl_passes_in_a_throttle_storm(faulty):
    client, name = faulty
    client.throttle_fraction = 1.0
    config = ProducerConfig(record_ttl=0.2, retry_base_delay=0.01, retry_max_delay=0.05)
    producer = Producer(client, name, config=config)

    results = producer.put_many(numbered_records(20, 5))

    for result in results:
        assert not result.success and result.error_code == EXPIRED
        assert codes(result)[-1] == EXPIRED and set(codes(result)[:-1]) == {THROTTLED}
    assert producer.metrics.snapshot()["UserRecordExpired"] == 20
    assert landed_positions(client, name) == Counter()


def test_unsent_records_expire_at_the_flush_deadline(faulty):
    client, name = faulty
    producer = Producer(client, name)

    results = producer.put_many([UserRecord("k", b"x")] * 5, deadline=0.0)

    assert all(codes(r) == [EXPIRED] and "deadline" in r.error_message for r in results)
    assert producer.metrics.snapshot()["RequestsSent"] == 0
    assert landed_positions(client, name) == Counter()
