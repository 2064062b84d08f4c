"""The endpoint's faster DynamoDB paths (`local.endpoint.dynamodb_speed`) answer and refuse as moto does.

The same calls go to the endpoint and to moto unpatched, in this process (`mock_aws`); every answer,
every refusal (its code, message and cancellation reasons) and every table's final content must match.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError
from moto import mock_aws
from moto.dynamodb import comparisons

from local.app.model import REGION
from local.app.provision import client
from local.endpoint import dynamodb_speed

pytestmark = pytest.mark.integration

SINK, LEASES, NUMBERS = "speed-sink", "speed-leases", "speed-numbers"
TABLES = {
    SINK: [("pk", "HASH", "S"), ("sk", "RANGE", "S")],
    LEASES: [("leaseKey", "HASH", "S")],
    NUMBERS: [("n", "HASH", "N")],
}


def _create(dynamodb: Any, suffix: str) -> None:
    for name, key in TABLES.items():
        dynamodb.create_table(
            TableName=name + suffix,
            KeySchema=[{"AttributeName": n, "KeyType": k} for n, k, _ in key],
            AttributeDefinitions=[{"AttributeName": n, "AttributeType": t} for n, _, t in key],
            BillingMode="PAY_PER_REQUEST",
        )


def _outcome(call: Callable[[], Any]) -> Any:
    try:
        answer = call()
    except ClientError as error:
        reasons = error.response.get("CancellationReasons")
        return (
            "refused",
            error.response["Error"].get("Code"),
            error.response["Error"].get("Message"),
            reasons,
        )
    answer.pop("ResponseMetadata", None)
    return ("answered", answer)


def _sink_item(sk: str, **extra: Any) -> dict[str, Any]:
    return {"pk": {"S": "shard-1"}, "sk": {"S": sk}, "data": {"B": b"\x00\x01" * 150}, **extra}


def _counter(key: str, n: str, table: str, *, expires: str | None = None) -> dict[str, Any]:
    update = {
        "TableName": table,
        "Key": {"leaseKey": {"S": key}},
        "UpdateExpression": "ADD #count :n" + (" SET #expiresAt = :e" if expires else ""),
        "ExpressionAttributeNames": {"#count": "count", **({"#expiresAt": "expiresAt"} if expires else {})},
        "ExpressionAttributeValues": {":n": {"N": n}, **({":e": {"N": expires}} if expires else {})},
    }
    return {"Update": update}


def _script(dynamodb: Any, suffix: str) -> list[Any]:
    """The calls a sink, a counter and a lease table make, and the ways they are refused; their outcomes."""
    sink, leases, numbers = SINK + suffix, LEASES + suffix, NUMBERS + suffix
    out = []

    def call(method: str, **kwargs: Any) -> None:
        out.append(_outcome(lambda: getattr(dynamodb, method)(**kwargs)))

    absent = {"ConditionExpression": "attribute_not_exists(pk)"}
    call("put_item", TableName=sink, Item=_sink_item("001", n={"N": "1"}), **absent)
    call("put_item", TableName=sink, Item=_sink_item("001", n={"N": "2"}), **absent)  # refused: exists
    call("put_item", TableName=sink, Item=_sink_item("001", n={"N": "3"}), ReturnValues="ALL_OLD")
    call("put_item", TableName=sink, Item=_sink_item("big", big={"B": b"x" * 410_000}))  # too large
    call(
        "put_item",
        TableName=sink,
        Item=_sink_item("002", **{f"a{i}": {"S": "v" * 20_000} for i in range(25)}),
    )
    call(
        "put_item",
        TableName=sink,
        Item=_sink_item("003", **{f"a{i}": {"S": "v" * 16_000} for i in range(24)}),
    )
    requests = [{"PutRequest": {"Item": _sink_item(f"1{i:02d}", n={"N": str(i)})}} for i in range(25)]
    call("batch_write_item", RequestItems={sink: requests})
    call("transact_write_items", TransactItems=[{"Put": {"TableName": sink, "Item": _sink_item(f"2{i:02d}")}}
                                                for i in range(10)])  # fmt: skip
    # counters: ADD on a missing item creates it; the same expression with other values, other items
    for n in ("1", "5", "-2"):
        call(
            "transact_write_items",
            TransactItems=[_counter("k1", n, leases), _counter("k2", n, leases, expires="1700000000")],
        )
    call("update_item", ReturnValues="ALL_NEW", **_counter("k3", "7", leases)["Update"])
    call("update_item", ReturnValues="UPDATED_OLD", **_counter("k3", "3", leases, expires="17")["Update"])
    # a lease's compare-and-swap: the first succeeds, the stale one is refused
    lease = {"TableName": leases, "Key": {"leaseKey": {"S": "shard-1"}}}
    call("put_item", TableName=leases, Item={"leaseKey": {"S": "shard-1"}, "leaseCounter": {"N": "1"}})
    for expected, new in (("1", "2"), ("1", "3"), ("2", "3")):
        call(
            "update_item",
            **lease,
            UpdateExpression="SET leaseCounter = :new, leaseOwner = :owner",
            ConditionExpression="leaseCounter = :expected",
            ExpressionAttributeValues={
                ":new": {"N": new},
                ":owner": {"S": f"w{new}"},
                ":expected": {"N": expected},
            },
            ReturnValues="ALL_NEW",
            ReturnValuesOnConditionCheckFailure="ALL_OLD",
        )
    # refusals of the update expression itself
    for expression, values in (
        ("SET leaseCounter = ", {}),  # syntax
        ("SET leaseKey = :v", {":v": {"S": "x"}}),  # the key
        ("ADD leaseOwner :v", {":v": {"N": "1"}}),  # ADD to a string
        ("SET a = :v, a = :w", {":v": {"N": "1"}, ":w": {"N": "2"}}),  # one path twice
        ("SET a = :missing", {":v": {"N": "1"}}),  # an undefined value
        ("SET a = b + :v", {":v": {"N": "1"}}),  # b does not exist
        ("SET leaseCounter = leaseCounter + :v REMOVE leaseOwner", {":v": {"N": "10"}}),
    ):
        call("update_item", **lease, UpdateExpression=expression, ExpressionAttributeValues=values)
    # a cancelled transaction puts every item back, an updated one included
    call(
        "transact_write_items",
        TransactItems=[
            _counter("k1", "100", leases),
            {"Put": {"TableName": sink, "Item": _sink_item("001", n={"N": "99"})}},
            {"Delete": {"TableName": sink, "Key": {"pk": {"S": "shard-1"}, "sk": {"S": "100"}}}},
            {"ConditionCheck": {**lease, "ConditionExpression": "leaseCounter = :c",
                                "ExpressionAttributeValues": {":c": {"N": "0"}},
                                "ReturnValuesOnConditionCheckFailure": "ALL_OLD"}},
        ],
    )  # fmt: skip
    # one item named twice under two spellings of its number key: checked, then updated, then cancelled
    call("put_item", TableName=numbers, Item={"n": {"N": "1"}, "c": {"N": "1"}})
    one = {":one": {"N": "1"}}
    checked = {"TableName": numbers, "Key": {"n": {"N": "1"}}, "ConditionExpression": "c = :one"}
    updated = {"TableName": numbers, "Key": {"n": {"N": "1.0"}}, "UpdateExpression": "ADD c :one"}
    missing = {"TableName": numbers, "Key": {"n": {"N": "2"}}, "ConditionExpression": "attribute_exists(n)"}
    call(
        "transact_write_items",
        TransactItems=[
            {"ConditionCheck": {**checked, "ExpressionAttributeValues": one}},
            {"Update": {**updated, "ExpressionAttributeValues": one}},
            {"ConditionCheck": missing},
        ],
    )
    # an attribute holding its key's value (a one-character string is one object in CPython: the key's)
    call("put_item", TableName=numbers, Item={"n": {"N": "7"}, "c": {"N": "7"}})
    seven = {"TableName": numbers, "Key": {"n": {"N": "7.0"}}, "ReturnValues": "ALL_NEW"}
    call("update_item", **seven, UpdateExpression="ADD c :one", ExpressionAttributeValues=one)
    # one condition's text with other names and values: each answered for its own (a parse cached
    # per text alone would answer the first)
    for name in ("pk", "n", "pk"):
        names = {"#k": name}
        call("put_item", TableName=sink, Item=_sink_item("001", n={"N": "4"}),
             ConditionExpression="attribute_not_exists(#k)", ExpressionAttributeNames=names)  # fmt: skip
    for value in ("3", "4", "3"):
        call("put_item", TableName=sink, Item=_sink_item("001", n={"N": "5"}), ConditionExpression="n = :v",
             ExpressionAttributeValues={":v": {"N": value}},
             ReturnValuesOnConditionCheckFailure="ALL_OLD")  # fmt: skip
    for data in (b"\x00\x01" * 150, b"\x00\x02" * 150):  # a B value: JSON cannot key it
        call("put_item", TableName=sink, Item=_sink_item("001", n={"N": "6"}), ConditionExpression="#d = :d",
             ExpressionAttributeNames={"#d": "data"},
             ExpressionAttributeValues={":d": {"B": data}})  # fmt: skip
    for low in ("103", "120", "103"):
        call("query", TableName=sink, KeyConditionExpression="pk = :p", FilterExpression="sk < :s",
             ExpressionAttributeValues={":p": {"S": "shard-1"}, ":s": {"S": low}})  # fmt: skip
    call("get_item", TableName=numbers, Key={"n": {"N": "7"}}, ConsistentRead=True)
    call("get_item", TableName=leases, Key={"leaseKey": {"S": "k1"}}, ConsistentRead=True)
    call("query", TableName=sink, KeyConditionExpression="pk = :p AND sk > :s",
         ExpressionAttributeValues={":p": {"S": "shard-1"}, ":s": {"S": "105"}}, Limit=7)  # fmt: skip
    for name in (sink, leases, numbers):
        call("scan", TableName=name, ConsistentRead=True)
    return out


def _same_names(value: Any, suffix: str) -> Any:
    """`value` with the tables' suffix taken out of every string and key (the two runs' names differ)."""
    if isinstance(value, str):
        return value.replace(suffix, "")
    if isinstance(value, dict):
        return {_same_names(k, suffix): _same_names(v, suffix) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(_same_names(v, suffix) for v in value)
    return value


def test_every_answer_and_refusal_is_moto_unpatched(local_endpoint_no_limits):
    suffix = f"-{uuid.uuid4().hex[:8]}"
    endpoint = client("dynamodb", local_endpoint_no_limits, retries={"max_attempts": 0})
    _create(endpoint, suffix)
    served = _same_names(_script(endpoint, suffix), suffix)
    with mock_aws():
        reference = boto3.client(
            "dynamodb", region_name=REGION, config=Config(retries={"max_attempts": 0}),
            aws_access_key_id="test", aws_secret_access_key="test",
        )  # fmt: skip
        _create(reference, suffix)
        expected = _same_names(_script(reference, suffix), suffix)
    assert len(served) == len(expected)
    for index, (got, want) in enumerate(zip(served, expected, strict=True)):
        assert got == want, f"call {index}"
    kinds = [o[0] for o in expected]
    assert kinds.count("refused") >= 10  # the script does exercise refusals


def test_one_update_expression_from_two_threads_with_their_own_values(local_endpoint_no_limits):
    endpoint = client("dynamodb", local_endpoint_no_limits, retries={"max_attempts": 0})
    suffix = f"-{uuid.uuid4().hex[:8]}"
    _create(endpoint, suffix)
    table, rounds = LEASES + suffix, 40

    def add(thread: int) -> None:
        dynamodb = client("dynamodb", local_endpoint_no_limits, retries={"max_attempts": 0})
        for _ in range(rounds):
            items = [_counter(f"t{thread}-{i}", str(thread + 1), table) for i in range(5)]
            dynamodb.transact_write_items(TransactItems=items)

    workers = [threading.Thread(target=add, args=(t,)) for t in range(2)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    for thread in range(2):
        for i in range(5):
            got = endpoint.get_item(
                TableName=table, Key={"leaseKey": {"S": f"t{thread}-{i}"}}, ConsistentRead=True
            )
            assert got["Item"]["count"] == {"N": str(rounds * (thread + 1))}


def test_a_condition_that_fails_to_parse_fails_every_time_as_moto_fails_it() -> None:
    """Condition refusals moto itself raises in-process (no ClientError to compare through the
    endpoint): the cached parse raises them too, at `parse()`, every time, and caches no answer."""
    cases = [
        ("attribute_not_exists(", None, None),
        ("n = :missing", None, {":v": {"N": "1"}}),
        ("#undefined = :v", {"#k": "n"}, {":v": {"N": "1"}}),
    ]
    for _ in range(2):
        for expression, names, values in cases:
            with pytest.raises(Exception) as moto_raised:
                comparisons.ConditionExpressionParser(expression, names, values).parse()
            ours = dynamodb_speed._ConditionParser(expression, names, values)  # built without raising
            with pytest.raises(type(moto_raised.value)) as raised:
                ours.parse()
            assert str(raised.value) == str(moto_raised.value)


def test_each_caller_of_a_cached_condition_gets_lists_of_its_own() -> None:
    """moto's callers extend the names a parser found (`+=` with a projection's): a cached parse
    must not hand two callers one list."""
    arguments = ("#a = :v AND attribute_exists(#b)", {"#a": "x", "#b": "y"}, {":v": {"S": "1"}})
    first, second = dynamodb_speed._ConditionParser(*arguments), dynamodb_speed._ConditionParser(*arguments)
    reference = comparisons.ConditionExpressionParser(*arguments)
    reference.parse()
    first.parse()
    first.expr_attr_names_found += ["#projected"]
    second.parse()
    assert second.expr_attr_names_found == reference.expr_attr_names_found == ["#a", "#b"]
    assert second.expr_attr_values_found == reference.expr_attr_values_found
