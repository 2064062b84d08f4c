"""The producer lands every record, aggregated per shard, in the shard its hash key maps to.

Runs against moto server and kinesis-mock on loopback: 10,000 records with 1,000 keys into a
4-shard stream, read back with GetRecords and decoded.
"""

from __future__ import annotations

from collections import Counter, defaultdict

import pytest

from shardline.kinesis import hash_key
from shardline.producer import Producer
from tests.support.integration import (
    create_stream,
    kinesis_client,
    numbered_records,
    position,
    read_stream,
    shard_ranges,
    unique_stream_name,
)

RECORDS = 10_000
KEYS = 1_000


@pytest.fixture
def stream(kinesis_endpoint):
    client = kinesis_client(kinesis_endpoint.endpoint_url)
    name = unique_stream_name("roundtrip")
    create_stream(client, name, shard_count=4)
    yield client, name
    client.delete_stream(StreamName=name, EnforceConsumerDeletion=True)


def test_every_record_lands_once_in_its_shard_in_key_order(stream):
    client, name = stream
    records = numbered_records(RECORDS, KEYS)
    producer = Producer(client, name)

    results = producer.put_many(records)

    assert [r.error_code for r in results if not r.success] == []
    ranges = shard_ranges(client, name)
    landed = read_stream(client, name)
    seen: Counter[int] = Counter()
    for shard_id, entries in landed.items():
        low, high = ranges[shard_id]
        last_position_of_key: dict[str, int] = {}
        for _, _, user in entries:
            assert low <= hash_key(user) <= high, (
                f"{user.partition_key} landed in {shard_id} outside its range"
            )
            seen[position(user)] += 1
            previous = last_position_of_key.get(user.partition_key, -1)
            assert position(user) > previous, f"key {user.partition_key} out of order in {shard_id}"
            last_position_of_key[user.partition_key] = position(user)
    assert seen == Counter(range(RECORDS)), "every record exactly once"

    # The results say where each record is, and aggregation really happened.
    where = {
        (shard_id, sequence, sub): position(user)
        for shard_id, entries in landed.items()
        for sequence, sub, user in entries
    }
    for index, result in enumerate(results):
        assert where[(result.shard_id, result.sequence_number, result.sub_sequence_number)] == index
        assert len(result.attempts) == 1 and result.attempts[0].success
    metrics = producer.metrics.snapshot()
    assert metrics["UserRecordsPut"] == RECORDS
    assert metrics["KinesisRecordsPut"] < RECORDS / 100, "100-byte records pack hundreds per aggregate"
    assert metrics["UserRecordsPerKinesisRecord"]["sum"] == RECORDS


def test_aggregates_never_mix_shards(stream):
    """Every aggregate's members share one shard: the one its explicit hash key routes to."""
    client, name = stream
    Producer(client, name).put_many(numbered_records(2_000, 500))
    ranges = shard_ranges(client, name)
    by_aggregate: dict[tuple[str, str], set[str]] = defaultdict(set)
    for shard_id, entries in read_stream(client, name).items():
        for sequence, sub, user in entries:
            if sub is not None:
                h = hash_key(user)
                by_aggregate[(shard_id, sequence)].add(
                    next(s for s, (lo, hi) in ranges.items() if lo <= h <= hi)
                )
    assert by_aggregate, "records were aggregated"
    assert all(len(shards) == 1 for shards in by_aggregate.values())
