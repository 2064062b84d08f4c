"""Per-shard pacing and the partitioning strategies, on moto server.

Time is a fake clock that only `sleep` moves, so pacing is checked exactly, not by timing.
"""

from __future__ import annotations

import random
from collections import Counter

import pytest

from shardline.kinesis import UserRecord, hash_key
from shardline.producer import ByExplicitHashKey, Producer, ProducerConfig, RandomShard, RoundRobin
from tests.support.fakes import FakeClock
from tests.support.integration import (
    create_stream,
    kinesis_client,
    read_stream,
    shard_ranges,
    unique_stream_name,
)


class SendLog:
    """Wraps the client to note, per PutRecords entry, the fake time and its shard."""

    def __init__(self, client, clock: FakeClock) -> None:
        self._client = client
        self._clock = clock
        self.sent: list[tuple[float, str]] = []

    def __getattr__(self, name):
        return getattr(self._client, name)

    def put_records(self, **kwargs):
        response = self._client.put_records(**kwargs)
        self.sent += [(self._clock.now, entry["ShardId"]) for entry in response["Records"]]
        return response


@pytest.fixture
def moto_stream(moto_server):
    client = kinesis_client(moto_server)
    name = unique_stream_name("pacing")
    create_stream(client, name, shard_count=4)
    return client, name


def test_one_hot_shard_is_paced_to_its_write_limit(moto_stream):
    client, name = moto_stream
    clock = FakeClock()
    log = SendLog(client, clock)
    # Aggregation off and one key: 3,000 Kinesis records for one shard at 100% of 1,000 records/s.
    config = ProducerConfig(aggregation_enabled=False, rate_limit=100.0)
    producer = Producer(log, name, config=config, clock=clock, sleep=clock.sleep)

    results = producer.put_many([UserRecord("hot", b"x" * 10)] * 3_000)

    assert all(result.success for result in results)
    assert clock.now >= 2.0, "a full bucket of 1,000, then 1,000 per second"
    per_second = Counter(int(at) for at, _ in log.sent)
    assert max(per_second.values()) <= 2_000, "never more than one bucket plus one second of refill"
    assert len({shard for _, shard in log.sent}) == 1


def test_records_of_unknown_shard_bypass_the_limiter(moto_stream):
    client, name = moto_stream
    clock = FakeClock()
    client_without_list_shards = SendLog(client, clock)
    producer = Producer(
        client_without_list_shards,
        name,
        config=ProducerConfig(rate_limit=100.0),
        clock=clock,
        sleep=clock.sleep,
    )
    producer.shard_map._list_shards = _denied  # no map: every record goes on its own, unpaced

    results = producer.put_many([UserRecord("hot", b"x")] * 1_500)

    assert all(r.success for r in results) and clock.now == 0.0


def _denied(**_kwargs):
    raise PermissionError("kinesis:ListShards not allowed")


@pytest.mark.parametrize(
    "partitioner", [RoundRobin(), RandomShard(random.Random(3))], ids=["round-robin", "random"]
)
def test_keyless_strategies_spread_one_key_over_every_shard(moto_stream, partitioner):
    client, name = moto_stream
    records = [UserRecord("same-key", f"{i}".encode()) for i in range(400)]

    results = Producer(client, name, partitioner=partitioner).put_many(records)

    per_shard = Counter(result.shard_id for result in results)
    assert len(per_shard) == 4
    if isinstance(partitioner, RoundRobin):
        assert set(per_shard.values()) == {100}
    ranges = shard_ranges(client, name)
    for shard_id, entries in read_stream(client, name).items():
        low, high = ranges[shard_id]
        assert all(low <= hash_key(user) <= high for _, _, user in entries)


def test_explicit_hash_key_strategy_derives_the_hash_from_the_record(moto_stream):
    client, name = moto_stream
    near_top = 2**128 - 1000  # moto answers 500 for the very last hash key, 2**128-1
    partitioner = ByExplicitHashKey(lambda record: near_top if record.data.startswith(b"high") else 0)
    records = [UserRecord("k", b"high-1"), UserRecord("k", b"low-1"), UserRecord("k", b"high-2")]

    results = Producer(client, name, partitioner=partitioner).put_many(records)

    ranges = shard_ranges(client, name)
    top_shard = next(s for s, (low, high) in ranges.items() if low <= near_top <= high)
    bottom_shard = next(s for s, (low, _) in ranges.items() if low == 0)
    assert [r.shard_id for r in results] == [top_shard, bottom_shard, top_shard]


def test_a_failing_strategy_fails_only_the_records_it_failed_on(moto_stream):
    client, name = moto_stream

    def from_data(record: UserRecord) -> int:
        return int(record.data)  # b"oops" raises ValueError

    records = [UserRecord("k", b"5"), UserRecord("k", b"oops"), UserRecord("k", b"7")]
    results = Producer(client, name, partitioner=ByExplicitHashKey(from_data)).put_many(records)

    assert [r.success for r in results] == [True, False, True]
    assert results[1].error_code == "PartitionerError" and "ValueError" in results[1].error_message
