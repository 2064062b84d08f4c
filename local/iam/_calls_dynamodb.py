"""DynamoDB (and DynamoDB Streams) operations -> the actions and ARNs IAM authorizes them on.

Sources: the Service Authorization Reference for DynamoDB
(https://docs.aws.amazon.com/service-authorization/latest/reference/list_amazondynamodb.html) and
the developer guide's pages on transactions
(https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/transaction-apis-iam.html: "each
item in the transaction needs its own action": Put -> PutItem, Update -> UpdateItem, Delete ->
DeleteItem, ConditionCheck -> ConditionCheckItem; TransactGetItems' Get -> GetItem) and on PartiQL
(https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/ql-iam.html: dynamodb:PartiQLSelect,
PartiQLInsert, PartiQLUpdate, PartiQLDelete on the table or index).
"""

from __future__ import annotations

import re
from typing import Any

from ._calls_types import Need, UnknownResource, Where

__all__ = ["needs"]

_TRANSACT_WRITE = {
    "Put": "dynamodb:PutItem",
    "Update": "dynamodb:UpdateItem",
    "Delete": "dynamodb:DeleteItem",
    "ConditionCheck": "dynamodb:ConditionCheckItem",
}
_BATCH_WRITE = {"PutRequest": "dynamodb:PutItem", "DeleteRequest": "dynamodb:DeleteItem"}
_WRITES = frozenset({"PutItem", "UpdateItem", "DeleteItem", "BatchWriteItem", "TransactWriteItems"})
_READS = frozenset({"GetItem", "BatchGetItem", "Query", "Scan", "TransactGetItems"})
#: Operations that name no resource (the Service Authorization Reference lists no resource type).
_STAR = frozenset(
    {
        "ListTables",
        "DescribeLimits",
        "DescribeEndpoints",
        "ListBackups",
        "ListGlobalTables",
        "ListExports",
        "ListImports",
        "ListContributorInsights",
        "ListStreams",
    }
)
#: The request parameters (and their items) the service's condition keys are read from.
_CONTEXT_KEYS = ("ReturnValues", "Select", "ReturnConsumedCapacity")
_PARTIQL = re.compile(
    r"""^\s*(?P<verb>SELECT|INSERT|UPDATE|DELETE|EXISTS)\b.*?
        (?:\bFROM\b|\bINTO\b|(?<=UPDATE))\s*"?(?P<table>[A-Za-z0-9_.\-]+)"?(?:\."?(?P<index>[A-Za-z0-9_.\-]+)"?)?""",
    re.IGNORECASE | re.DOTALL | re.VERBOSE,
)


def _table(where: Where, name: str) -> str:
    # TableName may be the table's ARN (DynamoDB accepts either since 2024).
    return name if name.startswith("arn:") else where.arn("dynamodb", f"table/{name}")


def _partiql(statement: str, where: Where) -> tuple[str, str, str]:
    """(action, resource, access) of one PartiQL statement."""
    match = _PARTIQL.match(statement)
    if match is None:
        raise UnknownResource(
            f"PartiQL statement names no table DynamoDB's IAM could read: {statement[:80]!r}"
        )
    verb = match.group("verb").upper()
    verb = "SELECT" if verb == "EXISTS" else verb
    table = _table(where, match.group("table"))
    resource = f"{table}/index/{match.group('index')}" if match.group("index") else table
    return f"dynamodb:PartiQL{verb.capitalize()}", resource, "read" if verb == "SELECT" else "write"


def _items(operation: str, params: dict[str, Any], where: Where) -> list[tuple[Need, str]]:
    """The per-item and per-table pairs of the multi-item operations, each with its access."""
    out: list[tuple[Need, str]] = []
    if operation == "TransactWriteItems":
        for item in params.get("TransactItems") or ():
            for kind, act in _TRANSACT_WRITE.items():
                if isinstance(item, dict) and kind in item:
                    out.append((Need(act, _table(where, item[kind].get("TableName", ""))), "write"))
    elif operation == "TransactGetItems":
        for item in params.get("TransactItems") or ():
            table = _table(where, (item.get("Get") or {}).get("TableName", ""))
            out.append((Need("dynamodb:GetItem", table), "read"))
    elif operation in ("BatchWriteItem", "BatchGetItem"):
        # the batch's own action on each table: PutItem does not cover BatchWriteItem (the Service
        # Authorization Reference lists it as an action of its own)
        access = "write" if operation == "BatchWriteItem" else "read"
        out += [
            (Need(f"dynamodb:{operation}", _table(where, name)), access)
            for name in params.get("RequestItems") or {}
        ]
    else:  # PartiQL
        statements = (
            [params.get("Statement", "")]
            if operation == "ExecuteStatement"
            else [
                s.get("Statement", "")
                for s in (params.get("Statements") or params.get("TransactStatements") or ())
            ]
        )
        for statement in statements:
            act, resource, access = _partiql(str(statement), where)
            out.append((Need(act, resource), access))
    return out


_MULTI = frozenset(
    {
        "TransactWriteItems",
        "TransactGetItems",
        "BatchWriteItem",
        "BatchGetItem",
        "ExecuteStatement",
        "BatchExecuteStatement",
        "ExecuteTransaction",
    }
)


def _single(operation: str, params: dict[str, Any], where: Where) -> tuple[str, str | None]:
    """(resource, touched table) of a one-resource operation."""
    if operation in _STAR:
        return "*", None
    if "TableName" in params:
        table = _table(where, str(params["TableName"]))
        index = params.get("IndexName") if operation in ("Query", "Scan") else None
        return (f"{table}/index/{index}" if index else table), table
    if "StreamArn" in params:  # DynamoDB Streams: DescribeStream, GetShardIterator
        return str(params["StreamArn"]), None
    if operation == "GetRecords":  # DynamoDB Streams: the stream is inside the iterator
        raise UnknownResource("DynamoDB Streams GetRecords: the stream ARN is inside the shard iterator")
    for key in ("ResourceArn", "BackupArn", "ExportArn", "ImportArn", "TableArn", "SourceTableArn"):
        if key in params:
            return str(params[key]), None
    return "*", None


def needs(
    operation: str, params: dict[str, Any], request: Any, where: Where
) -> tuple[list[Need], list[tuple[str, str]], dict[str, str]]:
    context = {f"dynamodb:{k}": str(params[k]) for k in _CONTEXT_KEYS if isinstance(params.get(k), str)}
    if operation in _MULTI:
        pairs = _items(operation, params, where)
        if not pairs:  # AWS refuses it as invalid; there is nothing to authorize
            raise UnknownResource(f"{operation} names no table in its items")
        return [n for n, _ in pairs], [(n.resource.split("/index/", 1)[0], a) for n, a in pairs], context
    resource, table = _single(operation, params, where)
    touches: list[tuple[str, str]] = []
    if table is not None and operation in _WRITES:
        touches.append((table, "write"))
    elif table is not None and operation in _READS:
        touches.append((table, "read"))
    return [Need(f"dynamodb:{operation}", resource)], touches, context
