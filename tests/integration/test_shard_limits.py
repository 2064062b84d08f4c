"""ShardLimitedKinesis: the per-shard write limits (1,000 records/s, 1 MiB/s) on real loopback servers.

Neither moto nor kinesis-mock enforces them; the wrapper must, shard by shard, with a clock the
tests move by hand so that nothing depends on wall time.
"""

from __future__ import annotations

import pytest
from botocore.exceptions import ClientError

from local.chaos.faults import THROTTLED, FaultyKinesis, ShardLimitedKinesis
from tests.support.integration import (
    create_stream,
    kinesis_client,
    open_shards,
    read_stream,
    unique_stream_name,
    wait_active,
)

MiB = 1024 * 1024


class FakeClock:
    """Seconds that pass only when a test says so."""

    def __init__(self) -> None:
        self.now = 1_000.25

    def __call__(self) -> float:
        return self.now

    def tick(self) -> None:
        self.now += 1.0


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def limited_stream(
    endpoint: str, clock: FakeClock, shards: int = 1, **limits
) -> tuple[ShardLimitedKinesis, str]:
    client = kinesis_client(endpoint)
    name = unique_stream_name("limits")
    create_stream(client, name, shard_count=shards)
    return ShardLimitedKinesis(client, clock=clock, **limits), name


def shard_ids(client, name: str) -> list[str]:
    """Open shards in hash-key order."""
    return [shard["ShardId"] for shard in open_shards(client, name)]


def starting_keys(client, name: str) -> list[str]:
    """An explicit hash key for each open shard, in hash-key order."""
    return [shard["HashKeyRange"]["StartingHashKey"] for shard in open_shards(client, name)]


def rate_exceeded(shard_id: str, name: str) -> dict[str, str]:
    message = f"Rate exceeded for shard {shard_id} in stream {name} under account 000000000000."
    return {"ErrorCode": THROTTLED, "ErrorMessage": message}


def tiny(first: int, stop: int) -> list[dict]:
    return [{"Data": b"x", "PartitionKey": f"k{i}"} for i in range(first, stop)]


def sized(key: str, total: int) -> dict:
    """An entry whose data plus UTF-8 partition key is `total` bytes."""
    return {"Data": b"d" * (total - len(key.encode("utf-8"))), "PartitionKey": key}


def errors(response: dict) -> dict[int, dict]:
    return {i: answer for i, answer in enumerate(response["Records"]) if "ErrorCode" in answer}


def landed(client, name: str) -> dict[str, list[bytes]]:
    return {shard: [user.data for _, _, user in items] for shard, items in read_stream(client, name).items()}


def test_a_shard_admits_1000_records_a_second(kinesis_endpoint, clock):
    limited, name = limited_stream(kinesis_endpoint.endpoint_url, clock)
    (shard,) = shard_ids(limited, name)
    answers = []
    for first in range(0, 1001, 500):  # 500, 500 and 1 entries, all in one second
        answers += limited.put_records(StreamName=name, Records=tiny(first, min(first + 500, 1001)))[
            "Records"
        ]
    assert errors({"Records": answers}) == {1000: rate_exceeded(shard, name)}
    assert limited.throttled == {shard: 1}
    assert limited.admitted_records == {shard: 1000}

    clock.tick()
    assert limited.put_records(StreamName=name, Records=tiny(1001, 1002))["FailedRecordCount"] == 0
    assert limited.admitted_records == {shard: 1001}


def test_a_shard_admits_1_mib_a_second_counting_partition_key_bytes(kinesis_endpoint, clock):
    limited, name = limited_stream(kinesis_endpoint.endpoint_url, clock)
    (shard,) = shard_ids(limited, name)
    keys = [f"ключ-{i}" for i in range(5)]  # 6 characters, 10 UTF-8 bytes
    quarter = MiB // 4

    exactly = [sized(key, quarter) for key in keys[:4]]
    assert limited.put_records(StreamName=name, Records=exactly)["FailedRecordCount"] == 0
    assert limited.admitted_bytes == {shard: MiB}

    clock.tick()
    one_byte_more = [*exactly[:3], sized(keys[3], quarter + 1), sized(keys[4], quarter)]
    # Counting data alone, or the keys' characters, all of the first four would fit.
    counted_without_key_bytes = sum(len(e["Data"]) + len(e["PartitionKey"]) for e in one_byte_more[:4])
    assert counted_without_key_bytes < MiB
    response = limited.put_records(StreamName=name, Records=one_byte_more)
    # The refused entry leaves the rest of the second's budget to the next one, which fits exactly.
    assert errors(response) == {3: rate_exceeded(shard, name)}
    assert limited.admitted_bytes == {shard: 2 * MiB}


def test_each_shard_has_its_own_budget(kinesis_endpoint, clock):
    limited, name = limited_stream(kinesis_endpoint.endpoint_url, clock, shards=2, records_per_second=3)
    first, second = shard_ids(limited, name)
    keys = starting_keys(limited, name)
    entries = [
        {"Data": f"{i}".encode(), "PartitionKey": "p", "ExplicitHashKey": keys[i % 2]} for i in range(8)
    ]
    response = limited.put_records(StreamName=name, Records=entries)
    assert errors(response) == {6: rate_exceeded(first, name), 7: rate_exceeded(second, name)}
    assert [answer["ShardId"] for answer in response["Records"][:6]] == [first, second] * 3
    assert limited.throttled == {first: 1, second: 1}
    assert limited.admitted_records == {first: 3, second: 3}


