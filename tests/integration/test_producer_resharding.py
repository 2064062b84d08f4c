"""A split and a merge between two puts of the same producer (whose shard map is then stale).

What must hold (on kinesis-mock; moto cannot reshard as Kinesis does, see the test):
- every record reported successful sits in a shard whose hash range holds its hash key;
- read back, each record is found exactly once in a shard that holds its hash key;
- the only copies outside their shard are the ones the producer saw land there and retried
  as `Wrong Shard` (an aggregate routed by its first record after a split carries the other
  child's records with it; the KPL retries those too, and consumers skip such copies);
- the producer's shard map converges to the stream's open shards.
"""

from __future__ import annotations

from collections import Counter

import pytest

from shardline.errors import WRONG_SHARD
from shardline.kinesis import hash_key
from shardline.producer import Producer, ProducerConfig
from tests.integration.helpers import (
    create_stream,
    kinesis_client,
    numbered_records,
    open_shards,
    position,
    read_stream,
    shard_ranges,
    unique_stream_name,
    wait_active,
)


def split_first_and_merge_last_two(client, name: str) -> None:
    shards = open_shards(client, name)
    first = shards[0]
    low, high = (int(first["HashKeyRange"][k]) for k in ("StartingHashKey", "EndingHashKey"))
    client.split_shard(
        StreamName=name, ShardToSplit=first["ShardId"], NewStartingHashKey=str((low + high) // 2)
    )
    wait_active(client, name)
    client.merge_shards(
        StreamName=name, ShardToMerge=shards[-2]["ShardId"], AdjacentShardToMerge=shards[-1]["ShardId"]
    )
    wait_active(client, name)


def run_with_reshard(client, name: str, **config) -> tuple[list, list, Producer]:
    """Put 6,000 records in three calls; split and merge between the first two."""
    create_stream(client, name, shard_count=4)
    records = numbered_records(6_000, 600)
    settings = ProducerConfig(retry_base_delay=0.001, retry_max_delay=0.01, **config)
    producer = Producer(client, name, config=settings)
    results = producer.put_many(records[:2_000])
    split_first_and_merge_last_two(client, name)
    results += producer.put_many(records[2_000:4_000])  # predicted with the pre-reshard map
    results += producer.put_many(records[4_000:])
    return records, results, producer


# moto cannot reshard the way Kinesis does: after SplitShard/MergeShards it keeps writing to the
# closed parents and re-puts their records into the children. Only kinesis-mock runs this case.
@pytest.mark.parametrize("kinesis_endpoint", ["kinesis-mock"], indirect=True)
def test_split_and_merge_mid_run(kinesis_endpoint):
    client = kinesis_client(kinesis_endpoint.endpoint_url)
    name = unique_stream_name("reshard")
    records, results, producer = run_with_reshard(client, name)

    ranges = shard_ranges(client, name)
    assert [r.error_code for r in results if not r.success] == []
    for record, result in zip(records, results, strict=True):
        low, high = ranges[result.shard_id]
        assert low <= hash_key(record) <= high
    assert set(producer.shard_map.open_shards()) == {s["ShardId"] for s in open_shards(client, name)}
    assert producer.shard_map.refresh_count >= 2

    ranges = shard_ranges(client, name)
    in_range: Counter[int] = Counter()
    out_of_range: Counter[int] = Counter()
    for shard_id, entries in read_stream(client, name).items():
        low, high = ranges[shard_id]
        for _, _, user in entries:
            (in_range if low <= hash_key(user) <= high else out_of_range)[position(user)] += 1
    assert in_range == Counter(range(len(records)))
    retried_wrong_shard = Counter(
        {
            index: sum(1 for attempt in result.attempts if attempt.error_code == WRONG_SHARD)
            for index, result in enumerate(results)
        }
    )
    assert +out_of_range == +retried_wrong_shard
    assert sum(out_of_range.values()) > 0, "the split made some aggregates straddle the two children"


@pytest.mark.parametrize("kinesis_endpoint", ["kinesis-mock"], indirect=True)
def test_without_wrong_shard_retries_every_record_is_in_the_stream_once(kinesis_endpoint):
    client = kinesis_client(kinesis_endpoint.endpoint_url)
    name = unique_stream_name("reshard-once")
    records, results, _ = run_with_reshard(client, name, retry_wrong_shard=False)

    assert all(result.success for result in results)
    assert not any(a.error_code == WRONG_SHARD for result in results for a in result.attempts)
    found = [(position(user), shard) for shard, es in read_stream(client, name).items() for _, _, user in es]
    assert Counter(n for n, _ in found) == Counter(range(len(records)))  # some out of range, none twice
    where = dict(found)
    assert all(result.shard_id == where[index] for index, result in enumerate(results))
    ranges = shard_ranges(client, name)
    outside = [n for n, shard in found if not ranges[shard][0] <= hash_key(records[n]) <= ranges[shard][1]]
    assert outside, "the split made some aggregates straddle the two children"
