"""The fast walk of a KPL aggregate's protobuf body: the layout every KPL writes, read into columns.

Hand-written, not a protobuf runtime, because it is the consumer's hot path (issue 41): the schema
is frozen (`_encode` draws it), a KPL always writes the key tables first and then each record's
fields 1, 2, 3, 4 in order, and a loop that knows this does a handful of byte compares per user
record where a generic reader calls a varint decoder per field. It reads `buf[pos:end]` in place
and builds no per-record object: it collects the records' partition keys and data in two lists
(`Columns`), and only a record that has an explicit hash key or an id (tags) costs more. The
callers turn the columns into `UserRecord`s or `ConsumedRecord`s with C-level `map`/`zip`.

It never has to be right about malformed input: at the first deviation from that layout it answers
None (or raises `IndexError`, `UnicodeDecodeError`, `AggregationError`), and `_decode`'s generic
reader decides and names the fault. A record whose fields deviate inside its own bounds (fields
out of order, unknown ones, repeated data) is read alone by the generic record reader, which is
what the generic reader would read for it in a canonical body.
"""

from __future__ import annotations

from collections.abc import Callable
from operator import itemgetter
from typing import NamedTuple

from shardline.errors import AggregationError
from shardline.kpl._identity import AGGREGATE_TAG, CALLER_TAG, DERIVED_ID_TAG, RECORD_ID_TAG

_HASH_KEYS = 2**128
_AFTER_LENGTH = itemgetter(slice(1, None))  # a key table entry's text after its length byte
_ID_TAG_HEAD = b"\x0a\x05" + RECORD_ID_TAG.encode() + b"\x12"  # a tag's key "sl.id", then its value
_DERIVED_TAG_HEAD = b"\x0a\x04" + DERIVED_ID_TAG.encode() + b"\x12"  # a tag's key "sl.k", then its value

#: What the generic reader makes of one record: (key index, hash key index or -1, data, tags).
RecordReader = Callable[[bytes, int, int, int], tuple[int, int, bytes, dict[str, str]]]
#: A record's explicit hash key, id and whether the id is derived; only for records that have one.
Odd = tuple[str | None, str | None, bool]


class Columns(NamedTuple):
    """An aggregate's user records, by column: `keys[i]` and `data[i]` are record i's; `odd` holds,
    by index, the (explicit hash key, id, id_derived) of the records that have any (most have
    none); `caller` is every record's (the first record's `sl.c`), `aggregate_id` the first `sl.a`."""

    keys: list[str]
    data: list[bytes]
    odd: dict[int, Odd]
    caller: str | None
    aggregate_id: str | None

    def hash_keys(self) -> list[str | None]:
        """Every record's explicit hash key (None where it has none)."""
        column: list[str | None] = [None] * len(self.data)
        for at, (hash_key, _, _) in self.odd.items():
            column[at] = hash_key
        return column

    def ids(self) -> tuple[list[str | None], list[bool]]:
        """Every record's id and id_derived (None, False where it has none)."""
        ids: list[str | None] = [None] * len(self.data)
        derived = [False] * len(self.data)
        for at, (_, record_id, is_derived) in self.odd.items():
            ids[at], derived[at] = record_id, is_derived
        return ids, derived


def walk(buf: bytes, pos: int, end: int, read_record: RecordReader) -> Columns | None:  # noqa: C901 -- one loop, kept flat on purpose: a helper call per record is what it saves
    """The columns of the canonical body `buf[pos:end]`, or None where it is not canonical.
    `read_record` is the generic reader of one record, for a record that deviates within itself.
    A read may run past `end` into the MD5 trailer, but the records must end exactly at `end`."""
    # The partition key table, then the hash key table. A key of at most 127 bytes is at most 127
    # UTF-16 code units: within Kinesis's 256, so only an empty one breaks its rules. Its entries
    # (0A <length> <key>) are stepped over, then decoded at once and split at their tags; where a
    # key or a length (10) holds a 0A byte too, there are more pieces than entries, and the
    # entries are decoded one by one.
    table_start, entries = pos, 0
    while pos < end and buf[pos] == 0x0A:
        n = buf[pos + 1]
        if n >= 0x80 or n == 0:
            return None
        pos += n + 2
        entries += 1
    pieces = buf[table_start:pos].decode("utf-8").split("\n")
    if len(pieces) == entries + 1:
        key_table = list(map(_AFTER_LENGTH, pieces[1:]))
    else:
        key_table = _entries(buf, table_start, pos)
    hash_table: list[str] = []
    while pos < end and buf[pos] == 0x12:
        n = buf[pos + 1]
        pos += 2
        hash_key = buf[pos : pos + n].decode("utf-8")
        if n >= 0x80 or not (hash_key.isascii() and hash_key.isdigit() and int(hash_key) < _HASH_KEYS):
            return None
        hash_table.append(hash_key)
        pos += n
    keys: list[str] = []
    data: list[bytes] = []
    add_record_key, add_data = keys.append, data.append
    odd: dict[int, Odd] = {}
    tags_of: dict[int, dict[str, str]] = {}  # records with tags other than a lone id, by index
    while pos < end:
        # 1A <record length> 08 <key index> 1A <data length> <data>: lengths and index in 1 or 2 bytes
        if buf[pos] != 0x1A:
            return None
        n = buf[pos + 1]
        if n < 0x80:
            pos += 2
        else:
            high = buf[pos + 2]
            if high >= 0x80:
                return None
            n = (n & 0x7F) | (high << 7)
            pos += 3
        start, record_end = pos, pos + n
        if buf[pos] == 0x08:
            k = buf[pos + 1]
            if k < 0x80:
                pos += 2
            else:
                high = buf[pos + 2]
                if high >= 0x80:
                    return None
                k = (k & 0x7F) | (high << 7)
                pos += 3
            if buf[pos] == 0x1A:
                n = buf[pos + 1]
                if n < 0x80:
                    pos += 2
                else:
                    high = buf[pos + 2]
                    if high >= 0x80:
                        return None
                    n = (n & 0x7F) | (high << 7)
                    pos += 3
                if pos + n == record_end:  # the common record: a key and data, nothing else
                    add_record_key(key_table[k])
                    add_data(buf[pos:record_end])
                    pos = record_end
                    continue
        # Any other record: an explicit hash key, tags, or fields the canonical order does not have.
        number = len(data)
        key, record_data, hash_key_or_none, record_id, derived, tags = _odd_record(
            buf, start, record_end, number, key_table, hash_table, read_record
        )
        add_record_key(key)
        add_data(record_data)
        if hash_key_or_none is not None or record_id is not None:
            odd[number] = (hash_key_or_none, record_id, derived)
        if tags:
            tags_of[number] = tags
        pos = record_end
    if pos != end:
        return None  # the last record ran into the MD5 trailer
    first = tags_of.get(0)
    caller = first.get(CALLER_TAG) if first else None
    aggregate_id = next((tags[AGGREGATE_TAG] for tags in tags_of.values() if AGGREGATE_TAG in tags), None)
    return Columns(keys, data, odd, caller, aggregate_id)