def test_refused_entries_are_answered_in_place_and_never_written(kinesis_endpoint, clock):
    limited, name = limited_stream(kinesis_endpoint.endpoint_url, clock, shards=2, records_per_second=2)
    first, second = shard_ids(limited, name)
    low, high = starting_keys(limited, name)
    targets = [low, low, low, high, low, high]
    entries = [
        {"Data": f"{i}".encode(), "PartitionKey": "p", "ExplicitHashKey": key}
        for i, key in enumerate(targets)
    ]
    response = limited.put_records(StreamName=name, Records=entries)
    assert response["FailedRecordCount"] == 2
    assert errors(response) == {2: rate_exceeded(first, name), 4: rate_exceeded(first, name)}
    assert all("SequenceNumber" in response["Records"][i] for i in (0, 1, 3, 5))
    assert landed(limited, name) == {first: [b"0", b"1"], second: [b"3", b"5"]}


def test_budget_is_given_back_for_what_the_server_does_not_write(kinesis_endpoint, clock):
    client = kinesis_client(kinesis_endpoint.endpoint_url)
    name = unique_stream_name("limits")
    create_stream(client, name, shard_count=1)
    faulty = FaultyKinesis(client)
    limited = ShardLimitedKinesis(faulty, records_per_second=2, clock=clock)
    (shard,) = shard_ids(client, name)

    faulty.fail_requests("InternalFailure")
    with pytest.raises(ClientError, match="InternalFailure"):
        limited.put_records(StreamName=name, Records=tiny(0, 2))
    faulty.record_error_fraction = 1.0
    assert limited.put_records(StreamName=name, Records=tiny(2, 4))["FailedRecordCount"] == 2
    assert limited.admitted_records[shard] == 0
    faulty.record_error_fraction = 0.0
    assert limited.put_records(StreamName=name, Records=tiny(4, 6))["FailedRecordCount"] == 0

    # Every entry refused: the server is not asked, so the armed failure is still there afterwards.
    faulty.fail_requests("InternalFailure")
    assert errors(limited.put_records(StreamName=name, Records=tiny(6, 7))) == {0: rate_exceeded(shard, name)}
    assert faulty.injected["PutRecords:InternalFailure"] == 1
    assert landed(client, name) == {shard: [b"x", b"x"]}


@pytest.mark.parametrize("resharded_by", ["wrapper", "refresh_shards"])
def test_after_a_split_each_child_has_its_own_budget(kinesis_mock, clock, resharded_by):
    # kinesis-mock only: moto keeps writing to a split shard's parent.
    limited, name = limited_stream(kinesis_mock, clock, records_per_second=2)
    (parent,) = shard_ids(limited, name)
    assert limited.put_records(StreamName=name, Records=tiny(0, 3))["FailedRecordCount"] == 1

    split = {"StreamName": name, "ShardToSplit": parent, "NewStartingHashKey": str(2**127)}
    if resharded_by == "wrapper":
        limited.split_shard(**split)
    else:
        kinesis_client(kinesis_mock).split_shard(**split)  # behind the wrapper's back
        limited.refresh_shards(name)
    wait_active(limited, name)
    low, high = shard_ids(limited, name)
    keys = ["0", str(2**127)] * 3
    # Same second: the parent's budget is spent, the children's are whole.
    entries = [{"Data": b"y", "PartitionKey": "p", "ExplicitHashKey": key} for key in keys]
    response = limited.put_records(StreamName=name, Records=entries)
    assert errors(response) == {4: rate_exceeded(low, name), 5: rate_exceeded(high, name)}
    assert [answer["ShardId"] for answer in response["Records"][:4]] == [low, high, low, high]
    assert limited.throttled == {parent: 1, low: 1, high: 1}


def test_put_record_over_budget_raises_the_throttling_error(kinesis_endpoint, clock):
    limited, name = limited_stream(kinesis_endpoint.endpoint_url, clock, records_per_second=1)
    (shard,) = shard_ids(limited, name)
    limited.put_record(StreamName=name, Data=b"a", PartitionKey="k")
    with pytest.raises(ClientError) as raised:
        limited.put_record(StreamName=name, Data=b"b", PartitionKey="k")
    refusal = rate_exceeded(shard, name)
    assert raised.value.response["Error"] == {
        "Code": refusal["ErrorCode"],
        "Message": refusal["ErrorMessage"],
    }
    assert raised.value.operation_name == "PutRecord"

    clock.tick()  # a new second, and the stream named by its ARN this time
    arn = limited.describe_stream_summary(StreamName=name)["StreamDescriptionSummary"]["StreamARN"]
    limited.put_record(StreamARN=arn, Data=b"c", PartitionKey="k")
    assert landed(limited, name) == {shard: [b"a", b"c"]}
