"""An in-memory lease table: `LeaseTable`'s semantics without DynamoDB, for fast handler tests.

Rows live in a dict; every write is fenced exactly as in `LeaseTable` (conditional on the stored
`leaseCounter`, which it increments; checkpoints compare-and-swap on the stored position and only
move forward), and `checkpoint_with` applies the sink writes to in-memory tables in the same step,
so a test can read what a handler committed. `reads` counts GetItem calls and `writes` counts
writes by kind, as DynamoDB would bill them.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from shardline.consumer._leases import MAX_TRANSACTION_ITEMS, Lease, LeaseTable
from shardline.errors import LeaseLost, SinkConflict
from shardline.kinesis._positions import SHARD_END, TRIM_HORIZON, Position

#: Kinds of write counted in `writes`, as the real table would issue them (each conditional).
CREATE = "row creation"  # PutItem of a new row at TRIM_HORIZON, counter 1
TAKE = "take"  # UpdateItem incrementing leaseCounter
CHECKPOINT = "checkpoint"  # UpdateItem of the checkpoint
CHECKPOINT_TRANSACTION = "checkpoint transaction"  # TransactWriteItems: checkpoint + sink writes
FAILURE = "failure"  # UpdateItem counting a failed attempt
SHARD_END_MARK = "shard end"  # UpdateItem setting a parent's checkpoint to SHARD_END
WRITE_KINDS = (CHECKPOINT, CHECKPOINT_TRANSACTION, FAILURE, CREATE, TAKE, SHARD_END_MARK)

Item = dict[str, dict[str, Any]]


class _NoClient:
    """Stands where `LeaseTable` keeps its DynamoDB client: nothing here may reach one."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"InMemoryLeaseTable called DynamoDB's {name}: a method is missing")


