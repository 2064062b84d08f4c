"""The endpoint's AttributeValue wire paths (`local.endpoint.dynamodb_wire`) give moto's own bytes.

Every type of AttributeValue, nested, goes through the endpoint and through moto unpatched in this
process (`mock_aws`), in writes, reads and refusals that carry items (a failed condition's Item, a
cancelled transaction's reasons): each response's body must be byte for byte moto's (the tables'
names aside), and the headers botocore reads (its CRC32, the request id) must be there and right.
"""

from __future__ import annotations

import uuid
import zlib
from typing import Any

import boto3
import pytest
from botocore.config import Config
from moto import mock_aws

from local.app.model import REGION
from local.app.provision import client

from .test_dynamodb_speed import _outcome, _same_names

pytestmark = pytest.mark.integration

WIDE = "wire-wide"
EVERY_TYPE = {
    "s": {"S": "text é"},
    "empty": {"S": ""},
    "n": {"N": "-12.50"},
    "b": {"B": b"\x00\xffbytes"},
    "ss": {"SS": ["a"]},  # one member each: a set's order is its process's hashing
    "ns": {"NS": ["2.5"]},
    "bs": {"BS": [b"\x02\x03"]},
    "m": {
        "M": {
            "inner": {"L": [{"S": "x"}, {"N": "1"}, {"B": b"\x04"}, {"NULL": True}]},
            "f": {"BOOL": False},
        }
    },
    "l": {"L": [{"M": {"k": {"SS": ["z"]}}}, {"BOOL": True}]},
    "null": {"NULL": True},
    "bool": {"BOOL": True},
}


def _script(dynamodb: Any, raw: Any, suffix: str) -> list[Any]:
    table = WIDE + suffix
    dynamodb.create_table(
        TableName=table,
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
        AttributeDefinitions=[{"AttributeName": n, "AttributeType": "S"} for n in ("pk", "sk")],
        BillingMode="PAY_PER_REQUEST",
    )
    out = []

    def call(client_: Any, method: str, **kwargs: Any) -> None:
        out.append(_outcome(lambda: getattr(client_, method)(**kwargs)))

    def key(sk: str) -> dict[str, Any]:
        return {"pk": {"S": "p"}, "sk": {"S": sk}}

    absent = {"ConditionExpression": "attribute_not_exists(pk)"}
    call(dynamodb, "put_item", TableName=table, Item={**key("1"), **EVERY_TYPE})
    call(dynamodb, "put_item", TableName=table, Item={**key("1"), **EVERY_TYPE}, **absent,
         ReturnValuesOnConditionCheckFailure="ALL_OLD")  # fmt: skip
    call(dynamodb, "put_item", TableName=table, Item={**key("1"), "s": {"S": "new"}}, ReturnValues="ALL_OLD")
    call(dynamodb, "put_item", TableName=table, Item={**key("1"), **EVERY_TYPE})
    call(dynamodb, "get_item", TableName=table, Key=key("1"), ConsistentRead=True)
    call(dynamodb, "get_item", TableName=table, Key=key("1"), ProjectionExpression="m.inner, bs, #n",
         ExpressionAttributeNames={"#n": "null"})  # fmt: skip
    call(dynamodb, "get_item", TableName=table + "-missing", Key=key("1"))
    writes = [{"PutRequest": {"Item": {**key(f"2{i}"), **EVERY_TYPE, "i": {"N": str(i)}}}} for i in range(25)]
    call(dynamodb, "batch_write_item", RequestItems={table: writes})
    call(dynamodb, "batch_write_item", RequestItems={table + "-missing": writes[:1]})
    reads = {"Keys": [key(f"2{i}") for i in range(0, 25, 3)] + [key("absent")]}
    call(dynamodb, "batch_get_item", RequestItems={table: reads})
    call(dynamodb, "batch_get_item", RequestItems={table + "-missing": reads})
    call(dynamodb, "update_item", TableName=table, Key=key("1"), ReturnValues="ALL_NEW",
         UpdateExpression="SET l[0].m = :m ADD n :n", ExpressionAttributeValues={
             ":m": {"M": {"b": {"B": b"\x09"}}}, ":n": {"N": "7"}})  # fmt: skip
    call(dynamodb, "update_item", TableName=table, Key=key("1"), ConditionExpression="s = :no",
         UpdateExpression="SET s = :no", ExpressionAttributeValues={":no": {"S": "no"}},
         ReturnValuesOnConditionCheckFailure="ALL_OLD")  # fmt: skip
    call(dynamodb, "transact_write_items", TransactItems=[
        {"Update": {"TableName": table, "Key": key("20"), "UpdateExpression": "ADD i :one",
                    "ExpressionAttributeValues": {":one": {"N": "1"}}}},
        {"Put": {"TableName": table, "Item": {**key("1"), **EVERY_TYPE}, **absent,
                 "ReturnValuesOnConditionCheckFailure": "ALL_OLD"}},
    ])  # fmt: skip
    call(dynamodb, "transact_write_items", TransactItems=[
        {"Put": {"TableName": table, "Item": {**key(f"3{i}"), **EVERY_TYPE}, **absent}} for i in range(5)
    ])  # fmt: skip
    call(dynamodb, "transact_get_items", TransactItems=[{"Get": {"TableName": table, "Key": key("30")}}])
    call(dynamodb, "query", TableName=table, KeyConditionExpression="pk = :p",
         ExpressionAttributeValues={":p": {"S": "p"}}, Limit=4)  # fmt: skip
    call(dynamodb, "scan", TableName=table, FilterExpression="contains(ss, :a)",
         ExpressionAttributeValues={":a": {"S": "a"}})  # fmt: skip
    # values a client with validation off can send: moto's own walk (and its refusals) for these
    for odd in ({"S": "a", "N": "1"}, {"N": "not a number"}, {"B": "!!"}):
        call(raw, "put_item", TableName=table, Item={**key("odd"), "v": odd})
        call(raw, "get_item", TableName=table, Key=key("odd"))
    return out


