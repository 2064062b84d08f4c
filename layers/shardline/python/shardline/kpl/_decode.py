"""Decoding KPL aggregated records (the wire format is drawn in `_encode`): a fast walk of the
layout every KPL writes (`_walk`), and a generic protobuf reader that skips unknown fields and
names the fault.
"""

from __future__ import annotations

from itertools import repeat
from typing import overload

from shardline.errors import AggregationError
from shardline.kinesis._limits import MAX_PARTITION_KEY_LENGTH
from shardline.kinesis._records import UserRecord, partition_key_length
from shardline.kpl._encode import DIGEST_SIZE, FRAMING_SIZE, MAGIC, _md5, varint_size
from shardline.kpl._identity import AGGREGATE_TAG, CALLER_TAG
from shardline.kpl._walk import Columns, id_of, walk

_HASH_KEYS = 2**128


def _read_varint(buf: bytes, pos: int, end: int) -> tuple[int, int]:
    """Decode a varint at `pos`; return (value, position after it). Rejects truncation and > 64 bits."""
    result = 0
    shift = 0
    while True:
        if pos >= end:
            raise AggregationError("truncated varint")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7
        if shift >= 64:
            raise AggregationError("varint longer than 64 bits")


def _skip_field(buf: bytes, pos: int, end: int, tag: int) -> int:
    """Skip an unknown field whose tag was just read; return the position after it."""
    wire_type = tag & 7
    if wire_type == 0:
        return _read_varint(buf, pos, end)[1]
    if wire_type == 1:
        pos += 8
    elif wire_type == 2:
        length, pos = _read_varint(buf, pos, end)
        pos += length
    elif wire_type == 5:
        pos += 4
    else:
        raise AggregationError(f"unsupported protobuf wire type {wire_type}")
    if pos > end:
        raise AggregationError("truncated field")
    return pos


def is_aggregated(payload: bytes) -> bool:
    """True if `payload` is framed as a KPL aggregate (magic and room for an MD5). Cheap: no hashing."""
    return len(payload) >= FRAMING_SIZE and payload[:4] == MAGIC


def decode(payload: bytes) -> list[UserRecord]:
    """Decode a KPL aggregated record into its user records, in order.

    Raises `AggregationError` on a bad magic, an MD5 mismatch, truncation, an index that
    points outside its table, or a record with both an explicit and a derived id. Unknown fields
    and tags are skipped, but a record's `sl.id` tag is its `id`, its `sl.k` tag its `id` with
    `id_derived=True`, and the first record's `sl.c` tag is the `caller` of every record (None
    when absent). A record without a hash-key index has `explicit_hash_key=None`.
    """
    return decode_aggregate(payload)[0]


def decode_aggregate(payload: bytes) -> tuple[list[UserRecord], str | None]:
    """`decode`, and the aggregate's id (the `sl.a` tag of its first record that has one), or None."""
    columns = decode_columns(payload)
    return members(columns), columns.aggregate_id


def members(columns: Columns) -> list[UserRecord]:
    """An aggregate's columns (`decode_columns`) as its user records."""
    keys, data, caller = columns.keys, columns.data, columns.caller
    if columns.odd:
        ids, derived = columns.ids()
        fields = zip(keys, data, columns.hash_keys(), ids, repeat(caller), derived)
    else:  # the common aggregate: no hash keys, no ids
        fields = zip(keys, data, repeat(None), repeat(None), repeat(caller), repeat(False))
    # tuple.__new__ per zipped row, in C: UserRecord is a NamedTuple (its __new__ is Python's)
    return list(map(tuple.__new__, repeat(UserRecord), fields))


def decode_columns(payload: bytes) -> Columns:
    """`decode_aggregate` by column (`_walk.Columns`): what a consumer wraps without a `UserRecord`."""
    if not is_aggregated(payload):
        raise AggregationError("not a KPL aggregated record (missing magic F3 89 9A C2)")
    payload = bytes(payload)  # a no-op for bytes; slices of it below are the records' data
    end = len(payload) - DIGEST_SIZE
    if _md5(memoryview(payload)[4:end]).digest() != payload[end:]:
        raise AggregationError("MD5 trailer does not match the aggregated record body")
    try:
        columns = walk(payload, 4, end, _decode_record)
    except (IndexError, UnicodeDecodeError, AggregationError):  # let the generic decoder name the fault
        columns = None
    if columns is not None:
        return columns
    records, aggregate_id = _decode_generic(payload[4:end])
    odd = {at: (r[2], r[3], r[5]) for at, r in enumerate(records) if r[2] is not None or r[3] is not None}
    caller = records[0].caller if records else None
    return Columns([r[0] for r in records], [r[1] for r in records], odd, caller, aggregate_id)


def _check_keys(partition_keys: list[str], hash_keys: list[str]) -> None:
    """The key tables hold only what Kinesis would take from a producer: a partition key of 1 to
    256 UTF-16 code units, a decimal hash key below 2**128. A table that breaks this makes the
    aggregate malformed here (it is not what a KPL builds: a forged one, passed through whole),
    rather than handing every consumer records whose keys never went through Kinesis's checks."""
    for key in partition_keys:
        # A key of at most 128 characters is at most 256 units: only longer ones are measured.
        long = len(key) > MAX_PARTITION_KEY_LENGTH // 2
        if not key or (long and partition_key_length(key) > MAX_PARTITION_KEY_LENGTH):
            raise AggregationError(
                f"partition key {key[:50]!r} is not 1 to {MAX_PARTITION_KEY_LENGTH} UTF-16 code units"
            )
    for hash_key in hash_keys:
        if not (hash_key.isascii() and hash_key.isdigit() and int(hash_key) < _HASH_KEYS):
            raise AggregationError(f"explicit hash key {hash_key[:50]!r} is not a decimal below 2**128")


