"""Property (issue 40, property 2): every operation of the five main services' botocore models is
named by `call_of`, with a non-empty action of the service's IAM prefix.

Each request is serialized by botocore's own serializer for the model's protocol from generated
names (the input shape's required members, and the members that name a resource), prepared and
SigV4-signed by botocore, then read back by `call_of`.
"""

from __future__ import annotations

import base64
import datetime
import json
from typing import Any
from urllib.parse import urlsplit

import botocore.auth
import botocore.credentials
import botocore.serialize
import botocore.session
import pytest
from botocore.awsrequest import create_request_object, prepare_request_dict
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from local.iam.calls import call_of

ACCOUNT = "000000000000"
REGION = "us-east-1"
ENDPOINT = "http://127.0.0.1:4566"
SERVICES = {"kinesis": "kinesis", "dynamodb": "dynamodb", "sqs": "sqs", "s3": "s3", "kms": "kms"}
_SESSION = botocore.session.get_session()
_CREDENTIALS = botocore.credentials.Credentials("AKIDEXAMPLE", "secret")

NAMES = st.from_regex(r"[a-z][a-z0-9\-]{2,24}", fullmatch=True)
KEYS = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9 ._\-]{0,12}(/[A-Za-z0-9 ._\-]{1,12}){0,2}", fullmatch=True)
#: Optional members that name the resource: filled so that the request says what it acts on.
NAMING = frozenset(
    {
        "StreamName",
        "StreamARN",
        "TableName",
        "QueueUrl",
        "KeyId",
        "SourceKeyId",
        "DestinationKeyId",
        "ConsumerARN",
        "Bucket",
        "Key",
    }
)


def _named(member: str, name: str, key: str) -> Any:
    """A well-formed value for members whose form the service checks before anything else."""
    if member == "TaskHandle":
        source = f"arn:aws:sqs:{REGION}:{ACCOUNT}:{name}"
        return base64.b64encode(json.dumps({"taskId": name, "sourceArn": source}).encode()).decode()
    if member.endswith(("Arn", "ARN")) and member not in (
        "StreamARN",
        "ConsumerARN",
        "ResourceARN",
        "ResourceArn",
    ):
        return f"arn:aws:dynamodb:{REGION}:{ACCOUNT}:table/{name}/backup/{name}"  # any ARN of the account
    return {
        "QueueUrl": f"{ENDPOINT}/{ACCOUNT}/{name}",
        "StreamARN": f"arn:aws:kinesis:{REGION}:{ACCOUNT}:stream/{name}",
        "ConsumerARN": f"arn:aws:kinesis:{REGION}:{ACCOUNT}:stream/{name}/consumer/{name}:1700000000",
        "ResourceARN": f"arn:aws:kinesis:{REGION}:{ACCOUNT}:stream/{name}",
        "ResourceArn": f"arn:aws:dynamodb:{REGION}:{ACCOUNT}:table/{name}",
        "ShardIterator": base64.b64encode(f"{name}:shardId-000000000000:1:1700000000000".encode()).decode(),
        "CopySource": f"{name}/{key}",
        "Statement": f'SELECT * FROM "{name}"',
        "Key": key,
        "AliasName": f"alias/{name}",
    }.get(member)


def _value(shape: Any, member: str, name: str, key: str, depth: int = 0) -> Any:
    named = _named(member, name, key)
    if named is not None and shape.type_name == "string":
        return named
    kind = shape.type_name
    if kind == "structure":
        wanted = [m for m in shape.members if m in shape.required_members or m in NAMING]
        if not wanted and shape.members and depth > 0:  # a union (TransactWriteItem): one of its members
            wanted = [next(iter(shape.members))]
        if depth > 6:
            wanted = list(shape.required_members)
        return {m: _value(shape.members[m], m, name, key, depth + 1) for m in wanted}
    if kind == "list":
        return [_value(shape.member, member, name, key, depth + 1)]
    if kind == "map":
        return {name: _value(shape.value, member, name, key, depth + 1)}
    return _scalar(shape, name)


