"""The sink writes waiting to ride with the next checkpoint, and the rules of one transaction.

DynamoDB's TransactWriteItems takes at most 100 items and 4 MB, and refuses two operations on
one item. The checkpoint is one of the items, so a handler's writes get the other 99.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from shardline.consumer._leases import MAX_TRANSACTION_BYTES, MAX_TRANSACTION_ITEMS
from shardline.consumer._settings import Writes

#: Writes that may ride with one checkpoint.
MAX_SINK_WRITES = MAX_TRANSACTION_ITEMS - 1


class PendingTransaction:
    """Sink writes of the records done since the last checkpoint: the entries, the items they
    touch, and their size."""

    __slots__ = ("items", "size", "writes")

    def __init__(self) -> None:
        self.writes: list[Mapping[str, Any]] = []
        self.items: set[str] = set()
        self.size = 0

    def fits(self, writes: list[Mapping[str, Any]]) -> bool:
        """Would `writes` (one record's) join this transaction without breaking a DynamoDB rule?"""
        return (
            len(self.writes) + len(writes) <= MAX_SINK_WRITES
            and self.size + sum(size_of(write) for write in writes) <= MAX_TRANSACTION_BYTES
            and self.items.isdisjoint(item_of(write) for write in writes)
        )

    def add(self, writes: list[Mapping[str, Any]]) -> None:
        self.writes.extend(writes)
        self.items.update(item_of(write) for write in writes)
        self.size += sum(size_of(write) for write in writes)

    def clear(self) -> None:
        self.writes = []
        self.items = set()
        self.size = 0


def checked_writes(writes: Writes) -> list[Mapping[str, Any]]:
    """A record's sink writes, if they fit in one transaction with the checkpoint. A handler that
    returns more fails on that record (counted, then dead-lettered), like any handler error."""
    if not writes:
        return []  # the common case, on the hot path
    writes = list(writes)
    size = sum(size_of(write) for write in writes)
    if (
        len(writes) > MAX_SINK_WRITES
        or len({item_of(write) for write in writes}) < len(writes)
        or size > MAX_TRANSACTION_BYTES
    ):
        raise ValueError(
            f"the handler returned {len(writes)} writes ({size} bytes) for one record; at most "
            f"{MAX_SINK_WRITES} writes to distinct items, {MAX_TRANSACTION_BYTES} bytes, "
            "fit in a transaction with the checkpoint"
        )
    return writes


def item_of(write: Mapping[str, Any]) -> str:
    """The (table, key) a TransactWriteItems entry touches, as a comparable string. A Put names
    no key (the table's schema is not known here): its whole item stands for it."""
    [(_, operation)] = write.items()
    target = operation.get("Key") or operation.get("Item")
    return json.dumps([operation.get("TableName"), target], sort_keys=True, default=str)


def size_of(write: Mapping[str, Any]) -> int:
    """Rough bytes of an entry on the wire (binary values count once, as DynamoDB counts them)."""
    return len(json.dumps(write, default=lambda value: "x" * len(value)))
