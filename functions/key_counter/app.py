"""Consumer group `key_counter`: how many user records the stream carried, per partition key.

Counter table (hash key `partitionKey` S; attributes `count` N and, with SINK_TTL_DAYS, `expiresAt`
N — the latest arrival of the key's records in the chunk + SINK_TTL_DAYS, refreshed by every
chunk that counts the key: the table's TTL attribute). A key that no record carried for longer
than the TTL is forgotten (DynamoDB deletes its item within days after `expiresAt`), and counts
from 1 again when it comes back: the partition keys are often user data, and a count of a key
idle for the TTL is not kept. A redrive of records older than the latest one counted may move
`expiresAt` back to their arrival + TTL. The handler is a batch handler:
for each chunk of records the consumer gives it, one `ADD #count :n` per partition key (n: the
chunk's records with that key) — not idempotent: applied twice, a count is wrong. It returns
them as one list of TransactWriteItems entries for the whole chunk, so they commit in the same
transaction as the checkpoint past the chunk; a replayed batch is skipped below the checkpoint, and
a crash leaves both or neither. The counts stay exact through replays, crashes and lost replies.
One item per key per chunk, not per record: a hot key costs one write per chunk, and no
transaction ever has to be cut short because two records touch the same counter. A chunk whose
list does not fit one transaction (over 99 writes) is split in halves by the consumer.

Identity: a second copy of an aggregate (a producer retry after a lost reply) is skipped by the
consumer before this handler sees it. A client re-POST is a new Kinesis record: a record with a
client id (`ConsumedRecord.id`: its HTTP `id`, or `<Idempotency-Key>:<index>`) is counted once
because its count is guarded — by its id as its caller's (`ConsumedRecord.scoped_id`: two callers'
equal ids, or an explicit `k:1` and a derived `k:1`, are two records): the list holds
`shardline.consumer.once(..., record_id=scoped_id, payload_hash=...)` for each id, in the same
transaction; a later copy's guard fails its condition, names the id, and the consumer runs the
chunk again without that record (metric `ClientIdDuplicatesSkipped`). A copy whose payload
(partition key, hash key, data) differs from the one the guard keeps is a conflict: it is not
counted, and is dead-lettered whole with both hashes (metric `ClientIdConflicts`). Records with
the same scoped id and payload in one chunk are counted once; with different payloads in one
chunk, the handler refuses the chunk (`ValueError`), so the consumer splits it until they run
apart, and the guard decides. A record without a client id is counted once per producer retry,
but a client re-POST of it counts again. Guards written before ids were scoped
(`once#<client id>#~~~`) guard nothing any more: a re-POST of such a record after the upgrade
counts again (within the old guards' lifetime).

Guard item, one per client id, in the counter table:

    partitionKey    S  "once#<scoped id>#" padded with "~" to GUARD_KEY_LENGTH (300) characters:
                       longer than any Kinesis partition key (256 UTF-16 code units), so no
                       counter can share it, and a guard never shows up as a counted key
    shardlineOnce   N  1
    shardlineOnceId S  the scoped id
    shardlinePayload S the payload hash of the record counted (a copy with another is a conflict)
    expiresAt       N  epoch seconds: the record's arrival + SHARDLINE_GUARD_TTL_SECONDS, the table's
                       TTL attribute: as long as a copy of the record can still reach the group
                       (the stream's retention + the DLQ's + a day, rendered by the constructs:
                       16 days for the app's 24 h stream; 16 days too without the variable). A
                       re-POST later than that is a new record.

Environment (read at the first invocation): SHARDLINE_GROUP, LEASE_TABLE, SINK_TABLE (the counter
table), DLQ_URL (optional), MAX_ATTEMPTS (3), CHECKPOINT_INTERVAL (seconds, 5), TIME_MARGIN
(seconds, 2), SINK_TTL_DAYS (the CDK app sets `sinkTtlDays`, 30; unset: counts are kept),
FAILURE_DETAIL (`fingerprint`), SHARDLINE_GUARD_TTL_SECONDS (how long a guard lives); Powertools'
POWERTOOLS_SERVICE_NAME, POWERTOOLS_METRICS_NAMESPACE
("shardline"), POWERTOOLS_TRACE_DISABLED.
"""

