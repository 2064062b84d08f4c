"""The producer: identity, not read-back — against real servers on loopback.

The producer's client talks to moto server (kinesis-mock for the reshard) through `LossyProxy`,
which loses replies after the write, loses requests before it, holds writes past the client's
read timeout, answers 503 or never answers. The test reads the stream itself, directly from the
server, and checks every result against the copy Kinesis holds at the result's sequence number.
"""

from __future__ import annotations

import time
from collections import defaultdict

import pytest

from shardline.errors import EXPIRED
from shardline.kinesis import UserRecord, hash_key
from shardline.producer import Producer, ProducerConfig
from tests.support.identity import (
    BROWNOUT,
    HANG,
    LOSE_AFTER,
    LOSE_BEFORE,
    Copy,
    LossyProxy,
    producer_client,
    read_copies,
    slow,
)
from tests.support.integration import (
    create_stream,
    kinesis_client,
    numbered_records,
    position,
    shard_ranges,
    unique_stream_name,
    wait_active,
)

FAST = ProducerConfig(retry_base_delay=0.01, retry_max_delay=0.05)
READS = ("GetRecords", "GetShardIterator", "SubscribeToShard")


@pytest.fixture
def moto_stream(moto_server):
    raw = kinesis_client(moto_server)
    name = unique_stream_name("identity")
    create_stream(raw, name, shard_count=2)
    with LossyProxy(moto_server) as proxy:
        yield raw, name, proxy


def assert_never_read(client, proxy: LossyProxy) -> None:
    """The producer asked for no read: counted on its client (botocore hooks) and at the server."""
    assert not any(client.operations[op] for op in READS), client.operations
    assert not any(proxy.calls[op] for op in READS), proxy.calls
    assert client.operations["PutRecords"] == proxy.calls["PutRecords"] > 0


def assert_each_success_is_kinesis_word(raw, name: str, records: list[UserRecord], results) -> list[Copy]:
    """Each success names the copy Kinesis holds at that sequence number: it de-aggregates to the
    record, at its sub-sequence number, in a shard whose range holds its hash key; and every copy
    of a record in the stream carries that same aggregate id."""
    copies = read_copies(raw, name)
    at = {(copy.shard_id, copy.sequence_number): copy for copy in copies}
    ids_of: dict[int, set[str | None]] = defaultdict(set)
    for copy in copies:
        for user in copy.records:
            ids_of[position(user)].add(copy.aggregate_id)
    ranges = shard_ranges(raw, name)
    for index, (record, result) in enumerate(zip(records, results, strict=True)):
        assert result.success, result
        copy = at[(result.shard_id, result.sequence_number)]
        assert copy.records[result.sub_sequence_number] == record
        assert copy.aggregate_id is not None and ids_of[index] == {copy.aggregate_id}
        low, high = ranges[result.shard_id]
        assert low <= hash_key(record) <= high
    return copies


def duplicated(copies: list[Copy]) -> dict[str, list[Copy]]:
    by_id: dict[str, list[Copy]] = defaultdict(list)
    for copy in copies:
        by_id[copy.aggregate_id].append(copy)  # type: ignore[index]
    return {key: found for key, found in by_id.items() if len(found) > 1}


@pytest.mark.parametrize(
    ("faults", "first_error", "copies_expected"),
    [
        ((LOSE_AFTER, LOSE_AFTER), "Internal", True),
        ((LOSE_BEFORE, LOSE_BEFORE), "Internal", False),
        ((slow(1.5),), "Internal", True),
        ((BROWNOUT, BROWNOUT, BROWNOUT), "ServiceUnavailable", False),
    ],
    ids=["lost-reply-after-the-write", "lost-request-before-the-write", "slow-write-past-the-timeout", "503"],
)
def test_1_only_kinesis_word_is_a_success(moto_stream, faults, first_error, copies_expected):
    raw, name, proxy = moto_stream
    client = producer_client(proxy.url, read_timeout=0.5)
    producer = Producer(client, name, config=FAST)
    records = numbered_records(300, 30)
    proxy.script(*faults)

    results = producer.put_many(records, deadline=20)
    proxy.wait_idle()  # a slow write lands after the client gave up on it

    assert proxy.applied.total() == len(faults)
    copies = assert_each_success_is_kinesis_word(raw, name, records, results)
    retried = [result for result in results if len(result.attempts) > 1]
    assert retried and all(result.attempts[0].error_code == first_error for result in retried)
    assert all(result.attempts[-1].success and not result.unconfirmed for result in results)
    assert_never_read(client, proxy)
    doubles = duplicated(copies)
    if copies_expected:  # Kinesis holds two copies of an aggregate: identical, one id
        assert doubles and all(len({copy.data for copy in found}) == 1 for found in doubles.values())
    else:
        assert not doubles
    metrics = producer.metrics.snapshot()
    assert metrics["AggregatesSealed"] >= 1 and metrics["SealedAggregatesResent"] >= 1
    assert metrics["UserRecordsNotLanded"] == 0


