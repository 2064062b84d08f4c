"""The KPL aggregated-record codec: byte-exact against the real KPL, exact sizes, strict decoding.

Protobuf bodies in these tests are built by hand with the small helpers below (not with the
codec under test), so the decoder is checked against an independent reading of the wire format.
"""

from __future__ import annotations

import base64
import hashlib
import json
from itertools import accumulate
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shardline.kinesis import MAX_HASH_KEY, UserRecord
from shardline.kpl import (
    DIGEST_SIZE,
    FRAMING_SIZE,
    MAGIC,
    AggregateBuilder,
    AggregationError,
    decode,
    encode,
    is_aggregated,
)
from shardline.kpl._encode import varint_size

# Aggregated records produced by the real KPL (from the awslabs kinesis-aggregation test suite,
# Apache-2.0), kept in the repository so the tests need nothing outside it.
CONFORMANCE_FILE = Path(__file__).resolve().parents[1] / "conformance" / "kpl_aggregated_records.json"

# -- hand-rolled protobuf --------------------------------------------------------------------

VARINT, FIXED64, LENGTH_DELIMITED, FIXED32 = 0, 1, 2, 5


def varint(value: int, width: int | None = None) -> bytes:
    """A protobuf varint; with `width`, padded to exactly that many bytes (a non-minimal encoding)."""
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        out.append(byte)
        if not value:
            break
    if width is not None:
        assert width >= len(out)
        while len(out) < width:
            out.append(0)
    for i in range(len(out) - 1):
        out[i] |= 0x80
    return bytes(out)


def key(field: int, wire_type: int) -> bytes:
    return varint(field << 3 | wire_type)


def uint(field: int, value: int, width: int | None = None) -> bytes:
    return key(field, VARINT) + varint(value, width)


def blob(field: int, payload: bytes, width: int | None = None) -> bytes:
    return key(field, LENGTH_DELIMITED) + varint(len(payload), width) + payload


def fixed64(field: int, value: int = 0x0102030405060708) -> bytes:
    return key(field, FIXED64) + value.to_bytes(8, "little")


def fixed32(field: int, value: int = 0x01020304) -> bytes:
    return key(field, FIXED32) + value.to_bytes(4, "little")


def pk_entry(partition_key: str) -> bytes:
    return blob(1, partition_key.encode("utf-8"))


def ehk_entry(explicit_hash_key: str) -> bytes:
    return blob(2, explicit_hash_key.encode("ascii"))


def record(*fields: bytes) -> bytes:
    """An AggregatedRecord.records entry (field 3) whose body is the given fields, in that order."""
    return blob(3, b"".join(fields))


def tag(tag_key: str, value: str | None = None) -> bytes:
    """A Record.tags entry (field 4): Tag { required string key = 1; optional string value = 2; }."""
    body = blob(1, tag_key.encode())
    if value is not None:
        body += blob(2, value.encode())
    return blob(4, body)


def frame(body: bytes) -> bytes:
    """Magic + body + MD5(body): a payload whose framing is valid whatever the body holds."""
    return MAGIC + body + hashlib.md5(body).digest()


def body_of(payload: bytes) -> bytes:
    return payload[len(MAGIC) : -DIGEST_SIZE]


def reference_fields(records: list[UserRecord]) -> tuple[list[bytes], list[bytes]]:
    """The top-level fields the KPL writes for `records`: (key-table entries, record entries)."""
    pk_index: dict[str, int] = {}
    ehk_index: dict[str, int] = {}
    pk_table: list[bytes] = []
    ehk_table: list[bytes] = []
    entries: list[bytes] = []
    for r in records:
        if r.partition_key not in pk_index:
            pk_index[r.partition_key] = len(pk_index)
            pk_table.append(pk_entry(r.partition_key))
        fields = [uint(1, pk_index[r.partition_key])]
        if r.explicit_hash_key is not None:
            if r.explicit_hash_key not in ehk_index:
                ehk_index[r.explicit_hash_key] = len(ehk_index)
                ehk_table.append(ehk_entry(r.explicit_hash_key))
            fields.append(uint(2, ehk_index[r.explicit_hash_key]))
        fields.append(blob(3, r.data))
        entries.append(record(*fields))
    return pk_table + ehk_table, entries


class ReferenceError(Exception):
    pass


def _ref_varint(buf: bytes, pos: int, end: int) -> tuple[int, int]:
    value = 0
    for i in range(10):
        if pos >= end:
            raise ReferenceError("truncated varint")
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << (7 * i)
        if byte < 0x80:
            return value, pos
    raise ReferenceError("varint longer than 10 bytes")


