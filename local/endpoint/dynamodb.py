"""Corrections to moto's DynamoDB (5.2.5) for the endpoint: atomic writes, and transactions that stay cheap.

moto's `transact_write_items` deep-copies every table a transaction touches, to roll back on a
cancellation: its cost grows with the table (a 20,000-item sink made each commit take seconds)
and, with the endpoint's threads, a copy taken while another request writes the same table fails
with "dictionary changed size during iteration". Its writes also do a condition check and the
write as two steps, which two threads can interleave: both compare-and-swaps of a lease would
succeed.

`apply()` (idempotent, called by the endpoint before it serves):
- runs every DynamoDB write (PutItem, UpdateItem, DeleteItem, BatchWriteItem's items,
  TransactWriteItems) under the lock of each table it writes, so each is atomic with respect to
  the others, as DynamoDB's are; and every read (GetItem, Query, Scan) under its table's lock
  too: moto applies a transaction's writes one by one and puts them back when a later condition
  fails, and a read between the two saw writes that never committed (a verdict counted an
  event-sink item twice that DynamoDB would never have shown). A lock per table, not one for all:
  with one, the producer API's small reads and writes of its idempotency table queued behind the
  consumers' 100-item transactions on the sink tables (a 500-record request's invocation took
  5.8 s at the median during a drain, 0.3 s alone). A transaction takes its tables'
  locks in one order every caller shares, so two transactions never wait on each other in a cycle;
- rolls a cancelled transaction back item by item: only the items it names are saved first, and
  only an item some Update names is copied (moto changes that one in place; a Put stores a new
  Item, a Delete removes it, a ConditionCheck only reads it: the item itself is what to put back);
- takes the faster paths of `local.endpoint.dynamodb_speed` (same answers, less CPU per item) and
  `local.endpoint.dynamodb_wire` (AttributeValues parsed and serialized without walking every member);
- answers a Query on a table's own key from the one partition it names: moto listed and sorted
  the whole table for every Query (340 ms at 20,000 items), which made reading a sink's new
  items (`local.commands.verify`) cost more than writing them;
- looks an item up without adding a partition: a table's `items` is a defaultdict, so moto's
  `Table.get_item` of a missing item (a table with a range key) added an empty partition under
  the look-up's own key, for good. Each read of an item not written yet (a BatchGetItem polling
  for a sink's new items) kept ~300 bytes; and each new item kept a third copy of its hash key
  (88 bytes), the key of the partition that the metering's or a transaction's look-up before the
  write had made. An empty partition answers nothing (a Scan sorts the items, an item count
  counts the items), so the answers are the same.
"""

from __future__ import annotations

import copy
import functools
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

from moto.dynamodb import models as dynamodb_models
from moto.dynamodb.models import DynamoDBBackend
from moto.dynamodb.models.dynamo_type import DynamoType
from moto.dynamodb.models.table import Table

from . import dynamodb_speed, dynamodb_wire

#: Writes whose first argument is the table (moto's `batch_write_item` does nothing: its response
#: handler calls `put_item` and `delete_item` per item).
WRITES = ("put_item", "update_item", "delete_item")
#: Reads that must not see a transaction in the middle of its writes or of its rollback.
READS = ("get_item", "query", "scan")
_APPLIED = False
_APPLY_LOCK = threading.Lock()
_QUERY = threading.local()  # the partition a Query in this thread reads: (table, its items)


class _TableCopyIsIdentity:
    """Stands in for the `copy` module inside moto's DynamoDB models: a Table is not copied."""

    @staticmethod
    def deepcopy(value: Any, memo: dict[int, Any] | None = None) -> Any:
        return value if isinstance(value, Table) else copy.deepcopy(value, memo)


class TableLocks:
    """A re-entrant lock per table, made on first use; a table named by its ARN shares its name's lock."""

    def __init__(self) -> None:
        self._made = threading.Lock()
        self._locks: dict[str, threading.RLock] = {}

    def of(self, table_name: str) -> threading.RLock:
        """The lock of one table (a call naming one table takes it without `holding`'s sorting)."""
        name = table_name.rpartition(":table/")[2] if table_name.startswith("arn:") else table_name
        lock = self._locks.get(name)
        if lock is None:
            with self._made:
                lock = self._locks.setdefault(name, threading.RLock())
        return lock

    @contextmanager
    def holding(self, table_names: Iterable[str]) -> Iterator[None]:
        """Every named table's lock, taken in one order all callers share: none waits in a cycle."""
        locks = {id(lock): lock for lock in map(self.of, table_names)}  # a name and its ARN: one lock
        with ExitStack() as stack:
            for _, lock in sorted(locks.items()):  # an order every caller shares
                stack.enter_context(lock)
            yield


TABLE_LOCKS = TableLocks()


def _locked(method: Callable[..., Any]) -> Callable[..., Any]:
    """A backend method whose first argument is a table name, run under that table's lock."""

    @functools.wraps(method)
    def locked(self: DynamoDBBackend, table_name: str, *args: Any, **kwargs: Any) -> Any:
        with TABLE_LOCKS.of(str(table_name)):
            return method(self, table_name, *args, **kwargs)

    return locked


