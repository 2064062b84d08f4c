"""The sink writes waiting to ride with the next checkpoint, whose they are, and the rules of one transaction.

DynamoDB's TransactWriteItems takes at most 100 items and 4 MB, refuses two operations on one
item (a table and a key: a `Put` names its key inside its item, so the table's key schema is
needed to tell), an item over 400 KB and a key attribute that is empty. The checkpoint is one of
the items, so a handler's writes get the other 99. `checked_writes` refuses, as that record's
failure, what DynamoDB would refuse; `PendingTransaction` remembers which record each write came
from, so a refusal at commit is blamed on the record that caused it. A handler's idempotent
puts (`_idempotent`) are none of the transaction's: they wait beside it, by record, and are
written before it.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterable, Mapping
from typing import Any, NamedTuple

from shardline.consumer._deaggregation import ConsumedRecord
from shardline.consumer._idempotent import IDEMPOTENT_PUT, is_idempotent_put
from shardline.consumer._lease_store import MAX_TRANSACTION_BYTES, MAX_TRANSACTION_ITEMS
from shardline.consumer._once import GUARD_ATTRIBUTES, is_once_guard
from shardline.consumer._settings import Writes

#: Writes that may ride with one checkpoint.
MAX_SINK_WRITES = MAX_TRANSACTION_ITEMS - 1
#: DynamoDB's limit on one item (names and values).
MAX_ITEM_BYTES = 400 * 1024
_OPERATIONS = ("Put", "Update", "Delete", "ConditionCheck", IDEMPOTENT_PUT)
_PUTS = ("Put", IDEMPOTENT_PUT)
#: Idempotent puts that may wait for one checkpoint: landing them is 10 BatchWriteItem calls, so a
#: commit at the time margin stays short (unbounded, a batch of 10,000 records outlived its function).
MAX_PENDING_PUTS = 250

#: A sink table's key attribute names, or None when not known.
KeyLookup = Callable[[str], "tuple[str, ...] | None"]


def _unknown_keys(table: str) -> tuple[str, ...] | None:
    return None


class RecordWrites(NamedTuple):
    """One record's sink writes (`writes` for the transaction, `puts` idempotent, written before
    it: `_idempotent`), and the last record done before it (None: none in this run).
    `covering` > 1: the writes of that many records up to `record` (a batch handler's one list)."""

    record: ConsumedRecord
    writes: list[Mapping[str, Any]]
    before: ConsumedRecord | None
    covering: int = 1
    puts: tuple[Mapping[str, Any], ...] = ()


class PendingTransaction:
    """Sink writes of the records done since the last checkpoint: the transaction's entries, by
    record, the items they touch, and their size; and the idempotent puts, by record, with those
    that already landed."""

    __slots__ = ("groups", "items", "keys", "landed", "puts", "size", "writes")
    landed: set[int]  # id() of the groups whose idempotent puts landed

    def __init__(self, keys: KeyLookup = _unknown_keys) -> None:
        self.keys = keys
        self.clear()

    def fits(self, writes: list[Mapping[str, Any]]) -> bool:
        """Would `writes` (one record's) join this transaction without breaking a DynamoDB rule?"""
        transactional = [write for write in writes if not is_idempotent_put(write)]
        puts = len(writes) - len(transactional)
        writes = transactional
        return (
            (not puts or self.puts + puts <= MAX_PENDING_PUTS)
            and len(self.writes) + len(writes) <= MAX_SINK_WRITES
            and self.size + sum(size_of(write) for write in writes) <= MAX_TRANSACTION_BYTES
            and self.items.isdisjoint(item_of(write, self.keys) for write in writes)
        )

    def add(
        self,
        record: ConsumedRecord,
        writes: list[Mapping[str, Any]],
        before: ConsumedRecord | None,
        covering: int = 1,
    ) -> None:
        puts = tuple(write for write in writes if is_idempotent_put(write))
        if puts:
            writes = [write for write in writes if not is_idempotent_put(write)]
        self._append(RecordWrites(record, writes, before, covering, puts))

    def _append(self, group: RecordWrites) -> None:
        self.groups.append(group)
        self.writes.extend(group.writes)
        self.items.update(item_of(write, self.keys) for write in group.writes)
        self.size += sum(size_of(write) for write in group.writes)
        self.puts += len(group.puts)

    def unlanded(self) -> list[RecordWrites]:
        """The records whose idempotent puts have not landed yet."""
        return [group for group in self.groups if group.puts and id(group) not in self.landed]

    def mark_landed(self, groups: Iterable[RecordWrites]) -> None:
        self.landed.update(id(group) for group in groups)

    def owner(self, index: int) -> RecordWrites:
        """The record whose writes include `writes[index]`."""
        for group in self.groups:
            if index < len(group.writes):
                return group
            index -= len(group.writes)
        raise IndexError(f"no pending write {index}")

    def keep(self, groups: Iterable[RecordWrites]) -> None:
        """Keep only `groups` pending (in order)."""
        groups = list(groups)
        landed = {id(group) for group in groups} & self.landed
        self.clear()
        for group in groups:
            self._append(group)
        self.landed = landed

    def clear(self) -> None:
        self.landed = set()
        self.groups: list[RecordWrites] = []
        self.writes: list[Mapping[str, Any]] = []
        self.items: set[str] = set()
        self.size = 0
        self.puts = 0


def checked_writes(writes: Writes, keys: KeyLookup = _unknown_keys) -> list[Mapping[str, Any]]:
    """A record's sink writes, if DynamoDB would take them in one transaction with the checkpoint.
    Raises `ValueError` naming the write otherwise: that record then fails (counted, then
    dead-lettered) like a handler that raised."""
    if not writes:
        return []  # the common case, on the hot path
    if isinstance(writes, Mapping) or not isinstance(writes, Iterable):
        raise ValueError(
            f"a handler returns a list of TransactWriteItems entries, not {type(writes).__name__}"
        )
    writes = list(writes)
    seen: set[str] = set()
    for index, write in enumerate(writes):
        problem = _problem(write, keys)
        if problem is None and item_of(write, keys) in seen:
            problem = "touches an item another write of the same record touches"
        if problem is not None:
            raise ValueError(f"sink write {index}: {problem}")
        seen.add(item_of(write, keys))
    transactional = [write for write in writes if not is_idempotent_put(write)]
    size = sum(size_of(write) for write in transactional)
    if len(transactional) > MAX_SINK_WRITES or size > MAX_TRANSACTION_BYTES:
        raise ValueError(
            f"the handler returned {len(transactional)} writes ({size} bytes) for one record; at most "
            f"{MAX_SINK_WRITES} writes, {MAX_TRANSACTION_BYTES} bytes, fit in a transaction with "
            "the checkpoint (a batch handler can say which record each write belongs to)"
        )
    return writes


def _problem(write: object, keys: KeyLookup) -> str | None:
    """Why DynamoDB would refuse this TransactWriteItems entry, or None."""
    if not isinstance(write, Mapping) or len(write) != 1:
        return "is not a sink write (one of Put, Update, Delete, ConditionCheck, IdempotentPut)"
    [(kind, operation)] = write.items()
    if kind not in _OPERATIONS or not isinstance(operation, Mapping):
        return f"{kind!r} is not one of Put, Update, Delete, ConditionCheck, IdempotentPut"
    table = operation.get("TableName")
    if not isinstance(table, str) or not table:
        return f"{kind} names no TableName"
    if kind == IDEMPOTENT_PUT and set(operation) != {"TableName", "Item"}:
        return f"{kind} takes TableName and Item only (BatchWriteItem has no condition)"
    if kind in _PUTS:
        item = operation.get("Item")
        if not isinstance(item, Mapping):
            return f"{kind} has no Item"
        size = item_bytes(item)
        if size > MAX_ITEM_BYTES:
            return f"{kind} of a {size}-byte item into {table}: DynamoDB's limit is {MAX_ITEM_BYTES} bytes"
        names = keys(table)
        key: Mapping[str, Any] = {name: item.get(name) for name in names} if names else {}
    else:
        given = operation.get("Key")
        if not isinstance(given, Mapping) or not given:
            return f"{kind} on {table} has no Key"
        key = given
    for name, value in key.items():
        if value is None:
            return f"{kind} into {table} lacks key attribute {name!r}"
        if isinstance(value, Mapping) and any(value.get(kind) in ("", b"") for kind in ("S", "B")):
            return f"key attribute {name!r} of {table} is empty, which DynamoDB refuses"
    return None


def item_of(write: Mapping[str, Any], keys: KeyLookup = _unknown_keys) -> str:
    """The (table, key) a TransactWriteItems entry touches, as a comparable string. A `Put` into
    a table whose key is not known is told apart by its whole item."""
    [(kind, operation)] = write.items()
    table = operation.get("TableName")
    target = operation.get("Key")
    if kind in _PUTS:
        item = operation.get("Item") or {}
        names = keys(table) if isinstance(table, str) else None
        if names:
            target = {name: item.get(name) for name in names}
        elif is_once_guard(write):  # its key is the item but the guard's own attributes
            target = {name: value for name, value in item.items() if name not in GUARD_ATTRIBUTES}
        else:
            target = item
    return json.dumps([table, target], sort_keys=True, default=str)


def size_of(write: Mapping[str, Any]) -> int:
    """Rough bytes of an entry on the wire (binary values count once, as DynamoDB counts them)."""
    return len(json.dumps(write, default=lambda value: "x" * len(value)))


def item_bytes(item: Mapping[str, Any]) -> int:
    """An item's size as DynamoDB counts it (attribute names and values), near enough to tell
    an item over 400 KB before DynamoDB refuses the whole transaction."""
    return sum(len(str(name).encode()) + _value_bytes(value) for name, value in item.items())


def _value_bytes(value: Any) -> int:
    if not isinstance(value, Mapping) or len(value) != 1:
        return len(json.dumps(value, default=str))
    [(kind, inner)] = value.items()
    if kind == "S":
        return len(str(inner).encode())
    if kind == "B":
        return _binary_bytes(inner)
    if kind == "N":
        return len(str(inner)) // 2 + 2
    if kind in ("SS", "NS"):
        return sum(len(str(member).encode()) for member in inner)
    if kind == "BS":
        return sum(_binary_bytes(member) for member in inner)
    if kind == "L":
        return 3 + sum(_value_bytes(member) + 1 for member in inner)
    if kind == "M":
        return 3 + sum(len(str(name).encode()) + _value_bytes(member) + 1 for name, member in inner.items())
    return 1  # BOOL, NULL


def _binary_bytes(value: Any) -> int:
    if isinstance(value, bytes | bytearray | memoryview):
        return len(value)
    try:
        return len(base64.b64decode(value))  # the wire form, as a client may pass it
    except (ValueError, TypeError):
        return len(str(value))