def _ref_fields(buf: bytes, pos: int, end: int):
    """Yield (field number, wire type, value) for every field in buf[pos:end]; value is an int or bytes."""
    while pos < end:
        tag_value, pos = _ref_varint(buf, pos, end)
        field, wire_type = tag_value >> 3, tag_value & 7
        if wire_type == VARINT:
            value, pos = _ref_varint(buf, pos, end)
        elif wire_type == LENGTH_DELIMITED:
            length, pos = _ref_varint(buf, pos, end)
            if pos + length > end:
                raise ReferenceError("truncated length-delimited field")
            value, pos = buf[pos : pos + length], pos + length
        elif wire_type in (FIXED64, FIXED32):
            size = 8 if wire_type == FIXED64 else 4
            if pos + size > end:
                raise ReferenceError("truncated fixed field")
            value, pos = buf[pos : pos + size], pos + size
        else:
            raise ReferenceError(f"wire type {wire_type}")
        yield field, wire_type, value


def reference_decode(body: bytes) -> list[UserRecord]:  # noqa: C901 -- over the gate before it existed; issue 26 cuts it
    """A slow, plain reading of the AggregatedRecord schema; raises ReferenceError on malformed input."""
    pk_table: list[str] = []
    ehk_table: list[str] = []
    raw: list[tuple[int, int | None, bytes]] = []
    try:
        for field, wire_type, value in _ref_fields(body, 0, len(body)):
            if wire_type != LENGTH_DELIMITED or field not in (1, 2, 3):
                continue
            if field == 1:
                pk_table.append(value.decode("utf-8"))
            elif field == 2:
                ehk_table.append(value.decode("utf-8"))
            else:
                pk_i = ehk_i = data = None
                for sub, sub_type, sub_value in _ref_fields(value, 0, len(value)):
                    if (sub, sub_type) == (1, VARINT):
                        pk_i = sub_value
                    elif (sub, sub_type) == (2, VARINT):
                        ehk_i = sub_value
                    elif (sub, sub_type) == (3, LENGTH_DELIMITED):
                        data = bytes(sub_value)
                if pk_i is None or data is None:
                    raise ReferenceError("record lacks partition key index or data")
                raw.append((pk_i, ehk_i, data))
    except UnicodeDecodeError:
        raise ReferenceError("key not UTF-8") from None
    if any(not (key.isascii() and key.isdigit()) or int(key) >= 2**128 for key in ehk_table):
        raise ReferenceError("an explicit hash key Kinesis would refuse")  # shardline's rule, not protobuf's
    if any(not 1 <= len(key.encode("utf-16-le", "surrogatepass")) // 2 <= 256 for key in pk_table):
        raise ReferenceError("a partition key Kinesis would refuse")  # shardline's rule, as above
    out = []
    for pk_i, ehk_i, data in raw:
        if pk_i >= len(pk_table) or (ehk_i is not None and ehk_i >= len(ehk_table)):
            raise ReferenceError("index out of range")
        out.append(UserRecord(pk_table[pk_i], data, None if ehk_i is None else ehk_table[ehk_i]))
    return out


def assert_codec_agrees(records: list[UserRecord]) -> bytes:
    """encode, AggregateBuilder (with exact incremental sizes) and decode all agree on `records`."""
    payload = encode(records)
    builder = AggregateBuilder()
    assert builder.size == FRAMING_SIZE
    for r in records:
        predicted = builder.size_with(r)
        assert builder.size_with(r) == predicted  # asking does not change anything
        builder.add(r)
        assert builder.size == predicted
    assert builder.count == len(records)
    built = builder.build()
    assert built == payload
    assert builder.size == len(built)
    assert decode(payload) == records
    return payload


# -- conformance with the real KPL -----------------------------------------------------------


def _conformance_cases() -> list[dict]:
    if not CONFORMANCE_FILE.is_file():
        pytest.fail(f"conformance file missing: {CONFORMANCE_FILE}")
    cases = json.loads(CONFORMANCE_FILE.read_text())["cases"]
    assert cases, f"no cases in {CONFORMANCE_FILE}"
    return cases


def _case_records(case: dict) -> list[UserRecord]:
    return [
        UserRecord(r["partition_key"], r["data_utf8"].encode("utf-8"), r.get("explicit_hash_key"))
        for r in case["records"]
    ]


KPL_CASE_NAMES = ["with_explicit_hash_keys", "without_explicit_hash_keys"]


@pytest.fixture(params=KPL_CASE_NAMES)
def kpl_case(request) -> tuple[list[UserRecord], bytes]:
    case = {case["name"]: case for case in _conformance_cases()}[request.param]
    return _case_records(case), base64.b64decode(case["aggregated_base64"])


def test_conformance_file_holds_exactly_the_cases_the_tests_run():
    names = sorted(case["name"] for case in _conformance_cases())
    assert names == KPL_CASE_NAMES


def test_encode_reproduces_the_kpl_bytes(kpl_case):
    records, kpl_bytes = kpl_case
    assert encode(records) == kpl_bytes


def test_builder_reproduces_the_kpl_bytes_with_exact_sizes(kpl_case):
    records, kpl_bytes = kpl_case
    builder = AggregateBuilder()
    for r in records:
        predicted = builder.size_with(r)
        builder.add(r)
        assert builder.size == predicted
    assert builder.build() == kpl_bytes
    assert builder.size == len(kpl_bytes)


def test_decode_returns_exactly_the_kpl_records(kpl_case):
    records, kpl_bytes = kpl_case
    decoded = decode(kpl_bytes)
    assert decoded == records
    assert all(type(r) is UserRecord and type(r.data) is bytes for r in decoded)


def test_the_independent_reference_encoding_matches_the_kpl(kpl_case):
    # Guards the helpers the other tests build bodies with.
    records, kpl_bytes = kpl_case
    tables, entries = reference_fields(records)
    assert frame(b"".join(tables + entries)) == kpl_bytes
    assert reference_decode(body_of(kpl_bytes)) == records


# -- round trips -----------------------------------------------------------------------------

# Keys Kinesis takes: 1 to 256 UTF-16 code units (up to 128 characters of any plane, or up to
# 256 of the Basic Multilingual Plane, one unit each).
partition_keys = st.one_of(
    st.text(st.characters(codec="utf-8"), min_size=1, max_size=128),
    st.text(st.characters(codec="utf-8", max_codepoint=0xFFFF), min_size=129, max_size=256),
)
explicit_hash_keys = st.one_of(
    st.none(),
    st.integers(0, MAX_HASH_KEY).map(str),
    st.sampled_from(["0", "1", "127", "128", str(MAX_HASH_KEY)]),
)
large_data = st.tuples(st.integers(16_384, 70_000), st.binary(min_size=1, max_size=64)).map(
    lambda t: (t[1] * (t[0] // len(t[1]) + 1))[: t[0]]
)
small_data = st.binary(max_size=2000)


@st.composite
def record_lists(draw, max_size: int = 200, allow_large: bool = True) -> list[UserRecord]:
    """1..max_size records, keys often repeated (drawn from a small pool), occasionally big data."""
    key_pool = draw(st.lists(partition_keys, min_size=1, max_size=8))
    ehk_pool = draw(st.lists(explicit_hash_keys, min_size=1, max_size=4))
    keys = st.one_of(st.sampled_from(key_pool), partition_keys)
    ehks = st.one_of(st.sampled_from(ehk_pool), explicit_hash_keys)
    data = st.one_of(small_data, small_data, small_data, large_data) if allow_large else small_data
    entries = st.builds(UserRecord, keys, data, ehks, st.none(), st.none(), st.just(False))
    size = draw(st.one_of(st.integers(1, 10), st.integers(1, max_size)))  # long lists are drawn often
    return draw(st.lists(entries, min_size=size, max_size=size))


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(record_lists())
def test_decode_inverts_encode(records):
    assert decode(encode(records)) == records


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(record_lists())
def test_builder_sizes_are_exact_and_it_builds_what_encode_writes(records):
    assert_codec_agrees(records)


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(record_lists(max_size=30, allow_large=False))
def test_encoding_matches_the_reference_layout(records):
    tables, entries = reference_fields(records)
    assert encode(records) == frame(b"".join(tables + entries))


def test_empty_aggregate_round_trips():
    assert encode([]) == frame(b"") == AggregateBuilder().build()
    assert len(encode([])) == FRAMING_SIZE
    assert decode(encode([])) == []


def test_encode_accepts_any_iterable():
    records = [UserRecord("a", b"1"), UserRecord("b", b"2", "5")]
    assert encode(r for r in records) == encode(records)


@pytest.mark.parametrize(
    "data_len",
    [*range(0, 3), *range(118, 134), *range(16_370, 16_392), 2**21 - 8, 2**21 + 8],
)
def test_sizes_are_exact_around_varint_boundaries(data_len):
    # Record and data lengths cross the 1->2 byte (128), 2->3 (16384) and 3->4 (2**21) varint steps.
    data = bytes(range(256)) * (data_len // 256) + bytes(data_len % 256)
    records = [UserRecord("k", data), UserRecord("k", data, "42"), UserRecord("other", data[: data_len // 2])]
    assert_codec_agrees(records)


@pytest.mark.parametrize("key_count", [127, 128, 129, 16_384, 16_385])
def test_sizes_are_exact_when_table_indexes_need_more_varint_bytes(key_count):
    records = [UserRecord(f"k{i}", b"x", str(i)) for i in range(key_count)]
    records += [UserRecord(f"k{key_count - 1}", b"again", str(key_count - 1)), UserRecord("k0", b"", "0")]
    assert_codec_agrees(records)


@pytest.mark.parametrize("key_len", [1, 127, 128, 256])
def test_sizes_are_exact_for_long_multibyte_partition_keys(key_len):
    # An emoji is two UTF-16 code units: 128 of them are the longest key Kinesis takes.
    keys = ["é" * key_len, "😀" * min(key_len, 128), "a" * key_len]
    records = [UserRecord(k, k.encode()) for k in keys] + [UserRecord(keys[1], b"")]
    assert_codec_agrees(records)


def test_size_with_does_not_change_the_builder():
    builder = AggregateBuilder()
    builder.add(UserRecord("a", b"x"))
    before = builder.build()
    size = builder.size
    builder.size_with(UserRecord("b", b"y" * 500, "7"))
    assert builder.build() == before
    assert builder.size == size
    assert builder.count == 1


# -- explicit hash keys are never borrowed ---------------------------------------------------


def test_record_without_hash_key_decodes_with_none_next_to_records_that_have_one():
    records = [
        UserRecord("a", b"1", "100"),
        UserRecord("b", b"2"),
        UserRecord("a", b"3", "100"),
        UserRecord("c", b"4"),
        UserRecord("d", b"5", "7"),
    ]
    decoded = decode(encode(records))
    assert decoded == records
    assert [r.explicit_hash_key for r in decoded] == ["100", None, "100", None, "7"]


def test_record_without_hash_key_index_does_not_borrow_entry_0_of_the_table():
    body = pk_entry("a") + ehk_entry("123") + record(uint(1, 0), blob(3, b"plain"))
    assert decode(frame(body)) == [UserRecord("a", b"plain", None)]


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(record_lists(max_size=50, allow_large=False))
def test_hash_key_presence_survives_the_round_trip(records):
    decoded = decode(encode(records))
    assert [r.explicit_hash_key is None for r in decoded] == [r.explicit_hash_key is None for r in records]


# -- decoder tolerance -----------------------------------------------------------------------

UNKNOWN_FIELDS = [
    uint(5, 300),
    fixed64(6),
    blob(7, b"\x0a\x01z unknown"),
    fixed32(8),
    uint(100, 1),  # field 100: a two-byte tag
    blob(100, b"abc"),
    fixed64(2**20),
]


# Known field numbers with a wire type the schema does not use are unknown fields too.
@pytest.mark.parametrize("unknown", [*UNKNOWN_FIELDS, uint(1, 5), uint(3, 0)], ids=lambda b: b.hex())
def test_unknown_top_level_fields_are_skipped(unknown):
    body = unknown + pk_entry("a") + unknown + ehk_entry("9") + unknown
    body += record(uint(1, 0), uint(2, 0), blob(3, b"d1")) + unknown + record(uint(1, 0), blob(3, b"d2"))
    body += unknown
    assert decode(frame(body)) == [UserRecord("a", b"d1", "9"), UserRecord("a", b"d2")]


@pytest.mark.parametrize(
    "unknown", [*UNKNOWN_FIELDS, blob(1, b"x"), blob(2, b"y"), uint(3, 9)], ids=lambda b: b.hex()
)
def test_unknown_record_fields_are_skipped(unknown):
    body = pk_entry("a") + ehk_entry("9")
    body += record(unknown, uint(1, 0), unknown, uint(2, 0), unknown, blob(3, b"d1"), unknown)
    body += record(uint(1, 0), blob(3, b"d2"), unknown)
    assert decode(frame(body)) == [UserRecord("a", b"d1", "9"), UserRecord("a", b"d2")]


def test_record_tags_are_skipped():
    body = pk_entry("a") + pk_entry("b")
    body += record(uint(1, 1), blob(3, b"one"), tag("colour", "blue"), tag("empty"))
    body += record(tag("first"), uint(1, 0), tag("k", "v"), blob(3, b"two"))
    assert decode(frame(body)) == [UserRecord("b", b"one"), UserRecord("a", b"two")]


def test_records_before_the_key_tables_are_decoded():
    body = record(uint(1, 1), uint(2, 0), blob(3, b"x")) + record(uint(1, 0), blob(3, b"y"))
    body += pk_entry("p0") + ehk_entry("5") + pk_entry("p1")
    assert decode(frame(body)) == [UserRecord("p1", b"x", "5"), UserRecord("p0", b"y")]


def test_record_fields_in_any_order_are_decoded():
    body = ehk_entry("11") + pk_entry("a") + ehk_entry("22") + pk_entry("b")
    body += record(blob(3, b"data first"), uint(1, 1))
    body += record(uint(2, 1), blob(3, b"ehk first"), uint(1, 0))
    body += record(blob(3, b"data, ehk, pk"), uint(2, 0), uint(1, 1))
    assert decode(frame(body)) == [
        UserRecord("b", b"data first"),
        UserRecord("a", b"ehk first", "22"),
        UserRecord("b", b"data, ehk, pk", "11"),
    ]


def test_multi_byte_table_indexes_are_decoded():
    keys = [f"key-{i}" for i in range(300)]
    ehks = [str(i * 1000) for i in range(200)]
    body = b"".join(map(pk_entry, keys)) + b"".join(map(ehk_entry, ehks))
    body += record(uint(1, 299), uint(2, 199), blob(3, b"a")) + record(uint(1, 128), blob(3, b"b"))
    body += record(uint(1, 127), uint(2, 128), blob(3, b"c"))
    assert decode(frame(body)) == [
        UserRecord("key-299", b"a", "199000"),
        UserRecord("key-128", b"b"),
        UserRecord("key-127", b"c", "128000"),
    ]


@pytest.mark.parametrize("width", [2, 3, 5, 10])
def test_non_minimal_varints_for_indexes_and_lengths_are_decoded(width):
    body = blob(1, b"a", width) + blob(2, b"77", width) + pk_entry("b")
    body += key(3, LENGTH_DELIMITED)
    inner = uint(1, 1, width) + uint(2, 0, width) + blob(3, b"payload", width)
    body += varint(len(inner), width) + inner
    body += record(uint(1, 0, width), blob(3, b"", width))
    assert decode(frame(body)) == [UserRecord("b", b"payload", "77"), UserRecord("a", b"")]


def test_non_minimal_record_tag_is_still_a_record():
    # Field 3 / wire type 2 written as a two-byte varint tag (9A 00). Protobuf parsers (the KCL's
    # protobuf-java among them) read tags as varints, so this is record 0, not an unknown field.
    inner = uint(1, 0) + blob(3, b"x")
    body = pk_entry("a") + b"\x9a\x00" + varint(len(inner)) + inner
    assert decode(frame(body)) == [UserRecord("a", b"x")]


def test_non_minimal_record_field_tags_are_still_known_fields():
    # Record fields 1 and 3 with two-byte tags (88 00, 9A 00).
    inner = b"\x88\x00" + varint(0) + b"\x9a\x00" + varint(1) + b"x"
    body = pk_entry("a") + blob(3, inner)
    assert decode(frame(body)) == [UserRecord("a", b"x")]


def test_large_data_with_multi_byte_lengths_is_decoded_from_a_hand_built_body():
    data = bytes(range(256)) * 100  # 25,600 bytes: three-byte varints
    body = pk_entry("k") + record(uint(1, 0), blob(3, data)) + record(blob(3, data[:200]), uint(1, 0))
    assert decode(frame(body)) == [UserRecord("k", data), UserRecord("k", data[:200])]


# -- malformed input -------------------------------------------------------------------------

VALID_BODY = pk_entry("a") + ehk_entry("1") + record(uint(1, 0), uint(2, 0), blob(3, b"data"))


@pytest.mark.parametrize("position", range(4))
def test_bad_magic_is_rejected(position):
    payload = bytearray(frame(VALID_BODY))
    payload[position] ^= 0x01
    with pytest.raises(AggregationError):
        decode(bytes(payload))


@pytest.mark.parametrize(
    "payload",
    [b"", b"\xf3", MAGIC, MAGIC + bytes(15), (MAGIC + bytes(16))[:-1]],
    ids=["empty", "one byte", "magic only", "19 bytes", "19 bytes again"],
)
def test_too_short_payloads_are_rejected(payload):
    assert len(payload) < FRAMING_SIZE
    with pytest.raises(AggregationError):
        decode(payload)


def test_shortest_valid_aggregate_is_magic_plus_digest_of_nothing():
    assert decode(MAGIC + hashlib.md5(b"").digest()) == []


def test_payload_without_magic_is_rejected():
    with pytest.raises(AggregationError):
        decode(VALID_BODY + hashlib.md5(VALID_BODY).digest())


@pytest.mark.parametrize("position", range(len(VALID_BODY)))
def test_md5_mismatch_after_flipping_one_body_byte_is_rejected(position):
    payload = bytearray(frame(VALID_BODY))
    payload[len(MAGIC) + position] ^= 0x40
    with pytest.raises(AggregationError, match="MD5"):
        decode(bytes(payload))


def test_md5_mismatch_in_the_digest_is_rejected():
    payload = bytearray(frame(VALID_BODY))
    payload[-1] ^= 0xFF
    with pytest.raises(AggregationError, match="MD5"):
        decode(bytes(payload))


TRUNCATION_RECORDS = [
    UserRecord("alpha", b"first"),
    UserRecord("β-key", b"x" * 200, "340282366920938463463374607431768211455"),
    UserRecord("alpha", b""),
    UserRecord("gamma", b"\x00\xff" * 70, "0"),
    UserRecord("β-key", b"last"),
]


def _assert_truncations_are_rejected_or_prefixes(records: list[UserRecord], cuts=None) -> None:
    tables, entries = reference_fields(records)
    body = body_of(encode(records))
    assert body == b"".join(tables + entries)
    # The only cuts that leave valid protobuf are those between top-level fields; after k of them,
    # the records decoded are the complete record entries among those k.
    boundaries = {
        end: max(0, k - len(tables))
        for k, end in enumerate(accumulate(map(len, tables + entries), initial=0))
    }
    for cut in range(len(body)) if cuts is None else cuts:
        truncated = frame(body[:cut])
        if cut in boundaries:
            assert decode(truncated) == records[: boundaries[cut]], cut
        else:
            with pytest.raises(AggregationError):
                decode(truncated)


def test_every_truncation_is_rejected_unless_it_ends_between_fields():
    _assert_truncations_are_rejected_or_prefixes(TRUNCATION_RECORDS)


def test_every_truncation_of_an_aggregate_with_large_records_is_rejected_or_a_prefix():
    records = [UserRecord("k", bytes(20_000)), UserRecord("k", b"tail", "5")]
    body_len = len(body_of(encode(records)))
    cuts = [*range(40), *range(body_len - 120, body_len)]  # the headers and the record boundary
    _assert_truncations_are_rejected_or_prefixes(records, cuts)


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(record_lists(max_size=8, allow_large=False), st.data())
def test_any_truncation_is_rejected_or_a_prefix(records, data):
    body_len = len(body_of(encode(records)))
    cuts = data.draw(st.lists(st.integers(0, body_len - 1), min_size=1, max_size=20))
    _assert_truncations_are_rejected_or_prefixes(records, cuts)


def test_truncating_the_payload_itself_is_rejected_at_every_length():
    payload = encode(TRUNCATION_RECORDS)
    for cut in range(len(payload)):
        with pytest.raises(AggregationError):
            decode(payload[:cut])


MALFORMED_BODIES = {
    "partition key index out of range": pk_entry("a") + record(uint(1, 1), blob(3, b"x")),
    "partition key index with an empty table": record(uint(1, 0), blob(3, b"x")),
    "partition key index far out of range": pk_entry("a") + record(uint(1, 2**40), blob(3, b"x")),
    "hash key index out of range": pk_entry("a")
    + ehk_entry("5")
    + record(uint(1, 0), uint(2, 1), blob(3, b"")),
    "hash key index with an empty table": pk_entry("a") + record(uint(1, 0), uint(2, 0), blob(3, b"x")),
    "hash key index out of range, second record": pk_entry("a")
    + ehk_entry("5")
    + record(uint(1, 0), uint(2, 0), blob(3, b"ok"))
    + record(uint(1, 0), uint(2, 200), blob(3, b"bad")),
    "record missing data": pk_entry("a") + record(uint(1, 0)),
    "record missing data after a good record": pk_entry("a")
    + record(uint(1, 0), blob(3, b"ok"))
    + record(uint(1, 0), uint(2, 0)),
    "record missing partition key index": pk_entry("a") + record(blob(3, b"x")),
    "empty record": pk_entry("a") + record(),
    "record length beyond the body": pk_entry("a") + key(3, LENGTH_DELIMITED) + varint(50) + uint(1, 0),
    "data overruns its record": pk_entry("a")
    + key(3, LENGTH_DELIMITED)
    + varint(4)
    + uint(1, 0)
    + key(3, LENGTH_DELIMITED)
    + varint(6)
    + b"abcdef"
    + record(uint(1, 0), blob(3, b"next")),
    "partition key index overruns its record": pk_entry("a")
    + key(3, LENGTH_DELIMITED)
    + varint(4)
    + blob(3, b"ab")
    + uint(1, 0)
    + pk_entry("b"),
    "key table entry beyond the body": key(1, LENGTH_DELIMITED) + varint(10) + b"abc",
    "fixed64 beyond the body": pk_entry("a") + key(6, FIXED64) + b"1234567",
    "fixed32 beyond the body": pk_entry("a") + key(6, FIXED32) + b"123",
    "unknown length-delimited beyond the body": pk_entry("a") + key(6, LENGTH_DELIMITED) + varint(9) + b"1",
    "unknown fixed64 beyond its record": pk_entry("a")
    + key(3, LENGTH_DELIMITED)
    + varint(7)
    + uint(1, 0)
    + blob(3, b"")
    + key(6, FIXED64)
    + b"1"
    + record(uint(1, 0), blob(3, b"12345678")),
    "tag without a value": pk_entry("a") + b"\x1a",
    "length varint cut short": pk_entry("a") + b"\x1a\x80",
    "unknown tag varint cut short": pk_entry("a") + b"\xa0",
    "index varint cut short": pk_entry("a") + key(3, LENGTH_DELIMITED) + varint(2) + b"\x08\x80",
    "varint of 11 bytes as an index": pk_entry("a")
    + record(key(1, VARINT) + b"\x80" * 10 + b"\x00", blob(3, b"x")),
    "varint of 11 bytes as a length": pk_entry("a") + key(3, LENGTH_DELIMITED) + b"\x80" * 10 + b"\x00",
    "varint of 11 bytes as a tag": pk_entry("a") + b"\x80" * 10 + b"\x00",
    "varint of 11 bytes as an unknown value": pk_entry("a") + key(9, VARINT) + b"\xff" * 10 + b"\x01",
    "partition key not UTF-8": blob(1, b"\xff\xfe") + record(uint(1, 0), blob(3, b"x")),
    "partition key with a lone surrogate": blob(1, b"\xed\xa0\x80") + record(uint(1, 0), blob(3, b"x")),
    "unused partition key not UTF-8": pk_entry("a") + blob(1, b"\xc3") + record(uint(1, 0), blob(3, b"x")),
    "hash key not UTF-8": pk_entry("a") + blob(2, b"\x80") + record(uint(1, 0), uint(2, 0), blob(3, b"x")),
}
for _wire_type in (3, 4, 6, 7):
    MALFORMED_BODIES[f"top-level wire type {_wire_type}"] = (
        pk_entry("a") + key(9, _wire_type) + b"\x00" * 8 + record(uint(1, 0), blob(3, b"x"))
    )
    MALFORMED_BODIES[f"record wire type {_wire_type}"] = pk_entry("a") + record(
        uint(1, 0), key(9, _wire_type) + b"\x00" * 8, blob(3, b"x")
    )
    MALFORMED_BODIES[f"known field with wire type {_wire_type}"] = pk_entry("a") + record(
        key(1, _wire_type), blob(3, b"x")
    )


@pytest.mark.parametrize("body", MALFORMED_BODIES.values(), ids=list(MALFORMED_BODIES))
def test_malformed_body_is_rejected(body):
    with pytest.raises(AggregationError):
        decode(frame(body))


@pytest.mark.parametrize("body", MALFORMED_BODIES.values(), ids=list(MALFORMED_BODIES))
def test_the_reference_decoder_agrees_the_body_is_malformed(body):
    # Guards the reference decoder the fuzz tests compare against.
    with pytest.raises(ReferenceError):
        reference_decode(body)


def test_ten_byte_varint_is_the_longest_accepted():
    body = pk_entry("a") + record(key(1, VARINT) + b"\x80" * 9 + b"\x00", blob(3, b"x"))
    assert decode(frame(body)) == [UserRecord("a", b"x")]


def test_aggregation_error_is_a_value_error():
    assert issubclass(AggregationError, ValueError)


# -- fuzzing ---------------------------------------------------------------------------------


def _decode_or_error(body: bytes) -> list[UserRecord] | None:
    """decode(frame(body)), or None if it raised AggregationError; any other exception propagates."""
    try:
        decoded = decode(frame(body))
    except AggregationError:
        return None
    assert isinstance(decoded, list)
    assert all(type(r) is UserRecord for r in decoded)
    assert all(isinstance(r.partition_key, str) and type(r.data) is bytes for r in decoded)
    assert all(r.explicit_hash_key is None or isinstance(r.explicit_hash_key, str) for r in decoded)
    return decoded


def _reference_or_error(body: bytes) -> list[UserRecord] | None:
    try:
        return reference_decode(body)
    except ReferenceError:
        return None


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=400))
def test_arbitrary_bodies_decode_to_records_or_raise_aggregation_error(body):
    _decode_or_error(body)


tag_text = st.text(st.characters(codec="utf-8"), max_size=3)
field_soup = st.lists(
    st.one_of(
        st.builds(pk_entry, partition_keys),
        st.builds(ehk_entry, st.integers(0, 10**6).map(str)),
        st.builds(blob, st.integers(1, 3), st.binary(max_size=20)),
        st.builds(uint, st.integers(0, 200), st.integers(0, 2**70)),
        st.builds(fixed64, st.integers(1, 200)),
        st.builds(fixed32, st.integers(1, 200)),
        st.builds(
            lambda fields: record(*fields),
            st.lists(
                st.one_of(
                    st.builds(uint, st.integers(1, 2), st.integers(0, 4)),
                    st.builds(blob, st.just(3), st.binary(max_size=20)),
                    st.builds(tag, tag_text, st.one_of(st.none(), tag_text)),
                    st.builds(uint, st.integers(5, 200), st.integers(0, 2**64)),
                ),
                max_size=5,
            ),
        ),
    ),
    max_size=12,
).map(b"".join)


@settings(max_examples=500, deadline=None)
@given(field_soup)
def test_bodies_of_plausible_fields_decode_as_the_reference_does(body):
    assert _decode_or_error(body) == _reference_or_error(body)


@st.composite
def mutated_bodies(draw) -> bytes:
    """A valid body, then a few byte flips, insertions, deletions or a truncation."""
    body = bytearray(body_of(encode(draw(record_lists(max_size=6, allow_large=False)))))
    for _ in range(draw(st.integers(1, 3))):
        op = draw(st.sampled_from(["flip", "set", "insert", "delete", "truncate"]))
        at = draw(st.integers(0, len(body)))
        if op == "insert":
            body[at:at] = draw(st.binary(min_size=1, max_size=3))
        elif op == "truncate":
            del body[at:]
        elif at < len(body):
            if op == "flip":
                body[at] ^= 1 << draw(st.integers(0, 7))
            elif op == "set":
                body[at] = draw(st.sampled_from([0x00, 0x08, 0x0A, 0x10, 0x12, 0x1A, 0x7F, 0x80, 0xFF]))
            else:
                del body[at : at + draw(st.integers(1, 4))]
    return bytes(body)


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated_bodies())
def test_mutated_aggregates_decode_as_the_reference_does_or_are_rejected(body):
    assert _decode_or_error(body) == _reference_or_error(body)


# -- is_aggregated ---------------------------------------------------------------------------


@settings(deadline=None)
@given(record_lists(max_size=5, allow_large=False))
def test_encoded_output_is_aggregated(records):
    assert is_aggregated(encode(records))


def test_empty_aggregate_is_aggregated():
    assert is_aggregated(encode([]))


@pytest.mark.parametrize(
    "payload",
    [
        b"",
        MAGIC,
        MAGIC + bytes(15),
        b"plain user data that is long enough",
        bytes(40),
        b"\xf3\x89\x9a\xc3" + bytes(16),
    ],
    ids=["empty", "magic only", "19 bytes with magic", "text", "zeros", "magic off by one bit"],
)
def test_payloads_that_are_not_aggregates(payload):
    assert not is_aggregated(payload)


def test_is_aggregated_checks_framing_only_not_the_digest():
    assert is_aggregated(MAGIC + bytes(16))
    with pytest.raises(AggregationError):
        decode(MAGIC + bytes(16))


def test_varint_size_matches_the_encoding():
    for value in [0, 1, 127, 128, 16_383, 16_384, 2**21 - 1, 2**21, 2**63, 2**64 - 1]:
        assert varint_size(value) == len(varint(value))


@given(st.integers(0, 2**64 - 1))
def test_varint_size_matches_the_encoding_for_any_uint64(value):
    assert varint_size(value) == len(varint(value))
