"""Client-id dedup: a guard item per id, written in the checkpoint's transaction.

A record that carries a client id (`ConsumedRecord.id`: the HTTP `id` of a record, or
`<Idempotency-Key>:<index>`) may be in the stream more than once when the client posted it
again after a failed request: each copy is a new Kinesis record, in a new aggregate. An id
belongs to its caller: key the guard by `ConsumedRecord.scoped_id` (the caller's scope, whether
the id is explicit or derived, and the id), never by `id` alone — two callers' `order-1`, or an
explicit `k:1` and a derived `k:1`, are different records. A sink that must apply it once
returns, with its own writes, the guard of `once`:

    from shardline.consumer import once

    @consumer.handler
    def handle(record):
        writes = [{"Update": {...}}]                       # the record's effect
        if record.scoped_id is not None:
            key = {"pk": {"S": f"order#{record.scoped_id}"}}
            writes.append(once("orders-once", key, payload_hash=record.payload_hash))
        return writes

The guard is a `Put` of the item `{**key, "shardlineOnce": 1}` on condition that no such item
exists. DynamoDB applies the whole transaction (the record's writes and the checkpoint) or none
of it: the first copy writes the guard; a later copy's guard fails its condition and cancels the
transaction with `ConditionalCheckFailed` at the guard's index. The consumer recognises the guard
(`is_once_guard`), counts the record as already applied (its writes skipped, the checkpoint moved
past it, metric `ClientIdDuplicatesSkipped`) whatever `sink_conflicts` says, and commits the rest.

With `payload_hash=record.payload_hash` the guard also keeps the hash of the payload it was
applied with (`shardlinePayload`) and asks DynamoDB for the item that refused it
(`ReturnValuesOnConditionCheckFailure=ALL_OLD`: no extra call, no extra permission). A refused
guard whose stored hash differs is not a copy but a *conflict* — the same id re-used with another
payload (`ClientIdConflict`): the record is neither applied nor skipped; it is counted
(`ClientIdConflicts`) and dead-lettered whole at once, both hashes in the dead letter. A guard
without a stored hash (written without `payload_hash`) refuses every later copy as applied.

A batch handler that answers one list of writes for its chunk (e.g. one `ADD` per key for the
whole chunk) passes `record_id=record.scoped_id`: the guard item keeps it (`shardlineOnceId`), so
a refused guard names the records it stands for, and the consumer runs the chunk again without
them — one more transaction per refusal, not a split down to single records.

The guard costs one item write per record with an id (write capacity: 1 WCU for a small item,
2 in a transaction). Give it a TTL with `expires_at` (epoch seconds, DynamoDB's `expiresAt`
attribute when the table's TTL is set to it) no shorter than a copy of the record can still reach
the group: the record's arrival + `ConsumerEnvironment.guard_ttl_seconds` (the variable
`SHARDLINE_GUARD_TTL_SECONDS`, which the constructs render from the stream's and the dead-letter
queue's retentions: `guard_ttl_seconds`), and longer than the client's own retry window:

    ttl = ConsumerEnvironment.from_environ().guard_ttl_seconds     # shardline.aws_lambda
    once("orders-once", key, expires_at=int(record.approximate_arrival) + ttl)

Why that long. A copy of a record is read from the stream until the stream's retention ends (a
consumer group reads a record at most its retention after it arrived), and a copy that was
dead-lettered — at the latest when the stream still held it — can be redriven until the queue's
retention ends after that. A guard that expired before would let the copy apply again: a count
counted twice. `GUARD_TTL_MARGIN_SECONDS` (a day) covers what happens between those moments: the
handler's attempts before the dead letter is sent (minutes: the function's timeout times its
attempts), a redrive that received the message at the last moment and applies it within its
visibility timeout (SQS's longest: 12 hours), and the skew between Kinesis's arrival stamp and
SQS's clock (seconds). DynamoDB deletes an expired item within days *after* `expiresAt`, never
before, so the guard is there at least that long. A function without the variable (not deployed
by the constructs) gets `DEFAULT_GUARD_TTL_SECONDS`: 16 days, right for a stream of the default
24 hours and a dead-letter queue of 14 days (SQS's longest), too short for a longer retention.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from shardline.errors import ClientIdConflict

#: The attribute every guard item carries, whose absence is the guard's condition.
ONCE_ATTRIBUTE = "shardlineOnce"
#: The attribute a guard's expiry goes in (set the table's TTL to it).
EXPIRES_AT_ATTRIBUTE = "expiresAt"
ONCE_CONDITION = f"attribute_not_exists({ONCE_ATTRIBUTE})"
#: The attribute naming the client id a guard stands for (`record_id=`).
ONCE_ID_ATTRIBUTE = "shardlineOnceId"
#: The attribute keeping the payload hash a client id was applied with (`ConsumedRecord.payload_hash`),
#: in a guard (`once(..., payload_hash=)`) and in an id-keyed idempotent put (`idempotent_put`).
PAYLOAD_ATTRIBUTE = "shardlinePayload"
#: The attributes a guard item holds besides its key.
GUARD_ATTRIBUTES = frozenset({ONCE_ATTRIBUTE, EXPIRES_AT_ATTRIBUTE, ONCE_ID_ATTRIBUTE, PAYLOAD_ATTRIBUTE})

#: Time past the stream's and the dead-letter queue's retentions a guard still lives (see above).
GUARD_TTL_MARGIN_SECONDS = 24 * 3600
#: SQS's longest message retention (14 days): no dead-letter queue holds a message longer.
SQS_MAX_RETENTION_SECONDS = 14 * 24 * 3600
#: Kinesis's default retention (24 hours), the constructs' default.
DEFAULT_STREAM_RETENTION_SECONDS = 24 * 3600


def guard_ttl_seconds(stream_retention_seconds: int, dead_letter_retention_seconds: int) -> int:
    """How long after its record's arrival a client-id guard must live: the stream's retention (a
    copy can be read until then) + the dead-letter queue's (a copy dead-lettered by then can be
    redriven until that ends) + `GUARD_TTL_MARGIN_SECONDS`."""
    for name, value in (
        ("stream_retention_seconds", stream_retention_seconds),
        ("dead_letter_retention_seconds", dead_letter_retention_seconds),
    ):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"guard_ttl_seconds: {name} is a number of seconds >= 0, got {value!r}")
    return stream_retention_seconds + dead_letter_retention_seconds + GUARD_TTL_MARGIN_SECONDS


#: 16 days: the guard TTL of a stream of the default retention and a dead-letter queue of SQS's longest.
DEFAULT_GUARD_TTL_SECONDS = guard_ttl_seconds(DEFAULT_STREAM_RETENTION_SECONDS, SQS_MAX_RETENTION_SECONDS)


def once(
    table_name: str,
    key: Mapping[str, Any],
    *,
    expires_at: int | None = None,
    record_id: str | None = None,
    payload_hash: str | None = None,
) -> dict[str, Any]:
    """A TransactWriteItems `Put` of a guard item at `key` (DynamoDB attribute values, e.g.
    `{"pk": {"S": f"order#{record.scoped_id}"}}`) in `table_name`, on condition that no guard is
    there yet. `record_id`: the record's scoped id, kept in the item (for a batch handler's one
    list). `payload_hash`: the record's `payload_hash`, kept in the item, so that a later copy
    with another payload is a conflict, not a copy (module docstring)."""
    if not isinstance(table_name, str) or not table_name:
        raise ValueError("once: table_name must be a non-empty string")
    if not isinstance(key, Mapping) or not key:
        raise ValueError("once: key must be a non-empty mapping of attribute names to values")
    for name in GUARD_ATTRIBUTES:
        if name in key:
            raise ValueError(f"once: the key must not name {name!r}, the guard's own attribute")
    item: dict[str, Any] = {**key, ONCE_ATTRIBUTE: {"N": "1"}}
    if expires_at is not None:
        if isinstance(expires_at, bool) or not isinstance(expires_at, int) or expires_at < 0:
            raise ValueError("once: expires_at is epoch seconds, a non-negative int")
        item[EXPIRES_AT_ATTRIBUTE] = {"N": str(expires_at)}
    if record_id is not None:
        if not isinstance(record_id, str) or not record_id:
            raise ValueError("once: record_id is the record's client id, a non-empty string")
        item[ONCE_ID_ATTRIBUTE] = {"S": record_id}
    put: dict[str, Any] = {"TableName": table_name, "Item": item, "ConditionExpression": ONCE_CONDITION}
    if payload_hash is not None:
        if not isinstance(payload_hash, str) or not payload_hash:
            raise ValueError("once: payload_hash is the record's payload_hash, a non-empty string")
        item[PAYLOAD_ATTRIBUTE] = {"S": payload_hash}
        put["ReturnValuesOnConditionCheckFailure"] = "ALL_OLD"  # the refusing guard, to compare hashes
    return {"Put": put}


def is_once_guard(write: object) -> bool:
    """Is `write` (a TransactWriteItems entry) a guard built by `once`?"""
    if not isinstance(write, Mapping) or len(write) != 1:
        return False
    put = write.get("Put")
    if not isinstance(put, Mapping) or put.get("ConditionExpression") != ONCE_CONDITION:
        return False
    item = put.get("Item")
    return isinstance(item, Mapping) and ONCE_ATTRIBUTE in item


def guarded_id(write: object) -> str | None:
    """The client id a guard built with `once(..., record_id=...)` stands for, else None."""
    if not is_once_guard(write):
        return None
    assert isinstance(write, Mapping)
    value = write["Put"]["Item"].get(ONCE_ID_ATTRIBUTE)
    return str(value["S"]) if isinstance(value, Mapping) and "S" in value else None


def stored_hash(item: Mapping[str, Any] | None) -> str | None:
    """The payload hash an item (a guard, or an id-keyed put) keeps, or None."""
    value = item.get(PAYLOAD_ATTRIBUTE) if isinstance(item, Mapping) else None
    return str(value["S"]) if isinstance(value, Mapping) and "S" in value else None


def conflict_of(
    write: Mapping[str, Any], refusing: Mapping[str, Any] | None, scoped_id: str | None
) -> ClientIdConflict | None:
    """A write keyed by a client id (a `once` guard, an id-keyed `idempotent_put`) was refused by
    `refusing` (the item DynamoDB returned with the refusal): a `ClientIdConflict` naming
    `scoped_id` (else the guard's `record_id`) when both keep a payload hash and they differ; else
    None (a copy of the same payload: already applied)."""
    [(_, operation)] = write.items()
    item = operation.get("Item") if isinstance(operation, Mapping) else None
    mine, theirs = stored_hash(item), stored_hash(refusing)
    if mine is None or theirs is None or mine == theirs:
        return None
    if scoped_id is None:
        scoped_id = guarded_id(write) or "?"
    return ClientIdConflict(scoped_id, theirs, mine)
