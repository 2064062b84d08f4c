"""Issue 8 across the wire, on moto server: the dead letter too large for SQS (7), DynamoDB's own
refusals and cancellations blamed on their record by the real `LeaseTable` (5, 6), and the
in-flight mark of `LeaseTable.begin` that finds a delivery whose process died (8)."""

from __future__ import annotations

import base64
import json
import uuid
from typing import Any

from shardline.consumer import ConsumedRecord, DeadLetterQueue, dead_letter_id
from shardline.kinesis import Position
from tests.support.integration import aws_client, n_of


class ProcessDied(BaseException):
    """A killed process, as the replay sees it: the invocation never answers."""


def _put(pipeline, record: ConsumedRecord, **attributes: Any) -> dict[str, Any]:
    return {"Put": {"TableName": pipeline.sink, "Item": {"id": {"S": str(n_of(record))}, **attributes}}}


def _sink_ids(pipeline) -> set[int]:
    return {int(item["id"]["S"]) for item in pipeline.sink_items()}


def _letters(pipeline) -> list[dict[str, Any]]:
    messages = pipeline.sqs.receive_message(
        QueueUrl=pipeline.queue_url, MaxNumberOfMessages=10, MessageAttributeNames=["All"]
    )
    return [message for message in messages.get("Messages", [])]


def test_a_dead_letter_too_large_for_sqs_goes_to_s3_and_sqs_carries_a_pointer(pipeline, moto_server):
    s3 = aws_client("s3", moto_server)
    bucket = f"dead-letters-{uuid.uuid4().hex[:8]}"
    s3.create_bucket(Bucket=bucket)
    queue = DeadLetterQueue(pipeline.sqs, pipeline.queue_url, s3=s3, bucket=bucket)
    big = ConsumedRecord(pipeline.stream, pipeline.shard_id, "7", 2, "k", None, b"\xff" * 900_000, 1.5)

    sent = queue.send(big, group="g", error="ValueError: too big to handle", attempts=3)

    [message] = _letters(pipeline)
    pointer = json.loads(message["Body"])
    assert message["MessageAttributes"]["DeadLetterId"]["StringValue"] == sent == dead_letter_id("g", big)
    assert pointer["data"] is None and pointer["version"] == 1 and pointer["sequenceNumber"] == "7"
    location = pointer["payloadLocation"]
    stored = json.loads(s3.get_object(Bucket=location["bucket"], Key=location["key"])["Body"].read())
    assert base64.b64decode(stored["data"]) == big.data, "the record, whole, in the bucket"
    assert stored["error"] == "ValueError: too big to handle" and stored["id"] == sent


def test_a_dead_letter_too_large_for_sqs_without_a_bucket_still_reaches_the_queue(pipeline):
    queue = DeadLetterQueue(pipeline.sqs, pipeline.queue_url)
    big = ConsumedRecord(pipeline.stream, pipeline.shard_id, "7", None, "k", None, b"x" * 900_000, 1.5)
    queue.send(big, group="g", error="e", attempts=3)
    [message] = _letters(pipeline)
    body = json.loads(message["Body"])
    assert body["data"] is None and "sequence number" in body["dataOmitted"]


def test_a_refused_sink_write_is_blamed_on_its_record_by_the_real_lease_table(pipeline):
    consumer = pipeline.consumer(dlq=DeadLetterQueue(pipeline.sqs, pipeline.queue_url))

    @consumer.handler
    def handle(record: ConsumedRecord) -> list[dict[str, Any]]:
        if n_of(record) == 13:  # the key schema comes from DescribeTable: a Put and an Update of one key
            update = {
                "Update": {
                    "TableName": pipeline.sink,
                    "Key": {"id": {"S": "13"}},
                    "UpdateExpression": "SET b = :b",
                    "ExpressionAttributeValues": {":b": {"S": "x"}},
                }
            }
            return [_put(pipeline, record), update]
        if n_of(record) == 21:  # refused at commit, by DynamoDB itself: the others commit
            return [
                {
                    "Update": {
                        "TableName": pipeline.sink,
                        "Key": {"id": {"S": "21"}},
                        "UpdateExpression": "SET id = :other",  # a key attribute
                        "ExpressionAttributeValues": {":other": {"S": "x"}},
                    }
                }
            ]
        return [_put(pipeline, record)]

    feed = pipeline.feed(batch_size=100)
    feed.drain(consumer.process)

    assert _sink_ids(pipeline) == set(range(len(pipeline.sent))) - {13, 21}
    letters = [json.loads(message["Body"]) for message in _letters(pipeline)]
    assert sorted(json.loads(base64.b64decode(letter["data"]))["n"] for letter in letters) == [13, 21]
    assert consumer.metrics.snapshot()["RecordsSentToDLQ"] == 2


def test_a_failed_sink_condition_is_blamed_on_its_record_by_the_real_lease_table(pipeline):
    consumer = pipeline.consumer(dlq=DeadLetterQueue(pipeline.sqs, pipeline.queue_url))

    @consumer.handler
    def handle(record: ConsumedRecord) -> list[dict[str, Any]]:
        put = _put(pipeline, record)
        if n_of(record) == 30:  # the same id as record 29: its condition fails
            put["Put"]["Item"]["id"] = {"S": "29"}
        put["Put"]["ConditionExpression"] = "attribute_not_exists(id)"
        return [put]

    pipeline.feed(batch_size=100).drain(consumer.process)

    assert _sink_ids(pipeline) == set(range(len(pipeline.sent))) - {30}
    [letter] = [json.loads(message["Body"]) for message in _letters(pipeline)]
    assert json.loads(base64.b64decode(letter["data"]))["n"] == 30
    assert letter["details"]["reasons"] and letter["details"]["refusedWrites"][0]["Put"]["Item"]["id"] == {
        "S": "29"
    }


def test_a_delivery_whose_process_died_is_found_by_its_in_flight_mark(pipeline):
    consumer = pipeline.consumer(dlq=DeadLetterQueue(pipeline.sqs, pipeline.queue_url))

    @consumer.handler
    def handle(record: ConsumedRecord) -> list[dict[str, Any]]:
        if n_of(record) == 17:
            raise ProcessDied("out of memory")
        return [_put(pipeline, record)]

    feed = pipeline.feed(batch_size=100)
    first = feed.invoke(consumer.process)
    row = pipeline.leases.get(pipeline.shard_id)
    assert isinstance(first, ProcessDied) and row.inflight == feed.records[0]["kinesis"]["sequenceNumber"]
    feed.drain(consumer.process)

    assert _sink_ids(pipeline) == set(range(len(pipeline.sent))) - {17}
    [letter] = [json.loads(message["Body"]) for message in _letters(pipeline)]
    assert json.loads(base64.b64decode(letter["data"]))["n"] == 17 and "died" in letter["error"]
    row = pipeline.leases.get(pipeline.shard_id)
    assert row.inflight is None and row.failed_at is None
    assert row.checkpoint > Position(feed.records[0]["kinesis"]["sequenceNumber"])
