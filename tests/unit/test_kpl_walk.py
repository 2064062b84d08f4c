"""The fast walk of a KPL body (`shardline.kpl._walk`) reads what the generic reader reads.

The walk takes the layout every KPL writes; these aggregates stress where it leaves its tightest
loop: partition keys of 10 bytes (their length byte is the table's tag, 0A) or holding a newline,
key indexes of two bytes, data lengths of two bytes, explicit hash keys, shardline's ids (explicit
and derived), the caller and the aggregate id. Whatever the walk answers must be what
`_decode_generic` answers for the same body, and what was encoded.
"""

from __future__ import annotations

import hashlib

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shardline.kinesis import UserRecord
from shardline.kpl import MAGIC, encode
from shardline.kpl._decode import _decode_generic, _decode_record, decode_aggregate, decode_columns
from shardline.kpl._identity import AggregateId, new_producer_id
from shardline.kpl._walk import walk

AGGREGATE_ID = AggregateId(new_producer_id(), "3", 9, 1).encode()
visible = st.characters(min_codepoint=0x21, max_codepoint=0x7E)
keys = st.one_of(
    st.sampled_from(["user-12345", "a\nb", "\n", "k"]),  # a 0A length byte, a 0A inside a key
    st.text(min_size=1, max_size=40).filter(lambda key: len(key.encode()) < 128),
)
hash_keys = st.one_of(st.none(), st.integers(0, 2**128 - 1).map(str))
ids = st.one_of(st.none(), st.text(visible, min_size=1, max_size=128))


@st.composite
def batches(draw: st.DrawFn) -> tuple[list[UserRecord], str | None, str | None]:
    pool = draw(st.lists(keys, min_size=1, max_size=200, unique=True))  # up to 2-byte key indexes
    caller = draw(st.one_of(st.none(), st.text(visible, min_size=1, max_size=20)))
    records = [
        UserRecord(
            draw(st.sampled_from(pool)),
            draw(st.binary(max_size=300)),  # data lengths of one and two bytes
            draw(hash_keys),
            record_id := draw(ids),
            caller,
            record_id is not None and draw(st.booleans()),
        )
        for _ in range(draw(st.integers(0, 60)))
    ]
    return records, caller, draw(st.one_of(st.none(), st.just(AGGREGATE_ID)))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batches())
def test_the_walk_reads_what_the_generic_reader_reads(batch: tuple[list[UserRecord], str | None, str | None]):
    records, caller, aggregate_id = batch
    payload = encode(records, aggregate_id, caller)
    body = payload[4:-16]
    columns = walk(payload, 4, len(payload) - 16, _decode_record)
    assert columns is not None, "shardline writes the canonical layout"
    generic = _decode_generic(body)
    assert decode_aggregate(payload) == generic
    expected = [record._replace(caller=caller if records else None) for record in records]
    assert generic == (expected, aggregate_id if records else None)
    assert decode_columns(payload).odd == {
        at: (r.explicit_hash_key, r.id, r.id_derived)
        for at, r in enumerate(records)
        if r.explicit_hash_key is not None or r.id is not None
    }


def test_a_body_the_walk_leaves_is_read_by_the_generic_reader():
    """Fields out of the KPL's order inside a record (data before the key index) and a table
    entry after the records: the walk declines or reads the record alone, the answer is the same."""
    record = b"\x1a\x01z\x08\x00"  # data, then the key index
    body = b"\x0a\x01k" + b"\x1a" + bytes([len(record)]) + record + b"\x0a\x01j"
    payload = MAGIC + body + hashlib.md5(body).digest()
    assert decode_aggregate(payload) == _decode_generic(body) == ([UserRecord("k", b"z")], None)


def test_two_byte_key_indexes_next_to_hash_keys_and_ids_are_read_as_written():
    records = [
        UserRecord(
            f"key-{n}",
            bytes([n % 256]) * (n % 3 * 100),  # 0, 100 and 200 bytes: lengths of one and two bytes
            str(n * 7919) if n % 5 == 0 else None,
            f"id-{n}" if n % 4 else None,
            None,
            n % 8 == 1,
        )
        for n in range(300)  # indexes past 127 take two bytes
    ]
    payload = encode(records, AGGREGATE_ID)
    assert walk(payload, 4, len(payload) - 16, _decode_record) is not None
    assert decode_aggregate(payload) == _decode_generic(payload[4:-16]) == (records, AGGREGATE_ID)
