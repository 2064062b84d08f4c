"""The readers of `local.verify`: a run's records in an event sink, counts in a counter table, letters
in a dead-letter queue — each read incrementally or without consuming anything."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterable
from typing import Any

from local.send import parse_payload

SEQUENCE_DIGITS = 129  # the event sink's zero-padding of sequence numbers in `sk`


class SinkReader:
    """A run's records in an event sink, read partition by partition from the last `sk` seen."""

    def __init__(self, dynamodb: Any, table: str, stream_name: str, run_id: str) -> None:
        self._dynamodb, self._table, self._stream, self._run = dynamodb, table, stream_name, run_id
        self.after: dict[str, str] = {}  # pk -> the last sk read (exclusive lower bound)
        self.positions: dict[int, list[str]] = {}  # seq -> every "pk|sk" it was found at
        self.first_seen: dict[int, float] = {}
        self.queries = 0
        self.items_read = 0

    def add_shard(self, shard_id: str, from_sequence: str | None = None) -> None:
        """Read `shard_id`'s partition from `from_sequence` (inclusive), or from its start."""
        # "0..seq" sorts just before "0..seq#000000"; " " before every key (DynamoDB refuses "")
        start = from_sequence.zfill(SEQUENCE_DIGITS) if from_sequence else " "
        self.after.setdefault(f"{self._stream}#{shard_id}", start)  # a partition's start is set once

    def poll(self) -> None:
        """Query every partition for what is new since the last poll."""
        now = time.time()
        for pk in list(self.after):
            query: dict[str, Any] = {
                "TableName": self._table,
                "KeyConditionExpression": "pk = :pk AND sk > :after",
                "ExpressionAttributeValues": {":pk": {"S": pk}, ":after": {"S": self.after[pk]}},
                "ProjectionExpression": "sk, #data",
                "ExpressionAttributeNames": {"#data": "data"},
                "ConsistentRead": True,
            }
            while True:
                page = self._dynamodb.query(**query)
                self.queries += 1
                for item in page["Items"]:
                    self.items_read += 1
                    self.after[pk] = item["sk"]["S"]
                    fields = parse_payload(item.get("data", {}).get("B", b""))
                    if fields is None or fields["run"] != self._run:
                        continue
                    self.positions.setdefault(fields["seq"], []).append(f"{pk}|{item['sk']['S']}")
                    self.first_seen.setdefault(fields["seq"], now)
                if "LastEvaluatedKey" not in page:
                    break
                query["ExclusiveStartKey"] = page["LastEvaluatedKey"]


def read_counts(dynamodb: Any, table: str, keys: Iterable[str]) -> dict[str, int]:
    """The counter table's `count` for each of `keys` (absent: 0), by BatchGetItem."""
    counts: dict[str, int] = {}
    keys = list(keys)
    for start in range(0, len(keys), 100):
        request = {
            table: {
                "Keys": [{"partitionKey": {"S": key}} for key in keys[start : start + 100]],
                "ConsistentRead": True,
            }
        }
        while request:
            answer = dynamodb.batch_get_item(RequestItems=request)
            for item in answer["Responses"].get(table, []):
                counts[item["partitionKey"]["S"]] = int(item.get("count", {}).get("N", "0"))
            request = answer.get("UnprocessedKeys") or {}
    return counts


class DeadLetterReader:
    """The run's letters in a group's DLQ, read without consuming them (their visibility is restored)."""

    def __init__(self, sqs: Any, url: str, run_id: str) -> None:
        self._sqs, self._url, self._run = sqs, url, run_id
        self.depth = 0
        self.letters: dict[int, dict[str, Any]] = {}  # seq -> the letter (deduplicated by its id)
        self._read_at_depth = 0

    def poll(self) -> None:
        names = ["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]
        attributes = self._sqs.get_queue_attributes(QueueUrl=self._url, AttributeNames=names)["Attributes"]
        self.depth = sum(int(attributes.get(name, 0)) for name in names)
        if self.depth != self._read_at_depth:
            self._read_all()
            self._read_at_depth = self.depth

    def _read_all(self) -> None:
        handles: list[str] = []
        try:
            while True:
                messages = self._sqs.receive_message(
                    QueueUrl=self._url, MaxNumberOfMessages=10, VisibilityTimeout=20, WaitTimeSeconds=0
                ).get("Messages", [])
                if not messages:
                    break
                for message in messages:
                    handles.append(message["ReceiptHandle"])
                    self._keep(message["Body"])
        finally:
            for start in range(0, len(handles), 10):
                entries = [
                    {"Id": str(i), "ReceiptHandle": h, "VisibilityTimeout": 0}
                    for i, h in enumerate(handles[start : start + 10])
                ]
                self._sqs.change_message_visibility_batch(QueueUrl=self._url, Entries=entries)

    def _keep(self, body: str) -> None:
        try:
            letter = json.loads(body)
            data = base64.b64decode(letter["data"]) if letter.get("data") else b""
        except (ValueError, TypeError, KeyError):
            return
        fields = parse_payload(data)
        if fields is not None and fields["run"] == self._run:
            self.letters.setdefault(fields["seq"], letter | {"_data": data})