@overload
def _read_tags(buf: bytes, pos: int, end: int, number: int) -> dict[str, str]: ...
@overload
def _read_tags(buf: bytes, pos: int, end: int, number: int, only_tags: bool) -> dict[str, str] | None: ...
def _read_tags(buf: bytes, pos: int, end: int, number: int, only_tags: bool = False) -> dict[str, str] | None:
    """The tags (field 4) from `pos` to the record's `end`, by key (the first of a key wins);
    other fields there are skipped — or, with `only_tags`, make the answer None."""
    tags: dict[str, str] = {}
    while pos < end:
        field, pos = _read_varint(buf, pos, end)
        if field != 0x22:
            if only_tags:
                return None
            pos = _skip_field(buf, pos, end, field)
            continue
        length, pos = _read_varint(buf, pos, end)
        tag_end = pos + length
        if tag_end > end:
            raise AggregationError(f"record {number}: truncated tag")
        key = value = None
        while pos < tag_end:
            tag_field, pos = _read_varint(buf, pos, tag_end)
            if tag_field == 0x0A or tag_field == 0x12:
                size, pos = _read_varint(buf, pos, tag_end)
                if pos + size > tag_end:
                    raise AggregationError(f"record {number}: truncated tag")
                try:
                    text = buf[pos : pos + size].decode("utf-8")
                except UnicodeDecodeError:
                    raise AggregationError(f"record {number}: a tag is not valid UTF-8") from None
                if tag_field == 0x0A:
                    key = text
                else:
                    value = text
                pos += size
            else:
                pos = _skip_field(buf, pos, tag_end, tag_field)
        if key is None:
            raise AggregationError(f"record {number}: a tag without its key")
        tags.setdefault(key, value or "")
    return tags


def _decode_generic(buf: bytes) -> tuple[list[UserRecord], str | None]:
    """Any valid protobuf layout: fields in any order, any varint encoding, unknown fields and
    tags skipped (but shardline's own). The slow path: clarity over speed."""
    pk_table: list[str] = []
    ehk_table: list[str] = []
    raw: list[tuple[int, int, bytes, dict[str, str]]] = []  # (key index, hash key index or -1, data, tags)
    pos = 0
    end = len(buf)
    try:
        while pos < end:
            tag, pos = _read_varint(buf, pos, end)
            if tag == 0x1A:  # a Record
                length, pos = _read_varint(buf, pos, end)
                if pos + length > end:
                    raise AggregationError("truncated record")
                raw.append(_decode_record(buf, pos, pos + length, len(raw)))
                pos += length
            elif tag == 0x0A or tag == 0x12:  # a partition key or explicit hash key table entry
                length, pos = _read_varint(buf, pos, end)
                if pos + length > end:
                    raise AggregationError("truncated key table entry")
                (pk_table if tag == 0x0A else ehk_table).append(buf[pos : pos + length].decode("utf-8"))
                pos += length
            else:
                pos = _skip_field(buf, pos, end, tag)
    except UnicodeDecodeError:
        raise AggregationError("a key table entry is not valid UTF-8") from None
    _check_keys(pk_table, ehk_table)
    aggregate_id = next((tags[AGGREGATE_TAG] for *_, tags in raw if AGGREGATE_TAG in tags), None)
    caller = raw[0][3].get(CALLER_TAG) if raw else None  # the first record's only
    records = []
    try:
        for number, (k, e, data, tags) in enumerate(raw):
            record_id, derived = id_of(tags, number)
            records.append(
                UserRecord(pk_table[k], data, ehk_table[e] if e >= 0 else None, record_id, caller, derived)
            )
    except IndexError:
        raise AggregationError("a record's key index points outside its table") from None
    return records, aggregate_id


def _decode_record(buf: bytes, pos: int, end: int, number: int) -> tuple[int, int, bytes, dict[str, str]]:
    pk_i = -1
    ehk_i = -1
    data = None
    tags: dict[str, str] = {}
    while pos < end:
        field, pos = _read_varint(buf, pos, end)
        if field == 0x22:
            length, pos = _read_varint(buf, pos, end)
            if pos + length > end:
                raise AggregationError(f"record {number}: truncated tag")
            for key, value in _read_tags(buf, pos - 1 - varint_size(length), pos + length, number).items():
                tags.setdefault(key, value)
            pos += length
        elif field == 0x1A:
            length, pos = _read_varint(buf, pos, end)
            if pos + length > end:
                raise AggregationError(f"record {number}: truncated data")
            data = buf[pos : pos + length]
            pos += length
        elif field == 0x08:
            pk_i, pos = _read_varint(buf, pos, end)
        elif field == 0x10:
            ehk_i, pos = _read_varint(buf, pos, end)
        else:
            pos = _skip_field(buf, pos, end, field)
    if pk_i < 0 or data is None:
        raise AggregationError(f"record {number} lacks its partition key index or data")
    return pk_i, ehk_i, data, tags