from __future__ import annotations

from collections import Counter
from functools import partial
from typing import Any

from shardline.aws_lambda import ConsumerEnvironment, ConsumerFunction
from shardline.consumer import ConsumedRecord, once
from shardline.consumer._once import DEFAULT_GUARD_TTL_SECONDS, EXPIRES_AT_ATTRIBUTE

#: Length of a guard's key: above the 256 UTF-16 code units a partition key (a counter's key) can have,
#: and room for "once#", a scoped id (a 16-character scope, "/k/", an id of at most 128) and "#".
GUARD_KEY_LENGTH = 300
DAY_SECONDS = 24 * 3600


def guard_key(scoped_id: str) -> dict[str, Any]:
    """The counter table key of the guard item of a client id, by its scoped id
    (`ConsumedRecord.scoped_id`: at most 16 + 3 + 128 characters), never the bare id."""
    return {"partitionKey": {"S": f"once#{scoped_id}#".ljust(GUARD_KEY_LENGTH, "~")}}


def is_guard(item: dict[str, Any]) -> bool:
    """Is a counter table item a guard (not a count)?"""
    return len(item["partitionKey"]["S"]) == GUARD_KEY_LENGTH and item["partitionKey"]["S"].startswith(
        "once#"
    )


def count(
    table: str,
    records: list[ConsumedRecord],
    *,
    ttl_days: int | None = None,
    guard_ttl_seconds: int = DEFAULT_GUARD_TTL_SECONDS,
) -> list[dict[str, Any]]:
    """The user logic: for a chunk of records, how many more records each partition key has (once
    per client id, each id's guard kept `guard_ttl_seconds` after its record's arrival), as one
    list of writes committed with the checkpoint past the chunk; with `ttl_days`, each counted
    key's `expiresAt` moves to its latest arrival + `ttl_days`."""
    per_key: Counter[str] = Counter()
    latest: dict[str, float] = {}
    guards: list[dict[str, Any]] = []
    guarded: dict[str, str] = {}  # scoped id -> payload hash
    for record in records:
        scoped_id = record.scoped_id
        if scoped_id is not None:
            payload = record.payload_hash
            if scoped_id in guarded:
                if guarded[scoped_id] != payload:  # split the chunk: the guard tells copy from conflict
                    raise ValueError(f"client id {scoped_id!r} twice in one chunk with two payloads")
                continue  # the same client record twice in the chunk: counted once
            guarded[scoped_id] = payload
            expires_at = int(record.approximate_arrival) + guard_ttl_seconds
            guard = once(
                table, guard_key(scoped_id), expires_at=expires_at, record_id=scoped_id, payload_hash=payload
            )
            guards.append(guard)
        per_key[record.partition_key] += 1
        latest[record.partition_key] = max(latest.get(record.partition_key, 0.0), record.approximate_arrival)
    return [_add(table, key, n, latest[key], ttl_days) for key, n in per_key.items()] + guards


def _add(table: str, key: str, n: int, arrival: float, ttl_days: int | None) -> dict[str, Any]:
    """The Update that adds `n` to `key`'s count (and, with a TTL, moves its `expiresAt`)."""
    update: dict[str, Any] = {
        "TableName": table,
        "Key": {"partitionKey": {"S": key}},
        "UpdateExpression": "ADD #count :n",
        "ExpressionAttributeNames": {"#count": "count"},
        "ExpressionAttributeValues": {":n": {"N": str(n)}},
    }
    if ttl_days is not None:
        update["UpdateExpression"] += " SET #expiresAt = :expiresAt"
        update["ExpressionAttributeNames"]["#expiresAt"] = EXPIRES_AT_ATTRIBUTE
        update["ExpressionAttributeValues"][":expiresAt"] = {"N": str(int(arrival) + ttl_days * DAY_SECONDS)}
    return {"Update": update}


def _counter(table: str) -> Any:
    env = ConsumerEnvironment.from_environ()
    return partial(count, table, ttl_days=env.sink_ttl_days, guard_ttl_seconds=env.guard_ttl_seconds)


function = ConsumerFunction(batch_handler_for=_counter)
handler = function.handler  # Logger, Tracer and EMF Metrics wired by ConsumerFunction
