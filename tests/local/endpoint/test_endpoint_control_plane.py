"""Kinesis's control plane on the local endpoint, as the service answers it (issue 27, item 3):
record sizes up to the stream's MaxRecordSizeInKiB, a reshard's UPDATING window and its limits,
iterator expiry and GetShardIterator's rate. Each fails on moto's own Kinesis, which answers at
once, accepts any reshard, lets iterators live for ever and refuses big records as throttles."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from botocore.exceptions import ClientError

from local.endpoint.handle import Endpoint
from tests.support.endpoint import get_json, new_stream
from tests.support.integration import kinesis_client, unique_stream_name, wait_active

pytestmark = pytest.mark.integration
MiB = 1024 * 1024


def error_of(call: Any, **kwargs: Any) -> tuple[str, str]:
    with pytest.raises(ClientError) as raised:
        call(**kwargs)
    error = raised.value.response["Error"]
    return error["Code"], error["Message"]


@pytest.fixture(scope="module")
def tuned(tmp_path_factory) -> Iterator[str]:
    """An endpoint whose iterators live 2 s instead of 5 minutes and whose reshards take 5 s instead of
    1 (the knobs, not the rules, change): long enough for the checks whatever the machine's load."""
    with Endpoint(port=0, log_path=tmp_path_factory.mktemp("endpoint") / "endpoint.log") as endpoint:
        get_json(
            f"{endpoint.url}/_shardline/limits", "PUT", {"iterator_ttl_seconds": 2, "reshard_seconds": 5}
        )
        yield endpoint.url


def test_a_10_mib_stream_takes_a_2_mib_record_and_refuses_an_11_mib_one_with_the_size_error(local_endpoint):
    client = kinesis_client(local_endpoint)
    name = unique_stream_name("large")
    client.create_stream(StreamName=name, ShardCount=1, MaxRecordSizeInKiB=10240)
    wait_active(client, name)
    summary = client.describe_stream_summary(StreamName=name)["StreamDescriptionSummary"]
    assert summary["MaxRecordSizeInKiB"] == 10240
    two = client.put_record(StreamName=name, Data=b"x" * (2 * MiB), PartitionKey="p")
    assert two["ShardId"] == "shardId-000000000000"
    code, message = error_of(client.put_record, StreamName=name, Data=b"x" * (11 * MiB), PartitionKey="p")
    assert (code, "Member must have length less than or equal to 10485760" in message) == (
        "ValidationException",
        True,
    )
    code, _ = error_of(
        client.put_records, StreamName=name, Records=[{"Data": b"x" * (11 * MiB), "PartitionKey": "p"}]
    )
    assert code == "ValidationException"


def test_a_record_over_a_default_streams_1_mib_is_a_validation_error_never_a_throttle(local_endpoint):
    client, name = new_stream(local_endpoint)
    for _ in range(3):  # a client that retries throttles would loop for ever on a throttle
        code, message = error_of(client.put_record, StreamName=name, Data=b"x" * (MiB + 1), PartitionKey="p")
        assert code == "ValidationException" and "1048576" in message


def test_a_max_record_size_outside_1024_to_10240_kib_is_refused(local_endpoint):
    client = kinesis_client(local_endpoint)
    code, _ = error_of(
        client.create_stream, StreamName=unique_stream_name("big"), ShardCount=1, MaxRecordSizeInKiB=20480
    )
    assert code == "ValidationException"


def test_a_reshard_keeps_the_stream_updating_and_refuses_another_until_it_is_done(tuned):
    client, name = new_stream(tuned, shards=2)
    client.split_shard(StreamName=name, ShardToSplit="shardId-000000000000", NewStartingHashKey=str(2**126))
    summary = client.describe_stream_summary(StreamName=name)["StreamDescriptionSummary"]
    assert summary["StreamStatus"] == "UPDATING"
    code, message = error_of(
        client.split_shard,
        StreamName=name,
        ShardToSplit="shardId-000000000001",
        NewStartingHashKey=str(3 * 2**126),
    )
    assert code == "ResourceInUseException" and "not ACTIVE, instead in state UPDATING" in message
    put = client.put_record(StreamName=name, Data=b"during", PartitionKey="p", ExplicitHashKey="1")
    assert put["ShardId"] == "shardId-000000000000", "the parent takes writes until the split is done"
    wait_active(client, name)
    open_shards = client.list_shards(StreamName=name, ShardFilter={"Type": "AT_LATEST"})["Shards"]
    assert [s["ShardId"] for s in open_shards] == [
        "shardId-000000000001",
        "shardId-000000000002",
        "shardId-000000000003",
    ]


def test_update_shard_count_keeps_to_double_and_half(local_endpoint):
    client, name = new_stream(local_endpoint, shards=4)
    for target in (9, 1):
        code, message = error_of(
            client.update_shard_count, StreamName=name, TargetShardCount=target, ScalingType="UNIFORM_SCALING"
        )
        assert code == "InvalidArgumentException" and "from 2 to 8 shards" in message
    client.update_shard_count(StreamName=name, TargetShardCount=8, ScalingType="UNIFORM_SCALING")
    wait_active(client, name)
    assert client.describe_stream_summary(StreamName=name)["StreamDescriptionSummary"]["OpenShardCount"] == 8


def test_an_iterator_older_than_its_life_is_refused_expired(tuned):
    client, name = new_stream(tuned)
    iterator = client.get_shard_iterator(
        StreamName=name, ShardId="shardId-000000000000", ShardIteratorType="TRIM_HORIZON"
    )
    fresh = iterator["ShardIterator"]
    assert client.get_records(ShardIterator=fresh)["Records"] == []
    time.sleep(2.5)
    code, message = error_of(client.get_records, ShardIterator=fresh)
    assert code == "ExpiredIteratorException" and "tolerated delay of 2000 milliseconds" in message


def test_get_shard_iterator_is_limited_to_5_a_second_per_shard(local_endpoint):
    """Calls as fast as they go until the first refusal: within the first 50 there is one, and the
    calls let through before it are no more than 5 a second allows (the bucket's 5, refilled at 5/s)."""
    client, name = new_stream(local_endpoint)
    began, admitted, refused = time.monotonic(), 0, None
    while refused is None and admitted < 50:
        try:
            client.get_shard_iterator(
                StreamName=name, ShardId="shardId-000000000000", ShardIteratorType="LATEST"
            )
            admitted += 1
        except ClientError as error:
            refused = error.response["Error"]["Code"]
    elapsed = time.monotonic() - began
    assert refused == "ProvisionedThroughputExceededException"
    assert admitted <= 5 + 5 * elapsed + 1
