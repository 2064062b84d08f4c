"""The KPL aggregated-record codec: many user records in one Kinesis record.

Wire format (the same bytes the Kinesis Producer Library writes and the KCL reads)::

    F3 89 9A C2 | protobuf AggregatedRecord | MD5(protobuf), 16 bytes

    AggregatedRecord { repeated string partition_key_table = 1;
                       repeated string explicit_hash_key_table = 2;
                       repeated Record records = 3; }
    Record           { required uint64 partition_key_index = 1;
                       optional uint64 explicit_hash_key_index = 2;
                       required bytes data = 3;
                       repeated Tag tags = 4; }
    Tag              { required string key = 1;
                       optional string value = 2; }

shardline writes its tags (`_identity`): on an aggregate's first record the aggregate's id
(`sl.a`) and its caller (`sl.c`, unless the caller is ""), and on each record its own id
(`sl.id`) or the id derived from an `Idempotency-Key` (`sl.k`). Other decoders skip tags, so they
read the same user records. Records without ids, caller or aggregate id are the KPL's bytes exactly.

The protobuf is written and read by hand: the schema is frozen, it uses two wire types, and
a hand-rolled loop is several times faster than a generic protobuf runtime in pure Python.
`AggregateBuilder` tracks the exact encoded size as records are added, so a reducer can fill
an aggregate to a byte cap without ever going over it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from itertools import chain
from operator import add

from shardline.errors import AggregationError
from shardline.kinesis._records import UserRecord
from shardline.kpl._identity import AGGREGATE_TAG, CALLER_TAG, DERIVED_ID_TAG, RECORD_ID_TAG

MAGIC = b"\xf3\x89\x9a\xc2"
DIGEST_SIZE = 16
#: Bytes an aggregate costs beyond its protobuf body: the magic and the MD5 trailer.
FRAMING_SIZE = len(MAGIC) + DIGEST_SIZE

_TAG_PARTITION_KEY_TABLE = b"\x0a"  # field 1, length-delimited
_TAG_HASH_KEY_TABLE = b"\x12"  # field 2, length-delimited
_TAG_RECORD = b"\x1a"  # field 3, length-delimited
_TAG_PK_INDEX = b"\x08"  # Record field 1, varint
_TAG_EHK_INDEX = b"\x10"  # Record field 2, varint
_TAG_DATA = b"\x1a"  # Record field 3, length-delimited
_TAG_TAGS = b"\x22"  # Record field 4, length-delimited
_TAG_TAG_KEY = b"\x0a"  # Tag field 1, length-delimited
_TAG_TAG_VALUE = b"\x12"  # Tag field 2, length-delimited

_md5 = hashlib.md5


# -- varints -------------------------------------------------------------------------------

_SMALL_VARINTS = tuple(bytes((i,)) for i in range(128))
_varint_cache: dict[int, bytes] = {}


def _encode_varint(value: int) -> bytes:
    if value < 128:
        return _SMALL_VARINTS[value]
    cached = _varint_cache.get(value)
    if cached is not None:
        return cached
    out = bytearray()
    rest = value
    while rest >= 0x80:
        out.append((rest & 0x7F) | 0x80)
        rest >>= 7
    out.append(rest)
    encoded = bytes(out)
    if value < 1 << 16:  # lengths and indexes repeat; keep the cache bounded
        _varint_cache[value] = encoded
    return encoded


def varint_size(value: int) -> int:
    """Bytes a protobuf varint takes for `value` (>= 0)."""
    return 1 if value < 128 else (value.bit_length() + 6) // 7


# -- encoding ------------------------------------------------------------------------------


def tag(key: str, value: str) -> bytes:
    """One encoded `Record.tags` entry (field 4), ready to follow a record's data."""
    key_bytes, value_bytes = key.encode("utf-8"), value.encode("utf-8")
    body = (
        _TAG_TAG_KEY + _encode_varint(len(key_bytes)) + key_bytes
        + _TAG_TAG_VALUE + _encode_varint(len(value_bytes)) + value_bytes
    )  # fmt: skip
    return _TAG_TAGS + _encode_varint(len(body)) + body