def _transaction_tables(transact_items: list[dict[str, Any]]) -> list[str]:
    return [
        str(operation["TableName"])
        for entry in transact_items
        if isinstance(entry, dict)
        for operation in entry.values()
        if isinstance(operation, dict) and operation.get("TableName")
    ]


def _touched_items(backend: DynamoDBBackend, transact_items: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """(table, hash value, range value, the item before the transaction or None) for each item it names.

    An item some Update names is copied: moto changes it in place (even after a failed Put of the
    same key). Any other is saved as it is: a Put stores a new Item, a Delete removes it.
    """
    found = []
    updated = set()
    for entry in transact_items:
        if len(entry) != 1:
            continue  # moto raises its validation error for this one
        kind, operation = next(iter(entry.items()))
        table = backend.tables.get(operation.get("TableName"))
        key = operation.get("Key") or operation.get("Item")
        if table is None or not key or table.hash_key_attr not in key:
            continue
        hash_value = DynamoType(key[table.hash_key_attr])
        range_value = None
        if table.range_key_attr is not None:
            if table.range_key_attr not in key:
                continue
            range_value = DynamoType(key[table.range_key_attr])
        found.append((table, hash_value, range_value, table.get_item(hash_value, range_value)))
        if kind == "Update":
            updated.add((id(table), hash_value, range_value))
    return [
        (table, hash_value, range_value, copy.deepcopy(item))
        if (id(table), hash_value, range_value) in updated
        else (table, hash_value, range_value, item)
        for table, hash_value, range_value, item in found
    ]


def _restore(saved: list[tuple[Any, ...]]) -> None:
    for table, hash_value, range_value, item in reversed(saved):
        if range_value is None:
            if item is None:
                table.items.pop(hash_value, None)
            else:
                table.items[hash_value] = item
        elif item is None:
            table.items.get(hash_value, {}).pop(range_value, None)
            if hash_value in table.items and not table.items[hash_value]:
                del table.items[hash_value]
        else:
            table.items[hash_value][range_value] = item


def _transact_write_items(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def transact_write_items(self: DynamoDBBackend, transact_items: list[dict[str, Any]]) -> Any:
        with TABLE_LOCKS.holding(_transaction_tables(transact_items)):
            saved = _touched_items(self, transact_items)
            try:
                return original(self, transact_items)
            except Exception:
                _restore(saved)  # moto's own rollback put back the same (uncopied) tables: a no-op
                raise

    return transact_write_items


def _partition_query(
    original_query: Callable[..., Any], original_all_items: Callable[..., Any]
) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """`Table.query` reading one partition, and the `all_items` that serves it within the query."""

    @functools.wraps(original_all_items)
    def all_items(self: Table) -> Any:
        partition = getattr(_QUERY, "partition", None)
        if partition is not None and partition[0] is self:
            return partition[1]
        return original_all_items(self)

    @functools.wraps(original_query)
    def query(self: Table, hash_key: Any, *args: Any, **kwargs: Any) -> Any:
        index_name = kwargs.get("index_name", args[6] if len(args) > 6 else None)  # moto passes it 8th
        if index_name or hash_key is None or self.range_key_attr is None:
            return original_query(self, hash_key, *args, **kwargs)
        # list() of a dict's values runs without releasing the GIL: a consistent copy under writers
        items = list(self.items[hash_key].values()) if hash_key in self.items else []
        _QUERY.partition = (self, sorted(items, key=lambda item: item.range_key))
        try:
            return original_query(self, hash_key, *args, **kwargs)
        finally:
            _QUERY.partition = None

    return query, all_items


def _get_item(original: Callable[..., Any]) -> Callable[..., Any]:
    """`Table.get_item`, a missing partition looked up without adding it (the answer is moto's: None)."""

    @functools.wraps(original)
    def get_item(self: Table, hash_key: Any, range_key: Any = None, *args: Any, **kwargs: Any) -> Any:
        if range_key and hash_key not in self.items:  # moto's `self.items[hash_key][range_key]`
            return None
        return original(self, hash_key, range_key, *args, **kwargs)

    return get_item


def apply() -> None:
    """Patch moto's DynamoDB backend in this process (the endpoint's)."""
    global _APPLIED
    with _APPLY_LOCK:
        if _APPLIED:
            return
        # the module global `copy` (a module moto imports, not exports) stands in for by a class
        dynamodb_models.copy = _TableCopyIsIdentity  # type: ignore[attr-defined, assignment]
        for name in (*WRITES, *READS):
            setattr(DynamoDBBackend, name, _locked(getattr(DynamoDBBackend, name)))
        DynamoDBBackend.transact_write_items = _transact_write_items(  # type: ignore[method-assign]
            DynamoDBBackend.transact_write_items
        )
        dynamodb_speed.apply(dynamodb_models)
        dynamodb_wire.apply()
        Table.query, Table.all_items = _partition_query(Table.query, Table.all_items)  # type: ignore[method-assign]
        Table.get_item = _get_item(Table.get_item)  # type: ignore[method-assign]
        _APPLIED = True
