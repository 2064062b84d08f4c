"""In-memory DynamoDB tables for the sink writes a handler returns: TransactWriteItems entries
applied all or nothing, or refused as DynamoDB refuses them.

What is modelled, and checked against DynamoDB (moto) in shardline's tests:
- `Put` (replaces the item; its key attributes come from the table's declared key schema, or,
  for a `shardline.consumer.once` guard into an undeclared table, are the guard's item but its
  `shardlineOnce` and `expiresAt`),
  `Delete`, `ConditionCheck`, and `Update` with `SET a = :v`, `ADD a :n` (numbers) and
  `REMOVE a` clauses, names plain or `#placeholders`;
- `ConditionExpression` of `attribute_not_exists(a)` or `attribute_exists(a)`, or
  `attribute_not_exists(a) OR a = :v` (an id-keyed idempotent put's): a failed one cancels the
  transaction (`SinkConflict`, as `LeaseTable` reports it, with the item that refused it when
  the write asked for it: `ReturnValuesOnConditionCheckFailure=ALL_OLD`);
- what DynamoDB rejects before evaluating anything (`ValidationException`): two entries on one
  item, a key that does not match the declared schema, an empty key value, a `Put` of an item
  over 400 KB, an update of a key attribute, an undefined `:value` or `#name`.

Anything else (nested paths, `if_not_exists`, arithmetic in SET, set types in ADD, other
conditions) raises `NotImplementedError` naming the expression, rather than being guessed at.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Any

from botocore.exceptions import ClientError

from shardline.consumer._once import GUARD_ATTRIBUTES, is_once_guard
from shardline.consumer._transaction import MAX_ITEM_BYTES, item_bytes
from shardline.errors import SinkConflict

Item = dict[str, dict[str, Any]]

_NAME = r"#?[A-Za-z_][A-Za-z0-9_]*"
_VALUE = r":[A-Za-z0-9_]+"
_CLAUSE = re.compile(r"\b(SET|ADD|REMOVE|DELETE)\b", re.IGNORECASE)
_SET = re.compile(rf"^\s*({_NAME})\s*=\s*({_VALUE})\s*$")
_ADD = re.compile(rf"^\s*({_NAME})\s+({_VALUE})\s*$")
_REMOVE = re.compile(rf"^\s*({_NAME})\s*$")
_CONDITION = re.compile(rf"^\s*(attribute_not_exists|attribute_exists)\s*\(\s*({_NAME})\s*\)\s*$")
_OR_EQUAL = re.compile(
    rf"^\s*attribute_not_exists\s*\(\s*({_NAME})\s*\)\s+OR\s+({_NAME})\s*=\s*({_VALUE})\s*$"
)


def validation_error(message: str) -> ClientError:
    """The error botocore raises for a request DynamoDB refuses outright."""
    return ClientError({"Error": {"Code": "ValidationException", "Message": message}}, "TransactWriteItems")


class SinkTables:
    """Sink tables by name; each maps an item's key (as canonical JSON) to the item."""

    def __init__(self, key_schema: Mapping[str, Sequence[str]]) -> None:
        self.key_schema = {table: list(keys) for table, keys in key_schema.items()}
        self._tables: dict[str, dict[str, Item]] = {}

    def items(self, table: str) -> list[Item]:
        """Every item of `table`, in the order first written."""
        return [dict(item) for item in self._tables.get(table, {}).values()]

    def item(self, table: str, key: Mapping[str, Mapping[str, Any]]) -> Item | None:
        found = self._tables.get(table, {}).get(_where(key))
        return dict(found) if found is not None else None

    def validate(self, writes: Sequence[Mapping[str, Any]]) -> None:
        """Raise what DynamoDB answers, before evaluating any condition, to a malformed transaction."""
        touched: set[tuple[str, str]] = set()
        for write in writes:
            kind, operation = _entry(write)
            table = operation["TableName"]
            key = self._key_of(kind, table, operation)
            if any(value.get("S") == "" or value.get("B") == b"" for value in key.values()):
                raise validation_error(
                    "One or more parameter values are not valid. A value specified for a key is empty"
                )
            if kind == "Put" and item_bytes(operation["Item"]) > MAX_ITEM_BYTES:
                raise validation_error("Item size has exceeded the maximum allowed size")
            if (table, _where(key)) in touched:
                raise validation_error("Transaction request cannot include multiple operations on one item")
            touched.add((table, _where(key)))
            if kind == "Update":
                _parse_update(operation, set(key))
            if "ConditionExpression" in operation:
                _parse_condition(operation)

    def apply(self, writes: Sequence[Mapping[str, Any]]) -> None:
        """Apply `writes` as one transaction: every condition holds and all land, or nothing does."""
        self.validate(writes)
        staged = {table: dict(items) for table, items in self._tables.items()}
        failed: list[int] = []  # DynamoDB evaluates every condition and names each that failed
        refusing: list[Item | None] = []
        for index, write in enumerate(writes):
            kind, operation = _entry(write)
            table = operation["TableName"]
            key = self._key_of(kind, table, operation)
            items = staged.setdefault(table, {})
            where = _where(key)
            current = items.get(where)
            if "ConditionExpression" in operation and not _holds(operation, current):
                failed.append(index)
                old = operation.get("ReturnValuesOnConditionCheckFailure") == "ALL_OLD"
                refusing.append(dict(current) if old and current is not None else None)
                continue
            if kind == "Put":
                items[where] = dict(operation["Item"])
            elif kind == "Delete":
                items.pop(where, None)
            elif kind == "Update":
                items[where] = _updated(current if current is not None else dict(key), operation, set(key))
        if failed:
            raise SinkConflict(
                f"sink writes {failed} failed their condition",
                tuple(failed),
                ("The conditional request failed",) * len(failed),
                tuple(refusing),
            )
        self._tables = staged

    def _key_of(self, kind: str, table: str, operation: Mapping[str, Any]) -> Item:
        schema = self.key_schema.get(table)
        if kind == "Put":
            if schema is None and is_once_guard({kind: operation}):
                item = operation["Item"]
                return {name: value for name, value in item.items() if name not in GUARD_ATTRIBUTES}
            if schema is None:
                raise ValueError(
                    f"a Put into {table!r}: declare the table's key attributes, "
                    f"InMemoryLeaseTable(key_schema={{{table!r}: [...]}})"
                )
            item = operation["Item"]
            if any(name not in item for name in schema):
                raise validation_error(f"One of the required keys was not given a value ({table})")
            return {name: item[name] for name in schema}
        key = dict(operation["Key"])
        if schema is not None and sorted(key) != sorted(schema):
            raise validation_error(f"The provided key element does not match the schema ({table})")
        return key