class AggregateBuilder:
    """Accumulates user records into one aggregate, knowing its exact encoded size at every step.

    `size` is the length `build()` would return now; `size_with(record)` is the length after
    adding `record`. Both include the magic and the MD5 trailer. `aggregate_id`, when given, is
    written as the first record's `sl.a` tag, then `caller` (unless None or "") as its `sl.c` tag;
    a record's own `id` as its `sl.id` tag (`sl.k` when `id_derived`). An aggregate holds one
    caller's records: adding a record whose `caller` is set and is not the builder's raises
    `AggregationError` (a record whose `caller` is None takes the builder's).
    """

    __slots__ = (
        "_caller",
        "_ehk_index",
        "_ehk_table_parts",
        "_first_tags",
        "_parts",
        "_pk_index",
        "_table_parts",
        "count",
        "size",
    )

    def __init__(self, aggregate_id: str | None = None, caller: str | None = None) -> None:
        self._caller = caller or ""
        self._first_tags = (tag(AGGREGATE_TAG, aggregate_id) if aggregate_id is not None else b"") + (
            tag(CALLER_TAG, caller) if caller else b""
        )
        self._pk_index: dict[str, bytes] = {}
        self._ehk_index: dict[str, bytes] = {}
        self._table_parts: list[bytes] = []
        self._ehk_table_parts: list[bytes] = []
        self._parts: list[bytes] = []
        self.count = 0
        self.size = FRAMING_SIZE

    def size_with(self, record: UserRecord) -> int:
        """Encoded size of the aggregate if `record` were added."""
        _, pk_entry, _, ehk_entry, head, tags = self._pieces(record)
        return self.size + len(pk_entry) + len(ehk_entry) + len(head) + len(record.data) + len(tags)

    def add(self, record: UserRecord, cap: int | None = None) -> bool:
        """Append `record` unless the aggregate would then exceed `cap` bytes; True if added.

        Its partition and hash keys join the tables if they are new.
        """
        pk_ref, pk_entry, ehk_ref, ehk_entry, head, tags = self._pieces(record)
        data = record.data
        new_size = self.size + len(pk_entry) + len(ehk_entry) + len(head) + len(data) + len(tags)
        if cap is not None and new_size > cap:
            return False
        if pk_entry:
            self._pk_index[record.partition_key] = pk_ref
            self._table_parts.append(pk_entry)
        if ehk_entry:
            self._ehk_index[record.explicit_hash_key] = ehk_ref  # type: ignore[index]  # not None here
            self._ehk_table_parts.append(ehk_entry)
        self._parts.append(head)
        self._parts.append(data)
        if tags:
            self._parts.append(tags)
        self.size = new_size
        self.count += 1
        return True

    def _pieces(self, record: UserRecord) -> tuple[bytes, bytes, bytes, bytes, bytes, bytes]:
        """(key index ref, new key table entry or b"", hash key ref, new entry or b"", record head,
        the record's tags or b"")."""
        pk = record.partition_key
        pk_ref = self._pk_index.get(pk)
        pk_entry = ehk_entry = b""
        if pk_ref is None:
            pk_ref = _TAG_PK_INDEX + _encode_varint(len(self._pk_index))
            encoded = pk.encode("utf-8")
            pk_entry = _TAG_PARTITION_KEY_TABLE + _encode_varint(len(encoded)) + encoded
        ehk = record.explicit_hash_key
        ehk_ref = b""
        if ehk is not None:
            ehk_ref = self._ehk_index.get(ehk, b"")
            if not ehk_ref:
                ehk_ref = _TAG_EHK_INDEX + _encode_varint(len(self._ehk_index))
                encoded = ehk.encode("ascii")
                ehk_entry = _TAG_HASH_KEY_TABLE + _encode_varint(len(encoded)) + encoded
        data_len = len(record.data)
        caller = record.caller
        if caller is not None and caller != self._caller:
            raise AggregationError(
                f"record {self.count}: caller {caller[:80]!r} in an aggregate of caller "
                f"{self._caller[:80]!r} (an aggregate holds one caller's records)"
            )
        tags = self._first_tags if not self.count else b""
        if record.id is not None:
            tags += tag(DERIVED_ID_TAG if record.id_derived else RECORD_ID_TAG, record.id)
        head = pk_ref + ehk_ref + _TAG_DATA + _encode_varint(data_len)
        record_head = _TAG_RECORD + _encode_varint(len(head) + data_len + len(tags)) + head
        return pk_ref, pk_entry, ehk_ref, ehk_entry, record_head, tags

    def build(self) -> bytes:
        """The aggregated record: magic, protobuf body, MD5 of the body."""
        return _frame(b"".join(self._table_parts), b"".join(self._ehk_table_parts), b"".join(self._parts))


