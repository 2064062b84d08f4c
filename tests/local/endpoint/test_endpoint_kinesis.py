"""Issue 11: the local endpoint's Kinesis, made right where moto 5.2.5 is wrong.

Each test talks to a real endpoint (`python -m local.endpoint`) started by a fixture as a child
process on a free port; each fails on moto's own Kinesis.
"""

from __future__ import annotations

import time

import pytest
from botocore.exceptions import ClientError

from tests.support.endpoint import TOP, data_of, new_stream, read_shard, shard_ids
from tests.support.integration import wait_active

pytestmark = pytest.mark.integration


def test_writes_after_a_split_go_to_the_open_children_only(local_endpoint):
    client, name = new_stream(local_endpoint)
    (parent,) = shard_ids(client, name)
    client.put_record(StreamName=name, Data=b"before", PartitionKey="p")
    client.split_shard(StreamName=name, ShardToSplit=parent, NewStartingHashKey=str(2**127))
    wait_active(client, name)  # a reshard takes effect once ACTIVE again
    low, high = shard_ids(client, name, ShardFilter={"Type": "AT_LATEST"})

    keys = ["0", str(2**127 - 1), str(2**127), str(TOP)]
    entries = [{"Data": key.encode(), "PartitionKey": "p", "ExplicitHashKey": key} for key in keys]
    answer = client.put_records(StreamName=name, Records=entries)
    single = client.put_record(StreamName=name, Data=b"single", PartitionKey="p", ExplicitHashKey=str(TOP))

    assert [entry["ShardId"] for entry in answer["Records"]] == [low, low, high, high]
    assert single["ShardId"] == high
    assert data_of(client, name, parent) == [b"before"], "the parent keeps its records and takes no more"
    assert data_of(client, name, low) == [b"0", str(2**127 - 1).encode()]
    assert data_of(client, name, high) == [str(2**127).encode(), str(TOP).encode(), b"single"]


def test_writes_after_a_merge_go_to_the_merged_child_only(local_endpoint):
    client, name = new_stream(local_endpoint, shards=2)
    first, second = shard_ids(client, name)
    client.put_records(
        StreamName=name,
        Records=[{"Data": b"a", "PartitionKey": "p", "ExplicitHashKey": key} for key in ("0", str(TOP))],
    )
    # The adjacent shard named first: moto only accepts the lower one as ShardToMerge.
    client.merge_shards(StreamName=name, ShardToMerge=second, AdjacentShardToMerge=first)
    wait_active(client, name)  # a reshard takes effect once ACTIVE again
    (child,) = shard_ids(client, name, ShardFilter={"Type": "AT_LATEST"})

    answer = client.put_records(
        StreamName=name,
        Records=[{"Data": b"b", "PartitionKey": "p", "ExplicitHashKey": key} for key in ("0", str(TOP))],
    )

    assert [entry["ShardId"] for entry in answer["Records"]] == [child, child]
    assert data_of(client, name, first) == [b"a"] and data_of(client, name, second) == [b"a"]
    assert data_of(client, name, child) == [b"b", b"b"]
    merged = client.list_shards(StreamName=name, ShardFilter={"Type": "AT_LATEST"})["Shards"][0]
    assert merged["HashKeyRange"] == {"StartingHashKey": "0", "EndingHashKey": str(TOP)}
    assert (merged["ParentShardId"], merged["AdjacentParentShardId"]) == (second, first)


