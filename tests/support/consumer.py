"""The consumer's in-memory harness (`shardline.testing`): a shard's records and events, effects that
count how often each record was applied, a recording SQS, and `setup` of a consumer on them."""

from __future__ import annotations

import base64
import hashlib
import json
import time
from typing import Any

from shardline.consumer import ConsumedRecord, DeadLetterQueue, KinesisConsumer
from shardline.kinesis import UserRecord
from shardline.kpl._encode import MAGIC
from shardline.testing import (
    InMemoryLeaseTable,
    event_record,
)

SHARD = "shardId-000000000000"
SINK = "effects"
FIRST_SEQUENCE = 49_590_338_271_490_256_608_559_692_538_361_571_095_921_575_989_136_588_898


class ProcessDied(BaseException):
    """What a killed process looks like to the replay: the invocation never answers."""


class RecordingSQS:
    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []

    def send_message(self, **request: Any) -> dict[str, Any]:
        self.messages.append(request)
        return {"MessageId": str(len(self.messages))}

    def bodies(self) -> list[dict[str, Any]]:
        return [json.loads(message["MessageBody"]) for message in self.messages]


def _add_to(key: str) -> dict[str, Any]:
    return {
        "Update": {
            "TableName": SINK,
            "Key": {"id": {"S": key}},
            "UpdateExpression": "ADD n :one",
            "ExpressionAttributeValues": {":one": {"N": "1"}},
        }
    }


def effect(record: ConsumedRecord) -> dict[str, Any]:
    """One record's sink write: count it under its own id, so a second application shows."""
    return _add_to(record_id(record))


def record_id(record: ConsumedRecord) -> str:
    try:
        return str(record.json()["id"])
    except ValueError:  # a pass-through aggregate: its bytes, named by its position
        return f"raw-{record.sequence_number}"


def applied(table: InMemoryLeaseTable) -> dict[str, int]:
    return {item["id"]["S"]: int(item["n"]["N"]) for item in table.items(SINK)}


def records(count: int, **kinds: str) -> list[UserRecord]:
    """`count` JSON records {"id", "kind"}; `kinds` maps an id (as "r<i>") to a kind."""
    return [
        UserRecord(f"key-{i % 5}", json.dumps({"id": f"r{i}", "kind": kinds.get(f"r{i}", "good")}).encode())
        for i in range(count)
    ]


def setup(**options: Any) -> tuple[KinesisConsumer, InMemoryLeaseTable, RecordingSQS]:
    table = InMemoryLeaseTable(key_schema={SINK: ["id"]})
    sqs = RecordingSQS()
    options.setdefault("max_attempts", 3)
    return KinesisConsumer("g", table, dlq=DeadLetterQueue(sqs, "https://sqs/dlq"), **options), table, sqs


def dead_ids(sqs: RecordingSQS) -> list[str]:
    return [json.loads(base64.b64decode(body["data"]))["id"] for body in sqs.bodies()]


def shard_event(entries: list[tuple[str, bytes]], first: int = FIRST_SEQUENCE) -> list[dict[str, Any]]:
    """Event records for raw Kinesis records (partition key, data), in one shard."""
    return [
        event_record(
            "events",
            SHARD,
            {
                "PartitionKey": key,
                "Data": data,
                "SequenceNumber": str(first + index * 10**16),
                "ApproximateArrivalTimestamp": time.time(),
            },
        )
        for index, (key, data) in enumerate(entries)
    ]


def framed(body: bytes) -> bytes:
    """A KPL aggregate around a hand-made protobuf body (magic, body, MD5)."""
    return MAGIC + body + hashlib.md5(body).digest()


def letter_id(body: dict[str, Any]) -> str:
    """The record id a dead letter carries (a pass-through aggregate's is its position)."""
    try:
        return str(json.loads(base64.b64decode(body["data"]))["id"])
    except ValueError:
        return f"raw-{body['sequenceNumber']}"