def _capture(dynamodb: Any, seen: list[tuple[bytes, dict[str, str]]]) -> Any:
    def before_parse(response_dict: dict[str, Any], **_: Any) -> None:
        seen.append((response_dict["body"], {k.lower(): v for k, v in response_dict["headers"].items()}))

    dynamodb.meta.events.register("before-parse.dynamodb.*", before_parse)
    return dynamodb


def _run(make: Any, suffix: str) -> tuple[list[Any], list[tuple[bytes, dict[str, str]]]]:
    seen: list[tuple[bytes, dict[str, str]]] = []
    dynamodb = _capture(make(retries={"max_attempts": 0}), seen)
    raw = _capture(make(retries={"max_attempts": 0}, parameter_validation=False), seen)
    outcomes = _same_names(_script(dynamodb, raw, suffix), suffix)
    return outcomes, seen[1:]  # not CreateTable's: its answer has the time it was created


def test_every_attribute_value_answer_and_refusal_is_moto_unpatched(local_endpoint_no_limits):
    suffix = f"-{uuid.uuid4().hex[:8]}"

    def endpoint(**config: Any) -> Any:
        return client("dynamodb", local_endpoint_no_limits, **config)

    def reference(**config: Any) -> Any:
        return boto3.client(
            "dynamodb", region_name=REGION, config=Config(**config),
            aws_access_key_id="test", aws_secret_access_key="test",
        )  # fmt: skip

    served, served_wire = _run(endpoint, suffix)
    with mock_aws():
        expected, expected_wire = _run(reference, suffix)
    assert len(served) == len(expected) == len(served_wire) == len(expected_wire)
    for index, (got, want) in enumerate(zip(served, expected, strict=True)):
        assert got == want, f"call {index}"
    refusals = {o[1] for o in expected if o[0] == "refused"}
    assert refusals >= {"ConditionalCheckFailedException", "TransactionCanceledException",
                         "ResourceNotFoundException", "ValidationException"}, refusals  # fmt: skip
    for index, ((body, headers), (want_body, want_headers)) in enumerate(
        zip(served_wire, expected_wire, strict=True)
    ):
        assert body.replace(suffix.encode(), b"") == want_body.replace(suffix.encode(), b""), f"call {index}"
        assert int(headers["x-amz-crc32"]) == zlib.crc32(body), f"call {index}"
        assert headers["x-amz-crc32"] == want_headers["x-amz-crc32"] or suffix.encode() in body
        assert headers.get("x-amzn-requestid"), f"call {index}"
        assert headers["content-type"] == want_headers["content-type"], f"call {index}"