def test_a_closed_parent_read_to_its_end_ends_with_child_shards(local_endpoint):
    client, name = new_stream(local_endpoint)
    (parent,) = shard_ids(client, name)
    client.put_records(
        StreamName=name, Records=[{"Data": b"1", "PartitionKey": "a"}, {"Data": b"2", "PartitionKey": "b"}]
    )
    client.split_shard(StreamName=name, ShardToSplit=parent, NewStartingHashKey=str(2**127))
    wait_active(client, name)  # a reshard takes effect once ACTIVE again
    low, high = shard_ids(client, name, ShardFilter={"Type": "AT_LATEST"})

    iterator = client.get_shard_iterator(StreamName=name, ShardId=parent, ShardIteratorType="TRIM_HORIZON")
    first = client.get_records(ShardIterator=iterator["ShardIterator"], Limit=1)
    assert [r["Data"] for r in first["Records"]] == [b"1"]
    assert "ChildShards" not in first and first["NextShardIterator"]
    last = client.get_records(ShardIterator=first["NextShardIterator"], Limit=1)

    assert [r["Data"] for r in last["Records"]] == [b"2"]
    assert "NextShardIterator" not in last

    def child(shard_id: str, low_key: int, high_key: int) -> dict:
        keys = {"StartingHashKey": str(low_key), "EndingHashKey": str(high_key)}
        return {"ShardId": shard_id, "ParentShards": [parent], "HashKeyRange": keys}

    assert last["ChildShards"] == [child(low, 0, 2**127 - 1), child(high, 2**127, TOP)]
    closed = client.list_shards(StreamName=name)["Shards"][0]["SequenceNumberRange"]
    assert closed["EndingSequenceNumber"] == last["Records"][0]["SequenceNumber"]


def test_sequence_numbers_are_kinesis_shaped_and_increase_per_shard(local_endpoint):
    client, name = new_stream(local_endpoint)
    (shard,) = shard_ids(client, name)
    numbers = [
        client.put_record(StreamName=name, Data=b"%d" % i, PartitionKey="k")["SequenceNumber"]
        for i in range(5)
    ]
    batch = client.put_records(
        StreamName=name, Records=[{"Data": b"%d" % i, "PartitionKey": str(i)} for i in range(5, 20)]
    )
    numbers += [entry["SequenceNumber"] for entry in batch["Records"]]  # fmt: skip

    assert all(number.isdecimal() and len(number) == 56 for number in numbers), numbers[:2]
    as_ints = [int(number) for number in numbers]
    assert as_ints == sorted(as_ints) and len(set(as_ints)) == 20, "strictly increasing"
    starting = client.list_shards(StreamName=name)["Shards"][0]["SequenceNumberRange"][
        "StartingSequenceNumber"
    ]
    assert int(starting) <= as_ints[0]

    at = read_shard(
        client, name, shard, ShardIteratorType="AT_SEQUENCE_NUMBER", StartingSequenceNumber=numbers[4]
    )
    after = read_shard(
        client, name, shard, ShardIteratorType="AFTER_SEQUENCE_NUMBER", StartingSequenceNumber=numbers[4]
    )
    assert [r["SequenceNumber"] for r in at[0]] == numbers[4:]
    assert [r["SequenceNumber"] for r in after[0]] == numbers[5:]


def test_list_shards_honours_shard_filter(local_endpoint):
    client, name = new_stream(local_endpoint)
    client.split_shard(StreamName=name, ShardToSplit="shardId-000000000000", NewStartingHashKey=str(2**127))
    wait_active(client, name)  # a reshard takes effect once ACTIVE again
    time.sleep(0.3)
    between = time.time()
    time.sleep(0.3)
    client.merge_shards(
        StreamName=name, ShardToMerge="shardId-000000000001", AdjacentShardToMerge="shardId-000000000002"
    )
    wait_active(client, name)  # a reshard takes effect once ACTIVE again
    ids = [f"shardId-00000000000{i}" for i in range(4)]

    assert shard_ids(client, name) == ids
    assert shard_ids(client, name, ShardFilter={"Type": "AT_LATEST"}) == ids[3:]
    assert shard_ids(client, name, ShardFilter={"Type": "AT_TRIM_HORIZON"}) == ids[:1]
    assert shard_ids(client, name, ShardFilter={"Type": "FROM_TRIM_HORIZON"}) == ids
    assert shard_ids(client, name, ShardFilter={"Type": "AFTER_SHARD_ID", "ShardId": ids[1]}) == ids[2:]
    assert shard_ids(client, name, ExclusiveStartShardId=ids[0]) == ids[1:]
    assert shard_ids(client, name, ShardFilter={"Type": "AT_TIMESTAMP", "Timestamp": between}) == ids[1:3]
    assert shard_ids(client, name, ShardFilter={"Type": "FROM_TIMESTAMP", "Timestamp": between}) == ids[1:]

    page = client.list_shards(StreamName=name, ShardFilter={"Type": "FROM_TRIM_HORIZON"}, MaxResults=3)
    assert [s["ShardId"] for s in page["Shards"]] == ids[:3]
    rest = client.list_shards(NextToken=page["NextToken"])
    assert [s["ShardId"] for s in rest["Shards"]] == ids[3:] and "NextToken" not in rest
    with pytest.raises(ClientError) as refused:
        client.list_shards(StreamName=name, NextToken=page["NextToken"])
    assert refused.value.response["Error"]["Code"] == "InvalidArgumentException"


