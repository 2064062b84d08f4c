"""Consumer group `key_counter`: how many user records the stream carried, per partition key.

Counter table (hash key `partitionKey` S; attribute `count` N). Each record adds one with
`ADD #count :one` — not idempotent: applied twice, a count is wrong. The handler returns the
`Update` as a TransactWriteItems entry, so it commits in the same transaction as the checkpoint;
a replayed batch is skipped below the checkpoint, and a crash leaves both or neither. The counts
stay exact through replays, crashes and lost replies.

Identity: a second copy of an aggregate (a producer retry after a lost reply) is skipped by the
consumer before this handler sees it. A client re-POST is a new Kinesis record: a record with a
client id (`ConsumedRecord.id`: its HTTP `id`, or `<Idempotency-Key>:<index>`) is counted once
because its `ADD` is guarded — the handler returns `shardline.consumer.once(...)` for the id beside
the `Update`, in the same transaction; a later copy's guard fails its condition and the consumer
skips the record as already applied (metric `ClientIdDuplicatesSkipped`). A record without a
client id is counted once per producer retry, but a client re-POST of it counts again.

Guard item, one per client id, in the counter table:

    partitionKey    S  "once#<client id>#" padded with "~" to GUARD_KEY_LENGTH (300) characters:
                       longer than any Kinesis partition key (256 UTF-16 code units), so no
                       counter can share it, and a guard never shows up as a counted key
    shardlineOnce   N  1
    expiresAt       N  epoch seconds: the record's arrival + ONCE_TTL_SECONDS (7 days), the table's
                       TTL attribute; a re-POST later than that is a new record

DynamoDB refuses a transaction that touches one item twice; when a record's key is already in
the pending transaction, shardline commits that one first and starts the next.

Environment (read at the first invocation): SHARDLINE_GROUP, LEASE_TABLE, SINK_TABLE (the counter
table), DLQ_URL (optional), MAX_ATTEMPTS (3), CHECKPOINT_INTERVAL (seconds, 5), TIME_MARGIN
(seconds, 2); Powertools' POWERTOOLS_SERVICE_NAME, POWERTOOLS_METRICS_NAMESPACE ("shardline"),
POWERTOOLS_TRACE_DISABLED.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from shardline.aws_lambda import ConsumerFunction
from shardline.consumer import ConsumedRecord, once

#: How long a client id's guard is kept: a re-POST of the same id within it is not counted again.
ONCE_TTL_SECONDS = 7 * 24 * 3600
#: Length of a guard's key: above the 256 UTF-16 code units a partition key (a counter's key) can have.
GUARD_KEY_LENGTH = 300


def guard_key(record_id: str) -> dict[str, Any]:
    """The counter table key of the guard item of a client id (ids are at most 128 characters)."""
    return {"partitionKey": {"S": f"once#{record_id}#".ljust(GUARD_KEY_LENGTH, "~")}}


def is_guard(item: dict[str, Any]) -> bool:
    """Is a counter table item a guard (not a count)?"""
    return len(item["partitionKey"]["S"]) == GUARD_KEY_LENGTH and item["partitionKey"]["S"].startswith(
        "once#"
    )


def count(table: str, record: ConsumedRecord) -> list[dict[str, Any]]:
    """The user logic: one more record for this partition key (once per client id), committed with
    the checkpoint."""
    writes: list[dict[str, Any]] = [
        {
            "Update": {
                "TableName": table,
                "Key": {"partitionKey": {"S": record.partition_key}},
                "UpdateExpression": "ADD #count :one",
                "ExpressionAttributeNames": {"#count": "count"},
                "ExpressionAttributeValues": {":one": {"N": "1"}},
            }
        }
    ]
    if record.id is not None:
        expires_at = int(record.approximate_arrival) + ONCE_TTL_SECONDS
        writes.append(once(table, guard_key(record.id), expires_at=expires_at))
    return writes


function = ConsumerFunction(lambda table: partial(count, table))
handler = function.handler  # Logger, Tracer and EMF Metrics wired by ConsumerFunction
