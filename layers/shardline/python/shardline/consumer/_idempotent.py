"""Idempotent puts: sink items written the same way on every replay, outside the checkpoint's transaction.

    from shardline.consumer import idempotent_put

    @consumer.handler
    def handle(record):
        item = {"pk": {"S": f"id#{record.scoped_id}"}, "data": {"B": record.data}}
        return [idempotent_put("events", item, payload_hash=record.payload_hash)]

A transaction bills two write units per KB of each item it writes, and holds at most 99 sink
writes beside the checkpoint. An item keyed by the record's own identity (its client id, or its
stream position) and built only from the record is the same item however often it is written, so
it needs neither: the consumer writes the idempotent puts of the records done since the last
checkpoint with BatchWriteItem (25 items a call, one write unit per KB of each; at most
`_transaction.MAX_PENDING_PUTS` wait for one checkpoint), and only when all of them landed does
the checkpoint move past those records. A crash in between rewrites the same
items on the replay; nothing is applied twice because there is nothing to add twice.

An item keyed by a client id is the same item only for the same payload: a client id belongs to
its caller (key it by `ConsumedRecord.scoped_id`, never `id`), and the same id re-used with
another payload must not overwrite the first one's item. Such a put passes
`payload_hash=record.payload_hash`: the item keeps it (`shardlinePayload`) and is written on
condition `attribute_not_exists(shardlinePayload) OR shardlinePayload = :hash`, so a copy of the same
payload rewrites it and another payload never does, even when two shards race with the same id. A
refused one is a conflict (`ClientIdConflict`, from the item DynamoDB returns with the refusal:
`ReturnValuesOnConditionCheckFailure=ALL_OLD`): its record is counted (`ClientIdConflicts`) and
dead-lettered whole, both hashes in the dead letter. BatchWriteItem takes no condition, so these
puts go in TransactWriteItems calls of their own (up to 100 items and `MAX_TRANSACTION_BYTES`
each; an item named twice starts a new call): one call per 100 records, not one per record — a
call per record multiplied every transient fault of DynamoDB by the batch's size (a batch of 100
then met one in 95 % of deliveries under the local runtime's heavy chaos, and its event sink no
longer drained). Cost: a transaction bills two write units per KB of each item, so a record with
a client id costs 2 in the event sink where one without costs 1. A call refused for a condition
writes nothing of it: the refused put's record is blamed, the others are written again with the
next checkpoint. Puts without a hash (records without a client id, keyed by their position) stay
on BatchWriteItem.

Keep transactions (plain TransactWriteItems entries, `once` guards) for effects that are not
idempotent: an `ADD`, a counter, a write whose content depends on what is already there. An
idempotent put lands before the transaction of the same checkpoint, so a record should not have
both kinds of write on one item; and a record whose transactional writes are refused (then
retried or dead-lettered) keeps the idempotent puts that landed, which its redrive rewrites.

`land` writes them: duplicates of one item in one call keep the last (BatchWriteItem refuses a
call naming an item twice); unprocessed items (throttling) are sent again with jittered backoff,
and if some are still unprocessed after `ATTEMPTS` calls it raises `DependencyUnavailable`, which
stalls the shard (`_stalls`) with nothing checkpointed. A call DynamoDB refuses as invalid is
written again one item at a time, to name the put it refuses (`SinkRejected` with its index), so
that put's record is blamed and the others go on.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from shardline.consumer._once import PAYLOAD_ATTRIBUTE
from shardline.errors import DependencyUnavailable, SinkConflict, SinkRejected

if TYPE_CHECKING:
    from shardline.protocols import DynamoDBClient

#: The entry kind `idempotent_put` returns, beside TransactWriteItems' Put, Update, Delete, ConditionCheck.
IDEMPOTENT_PUT = "IdempotentPut"
#: BatchWriteItem's limit on items per call.
BATCH_ITEMS = 25
#: A transaction of id-keyed puts: DynamoDB's 100 items, and bytes well under its 4 MB.
TRANSACTION_ITEMS = 100
TRANSACTION_BYTES = 3_500_000
#: Cancellation reasons that refuse no put for itself: the transaction is tried again.
_TRANSIENT_REASONS = frozenset(
    {"None", None, "ThrottlingError", "ProvisionedThroughputExceeded", "TransactionConflict"}
)
#: Calls for one chunk before its unprocessed items stall the shard.
ATTEMPTS = 6
BACKOFF_S = 0.05
#: The condition of an id-keyed put: no item of that id yet, or one of the same payload.
SAME_PAYLOAD = f"attribute_not_exists({PAYLOAD_ATTRIBUTE}) OR {PAYLOAD_ATTRIBUTE} = :payloadHash"
_THROTTLED = frozenset(
    {"ProvisionedThroughputExceededException", "ThrottlingException", "RequestLimitExceeded"}
)


def idempotent_put(
    table_name: str, item: Mapping[str, Any], *, payload_hash: str | None = None
) -> dict[str, Any]:
    """A sink write of `item` (DynamoDB attribute values, its key included) into `table_name` that
    is the same on every replay: written with BatchWriteItem before the checkpoint, not in its
    transaction (one write unit per KB instead of two). No condition: the item is overwritten.

    `payload_hash` (the record's `payload_hash`, for an item keyed by its client id): the item
    keeps it, and is written only if no item is there or the one there keeps the same hash (in a
    transaction of such puts; module docstring) — another payload under the same id is a conflict."""
    if not isinstance(table_name, str) or not table_name:
        raise ValueError("idempotent_put: table_name must be a non-empty string")
    if not isinstance(item, Mapping) or not item:
        raise ValueError("idempotent_put: item must be a non-empty mapping of attribute names to values")
    if PAYLOAD_ATTRIBUTE in item:
        raise ValueError(f"idempotent_put: the item must not name {PAYLOAD_ATTRIBUTE!r}: pass payload_hash=")
    written = dict(item)
    if payload_hash is not None:
        if not isinstance(payload_hash, str) or not payload_hash:
            raise ValueError("idempotent_put: payload_hash is the record's payload_hash, a non-empty string")
        written[PAYLOAD_ATTRIBUTE] = {"S": payload_hash}
    return {IDEMPOTENT_PUT: {"TableName": table_name, "Item": written}}


def is_conditional(put: Mapping[str, Any]) -> bool:
    """Is `put` (an `idempotent_put`) keyed by a client id, written on its payload's condition?"""
    return PAYLOAD_ATTRIBUTE in put[IDEMPOTENT_PUT]["Item"]


def is_idempotent_put(write: object) -> bool:
    """Is `write` a sink write built by `idempotent_put`?"""
    return isinstance(write, Mapping) and len(write) == 1 and IDEMPOTENT_PUT in write


def land(
    client: DynamoDBClient,
    puts: Sequence[Mapping[str, Any]],
    item_key: Callable[[Mapping[str, Any]], str],
    *,
    sleep: Callable[[float], None],
) -> int:
    """Write `puts` (entries of `idempotent_put`) with BatchWriteItem, those with a payload hash
    on their condition in transactions of up to 100 (`transaction_chunks`), in order; returns the
    calls made. `item_key` names the item a put writes (two plain puts of one item: the last is
    written). Raises `SinkRejected` naming
    the index of a put DynamoDB refuses, `SinkConflict` naming the index of a conditional put
    refused (with the item that refused it), `DependencyUnavailable` when throttling outlasts
    the retries, and any other refusal as botocore raised it."""
    latest: dict[str, tuple[int, str, Mapping[str, Any]]] = {}
    conditional: list[tuple[int, str, Mapping[str, Any]]] = []
    for index, put in enumerate(puts):
        operation = put[IDEMPOTENT_PUT]
        table, item = operation["TableName"], operation["Item"]
        if PAYLOAD_ATTRIBUTE in item:
            conditional.append((index, table, item))  # each in order: never collapsed into another
        else:
            latest[item_key(put)] = (index, table, item)
    chosen = list(latest.values())
    calls = 0
    for start in range(0, len(chosen), BATCH_ITEMS):
        calls += _write_chunk(client, chosen[start : start + BATCH_ITEMS], sleep)
    for chunk in transaction_chunks(conditional, item_key, puts):
        calls += _write_conditional(client, chunk, sleep)
    return calls


def conditional_put(table: str, item: Mapping[str, Any]) -> dict[str, Any]:
    """The Put of an id-keyed item on its payload's condition (`SAME_PAYLOAD`), returning the item
    that refuses it: a PutItem's arguments, or a TransactWriteItems entry's `Put`."""
    return {
        "TableName": table,
        "Item": item,
        "ConditionExpression": SAME_PAYLOAD,
        "ExpressionAttributeValues": {":payloadHash": item[PAYLOAD_ATTRIBUTE]},
        "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
    }


def transaction_chunks(
    conditional: list[tuple[int, str, Mapping[str, Any]]],
    item_key: Callable[[Mapping[str, Any]], str],
    puts: Sequence[Mapping[str, Any]],
) -> list[list[tuple[int, str, Mapping[str, Any]]]]:
    """The id-keyed puts in order, cut into transactions: at most `TRANSACTION_ITEMS` items and
    `TRANSACTION_BYTES` (estimated high), never one item twice (DynamoDB refuses that)."""
    chunks: list[list[tuple[int, str, Mapping[str, Any]]]] = []
    chunk: list[tuple[int, str, Mapping[str, Any]]] = []
    keys: set[str] = set()
    size = 0
    for entry in conditional:
        key, bytes_ = item_key(puts[entry[0]]), _rough_bytes(entry[2])
        if chunk and (len(chunk) == TRANSACTION_ITEMS or key in keys or size + bytes_ > TRANSACTION_BYTES):
            chunks.append(chunk)
            chunk, keys, size = [], set(), 0
        chunk.append(entry)
        keys.add(key)
        size += bytes_
    if chunk:
        chunks.append(chunk)
    return chunks


def _rough_bytes(item: Mapping[str, Any]) -> int:
    """An item's size, never below DynamoDB's count of it (names, and each value's text or bytes)."""
    total = 0
    for name, value in item.items():
        total += len(name.encode()) + 8
        for kind, content in value.items():
            if kind == "B" and isinstance(content, bytes | bytearray):
                total += len(content)
            elif kind in ("S", "N") and isinstance(content, str):
                total += len(content.encode())
            else:
                total += len(repr(content).encode())
    return total


def _write_conditional(
    client: DynamoDBClient, chunk: list[tuple[int, str, Mapping[str, Any]]], sleep: Callable[[float], None]
) -> int:
    """One transaction of id-keyed puts, each on condition that no other payload holds its id
    (`SAME_PAYLOAD`); returns the calls made."""
    request = [{"Put": conditional_put(table, item)} for _, table, item in chunk]
    for attempt in range(1, ATTEMPTS + 1):
        try:
            client.transact_write_items(TransactItems=request)
            return attempt
        except ClientError as exc:
            error = exc.response.get("Error", {})
            code = error.get("Code")
            if code == "ValidationException":
                return attempt + _write_conditional_one_by_one(client, chunk)
            if code == "TransactionCanceledException":
                reasons = list(exc.response.get("CancellationReasons") or ())
                _raise_refused(chunk, reasons, exc)
            elif code not in _THROTTLED:
                raise
            if attempt < ATTEMPTS:
                sleep(random.uniform(0, BACKOFF_S * 2**attempt))
    raise DependencyUnavailable(
        f"DynamoDB refused a transaction of {len(chunk)} idempotent puts {ATTEMPTS} times in a row "
        "(throttled, or conflicting transactions)"
    )


def _raise_refused(
    chunk: list[tuple[int, str, Mapping[str, Any]]], reasons: list[Mapping[str, Any]], exc: ClientError
) -> None:
    """A cancelled transaction of id-keyed puts: raise for the first put refused for itself (its
    condition, or invalid); return when every reason is transient (throttled, a conflicting
    transaction: try again)."""
    for (index, table, _), reason in zip(chunk, reasons, strict=False):
        code = reason.get("Code")
        if code == "ConditionalCheckFailed":
            raise SinkConflict(
                f"idempotent put {index} into {table}: its id holds another payload",
                (index,),
                (str(reason.get("Message", "The conditional request failed")),),
                (reason.get("Item"),),
            ) from exc
        if code == "ValidationError":
            raise SinkRejected(
                f"DynamoDB refused idempotent put {index} into {table}: {reason.get('Message', '')}",
                (index,),
            ) from exc
    if not reasons or any(reason.get("Code") not in _TRANSIENT_REASONS for reason in reasons):
        raise exc


def _write_conditional_one_by_one(
    client: DynamoDBClient, chunk: list[tuple[int, str, Mapping[str, Any]]]
) -> int:
    """A transaction DynamoDB refused as a whole: each put alone, to name the one it refuses."""
    for index, table, item in chunk:
        try:
            client.put_item(**conditional_put(table, item))
        except ClientError as exc:
            error = exc.response.get("Error", {})
            code = error.get("Code")
            if code == "ConditionalCheckFailedException":
                raise SinkConflict(
                    f"idempotent put {index} into {table}: its id holds another payload",
                    (index,),
                    (str(error.get("Message", "The conditional request failed")),),
                    (exc.response.get("Item"),),
                ) from exc
            if code == "ValidationException":
                raise SinkRejected(
                    f"DynamoDB refused idempotent put {index} into {table}: {error.get('Message', '')}",
                    (index,),
                ) from exc
            raise
    return len(chunk)


def _write_chunk(
    client: DynamoDBClient, chunk: list[tuple[int, str, Mapping[str, Any]]], sleep: Callable[[float], None]
) -> int:
    request: dict[str, list[dict[str, Any]]] = {}
    for _, table, item in chunk:
        request.setdefault(table, []).append({"PutRequest": {"Item": item}})
    for attempt in range(1, ATTEMPTS + 1):
        try:
            answer = client.batch_write_item(RequestItems=request)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") != "ValidationException":
                raise
            return attempt + _write_one_by_one(client, chunk)
        request = dict(answer.get("UnprocessedItems") or {})
        if not request:
            return attempt
        if attempt < ATTEMPTS:
            sleep(random.uniform(0, BACKOFF_S * 2**attempt))
    unprocessed = sum(len(entries) for entries in request.values())
    raise DependencyUnavailable(
        f"DynamoDB left {unprocessed} idempotent puts unprocessed after {ATTEMPTS} BatchWriteItem calls "
        f"(throttled): {', '.join(sorted(request))}"
    )


def _write_one_by_one(client: DynamoDBClient, chunk: list[tuple[int, str, Mapping[str, Any]]]) -> int:
    """A chunk DynamoDB refused as a whole: each put alone, to name the one it refuses."""
    for index, table, item in chunk:
        try:
            client.put_item(TableName=table, Item=item)
        except ClientError as exc:
            error = exc.response.get("Error", {})
            if error.get("Code") != "ValidationException":
                raise
            raise SinkRejected(
                f"DynamoDB refused idempotent put {index} into {table}: {error.get('Message', '')}",
                (index,),
            ) from exc
    return len(chunk)