def encode(
    records: Iterable[UserRecord], aggregate_id: str | None = None, caller: str | None = None
) -> bytes:
    """Encode `records` as one KPL aggregated record (tables deduplicated, order kept), with
    `aggregate_id` as the first record's `sl.a` tag, the caller as its `sl.c` tag, and each record's
    `id` as its `sl.id` tag (`sl.k` when derived). The caller is `caller`, or else the one the
    records name (`AggregationError` if they name more than one)."""
    records = list(records)
    if not records:
        return _encode_rows(records, aggregate_id, caller)
    keys, datas, hash_keys, ids, callers, _ = zip(*records, strict=True)
    if caller is None:
        named = set(callers)
        named.discard(None)
        if len(named) > 1:
            raise AggregationError(
                f"records of {len(named)} callers in one aggregate (it holds one caller's)"
            )
        caller = named.pop() if named else None
    n = len(records)
    plain = aggregate_id is None and not caller and hash_keys.count(None) == n and ids.count(None) == n
    if plain and max(map(len, datas)) < _TABLE_SIZE - 8:
        return _encode_columns(keys, datas)
    return _encode_rows(records, aggregate_id, caller)


def _encode_columns(keys: tuple[str, ...], datas: tuple[bytes, ...]) -> bytes:
    """The common case (no explicit hash keys, records under 4 KiB), column by column: every
    step is a C-level map over the whole batch, with prefixes read from precomputed tables."""
    record_prefix, key_prefix, key_ref = _tables()
    unique = dict.fromkeys(keys)  # first-seen order, as the KPL numbers its key table
    if len(unique) >= _TABLE_SIZE:
        return _encode_rows([UserRecord(key, data) for key, data in zip(keys, datas, strict=True)])
    encoded = list(map(str.encode, unique))
    table = b"".join(
        chain.from_iterable(zip(map(key_prefix.__getitem__, map(len, encoded)), encoded, strict=True))
    )
    ref_of = dict(zip(unique, key_ref, strict=False))  # the table is longer
    lengths = list(map(len, datas))
    # Record field 3 (data) and AggregatedRecord field 3 (record) share tag 0x1A: one prefix table.
    heads = list(map(add, map(ref_of.__getitem__, keys), map(record_prefix.__getitem__, lengths)))
    prefixes = map(record_prefix.__getitem__, map(add, map(len, heads), lengths))
    return _frame(table, b"", b"".join(chain.from_iterable(zip(prefixes, heads, datas, strict=True))))


def _encode_rows(
    records: list[UserRecord], aggregate_id: str | None = None, caller: str | None = None
) -> bytes:
    """Any records, one at a time."""
    builder = AggregateBuilder(aggregate_id, caller)
    for record in records:
        builder.add(record)
    return builder.build()


def _frame(*body: bytes) -> bytes:
    """Magic, body, MD5 of the body: hashed piecewise so the body is copied only once more."""
    digest = _md5()
    for piece in body:
        digest.update(piece)
    return b"".join((MAGIC, *body, digest.digest()))


_TABLE_SIZE = 1 << 12
_prefix_tables: list[list[bytes]] = []


def _tables() -> list[list[bytes]]:
    """`0x1A + varint(n)`, `0x0A + varint(n)`, `0x08 + varint(n)` for n below 4096: built on
    first use (about a millisecond each here), not at import (cold starts)."""
    if not _prefix_tables:
        for tag in (0x1A, 0x0A, 0x08):
            small = [bytes((tag, n)) for n in range(128)]
            _prefix_tables.append(
                small + [bytes((tag, n & 0x7F | 0x80, n >> 7)) for n in range(128, _TABLE_SIZE)]
            )
    return _prefix_tables