def test_2_a_lost_reply_is_retried_as_the_identical_aggregate_within_the_deadline(moto_server):
    raw = kinesis_client(moto_server)
    name = unique_stream_name("identity-lost")
    create_stream(raw, name, shard_count=1)
    with LossyProxy(moto_server) as proxy:
        client = producer_client(proxy.url)
        producer = Producer(client, name, config=FAST)
        records = numbered_records(50, 5)  # one aggregate
        proxy.script(LOSE_AFTER)

        started = time.monotonic()
        results = producer.put_many(records, deadline=5)
        elapsed = time.monotonic() - started

        assert_never_read(client, proxy)
    assert elapsed < 5
    first, second = read_copies(raw, name)  # two copies: the lost reply's, and the resend's
    assert first.data == second.data and first.aggregate_id == second.aggregate_id is not None
    assert first.records == second.records == records
    for index, result in enumerate(results):
        assert result.success and (result.shard_id, result.sequence_number) == (
            second.shard_id,
            second.sequence_number,
        )
        assert result.sub_sequence_number == index
        assert [attempt.error_code for attempt in result.attempts] == ["Internal", None]
        assert "closed" in result.attempts[0].error_message.lower()
    metrics = producer.metrics.snapshot()
    assert (metrics["AggregatesSealed"], metrics["SealedAggregatesResent"], metrics["RequestsSent"]) == (
        1,
        1,
        2,
    )


def test_3_a_reshard_between_a_lost_copy_and_its_resend_reroutes_each_member_to_its_shard(kinesis_mock):
    raw = kinesis_client(kinesis_mock)
    name = unique_stream_name("identity-reshard")
    create_stream(raw, name, shard_count=1)
    [parent] = raw.list_shards(StreamName=name)["Shards"]
    with LossyProxy(kinesis_mock) as proxy:
        client = producer_client(proxy.url, read_timeout=5)
        producer = Producer(client, name, config=FAST)
        assert producer.put_many([UserRecord("warm-up", b"99999999|")])[0].success  # the map: one shard
        records = numbered_records(40, 40)  # keys over the whole hash range: one aggregate, both halves
        split = []

        def split_the_parent() -> None:  # after the copy landed in the parent, before its reply is lost
            if not split:
                split.append(1)
                raw.split_shard(
                    StreamName=name, ShardToSplit=parent["ShardId"], NewStartingHashKey=str(2**127)
                )
                wait_active(raw, name)

        proxy.after_forward = split_the_parent
        proxy.script(LOSE_AFTER)

        results = producer.put_many(records, deadline=20)

        proxy.after_forward = None
        assert_never_read(client, proxy)
    copies = assert_each_success_is_kinesis_word(raw, name, records, results)
    assert {result.shard_id for result in results} == set(shard_ranges(raw, name)) - {parent["ShardId"]}
    [(_, found)] = duplicated(copies).items()
    assert next(copy.shard_id for copy in found) == parent["ShardId"], "the lost copy landed in the parent"
    assert len(found) == 3 and len({copy.shard_id for copy in found}) == 3, "then each child once"
    assert len({copy.data for copy in found}) == 1, "re-routed, not split: the same bytes"
    metrics = producer.metrics.snapshot()
    assert metrics["AggregatesSealed"] == 1 and metrics["AggregatesRerouted"] == 1


@pytest.mark.parametrize("fault", [HANG, slow(4.0)], ids=["never-answers", "answers-after-the-timeout"])
def test_put_many_returns_by_its_deadline_plus_one_request_in_flight(moto_stream, fault):
    _raw, name, proxy = moto_stream
    client = producer_client(proxy.url, read_timeout=2)
    producer = Producer(client, name, config=FAST)
    proxy.script(*[fault] * 100)

    started = time.monotonic()
    results = producer.put_many(numbered_records(200, 20), deadline=5)
    elapsed = time.monotonic() - started

    assert 5 <= elapsed <= 5 + 2 + 1, f"{elapsed:.1f} s: the deadline, plus one read timeout (and slack)"
    assert proxy.calls["PutRecords"] >= 3, "resent within the deadline (each try a 2 s timeout)"
    for result in results:  # given up, and a copy may be in the stream: never a 'maybe' success
        assert not result.success and result.error_code == EXPIRED and result.unconfirmed
        assert result.attempts[0].error_code == "Internal"
    assert producer.metrics.snapshot()["UserRecordsNotLanded"] == 200
    assert_never_read(client, proxy)
