"""The baseline's consumer: Powertools' `BatchProcessor` over Kinesis, each record applied once by
Powertools' idempotency utility, as its docs integrate the two ("Batch processing").

For each record of a batch (`record_handler`), `apply` runs under `@idempotent_function`, keyed by
the record's id (`id`), which comes from the record's payload — a stable id its producer gave it, so
a Kinesis-level duplicate (a client's re-post, a producer's retry) is applied once, unlike a key
from the sequence number. `apply` has the two effects of shardline's example groups:

- PutItem into EVENTS_TABLE: one item per record, keyed by its id (`id`, `partitionKey`,
  `sequenceNumber`, `data`, `approximateArrival`, `expiresAt` = arrival + EVENTS_TTL_DAYS);
- UpdateItem `ADD count :1` on COUNTS_TABLE, keyed by the record's partition key.

Idempotency (IDEMPOTENCY_TABLE, key `id`, TTL `expiration`): Powertools' defaults, the window
IDEMPOTENCY_EXPIRES_SECONDS (3600, its default), `register_lambda_context` each invocation. Per
record on the happy path: PutItem (INPROGRESS, conditional), the two effects, UpdateItem (COMPLETED).

A record's id: its JSON payload's `id`; the payloads `python -m local send` writes name themselves
by `run` and `seq` instead, whose id `send` gave the record as `<run>-<seq>`. A record with neither
fails (`raise_on_no_idempotency_key`), and after the mapping's retries lands in its on-failure queue.

Imports only what Lambda provides (boto3) and the Powertools layer.
"""

from __future__ import annotations

import base64
import json
import os
from typing import Any

import boto3
from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.batch.types import PartialItemFailureResponse
from aws_lambda_powertools.utilities.data_classes.kinesis_stream_event import KinesisStreamRecord
from aws_lambda_powertools.utilities.idempotency import (
    DynamoDBPersistenceLayer,
    IdempotencyConfig,
    idempotent_function,
)
from aws_lambda_powertools.utilities.typing import LambdaContext

EVENTS_TABLE = os.environ["EVENTS_TABLE"]
COUNTS_TABLE = os.environ["COUNTS_TABLE"]
EVENTS_TTL_S = int(os.environ.get("EVENTS_TTL_DAYS", "30")) * 24 * 3600

processor = BatchProcessor(event_type=EventType.KinesisDataStreams)
persistence = DynamoDBPersistenceLayer(table_name=os.environ["IDEMPOTENCY_TABLE"])
config = IdempotencyConfig(
    event_key_jmespath="id",
    raise_on_no_idempotency_key=True,
    expires_after_seconds=int(os.environ.get("IDEMPOTENCY_EXPIRES_SECONDS", "3600")),
)
dynamodb = boto3.client("dynamodb")


def event_id(data: bytes) -> str | None:
    """The record's id from its payload (see the module), or None."""
    try:
        payload = json.loads(data)
    except ValueError:
        return None
    if not isinstance(payload, dict):
        return None
    if isinstance(payload.get("id"), str):
        return str(payload["id"])
    if isinstance(payload.get("run"), str) and isinstance(payload.get("seq"), int):
        return f"{payload['run']}-{payload['seq']}"
    return None


# Powertools types its decorator as returning Any.
@idempotent_function(data_keyword_argument="record", config=config, persistence_store=persistence)  # type: ignore[untyped-decorator]
def apply(record: dict[str, Any]) -> dict[str, str]:
    """The record's two effects; its result is what Powertools keeps in the idempotency record."""
    arrival = float(record["approximateArrival"])
    dynamodb.put_item(
        TableName=EVENTS_TABLE,
        Item={
            "id": {"S": record["id"]},
            "partitionKey": {"S": record["partitionKey"]},
            "sequenceNumber": {"S": record["sequenceNumber"]},
            "data": {"B": base64.b64decode(record["data"])},
            "approximateArrival": {"N": f"{arrival:.3f}"},
            "expiresAt": {"N": str(int(arrival) + EVENTS_TTL_S)},
        },
    )
    dynamodb.update_item(
        TableName=COUNTS_TABLE,
        Key={"partitionKey": {"S": record["partitionKey"]}},
        UpdateExpression="ADD #count :one",
        ExpressionAttributeNames={"#count": "count"},
        ExpressionAttributeValues={":one": {"N": "1"}},
    )
    return {"id": record["id"]}


def record_handler(record: KinesisStreamRecord) -> None:
    kinesis = record.kinesis
    apply(
        record={
            "id": event_id(kinesis.data_as_bytes()),
            "partitionKey": kinesis.partition_key,
            "sequenceNumber": kinesis.sequence_number,
            "approximateArrival": kinesis.approximate_arrival_timestamp,
            "data": kinesis.data,
        }
    )


def handler(event: dict[str, Any], context: LambdaContext) -> PartialItemFailureResponse:
    config.register_lambda_context(context)
    return process_partial_response(
        event=event, record_handler=record_handler, processor=processor, context=context
    )