def _scalar(shape: Any, name: str) -> Any:
    kind = shape.type_name
    if kind == "string":
        return shape.enum[0] if shape.enum else name.ljust(int(shape.metadata.get("min", 0)), "x")
    scalars: dict[str, Any] = {
        "integer": max(1, int(shape.metadata.get("min", 1))),
        "double": 1.0,
        "float": 1.0,
        "boolean": True,
        "blob": b"x",
        "timestamp": datetime.datetime(2024, 1, 1, tzinfo=datetime.UTC),
    }
    scalars["long"] = scalars["integer"]
    return scalars[kind]


def _signed_request(service: str, operation: str, name: str, key: str) -> tuple[str, tuple[Any, ...]]:
    model = _SESSION.get_service_model(service)
    op = model.operation_model(operation)
    params = _value(op.input_shape, "", name, key) if op.input_shape is not None else {}
    request = botocore.serialize.create_serializer(
        model.protocol, include_validation=False
    ).serialize_to_request(params, op)
    prepare_request_dict(request, endpoint_url=ENDPOINT)
    aws_request = create_request_object(request)
    signer = botocore.auth.S3SigV4Auth if service == "s3" else botocore.auth.SigV4Auth
    signer(_CREDENTIALS, model.signing_name, REGION).add_auth(aws_request)
    prepared = aws_request.prepare()
    body = prepared.body or b""
    body = body.encode() if isinstance(body, str) else body if isinstance(body, bytes) else body.read()
    url = urlsplit(prepared.url)
    headers = {k: v.decode() if isinstance(v, bytes) else v for k, v in prepared.headers.items()}
    return model.signing_name, (prepared.method, url.path, url.query, headers, body)


#: Operations `call_of` knows and flags as not modelled (newer than the reference it follows).
NOT_MODELLED = {
    ("kinesis", o)
    for o in ("CreateChannel", "DeleteChannel", "DescribeChannel", "ListChannels", "UpdateChannel")
}


def _same_wire() -> dict[tuple[str, str], str]:
    """Operations whose requests are identical on the wire to another's, identified as that one: a
    deprecated S3 operation and its successor on one method and URI (GetBucketLifecycle,
    GetBucketLifecycleConfiguration), and ListDirectoryBuckets, which differs from ListBuckets only by
    its host (S3 Express's control endpoint)."""
    s3 = _SESSION.get_service_model("s3")
    current = {}
    for name in s3.operation_names:
        op = s3.operation_model(name)
        if not op.deprecated:
            current.setdefault((op.http["method"], op.http["requestUri"]), name)
    same = {("s3", "ListDirectoryBuckets"): "ListBuckets"}
    for name in s3.operation_names:
        op = s3.operation_model(name)
        if op.deprecated and (op.http["method"], op.http["requestUri"]) in current:
            same[("s3", name)] = current[(op.http["method"], op.http["requestUri"])]
    return same


SAME_WIRE = _same_wire()
OPERATIONS = [
    (prefix, operation)
    for prefix, service in SERVICES.items()
    for operation in _SESSION.get_service_model(service).operation_names
]


@pytest.mark.parametrize(("prefix", "operation"), OPERATIONS, ids=[f"{p}.{o}" for p, o in OPERATIONS])
@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=NAMES, key=KEYS)
def test_property_2_every_operation_of_the_five_services_is_named_with_an_action_of_its_prefix(
    prefix: str, operation: str, name: str, key: str
) -> None:
    signing, (method, path, query, headers, body) = _signed_request(SERVICES[prefix], operation, name, key)
    call = call_of(signing, method, path, query, headers, body, account=ACCOUNT, region=REGION)
    assert call.operation == SAME_WIRE.get((prefix, operation), operation)
    assert call.modelled == ((prefix, operation) not in NOT_MODELLED)
    assert call.service == prefix
    assert call.needs, f"{operation} needs nothing"
    for need in call.needs:
        assert need.action.startswith(f"{prefix}:") and len(need.action) > len(prefix) + 1, need
        assert need.resource == "*" or need.resource.startswith("arn:aws:"), need
