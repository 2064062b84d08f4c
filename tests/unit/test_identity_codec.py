"""Identity in the KPL format: ids ride in the standard per-record tags, and every other decoder
still reads the same user records.

The other decoders are aws-kinesis-agg's de-aggregator (the awslabs library, which parses with the
protobuf runtime and the KPL's own `.proto`, the schema the KCL compiles) and that protobuf runtime
itself; the real KPL's bytes come from `tests/conformance/`.
"""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path

import pytest
from aws_kinesis_agg.aggregator import RecordAggregator
from aws_kinesis_agg.deaggregator import deaggregate_records, messages_pb2  # it puts its folder on sys.path
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shardline.errors import AggregationError
from shardline.kinesis import UserRecord
from shardline.kpl import MAGIC, AggregateBuilder, decode, encode
from shardline.kpl._decode import decode_aggregate
from shardline.kpl._identity import AGGREGATE_TAG, RECORD_ID_TAG, AggregateId, new_producer_id

CONFORMANCE_FILE = Path(__file__).resolve().parents[1] / "conformance" / "kpl_aggregated_records.json"
AGGREGATE_ID = AggregateId(new_producer_id(), "3", 0x1F, 0x1C).encode()


def kpl_cases() -> list[tuple[str, list[UserRecord], bytes]]:
    cases = json.loads(CONFORMANCE_FILE.read_text())["cases"]
    return [
        (
            case["name"],
            [
                UserRecord(r["partition_key"], r["data_utf8"].encode(), r.get("explicit_hash_key"))
                for r in case["records"]
            ],
            base64.b64decode(case["aggregated_base64"]),
        )
        for case in cases
    ]


def with_ids(records: list[UserRecord]) -> list[UserRecord]:
    """Every other record gets a client id: tagged and untagged records side by side."""
    return [r._replace(id=f"order-{i}") if i % 2 == 0 else r for i, r in enumerate(records)]


def read_by_aws_kinesis_agg(payload: bytes) -> list[tuple[str, bytes, str | None]]:
    """(partition key, data, explicit hash key) of each user record, as aws-kinesis-agg reads it."""
    event_record = {
        "kinesis": {
            "kinesisSchemaVersion": "1.0",
            "sequenceNumber": "1",
            "partitionKey": "a",
            "approximateArrivalTimestamp": 1.0,
            "data": base64.b64encode(payload).decode(),
        }
    }
    users = deaggregate_records([event_record])
    assert all(user["kinesis"].get("aggregated") for user in users), "read as a plain record"
    fields = [user["kinesis"] for user in users]
    return [(f["partitionKey"], base64.b64decode(f["data"]), f["explicitHashKey"]) for f in fields]


def user_fields(records: list[UserRecord]) -> list[tuple[str, bytes, str | None]]:
    return [(r.partition_key, r.data, r.explicit_hash_key) for r in records]


@pytest.mark.parametrize("name, records, kpl_bytes", kpl_cases(), ids=[c[0] for c in kpl_cases()])
def test_5_other_decoders_still_read_every_record(name, records, kpl_bytes):
    # Ours, with both kinds of ids, read by aws-kinesis-agg: the same user records, byte for byte.
    tagged = encode(with_ids(records), AGGREGATE_ID)
    assert tagged != kpl_bytes
    assert read_by_aws_kinesis_agg(tagged) == user_fields(records)
    # ... and by the protobuf runtime with the KPL's schema: the tags are Tag messages, not noise.
    message = messages_pb2.AggregatedRecord()
    message.ParseFromString(tagged[len(MAGIC) : -16])
    tags = [{tag.key: tag.value for tag in record.tags} for record in message.records]
    assert tags[0] == {AGGREGATE_TAG: AGGREGATE_ID, RECORD_ID_TAG: "order-0"}
    assert all(t == ({RECORD_ID_TAG: f"order-{i}"} if i % 2 == 0 else {}) for i, t in enumerate(tags) if i)
    # Without ids, the bytes are the real KPL's; and the KPL's bytes read by us as before (no ids).
    assert encode(records) == kpl_bytes
    assert decode_aggregate(kpl_bytes) == (records, None)
    # The other way: aws-kinesis-agg's own aggregate, read by us.
    aggregator = RecordAggregator()
    for record in records:
        assert aggregator.add_user_record(record.partition_key, record.data, record.explicit_hash_key) is None
    _, _, theirs = aggregator.clear_and_get().get_contents()
    assert user_fields(decode(theirs)) == user_fields(records)


