"""The local endpoint's SubscribeToShard against what AWS pushed (tests/conformance/aws_recorded/
kinesis_subscribe.json), read through boto3's `subscribe_to_shard` as the recorded tests read it.

Each test does what its recorded test did (a 1-shard stream, consumer `c1`, five records "Hello
world_<i>" under partition key "1") and compares the answer, written as LocalStack's snapshot
writes it (`as_snapshot`), with AWS's recording field by field.
"""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from tests.support.esm.aws import client, create_stream
from tests.support.recorded import load, mismatches

pytestmark = pytest.mark.integration

RECORDED = load("kinesis_subscribe")
MESSAGES = [f"Hello world_{i}" for i in range(5)]


def as_snapshot(value: Any) -> Any:
    """boto3's answer as LocalStack's snapshot writes it: bytes as their repr, a datetime as "timestamp"."""
    if isinstance(value, dict):
        return {key: as_snapshot(item) for key, item in value.items()}
    if isinstance(value, list):
        return [as_snapshot(item) for item in value]
    if isinstance(value, bytes):
        return repr(value)
    if isinstance(value, datetime.datetime):
        return "timestamp"
    return value


def subscribed(url: str, position: dict[str, Any] | None = None) -> tuple[Any, str, Any]:
    """A new stream, its consumer c1, and c1's subscription to its shard (TRIM_HORIZON unless given)."""
    kinesis = client("kinesis", url)
    name = create_stream(kinesis)
    description = kinesis.describe_stream(StreamName=name)["StreamDescription"]
    consumer = kinesis.register_stream_consumer(StreamARN=description["StreamARN"], ConsumerName="c1")
    shard = description["Shards"][0]
    if position is not None and position["Type"] == "AT_SEQUENCE_NUMBER":
        position = {**position, "SequenceNumber": shard["SequenceNumberRange"]["StartingSequenceNumber"]}
    answer = kinesis.subscribe_to_shard(
        ConsumerARN=consumer["Consumer"]["ConsumerARN"],
        ShardId=shard["ShardId"],
        StartingPosition=position or {"Type": "TRIM_HORIZON"},
    )
    return kinesis, name, answer["EventStream"]


def events_with_records(stream: Any, count: int) -> list[dict[str, Any]]:
    """The SubscribeToShardEvents that carry records, until `count` records; empty ones skipped."""
    events: list[dict[str, Any]] = []
    try:
        for message in stream:
            event = message["SubscribeToShardEvent"]
            if event["Records"]:
                events.append(event)
            if sum(len(e["Records"]) for e in events) >= count:
                return events
    finally:
        stream.close()
    raise AssertionError(f"the stream ended with {events}")


def test_records_put_at_once_arrive_in_one_event_as_aws_pushed_them(local_endpoint):
    """Source: kinesis_subscribe.json `events` — LocalStack tests/aws/services/kinesis/
    test_kinesis.snapshot.json, TestKinesis::test_subscribe_to_shard, Events (AWS-validated
    2025-08-19): one event with the five records, MillisBehindLatest 0, no ChildShards, and a
    ContinuationSequenceNumber recorded apart from every record's sequence number (LocalStack skips
    that field: its own is the last record's; AWS's is not)."""
    kinesis, name, stream = subscribed(local_endpoint)
    kinesis.put_records(StreamName=name, Records=[{"Data": m, "PartitionKey": "1"} for m in MESSAGES])
    events = events_with_records(stream, len(MESSAGES))
    assert mismatches(as_snapshot({"Events": events}), RECORDED["events"]["recorded"]) == []
    [event] = events
    assert event["ContinuationSequenceNumber"] not in {r["SequenceNumber"] for r in event["Records"]}


@pytest.mark.parametrize(
    ("case", "position"),
    [
        ("at_timestamp", {"Type": "AT_TIMESTAMP", "Timestamp": datetime.datetime(2015, 1, 1)}),
        ("at_sequence_number", {"Type": "AT_SEQUENCE_NUMBER"}),  # the shard's StartingSequenceNumber
    ],
)
def test_records_put_one_by_one_arrive_from_the_recorded_starting_positions(local_endpoint, case, position):
    """Source: kinesis_subscribe.json `at_timestamp` — LocalStack TestKinesis::
    test_subscribe_to_shard_with_at_timestamp, Records (AWS-validated 2024-06-21); `at_sequence_number`
    — TestKinesis::test_subscribe_to_shard_with_sequence_number_as_iterator, Records (AWS-validated
    2022-08-26): a position before the stream's first record gets every record put after subscribing."""
    kinesis, name, stream = subscribed(local_endpoint, position)
    for message in MESSAGES:
        kinesis.put_records(StreamName=name, Records=[{"Data": message, "PartitionKey": "1"}])
    records = [record for event in events_with_records(stream, len(MESSAGES)) for record in event["Records"]]
    records.sort(key=lambda record: record["Data"])
    assert mismatches(as_snapshot({"Records": records}), RECORDED[case]["recorded"]) == []
