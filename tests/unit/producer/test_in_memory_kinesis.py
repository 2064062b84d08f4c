"""`InMemoryKinesis` itself, where a producer relies on it: ListShards paging and filtering over
hash-key ranges a `ShardMap` predicts from, per-record answers, and botocore's errors."""

from __future__ import annotations

import pytest
from botocore.exceptions import ClientError, ParamValidationError, ReadTimeoutError

from shardline.kinesis import MAX_HASH_KEY, ShardMap, UserRecord, hash_key
from shardline.kpl import encode
from shardline.testing import Fault, InMemoryKinesis


def put(kinesis: InMemoryKinesis, *entries: dict) -> dict:
    return kinesis.put_records(StreamName="events", Records=list(entries))


def test_shards_split_the_hash_key_space_and_a_shard_map_predicts_where_records_land():
    kinesis = InMemoryKinesis("events", shard_count=3)
    shard_map = ShardMap(kinesis.list_shards, stream_name="events")
    assert shard_map.refresh()
    for key in (0, 1, MAX_HASH_KEY // 3, MAX_HASH_KEY // 2, MAX_HASH_KEY):
        assert shard_map.predict(key) == kinesis.shard_of(key)
    [answer] = put(kinesis, {"Data": b"x", "PartitionKey": "p"})["Records"]
    assert answer["ShardId"] == shard_map.predict(hash_key(UserRecord("p", b"")))


def test_list_shards_pages_and_at_latest_drops_closed_shards():
    kinesis = InMemoryKinesis("events", shard_count=2)
    kinesis.split_shard("shardId-000000000000", 2**126)
    first = kinesis.list_shards(StreamName="events", MaxResults=3)
    assert [s["ShardId"] for s in first["Shards"]] == [f"shardId-00000000000{i}" for i in range(3)]
    rest = kinesis.list_shards(NextToken=first["NextToken"])
    assert [s["ShardId"] for s in rest["Shards"]] == ["shardId-000000000003"] and "NextToken" not in rest
    assert "EndingSequenceNumber" in first["Shards"][0]["SequenceNumberRange"]
    assert rest["Shards"][0]["ParentShardId"] == "shardId-000000000000"
    latest = kinesis.list_shards(StreamName="events", ShardFilter={"Type": "AT_LATEST"})["Shards"]
    assert [s["ShardId"] for s in latest] == kinesis.shard_ids(open_only=True)
    with pytest.raises(ClientError, match="InvalidArgumentException"):
        kinesis.list_shards(StreamName="events", NextToken=first["NextToken"])


def test_put_records_answers_per_record_and_counts_failures():
    kinesis = InMemoryKinesis("events", shard_count=1)
    ok = put(kinesis, {"Data": b"a", "PartitionKey": "p"}, {"Data": b"b", "PartitionKey": "q"})
    assert ok["FailedRecordCount"] == 0
    assert [r["ShardId"] for r in ok["Records"]] == ["shardId-000000000000"] * 2
    assert int(ok["Records"][0]["SequenceNumber"]) < int(ok["Records"][1]["SequenceNumber"])
    kinesis.fail_next(Fault.THROTTLE)
    refused = put(kinesis, {"Data": b"c", "PartitionKey": "p"})
    assert refused["FailedRecordCount"] == 1
    assert refused["Records"][0]["ErrorCode"] == "ProvisionedThroughputExceededException"
    assert [s.data for s in kinesis.records("shardId-000000000000")] == [b"a", b"b"]


def test_faults_fail_before_the_write_or_lose_the_reply_after_it():
    kinesis = InMemoryKinesis("events")
    kinesis.fail_next(Fault.FAIL)
    with pytest.raises(ClientError) as failed:
        put(kinesis, {"Data": b"a", "PartitionKey": "p"})
    assert failed.value.response["ResponseMetadata"]["HTTPStatusCode"] == 500
    kinesis.fail_next(Fault.LOSE_REPLY)
    with pytest.raises(ReadTimeoutError):
        put(kinesis, {"Data": b"b", "PartitionKey": "p"})
    assert [s.data for s in kinesis.records("shardId-000000000000")] == [b"b"], "the lost reply's write"
    kinesis.fail_next(Fault.THROTTLE, operation="ListShards")
    with pytest.raises(ClientError, match="LimitExceededException"):
        kinesis.list_shards(StreamName="events")
    with pytest.raises(ValueError, match="ListShards takes"):
        kinesis.fail_next(Fault.LOSE_REPLY, operation="ListShards")


def test_write_limits_refuse_per_record_past_a_shards_second():
    now = [0.0]
    kinesis = InMemoryKinesis("events", enforce_limits=True, clock=lambda: now[0])
    answers = put(kinesis, *[{"Data": b"x", "PartitionKey": "p"}] * 500)["Records"]
    answers += put(kinesis, *[{"Data": b"x", "PartitionKey": "p"}] * 500)["Records"]
    assert all("SequenceNumber" in a for a in answers)
    [over] = put(kinesis, {"Data": b"x", "PartitionKey": "p"})["Records"]
    assert over["ErrorCode"] == "ProvisionedThroughputExceededException"
    big = {"Data": b"x" * (600 * 1024), "PartitionKey": "p"}
    now[0] = 1.5
    assert [("ErrorCode" in a) for a in put(kinesis, big, big)["Records"]] == [False, True], "1 MiB/s"


def test_validation_errors_are_botocores():
    kinesis = InMemoryKinesis("events")
    with pytest.raises(ParamValidationError, match='Missing required parameter in input: "Records"'):
        kinesis.put_records(StreamName="events")
    with pytest.raises(ParamValidationError, match="valid min length: 1"):
        kinesis.put_records(StreamName="events", Records=[])
    with pytest.raises(ParamValidationError, match=r"Invalid type for parameter Records\[0\]\.Data"):
        put(kinesis, {"Data": 1, "PartitionKey": "p"})
    with pytest.raises(ClientError, match="ValidationException"):
        put(kinesis, *[{"Data": b"x", "PartitionKey": "p"}] * 501)
    with pytest.raises(ClientError, match="ValidationException"):
        put(kinesis, {"Data": b"x", "PartitionKey": "p" * 257})
    with pytest.raises(ClientError, match="InvalidArgumentException"):
        put(kinesis, {"Data": b"x", "PartitionKey": "p", "ExplicitHashKey": str(MAX_HASH_KEY + 1)})
    with pytest.raises(ClientError, match="ResourceNotFoundException"):
        kinesis.put_records(StreamName="other", Records=[{"Data": b"x", "PartitionKey": "p"}])
    assert kinesis.records("shardId-000000000000") == []


def test_aggregates_read_back_decoded():
    kinesis = InMemoryKinesis("events")
    users = [UserRecord("a", b"1"), UserRecord("b", b"2")]
    put(kinesis, {"Data": encode(users), "PartitionKey": "a"}, {"Data": b"plain", "PartitionKey": "c"})
    assert kinesis.user_records("shardId-000000000000") == [*users, UserRecord("c", b"plain")]
