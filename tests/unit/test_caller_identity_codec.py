"""Issue 39, property 2 on the wire: ids belong to their caller.

The caller rides in the aggregate's first record (`sl.c`), a derived id in its own tag (`sl.k`);
both round-trip through `encode`/`AggregateBuilder`/`decode`, other decoders (aws-kinesis-agg and
the protobuf runtime with the KPL's schema) still read the same user records, and records without
ids or caller are still the real KPL's bytes.
"""

from __future__ import annotations

import base64
import hashlib

import pytest
from aws_kinesis_agg.deaggregator import messages_pb2  # it puts its folder on sys.path
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shardline.errors import AggregationError, InvalidRecord
from shardline.kinesis import DEFAULT_LIMITS, UserRecord, validate
from shardline.kpl import MAGIC, AggregateBuilder, decode, encode
from shardline.kpl._decode import decode_aggregate
from shardline.kpl._identity import (
    AGGREGATE_TAG,
    CALLER_TAG,
    DERIVED_ID_TAG,
    RECORD_ID_TAG,
    AggregateId,
    caller_scope,
    new_producer_id,
)
from tests.unit.test_identity_codec import kpl_cases, read_by_aws_kinesis_agg, user_fields

AGGREGATE_ID = AggregateId(new_producer_id(), "7", 3, 1).encode()
ALICE = "arn:aws:iam::000000000000:user/alice"
MALLORY = "arn:aws:iam::000000000000:user/mallory"

visible = st.characters(min_codepoint=0x21, max_codepoint=0x7E)
callers = st.one_of(st.none(), st.just(""), st.text(visible, min_size=1, max_size=512))


@st.composite
def caller_batches(draw) -> tuple[str | None, list[UserRecord]]:
    """One caller's records: explicit ids, derived ids and no ids side by side."""
    caller = draw(callers)
    size = draw(st.integers(1, 30))
    batch = []
    for _ in range(size):
        record_id = draw(st.one_of(st.none(), st.text(visible, min_size=1, max_size=128)))
        batch.append(
            UserRecord(
                draw(st.text(st.characters(codec="utf-8"), min_size=1, max_size=20)),
                draw(st.binary(max_size=300)),
                draw(st.one_of(st.none(), st.integers(0, 2**128 - 1).map(str))),
                record_id,
                caller,
                record_id is not None and draw(st.booleans()),
            )
        )
    return caller, batch


def as_decoded(batch: list[UserRecord], caller: str | None) -> list[UserRecord]:
    """What a consumer reads back: the aggregate's caller on every record; "" travels as no tag."""
    return [r._replace(caller=caller or None) for r in batch]


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(caller_batches(), st.one_of(st.none(), st.just(AGGREGATE_ID)))
def test_property_2_codec_round_trips_the_caller_and_derived_ids(drawn, aggregate_id):
    caller, batch = drawn
    payload = encode(batch, aggregate_id)
    assert decode_aggregate(payload) == (as_decoded(batch, caller), aggregate_id)
    # The builder's sizes stay exact with the new tags, and it writes what encode writes.
    builder = AggregateBuilder(aggregate_id, caller)
    for record in batch:
        expected = builder.size_with(record)
        assert builder.add(record)
        assert builder.size == expected
    assert builder.build() == payload and builder.size == len(payload)
    # Other decoders read the same user records; the tags are Tag messages in the KPL's schema.
    assert [f[:2] for f in read_by_aws_kinesis_agg(payload)] == [f[:2] for f in user_fields(batch)]
    message = messages_pb2.AggregatedRecord()
    message.ParseFromString(payload[len(MAGIC) : -16])
    tags = [[(tag.key, tag.value) for tag in record.tags] for record in message.records]
    first = [(AGGREGATE_TAG, aggregate_id)] if aggregate_id else []
    first += [(CALLER_TAG, caller)] if caller else []
    for index, (record, record_tags) in enumerate(zip(batch, tags, strict=True)):
        own = [(DERIVED_ID_TAG if record.id_derived else RECORD_ID_TAG, record.id)] if record.id else []
        assert record_tags == (first if index == 0 else []) + own


def test_property_2_explicit_and_derived_ids_decode_as_different_identities():
    explicit = UserRecord("p", b"x", None, "k:1", ALICE)
    derived = UserRecord("p", b"x", None, "k:1", ALICE, True)
    # Through the decoder's fast path (shardline's own layout) ...
    fast = decode(encode([explicit, derived], AGGREGATE_ID))
    # ... and its generic one (the same tags written by the protobuf runtime, unrelated tag first).
    message = messages_pb2.AggregatedRecord()
    message.partition_key_table.append("p")
    one = message.records.add(partition_key_index=0, data=b"x")
    one.tags.add(key="unrelated", value="u")
    one.tags.add(key=CALLER_TAG, value=ALICE)
    one.tags.add(key=RECORD_ID_TAG, value="k:1")
    message.records.add(partition_key_index=0, data=b"x").tags.add(key=DERIVED_ID_TAG, value="k:1")
    body = message.SerializeToString()
    generic = decode(MAGIC + body + hashlib.md5(body).digest())
    for decoded in (fast, generic):
        assert decoded == [explicit, derived]
        identities = {(caller_scope(r.caller), r.id_derived, r.id) for r in decoded}
        assert len(identities) == 2


def test_property_2_equal_ids_of_two_callers_are_two_identities():
    alices = decode(encode([UserRecord("p", b"a", None, "order-1")], AGGREGATE_ID, ALICE))
    mallorys = decode(encode([UserRecord("p", b"m", None, "order-1")], AGGREGATE_ID, MALLORY))
    assert alices[0].caller == ALICE and mallorys[0].caller == MALLORY
    assert caller_scope(alices[0].caller) != caller_scope(mallorys[0].caller)