class InMemoryLeaseTable(LeaseTable):
    """A `LeaseTable` whose rows and sink tables are kept in memory.

    `key_schema` names the key attributes of each sink table a handler `Put`s into, e.g.
    `{"orders": ["id"]}` (an `Update` or `Delete` carries its key itself).
    """

    def __init__(self, table_name: str = "leases", *, key_schema: Mapping[str, Sequence[str]] = {}) -> None:
        super().__init__(_NoClient(), table_name)  # the client is never called
        self._rows: dict[str, Lease] = {}
        self._key_schema = {table: list(keys) for table, keys in key_schema.items()}
        self.sinks: dict[str, dict[str, Item]] = {}
        self.reads = 0
        self.writes: Counter[str] = Counter()

    # -- inspection --------------------------------------------------------------------------

    def row(self, key: str) -> Lease | None:
        """The stored row, without counting a read."""
        return self._rows.get(key)

    def rows(self) -> dict[str, Lease]:
        return dict(self._rows)

    def items(self, table: str) -> list[Item]:
        """Every item a sink table holds, in the order first written."""
        return list(self.sinks.get(table, {}).values())

    def place(self, key: str, checkpoint: Position, owner: str = "previous-invocation") -> None:
        """Between calls: put `key`'s row at `checkpoint`, as another invocation left it."""
        current = self._rows.get(key)
        self._rows[key] = Lease(key, owner, current.counter if current else 1, checkpoint)

    # -- LeaseTable ---------------------------------------------------------------------------

    def get(self, key: str) -> Lease | None:
        self.reads += 1
        return self._rows.get(key)

    def hold(self, key: str, owner: str, *, parent_shard_ids: Iterable[str] = ()) -> Lease:
        current = self.get(key)
        if current is not None:
            return replace(current, owner=owner)
        return self._create(key, owner, parent_shard_ids)

    def take(self, key: str, owner: str, *, parent_shard_ids: Iterable[str] = ()) -> Lease:
        current = self.get(key)
        if current is None:
            return self._create(key, owner, parent_shard_ids)
        switches = current.owner_switches + (current.owner != owner)
        lease = replace(current, owner=owner, counter=current.counter + 1, owner_switches=switches)
        self._rows[key] = lease
        self.writes[TAKE] += 1
        return lease

    def checkpoint(self, lease: Lease, position: Position) -> Lease:
        if position <= lease.checkpoint:
            return lease
        return self._advance(lease, position, CHECKPOINT)

    def checkpoint_with(self, lease: Lease, position: Position, writes: Sequence[Mapping[str, Any]]) -> Lease:
        if not writes:
            return self.checkpoint(lease, position)
        if len(writes) > MAX_TRANSACTION_ITEMS - 1:
            raise ValueError(f"at most {MAX_TRANSACTION_ITEMS - 1} writes ride with one checkpoint")
        if position <= lease.checkpoint:
            raise ValueError(f"writes must come with a forward checkpoint: {position} <= {lease.checkpoint}")
        self._fence(lease, compare_checkpoint=True)
        staged = {table: dict(items) for table, items in self.sinks.items()}  # both or neither
        for write in writes:
            self._apply(staged, write)
        advanced = self._advance(lease, position, CHECKPOINT_TRANSACTION)
        self.sinks = staged
        return advanced

    def record_failure(self, lease: Lease, position: Position, error: str) -> Lease:
        stored = self._fence(lease, compare_checkpoint=False)
        attempts = lease.failed_attempts + 1 if lease.failed_at == position else 1
        error = error[:1000] or "-"
        self._rows[lease.key] = replace(
            stored,
            owner=lease.owner,
            counter=lease.counter + 1,
            failed_at=position,
            failed_attempts=attempts,
            last_error=error,
        )
        self.writes[FAILURE] += 1
        return replace(
            lease, counter=lease.counter + 1, failed_at=position, failed_attempts=attempts, last_error=error
        )

    def mark_shard_end(self, seen: Lease) -> bool:
        stored = self._rows.get(seen.key)
        if stored is None or stored.checkpoint != seen.checkpoint:
            return False
        self._rows[seen.key] = replace(stored, checkpoint=Position(SHARD_END))
        self.writes[SHARD_END_MARK] += 1
        return True

    # -- internals -----------------------------------------------------------------------------

    def _create(self, key: str, owner: str, parent_shard_ids: Iterable[str]) -> Lease:
        lease = Lease(key, owner, 1, Position(TRIM_HORIZON), parent_shard_ids=frozenset(parent_shard_ids))
        self._rows[key] = lease
        self.writes[CREATE] += 1
        return lease

    def _fence(self, lease: Lease, *, compare_checkpoint: bool) -> Lease:
        stored = self._rows.get(lease.key)
        if stored is None or stored.counter != lease.counter:
            raise LeaseLost(f"lease {lease.key} was taken by another owner")
        if compare_checkpoint and stored.checkpoint != lease.checkpoint:
            raise LeaseLost(f"lease {lease.key}: the checkpoint moved under us")
        return stored

    def _advance(self, lease: Lease, position: Position, kind: str) -> Lease:
        stored = self._fence(lease, compare_checkpoint=True)
        cleared = lease.failed_at is not None and lease.failed_at <= position
        advanced = replace(lease, checkpoint=position, owner_switches=0, counter=lease.counter + 1)
        if cleared:
            advanced = replace(advanced, failed_at=None, failed_attempts=0, last_error=None)
        self._rows[lease.key] = replace(
            stored,
            owner=lease.owner,
            checkpoint=position,
            owner_switches=0,
            counter=lease.counter + 1,
            failed_at=advanced.failed_at,
            failed_attempts=advanced.failed_attempts,
            last_error=advanced.last_error,
        )
        self.writes[kind] += 1
        return advanced

    def _apply(self, sinks: dict[str, dict[str, Item]], write: Mapping[str, Any]) -> None:
        [(kind, operation)] = write.items()
        table = operation["TableName"]
        items = sinks.setdefault(table, {})
        if kind == "Put":
            item: Item = dict(operation["Item"])
            schema = self._key_schema.get(table)
            if schema is None:
                raise KeyError(f"Put into {table!r}: declare its key, InMemoryLeaseTable(key_schema=...)")
            key = {name: item[name] for name in schema}
        else:
            key = dict(operation["Key"])
        where = json.dumps(key, sort_keys=True, default=str)
        condition = operation.get("ConditionExpression")
        if condition is not None:
            if not condition.startswith("attribute_not_exists("):
                raise NotImplementedError(f"condition {condition!r}: only attribute_not_exists(...)")
            if where in items:
                raise SinkConflict(f"a sink write failed its condition on {table} {where}")
        if kind == "Put":
            items[where] = item
        elif kind == "Delete":
            items.pop(where, None)
        elif kind == "Update":
            items[where] = _updated(items.get(where, dict(key)), operation)
        elif kind != "ConditionCheck":
            raise NotImplementedError(f"TransactWriteItems entry {kind!r}")


def _updated(item: Item, operation: Mapping[str, Any]) -> Item:
    """`item` after an UpdateExpression of `SET a = :v, ...` and/or `ADD a :n, ...` clauses."""
    names: Mapping[str, str] = operation.get("ExpressionAttributeNames", {})
    values: Mapping[str, dict[str, Any]] = operation.get("ExpressionAttributeValues", {})
    item = dict(item)
    expression = operation["UpdateExpression"]
    for clause in _clauses(expression):
        action, _, body = clause.partition(" ")
        for part in body.split(","):
            if action == "SET":
                target, _, value = (piece.strip() for piece in part.partition("="))
                item[names.get(target, target)] = values[value]
            elif action == "ADD":
                target, value = part.split()
                attribute = names.get(target, target)
                current = float(item.get(attribute, {"N": "0"})["N"])
                total = current + float(values[value]["N"])
                item[attribute] = {"N": str(int(total)) if total.is_integer() else str(total)}
            else:
                raise NotImplementedError(f"UpdateExpression {expression!r}: only SET and ADD")
    return item


def _clauses(expression: str) -> list[str]:
    """Split `SET a = :a ADD b :b` into its clauses."""
    clauses: list[str] = []
    for word in expression.split():
        if word in ("SET", "ADD", "REMOVE", "DELETE"):
            clauses.append(word)
        elif clauses:
            clauses[-1] += " " + word
    return clauses
