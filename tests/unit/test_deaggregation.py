"""Lambda Kinesis events to ConsumedRecords: aggregates, pass-through, and malformed events."""

from __future__ import annotations

import base64
import json

import pytest

from shardline.consumer import ConsumedRecord, ConsumerMetrics, EventError, deaggregate, stream_and_shard
from shardline.kinesis import HashRange, Position, UserRecord, hash_key
from shardline.kpl import encode

ARN = "arn:aws:kinesis:eu-west-1:123456789012:stream/orders"


def event_record(data: bytes, sequence: str = "100", key: str = "a", **overrides) -> dict:
    record = {
        "kinesis": {
            "kinesisSchemaVersion": "1.0",
            "partitionKey": key,
            "sequenceNumber": sequence,
            "data": base64.b64encode(data).decode(),
            "approximateArrivalTimestamp": 1700000000.5,
        },
        "eventSource": "aws:kinesis",
        "eventID": f"shardId-000000000003:{sequence}",
        "eventSourceARN": ARN,
    }
    record.update(overrides)
    return record


USERS = [UserRecord("user-1", b'{"a": 1}'), UserRecord("user-2", b"two", "12345"), UserRecord("user-1", b"3")]


def test_an_aggregate_becomes_its_user_records_with_sub_sequence_numbers():
    records = deaggregate([event_record(encode(USERS), sequence="555")])
    assert records == [
        ConsumedRecord(
            "orders",
            "shardId-000000000003",
            "555",
            i,
            u.partition_key,
            u.explicit_hash_key,
            u.data,
            1700000000.5,
        )
        for i, u in enumerate(USERS)
    ]
    assert records[0].json() == {"a": 1} and records[1].text() == "two"
    assert [r.position for r in records] == [Position("555", i) for i in range(3)]


def test_a_plain_record_passes_through_with_no_sub_sequence_number():
    [record] = deaggregate([event_record(b"plain", key="k9", sequence="7")])
    assert (record.partition_key, record.data, record.sub_sequence_number) == ("k9", b"plain", None)
    assert record.position == Position("7", 0)


def test_an_aggregate_with_a_bad_md5_passes_through_whole_and_is_counted():
    corrupted = bytearray(encode(USERS))
    corrupted[10] ^= 0xFF
    metrics = ConsumerMetrics()
    [record] = deaggregate([event_record(bytes(corrupted), key="a")], metrics=metrics)
    assert record.data == bytes(corrupted) and record.sub_sequence_number is None
    assert metrics.snapshot()["CorruptAggregatesPassedThrough"] == 1


def test_sub_records_outside_the_shard_range_are_delivered_and_counted():
    low_half = HashRange(0, 2**127 - 1)
    expected_outside = sum(1 for u in USERS if hash_key(u) not in low_half)
    metrics = ConsumerMetrics()
    records = deaggregate([event_record(encode(USERS))], hash_range=low_half, metrics=metrics)
    assert len(records) == 3 and expected_outside > 0
    assert metrics.snapshot()["OutOfRangeRecords"] == expected_outside


@pytest.mark.parametrize(
    ("breakage", "field"),
    [
        (lambda r: r.pop("kinesis"), "kinesis"),
        (lambda r: r["kinesis"].pop("data"), "kinesis.data"),
        (lambda r: r["kinesis"].pop("sequenceNumber"), "kinesis.sequenceNumber"),
        (lambda r: r["kinesis"].__setitem__("data", "not base64!"), "kinesis.data"),
        (lambda r: r.pop("eventSourceARN"), "eventSourceARN"),
        (lambda r: r.__setitem__("eventSourceARN", "arn:aws:sqs:queue"), "eventSourceARN"),
        (lambda r: r.__setitem__("eventID", "no-colon"), "eventID"),
    ],
)
def test_a_malformed_event_record_is_an_error_naming_its_index_and_field(breakage, field):
    good, bad = event_record(b"ok", sequence="1"), event_record(b"ok", sequence="2")
    breakage(bad)
    with pytest.raises(EventError) as raised:
        deaggregate([good, bad])
    assert (raised.value.index, raised.value.field) == (1, field)
    assert "event record 1" in str(raised.value)


def test_plain_record_without_partition_key_is_an_error():
    record = event_record(b"ok")
    record["kinesis"].pop("partitionKey")
    with pytest.raises(EventError, match="partitionKey"):
        deaggregate([record])


def test_stream_and_shard_come_from_the_arn_and_event_id():
    assert stream_and_shard(event_record(b"x")) == ("orders", "shardId-000000000003")


def test_json_helper_parses_the_payload():
    [record] = deaggregate([event_record(json.dumps([1, 2]).encode())])
    assert record.json() == [1, 2]
