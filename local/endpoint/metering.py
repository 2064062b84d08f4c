"""The endpoint's part of the usage ledger: DynamoDB's request units, SQS's requests, CloudWatch's
PutMetricData, counted where moto serves them (Kinesis counts in `kinesis.writes` and `kinesis.responses`).

    install()          # before `dynamodb.apply()`, so its lock holds each write and its metering together
    USAGE.snapshot()   # what `GET /_shardline/usage` answers, with `storage()` per table

What each counter means, and the AWS page that defines its metering: `local.cloudwatch.usage`. Only
the app's calls are counted: a call from an observer's client (`OBSERVER_AGENT`) is not (`serving`).

DynamoDB is metered on moto's backend: a write wrapper reads the stored item before the write (its
size decides an update's and a failed condition's units) and the item after; a transaction runs its
writes with `factor` 2. Reads are metered where the response asks for them (GetItem, BatchGetItem,
TransactGetItems set the read's consistency and factor for the backend's `get_item`, whose other
callers — moto's own look-ups — are not billed reads). A Query or Scan is metered on the items it
returns: DynamoDB meters the items read before a FilterExpression and in full whatever the
projection, so a filtered or projected Query is under-counted here.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Hashable, Iterable, Mapping
from decimal import Decimal, InvalidOperation
from typing import Any

from ..chaos.profiles import OBSERVER_AGENT
from ..cloudwatch.usage import Usage, read_units, sqs_requests, write_units

__all__ = ["USAGE", "install", "item_size", "reading", "serving"]

_REQUEST = threading.local()  # .observer: the request being served is an observer's


class _AppUsage(Usage):
    """The ledger of the app's own calls: an observer's (provisioning, `status`, `send`'s verdict, a
    benchmark's reads — their clients carry `OBSERVER_AGENT`) are no cost of the app's."""

    def add(self, service: str, resource: str, **amounts: float) -> None:
        if not getattr(_REQUEST, "observer", False):
            super().add(service, resource, **amounts)

    def distinct(self, service: str, resource: str, counter: str, keys: Iterable[Hashable]) -> None:
        if not getattr(_REQUEST, "observer", False):
            super().distinct(service, resource, counter, keys)


def serving(user_agent: str) -> None:
    """The request this thread serves now comes with `user_agent` (an observer's is not metered)."""
    _REQUEST.observer = OBSERVER_AGENT in user_agent


USAGE = _AppUsage()
_CTX = threading.local()  # .factor: 2 inside a transaction; .reads: (consistency by table, factor); .sqs_*
_INSTALLED = False


# -- item size, as DynamoDB computes it --------------------------------------------------------------


def item_size(attrs: Mapping[str, Any]) -> int:
    """An item's size: each attribute's name (UTF-8) plus its value's size (`value_size`)."""
    return sum(len(name.encode()) + value_size(value) for name, value in attrs.items())


def value_size(value: Any) -> int:
    """A value's size by DynamoDB's rules: strings and binaries their bytes, a number 1 byte per two
    significant digits plus 1, booleans and null 1, a list or map 3 plus 1 per element plus the
    elements (names included). `value` is moto's DynamoType or its `{type: value}` dict."""
    kind, raw = _typed(value)
    if kind == "S":
        return len(raw.encode())
    if kind == "N":
        return _number_size(raw)
    if kind == "B":
        return _binary_size(raw)
    if kind in ("BOOL", "NULL"):
        return 1
    if kind == "SS":
        return sum(len(v.encode()) for v in raw)
    if kind == "NS":
        return sum(_number_size(v) for v in raw)
    if kind == "BS":
        return sum(_binary_size(v) for v in raw)
    if kind == "L":
        return 3 + sum(1 + value_size(v) for v in raw)
    if kind == "M":
        return 3 + sum(1 + len(k.encode()) + value_size(v) for k, v in raw.items())
    return 0


def _typed(value: Any) -> tuple[str, Any]:
    if isinstance(value, dict):
        return next(iter(value.items())) if value else ("NULL", True)
    return value.type, value.value


def _number_size(text: str) -> int:
    try:
        digits = len(Decimal(text).normalize().as_tuple().digits)
    except InvalidOperation:
        digits = len(text)
    return (digits + 1) // 2 + 1


def _binary_size(raw: Any) -> int:
    if isinstance(raw, bytes | bytearray):
        return len(raw)
    text = str(raw)  # moto keeps the base64 it received
    return len(text) * 3 // 4 - text.count("=", -2)


# -- DynamoDB ------------------------------------------------------------------------------------


def _stored(backend: Any, table_name: str, key: Mapping[str, Any]) -> int | None:
    """The size of the item stored under `key` (an item's attributes will do), or None: no such item."""
    from moto.dynamodb.models.dynamo_type import DynamoType

    table = backend.tables.get(table_name)
    try:
        hash_value = DynamoType(key[table.hash_key_attr])
        range_value = DynamoType(key[table.range_key_attr]) if table.range_key_attr else None
        item = table.get_item(hash_value, range_value)
    except Exception:  # no table, or a key moto will refuse with its own error: not metered
        return None
    return None if item is None else item_size(item.attrs)


def _charge_write(table_name: str, size: int) -> None:
    USAGE.add("dynamodb", table_name, write_units=write_units(size) * getattr(_CTX, "factor", 1))


def _write(original: Callable[..., Any], *, deletes: bool = False) -> Any:
    """PutItem, UpdateItem (the larger of the item before and after) or DeleteItem (the item deleted)."""
    from moto.dynamodb.exceptions import ConditionalCheckFailed

    @functools.wraps(original)
    def metered(self: Any, table_name: str, *args: Any, **kwargs: Any) -> Any:
        key = args[0] if args else kwargs.get("key") or kwargs.get("item_attrs") or {}
        before = _stored(self, table_name, key)
        try:
            item = original(self, table_name, *args, **kwargs)
        except ConditionalCheckFailed:
            _charge_write(table_name, before or 0)  # a failed condition still costs the item it read
            raise
        after = item_size(item.attrs) if item is not None and not deletes else 0
        _charge_write(table_name, max(before or 0, after))
        return item

    return metered


def _transaction(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def metered(self: Any, transact_items: list[dict[str, Any]]) -> Any:
        for entry in transact_items:
            check = entry.get("ConditionCheck") if isinstance(entry, dict) else None
            if check is not None:  # a transactional read of the item checked
                size = _stored(self, check.get("TableName", ""), check.get("Key") or {}) or 0
                USAGE.add(
                    "dynamodb", check.get("TableName", ""), read_units=2 * read_units(size, consistent=True)
                )
        _CTX.factor = 2
        try:
            return original(self, transact_items)
        finally:
            _CTX.factor = 1

    return metered


def _get_item(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def metered(self: Any, table_name: str, keys: Any, projection_expressions: Any = None) -> Any:
        reads = getattr(_CTX, "reads", None)
        if reads is None:  # moto's own look-up, not a read a caller asked for
            return original(self, table_name, keys, projection_expressions)
        item = original(self, table_name, keys)  # the whole item: a projection is read in full
        consistency, factor = reads  # consistency None: every table's (a transaction's)
        size = item_size(item.attrs) if item is not None else 0
        consistent = consistency is None or consistency.get(table_name, False)
        units = read_units(size, consistent=consistent) * factor
        USAGE.add("dynamodb", table_name, read_units=units)
        return item.project(projection_expressions) if item is not None and projection_expressions else item

    return metered


def _reads(
    consistency: Callable[[Any], dict[str, bool] | None], factor: int, original: Callable[..., Any]
) -> Any:
    """A response action whose backend `get_item` calls are billed reads (see `_get_item`)."""

    @functools.wraps(original)
    def reading(self: Any) -> Any:
        _CTX.reads = (consistency(self), factor)
        try:
            return original(self)
        finally:
            _CTX.reads = None

    return reading


def _query(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def metered(self: Any, table_name: str, *args: Any, **kwargs: Any) -> Any:
        answer = original(self, table_name, *args, **kwargs)
        size = sum(item_size(item.attrs) for item in answer[0])  # summed, then rounded: per call
        units = read_units(size, consistent=bool(kwargs.get("consistent_read")))
        USAGE.add("dynamodb", table_name, read_units=units)
        return answer

    return metered


def _install_dynamodb() -> None:
    from moto.dynamodb.models import DynamoDBBackend
    from moto.dynamodb.responses import DynamoHandler

    backend: Any = DynamoDBBackend
    backend.put_item = _write(backend.put_item)
    backend.update_item = _write(backend.update_item)
    backend.delete_item = _write(backend.delete_item, deletes=True)
    backend.transact_write_items = _transaction(backend.transact_write_items)
    backend.get_item = _get_item(backend.get_item)
    backend.query = _query(backend.query)
    backend.scan = _query(backend.scan)

    def one(response: Any) -> dict[str, bool]:
        return {response.body.get("TableName", ""): bool(response.body.get("ConsistentRead"))}

    def batch(response: Any) -> dict[str, bool]:
        tables = response.body.get("RequestItems") or {}
        return {name: bool(request.get("ConsistentRead")) for name, request in tables.items()}

    def transactional(response: Any) -> None:
        return None  # a transaction's reads are strongly consistent

    responses: Any = DynamoHandler
    responses.get_item = _reads(one, 1, responses.get_item)
    responses.batch_get_item = _reads(batch, 1, responses.batch_get_item)
    responses.transact_get_items = _reads(transactional, 2, responses.transact_get_items)


# -- SQS and CloudWatch ----------------------------------------------------------------------------


def _attributes_size(attributes: Mapping[str, Any] | None) -> int:
    """A message's attributes as SQS counts them toward its size: name, data type and value."""
    size = 0
    for name, attribute in (attributes or {}).items():
        value = attribute.get("StringValue") or attribute.get("BinaryValue") or b""
        size += len(name.encode()) + len(str(attribute.get("DataType", "")).encode())
        size += len(value) if isinstance(value, bytes | bytearray) else len(str(value).encode())
    return size


def _sqs_payload(size: int, sent: int = 0) -> None:
    """Adds to the payload (and the messages sent) of the SQS call this thread serves."""
    _CTX.sqs_payload = getattr(_CTX, "sqs_payload", 0) + size
    _CTX.sqs_sent = getattr(_CTX, "sqs_sent", 0) + sent


def _sqs_call(original: Callable[..., Any]) -> Callable[..., Any]:
    """Every SQS call, one request per 64 KB of the payload its sends and receives counted."""

    @functools.wraps(original)
    def metered(self: Any) -> Any:
        _CTX.sqs_payload = _CTX.sqs_sent = 0
        try:
            return original(self)
        finally:
            queue = self._get_param("QueueUrl") or self._get_param("QueueName") or "(no queue)"
            name = str(queue).rstrip("/").rsplit("/", 1)[-1]
            requests = sqs_requests(_CTX.sqs_payload)
            USAGE.add("sqs", name, requests=requests, messages_sent=_CTX.sqs_sent)

    return metered


def _install_sqs() -> None:
    from moto.sqs.models import SQSBackend
    from moto.sqs.responses import SQSResponse

    backend: Any = SQSBackend
    send, receive = backend.send_message, backend.receive_message  # a batch sends each of its messages

    @functools.wraps(send)
    def send_message(self: Any, queue_name: str, message_body: str, *args: Any, **kwargs: Any) -> Any:
        message = send(self, queue_name, message_body, *args, **kwargs)
        attributes = args[0] if args else kwargs.get("message_attributes")
        _sqs_payload(len(message_body.encode()) + _attributes_size(attributes), sent=1)
        return message

    @functools.wraps(receive)
    def receive_message(self: Any, *args: Any, **kwargs: Any) -> Any:
        messages = receive(self, *args, **kwargs)
        _sqs_payload(sum(len(m.body.encode()) + _attributes_size(m.message_attributes) for m in messages))
        return messages

    backend.send_message, backend.receive_message = send_message, receive_message
    responses: Any = SQSResponse
    responses.call_action = _sqs_call(responses.call_action)


def _install_cloudwatch() -> None:
    from moto.cloudwatch.models import CloudWatchBackend

    backend: Any = CloudWatchBackend
    put = backend.put_metric_data

    @functools.wraps(put)
    def put_metric_data(self: Any, namespace: str, metric_data: list[dict[str, Any]]) -> Any:
        answer = put(self, namespace, metric_data)
        metrics = [
            (
                datum["MetricName"],
                tuple(sorted((d["Name"], d["Value"]) for d in datum.get("Dimensions") or ())),
            )
            for datum in metric_data
        ]
        USAGE.add("cloudwatch", namespace, put_metric_data_calls=1)
        USAGE.distinct("cloudwatch", namespace, "metrics", metrics)
        return answer

    backend.put_metric_data = put_metric_data


# -- the reading -------------------------------------------------------------------------------


def storage() -> dict[str, dict[str, int]]:
    """Per table, its items and their bytes now (DynamoDB's storage, without its 100-byte overhead)."""
    from moto.dynamodb.models import dynamodb_backends

    tables: dict[str, dict[str, int]] = {}
    for regions in list(dynamodb_backends.values()):
        for backend in list(regions.values()):
            for name, table in list(backend.tables.items()):
                count = size = 0
                for value in list(table.items.values()):  # list(): a consistent copy under writers
                    items = list(value.values()) if isinstance(value, dict) else [value]
                    count += len(items)
                    size += sum(item_size(item.attrs) for item in items)
                tables[name] = {"items": count, "bytes_stored": size}
    return tables


def reading(*, reset: bool = False) -> dict[str, Any]:
    """The endpoint's ledger now, tables' storage included; `reset`: zeroed in the same step."""
    answer = USAGE.snapshot(reset=reset)
    tables = answer["services"].setdefault("dynamodb", {})
    for name, stored in storage().items():
        tables.setdefault(name, {"write_units": 0, "read_units": 0}).update(stored)
    return answer


def install() -> None:
    """Meter DynamoDB, SQS and PutMetricData in this process (the endpoint's); idempotent.
    Before `dynamodb.apply()`: its lock then holds each write together with its metering."""
    global _INSTALLED
    if _INSTALLED:
        return
    _install_dynamodb()
    _install_sqs()
    _install_cloudwatch()
    _INSTALLED = True