def _entries(buf: bytes, pos: int, end: int) -> list[str]:
    """The keys of the checked key table entries `buf[pos:end]`, one by one."""
    keys = []
    while pos < end:
        n = buf[pos + 1]
        keys.append(buf[pos + 2 : pos + 2 + n].decode("utf-8"))
        pos += n + 2
    return keys


def _odd_record(
    buf: bytes,
    pos: int,
    end: int,
    number: int,
    key_table: list[str],
    hash_table: list[str],
    read_record: RecordReader,
) -> tuple[str, bytes, str | None, str | None, bool, dict[str, str] | None]:
    """A record that is not a bare key and data: (key, data, hash key, id, id_derived, its tags
    when it has others than a lone id). A hash key index and shardline's own layouts of an id are
    read here; anything else by the generic record reader."""
    found = _canonical_head(buf, pos, end)
    if found is not None:
        k, e, at, data_end = found
        hash_key = hash_table[e] if e >= 0 else None
        if data_end == end:
            return key_table[k], buf[at:end], hash_key, None, False, None
        # shardline's own layouts of a record's id alone, explicit ("sl.id") or derived ("sl.k")
        if (record_id := _lone_tag(buf, data_end, end, _ID_TAG_HEAD)) is not None:
            return key_table[k], buf[at:data_end], hash_key, record_id, False, None
        if (record_id := _lone_tag(buf, data_end, end, _DERIVED_TAG_HEAD)) is not None:
            return key_table[k], buf[at:data_end], hash_key, record_id, True, None
    k, e, record_data, tags = read_record(buf, pos, end, number)
    if k < 0:
        raise AggregationError(f"record {number} lacks its partition key index")
    tagged_id, derived = id_of(tags, number)
    return key_table[k], record_data, hash_table[e] if e >= 0 else None, tagged_id, derived, tags


def _lone_tag(buf: bytes, at: int, end: int, head: bytes) -> str | None:
    """The value of the record's one tag, laid out as shardline writes it from `at` to the record's
    `end`: 22 L <head: 0A len key 12> N <value> (N < 128, L = len(head) + 1 + N); else None."""
    length_at = at + 2 + len(head)
    if (
        buf[at] == 0x22
        and buf[length_at] < 0x80
        and buf[at + 2 : length_at] == head
        and buf[at + 1] == buf[length_at] + len(head) + 1
        and length_at + 1 + buf[length_at] == end
    ):
        return buf[length_at + 1 : end].decode("utf-8")
    return None


def _canonical_head(buf: bytes, pos: int, end: int) -> tuple[int, int, int, int] | None:
    """(key index, hash key index or -1, data start, data end) of a record at `pos` whose fields
    1, 2 (optional), 3 come first and in order, with varints of one or two bytes, its data within
    `end`; None otherwise."""
    if buf[pos] != 0x08:
        return None
    k, at = _small_varint(buf, pos + 1)
    e = -1
    if buf[at] == 0x10:
        e, at = _small_varint(buf, at + 1)
        if e < 0:
            return None
    if k < 0 or buf[at] != 0x1A:
        return None
    n, at = _small_varint(buf, at + 1)
    if n < 0 or at + n > end:
        return None
    return k, e, at, at + n


def _small_varint(buf: bytes, pos: int) -> tuple[int, int]:
    """A varint of one or two bytes at `pos` and the position after it; (-1, pos) if it is longer."""
    low = buf[pos]
    if low < 0x80:
        return low, pos + 1
    high = buf[pos + 1]
    if high >= 0x80:
        return -1, pos
    return (low & 0x7F) | (high << 7), pos + 2


def id_of(tags: dict[str, str], number: int) -> tuple[str | None, bool]:
    """A record's (id, id_derived) from its tags: an explicit id and a derived one are two
    namespaces, and a record claiming both is not one shardline wrote."""
    record_id = tags.get(RECORD_ID_TAG)
    derived = tags.get(DERIVED_ID_TAG)
    if derived is None:
        return record_id, False
    if record_id is not None:
        raise AggregationError(
            f"record {number}: both an explicit id ({RECORD_ID_TAG}) and a derived one ({DERIVED_ID_TAG})"
        )
    return derived, True