def test_describe_stream_summary_counts_the_open_shards_after_resharding(local_endpoint):
    client, name = new_stream(local_endpoint)
    client.split_shard(StreamName=name, ShardToSplit="shardId-000000000000", NewStartingHashKey=str(2**127))
    wait_active(client, name)  # a reshard takes effect once ACTIVE again
    summary = client.describe_stream_summary(StreamName=name)["StreamDescriptionSummary"]
    assert (summary["StreamStatus"], summary["OpenShardCount"]) == ("ACTIVE", 2)


def test_a_stream_named_by_arn_can_be_read(local_endpoint):
    client, name = new_stream(local_endpoint)
    arn = client.describe_stream_summary(StreamName=name)["StreamDescriptionSummary"]["StreamARN"]
    client.put_record(StreamARN=arn, Data=b"by arn", PartitionKey="p")
    request = {"StreamARN": arn, "ShardId": "shardId-000000000000", "ShardIteratorType": "TRIM_HORIZON"}
    iterator = client.get_shard_iterator(**request)["ShardIterator"]
    assert [r["Data"] for r in client.get_records(ShardIterator=iterator, StreamARN=arn)["Records"]] == [
        b"by arn"
    ]


def test_partition_keys_are_measured_in_utf16_units(local_endpoint):
    client, name = new_stream(local_endpoint)
    longest, too_long = "😀" * 128, "😀" * 129  # 256 and 258 UTF-16 units; 128 and 129 characters
    assert (
        client.put_records(StreamName=name, Records=[{"Data": b"x", "PartitionKey": longest}])[
            "FailedRecordCount"
        ]
        == 0
    )
    with pytest.raises(ClientError) as refused:
        client.put_records(
            StreamName=name,
            Records=[{"Data": b"y", "PartitionKey": "ok"}, {"Data": b"x", "PartitionKey": too_long}],
        )
    assert refused.value.response["Error"]["Code"] == "InvalidArgumentException"
    assert data_of(client, name, "shardId-000000000000") == [b"x"], "the whole request was refused"


def test_get_records_honours_limit_and_refuses_more_than_10000(local_endpoint):
    client, name = new_stream(local_endpoint)
    client.put_records(StreamName=name, Records=[{"Data": b"x", "PartitionKey": str(i)} for i in range(7)])
    iterator = client.get_shard_iterator(
        StreamName=name, ShardId="shardId-000000000000", ShardIteratorType="TRIM_HORIZON"
    )
    answer = client.get_records(ShardIterator=iterator["ShardIterator"], Limit=3)
    assert len(answer["Records"]) == 3 and answer["MillisBehindLatest"] >= 0
    with pytest.raises(ClientError) as refused:
        client.get_records(ShardIterator=iterator["ShardIterator"], Limit=10_001)
    assert refused.value.response["Error"]["Code"] == "InvalidArgumentException"
