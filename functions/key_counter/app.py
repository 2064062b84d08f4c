"""Consumer group `key_counter`: how many user records the stream carried, per partition key.

Counter table (hash key `partitionKey` S; attribute `count` N). Each record adds one with
`ADD #count :one` — not idempotent: applied twice, a count is wrong. The handler returns the
`Update` as a TransactWriteItems entry, so it commits in the same transaction as the checkpoint;
a replayed batch is skipped below the checkpoint, and a crash leaves both or neither. The counts
stay exact through replays, crashes and lost replies.

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
from shardline.consumer import ConsumedRecord


def count(table: str, record: ConsumedRecord) -> list[dict[str, Any]]:
    """The user logic: one more record for this partition key, committed with the checkpoint."""
    return [
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


function = ConsumerFunction(lambda table: partial(count, table))
handler = function.handler  # Logger, Tracer and EMF Metrics wired by ConsumerFunction