def _entry(write: Mapping[str, Any]) -> tuple[str, Mapping[str, Any]]:
    if len(write) != 1:
        raise validation_error(f"a TransactWriteItems entry holds exactly one operation: {sorted(write)}")
    [(kind, operation)] = write.items()
    if kind not in ("Put", "Update", "Delete", "ConditionCheck"):
        raise NotImplementedError(f"TransactWriteItems entry {kind!r}")
    if kind == "ConditionCheck" and "ConditionExpression" not in operation:
        raise validation_error("a ConditionCheck needs a ConditionExpression")
    return str(kind), operation


def _where(key: Mapping[str, Any]) -> str:
    return json.dumps(key, sort_keys=True, default=str)


def _name(token: str, operation: Mapping[str, Any]) -> str:
    if not token.startswith("#"):
        return token
    names: Mapping[str, str] = operation.get("ExpressionAttributeNames", {})
    if token not in names:
        raise validation_error(f"An expression attribute name used in the expression is not defined: {token}")
    return names[token]


def _value(token: str, operation: Mapping[str, Any]) -> dict[str, Any]:
    values: Mapping[str, dict[str, Any]] = operation.get("ExpressionAttributeValues", {})
    if token not in values:
        raise validation_error(f"An expression attribute value used in expression is not defined: {token}")
    return values[token]


def _parse_condition(operation: Mapping[str, Any]) -> tuple[bool, str, dict[str, Any] | None]:
    """(must exist, attribute name, value it may equal instead) of an `attribute_(not_)exists(a)`
    or `attribute_not_exists(a) OR a = :v` condition."""
    condition = operation["ConditionExpression"]
    either = _OR_EQUAL.match(condition)
    if either is not None and _name(either.group(1), operation) == _name(either.group(2), operation):
        return False, _name(either.group(1), operation), _value(either.group(3), operation)
    match = _CONDITION.match(condition)
    if match is None:
        raise NotImplementedError(
            f"ConditionExpression {condition!r}: only attribute_not_exists(a), attribute_exists(a) "
            "and attribute_not_exists(a) OR a = :v"
        )
    return match.group(1) == "attribute_exists", _name(match.group(2), operation), None


def _holds(operation: Mapping[str, Any], current: Item | None) -> bool:
    must_exist, attribute, equal = _parse_condition(operation)
    if equal is not None and current is not None and current.get(attribute) == equal:
        return True
    return (current is not None and attribute in current) == must_exist


def _parse_update(
    operation: Mapping[str, Any], key: set[str]
) -> list[tuple[str, str, dict[str, Any] | None]]:
    """The actions of an UpdateExpression: (SET | ADD | REMOVE, attribute, value)."""
    expression = operation["UpdateExpression"]
    pieces = _CLAUSE.split(expression)
    if pieces[0].strip():
        raise NotImplementedError(f"UpdateExpression {expression!r}: it must start with SET, ADD or REMOVE")
    actions: list[tuple[str, str, dict[str, Any] | None]] = []
    for keyword, body in zip(pieces[1::2], pieces[2::2], strict=True):
        action = keyword.upper()
        pattern = {"SET": _SET, "ADD": _ADD, "REMOVE": _REMOVE}.get(action)
        for part in body.split(","):
            match = pattern.match(part) if pattern is not None else None
            if match is None:
                raise NotImplementedError(
                    f"UpdateExpression {expression!r}: only SET a = :v, ADD a :n and REMOVE a are modelled"
                )
            attribute = _name(match.group(1), operation)
            if attribute in key:
                raise validation_error(
                    f"Cannot update attribute {attribute}. This attribute is part of the key"
                )
            value = _value(match.group(2), operation) if action != "REMOVE" else None
            if action == "ADD" and value is not None and set(value) != {"N"}:
                raise NotImplementedError(f"UpdateExpression {expression!r}: ADD of a set")
            actions.append((action, attribute, value))
    return actions


def _updated(item: Item, operation: Mapping[str, Any], key: set[str]) -> Item:
    item = dict(item)
    for action, attribute, value in _parse_update(operation, key):
        if action == "SET" and value is not None:
            item[attribute] = value
        elif action == "REMOVE":
            item.pop(attribute, None)
        elif value is not None:  # ADD of a number: Decimal arithmetic, as DynamoDB's (and moto's)
            current = item.get(attribute, {"N": "0"})
            if "N" not in current:
                raise validation_error(
                    f"An operand in the update expression has an incorrect data type: {attribute}"
                )
            item[attribute] = {"N": str(Decimal(current["N"]) + Decimal(value["N"]))}
    return item