def test_ids_written_by_the_protobuf_runtime_are_read_by_shardline():
    # An independent encoder of the tag field: the protobuf runtime, from the KPL's schema.
    message = messages_pb2.AggregatedRecord()
    message.partition_key_table.extend(["k1", "k2"])
    first = message.records.add(partition_key_index=0, data=b"one")
    first.tags.add(key="unrelated", value="x")
    first.tags.add(key=AGGREGATE_TAG, value=AGGREGATE_ID)
    second = message.records.add(partition_key_index=1, data=b"two")
    second.tags.add(key=RECORD_ID_TAG, value="client-7")
    body = message.SerializeToString()
    payload = MAGIC + body + hashlib.md5(body).digest()
    records, aggregate_id = decode_aggregate(payload)
    assert records == [UserRecord("k1", b"one"), UserRecord("k2", b"two", None, "client-7")]
    assert aggregate_id == AGGREGATE_ID and AggregateId.parse(aggregate_id).counter == 0x1F


record_ids = st.one_of(st.none(), st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E), min_size=1))
records = st.lists(
    st.builds(
        UserRecord,
        st.text(st.characters(codec="utf-8"), min_size=1, max_size=20),
        st.binary(max_size=300),
        st.none(),
        record_ids,
        st.none(),
        st.just(False),
    ),
    min_size=1,
    max_size=40,
)


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records, st.one_of(st.none(), st.just(AGGREGATE_ID)))
def test_ids_round_trip_and_sizes_stay_exact(batch, aggregate_id):
    payload = encode(batch, aggregate_id)
    assert decode_aggregate(payload) == (batch, aggregate_id)
    builder = AggregateBuilder(aggregate_id)
    for record in batch:
        expected = builder.size_with(record)
        assert builder.add(record)
        assert builder.size == expected
    assert builder.build() == payload and builder.size == len(payload)
    assert read_by_aws_kinesis_agg(payload) == user_fields(batch)


def test_a_malformed_tag_names_its_record():
    message = messages_pb2.AggregatedRecord()
    message.partition_key_table.append("k")
    message.records.add(partition_key_index=0, data=b"ok")
    body = message.SerializeToString() + b"\x1a\x07\x08\x00\x1a\x01x\x22\x05"  # record 1: a tag cut short
    with pytest.raises(AggregationError, match="record 1"):
        decode(MAGIC + body + hashlib.md5(body).digest())


@pytest.mark.parametrize(
    "value", ["", "p.1.1", "P.1.1.1", "p.1.g.1", "p..1.1", "p.1.1.1.1", "p.1." + "f" * 17 + ".1"]
)
def test_an_aggregate_id_that_is_not_one_is_refused(value):
    with pytest.raises(AggregationError, match="not a shardline aggregate id"):
        AggregateId.parse(value)


def test_a_field_repeated_after_the_data_still_decodes_as_protobuf_does():
    # The fast path reads tags after the data; anything else there (a repeated data field, whose
    # last value wins in protobuf) goes to the generic decoder. Found by the mutation test.
    message = messages_pb2.AggregatedRecord()
    message.partition_key_table.append("k")
    message.records.add(partition_key_index=0, data=b"")
    body = message.SerializeToString()
    record = body[body.index(b"\x1a", 3) :]  # the one Record, as written: 1a 04 08 00 1a 00
    repeated = record[:1] + bytes([record[1] + 3]) + record[2:] + b"\x1a\x01z"
    tagged = repeated[:1] + bytes([repeated[1] + 9]) + repeated[2:] + b"\x22\x07\x0a\x05sl.id"[:9]
    for rewritten in (repeated, tagged):
        payload_body = body[: body.index(record)] + rewritten
        expected = messages_pb2.AggregatedRecord()
        expected.ParseFromString(payload_body)
        payload = MAGIC + payload_body + hashlib.md5(payload_body).digest()
        assert [r.data for r in decode(payload)] == [r.data for r in expected.records] == [b"z"]
