"""Kinesis Data Streams operations -> the actions and ARNs IAM authorizes them on.

Source: the Service Authorization Reference for Kinesis
(https://docs.aws.amazon.com/service-authorization/latest/reference/list_amazonkinesis.html): the
`stream` resource type (`arn:aws:kinesis:<region>:<account>:stream/<name>`) for the data and control
operations, the `consumer` resource type
(`arn:aws:kinesis:<region>:<account>:stream/<name>/consumer/<consumer>:<creation epoch>`) for
SubscribeToShard, DescribeStreamConsumer and DeregisterStreamConsumer; RegisterStreamConsumer and
ListStreamConsumers on the stream; ListStreams, DescribeLimits, account settings on "*".

GetRecords names its stream only inside the shard iterator: the local endpoint issues moto's
iterator, `base64("<stream>:<shard>:<sequence>[:<issued ms>]")`
(`local.endpoint.kinesis.fixes._compose_shard_iterator`), decoded here. A ListShards page continued
by NextToken alone names it inside the token, the local endpoint's `urlsafe_base64(JSON)` with the
first request's `arn` and `name` (`local.endpoint.kinesis.responses.list_shards`).
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

from ._calls_types import Need, UnknownResource, Where

__all__ = ["needs", "stream_of_iterator", "stream_of_list_token"]

#: Kinesis operations newer than the Service Authorization Reference this was written from (their
#: resource type is not documented there): not modelled, the enforcer lists them.
_UNMODELLED = frozenset(
    {"CreateChannel", "DeleteChannel", "DescribeChannel", "ListChannels", "UpdateChannel"}
)
_STAR = frozenset({"ListStreams", "DescribeLimits", "DescribeAccountSettings", "UpdateAccountSettings"})
_CONSUMER_OPS = frozenset({"SubscribeToShard", "DescribeStreamConsumer", "DeregisterStreamConsumer"})
_WRITES = frozenset({"PutRecord", "PutRecords"})
_READS = frozenset({"GetRecords", "SubscribeToShard"})


def stream_of_iterator(iterator: str) -> str:
    """The stream name inside a local shard iterator (`UnknownResource` if it is not one)."""
    try:
        text = base64.b64decode(iterator.encode("ascii"), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeError, ValueError):
        raise UnknownResource("GetRecords: the ShardIterator is not one the local endpoint issued") from None
    parts = text.split(":")
    if len(parts) < 3 or not parts[0] or parts[0] == "None":
        raise UnknownResource("GetRecords: the ShardIterator names no stream")
    return parts[0]


def stream_of_list_token(token: str, where: Where) -> str:
    """The stream ARN inside a local ListShards NextToken (`UnknownResource` if it is not one)."""
    try:
        request = json.loads(base64.urlsafe_b64decode(token.encode("ascii")))
    except (binascii.Error, UnicodeError, ValueError):
        request = None
    if isinstance(request, dict) and request.get("arn"):
        return str(request["arn"])
    if isinstance(request, dict) and request.get("name"):
        return where.arn("kinesis", f"stream/{request['name']}")
    raise UnknownResource("ListShards: the NextToken is not one the local endpoint issued")


def _stream(params: dict[str, Any], where: Where) -> str | None:
    if params.get("StreamARN"):
        return str(params["StreamARN"])
    if params.get("StreamName"):
        return where.arn("kinesis", f"stream/{params['StreamName']}")
    return None


def needs(
    operation: str, params: dict[str, Any], request: Any, where: Where
) -> tuple[list[Need], list[tuple[str, str]], dict[str, str]] | None:
    if operation in _UNMODELLED:
        return None
    action = f"kinesis:{operation}"
    touched: str | None = None
    if operation in _STAR:
        resource = "*"
    elif operation in _CONSUMER_OPS:
        if params.get("ConsumerARN"):
            resource = str(params["ConsumerARN"])
        else:
            # by StreamARN + ConsumerName: the consumer's ARN ends in its creation time, which the
            # request does not carry
            raise UnknownResource(f"{operation} names its consumer without its ARN (creation time unknown)")
        touched = resource.split("/consumer/", 1)[0]
    elif operation == "GetRecords":
        resource = _stream(params, where) or where.arn(
            "kinesis", f"stream/{stream_of_iterator(str(params.get('ShardIterator', '')))}"
        )
        touched = resource
    elif params.get("ResourceARN"):  # tags, resource policies: on the stream or consumer named
        resource = str(params["ResourceARN"])
    else:
        stream = _stream(params, where)
        if stream is None and operation == "ListShards" and params.get("NextToken"):
            stream = stream_of_list_token(str(params["NextToken"]), where)
        if stream is None:
            raise UnknownResource(f"{operation} names no stream (StreamName/StreamARN absent)")
        resource = stream
        touched = stream
    touches: list[tuple[str, str]] = []
    if touched is not None and operation in _WRITES:
        touches.append((touched, "write"))
    elif touched is not None and operation in _READS:
        touches.append((touched, "read"))
    return [Need(action, resource)], touches, {}