def test_property_2_an_aggregate_never_holds_two_callers():
    builder = AggregateBuilder(AGGREGATE_ID, ALICE)
    assert builder.add(UserRecord("p", b"a", None, None, ALICE))
    assert builder.add(UserRecord("p", b"b"))  # None: the builder's caller
    with pytest.raises(AggregationError, match="one caller"):
        builder.add(UserRecord("p", b"c", None, None, MALLORY))
    with pytest.raises(AggregationError, match="one caller"):
        builder.size_with(UserRecord("p", b"c", None, None, ""))
    assert builder.count == 2
    with pytest.raises(AggregationError, match="2 callers"):
        encode([UserRecord("p", b"a", None, None, ALICE), UserRecord("p", b"b", None, None, MALLORY)])
    # The caller of a whole aggregate is its first record's tag: one written later is not read.
    message = messages_pb2.AggregatedRecord()
    message.partition_key_table.append("p")
    message.records.add(partition_key_index=0, data=b"a")
    message.records.add(partition_key_index=0, data=b"b").tags.add(key=CALLER_TAG, value=MALLORY)
    body = message.SerializeToString()
    assert [r.caller for r in decode(MAGIC + body + hashlib.md5(body).digest())] == [None, None]


def test_property_2_a_record_claiming_an_explicit_and_a_derived_id_is_malformed():
    message = messages_pb2.AggregatedRecord()
    message.partition_key_table.append("p")
    record = message.records.add(partition_key_index=0, data=b"a")
    record.tags.add(key=RECORD_ID_TAG, value="k:1")
    record.tags.add(key=DERIVED_ID_TAG, value="k:1")
    body = message.SerializeToString()
    with pytest.raises(AggregationError, match="record 0: both an explicit id"):
        decode(MAGIC + body + hashlib.md5(body).digest())


@pytest.mark.parametrize("name, records, kpl_bytes", kpl_cases(), ids=[c[0] for c in kpl_cases()])
def test_property_2_kpl_conformance_unchanged_without_ids_or_caller(name, records, kpl_bytes):
    # The caller "" (a library producer left at its default) writes no tag: the real KPL's bytes.
    assert encode(records) == encode(records, None, "") == kpl_bytes
    assert encode([r._replace(caller="") for r in records]) == kpl_bytes
    assert AggregateBuilder(None, "").size_with(records[0]) == AggregateBuilder().size_with(records[0])
    decoded = decode(kpl_bytes)
    assert decoded == records
    assert all(r.caller is None and r.id_derived is False for r in decoded)


def test_property_2_caller_scope_is_the_designed_digest():
    assert caller_scope(None) == caller_scope("") == "-"
    expected = base64.b32encode(hashlib.sha256(ALICE.encode()).digest()).decode().lower()[:16]
    assert caller_scope(ALICE) == expected and len(expected) == 16
    assert caller_scope(MALLORY) != expected


@pytest.mark.parametrize(
    "record, message",
    [
        (UserRecord("p", b"x", None, None, "a" * 513), "at most 512 visible ASCII"),
        (UserRecord("p", b"x", None, None, "alice smith"), "at most 512 visible ASCII"),
        (UserRecord("p", b"x", None, None, "caf\u00e9"), "at most 512 visible ASCII"),
        (UserRecord("p", b"x", None, None, 7), "must be a str or None"),  # type: ignore[arg-type]
        (UserRecord("p", b"x", None, None, None, True), "True only for a record with an id"),
        (UserRecord("p", b"x", None, "k:1", None, 1), "must be a bool"),  # type: ignore[arg-type]
    ],
)
def test_property_2_a_bad_caller_or_derived_flag_is_named(record, message):
    with pytest.raises(InvalidRecord) as raised:
        validate([UserRecord("ok", b""), record])
    [problem] = raised.value.problems
    assert problem.index == 1 and problem.field in ("caller", "id_derived")
    assert message in problem.message
    assert validate([UserRecord("p", b"x", None, "k:1", "a" * 512, True)])  # the longest caller is fine


def test_property_2_the_caller_counts_against_the_record_size():
    limit = DEFAULT_LIMITS.max_record_size
    caller = "c" * 512
    # The largest data a record with the longest caller may carry ...
    size = next(
        size for size in range(limit, 0, -1) if not _problems(UserRecord("p", bytes(size), caller=caller))
    )
    # ... is at least the caller's bytes below what a record without a caller may carry,
    assert not _problems(UserRecord("p", bytes(size + 512)))
    # and its one-record aggregate (with an aggregate id, the caller's tag) fits the stream.
    assert len(encode([UserRecord("p", bytes(size), caller=caller)], AGGREGATE_ID)) + 1 <= limit


def _problems(record: UserRecord) -> bool:
    try:
        validate([record])
    except InvalidRecord:
        return True
    return False


def test_property_2_the_testing_kits_events_keep_each_records_caller():
    from shardline.testing import kinesis_event

    users = [
        UserRecord("p", b"1", None, "x", ALICE),
        UserRecord("p", b"2", None, "x", ALICE),
        UserRecord("p", b"3", None, "x", MALLORY),
        UserRecord("p", b"4"),
    ]
    event = kinesis_event(users)
    payloads = [base64.b64decode(r["kinesis"]["data"]) for r in event["Records"]]
    # Alice's two records in one aggregate, Mallory's alone but still an aggregate (its caller
    # travels only in one), the caller-less record plain.
    assert [decode(p) if p.startswith(MAGIC) else p for p in payloads] == [users[:2], [users[2]], b"4"]
