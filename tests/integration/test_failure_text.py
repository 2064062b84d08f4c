"""Issue 25, item 5, across the wire on moto server: a handler's exception text that holds a secret
reaches neither the real lease table's row (`lastError`, `stalledCause`), nor the dead letter in
SQS or its whole copy in S3, nor shardline's log lines — only its type and fingerprint
(`shardline.consumer._failure_text`)."""

from __future__ import annotations

import json
import logging
import uuid

import pytest

from shardline.consumer import ConsumedRecord, DeadLetterQueue, DependencyUnavailable
from shardline.consumer._failure_text import failure_text
from tests.support.integration import aws_client, n_of

SECRET = "zq7XkP-4111-secret-vW9j"


def leaks(written: str) -> list[str]:
    """The 6-character windows of SECRET found in `written`."""
    return [SECRET[at : at + 6] for at in range(len(SECRET) - 5) if SECRET[at : at + 6] in written]


def lease_item(pipeline) -> dict:
    return pipeline.dynamodb.get_item(
        TableName=pipeline.leases.table_name, Key={"leaseKey": {"S": pipeline.shard_id}}, ConsistentRead=True
    )["Item"]


def test_5_a_poison_record_s_secret_reaches_no_lease_row_dead_letter_s3_object_or_log(
    pipeline, moto_server, caplog: pytest.LogCaptureFixture
) -> None:
    s3 = aws_client("s3", moto_server)
    bucket = f"dead-letters-{uuid.uuid4().hex[:8]}"
    s3.create_bucket(Bucket=bucket)
    # Every letter goes whole to S3 (SQS keeps 1024 of the 1100 bytes for attributes): both the
    # pointer and the object are checked.
    queue = DeadLetterQueue(pipeline.sqs, pipeline.queue_url, s3=s3, bucket=bucket, max_message_bytes=1100)
    consumer = pipeline.consumer(dlq=queue, max_attempts=2)
    raised = KeyError(f"card {SECRET} for order 31")

    @consumer.handler
    def handle(record: ConsumedRecord) -> None:
        if n_of(record) == 31:
            raise KeyError(f"card {SECRET} for order 31")

    feed = pipeline.feed(batch_size=100)
    with caplog.at_level(logging.DEBUG, logger="shardline"):
        feed.invoke(consumer.process)
        row = lease_item(pipeline)
        feed.drain(consumer.process)

    expected = failure_text(raised)
    assert row["lastError"]["S"] == expected.text == f"KeyError [{expected.fingerprint}]"
    assert not leaks(json.dumps(row))
    [pointer] = pipeline.dead_letters()
    location = pointer["payloadLocation"]
    stored = s3.get_object(Bucket=location["bucket"], Key=location["key"])["Body"].read().decode()
    for letter in (pointer, json.loads(stored)):
        assert letter["error"] == expected.text and letter["errorType"] == "KeyError"
        assert letter["errorFingerprint"] == expected.fingerprint and "errorMessage" not in letter
    assert not leaks(json.dumps(pointer)) and not leaks(stored)
    assert not leaks(caplog.text) and f"sent to the DLQ after 2 attempts: {expected.text}" in caplog.text


def test_5_a_dependency_s_secret_reaches_no_stall_cause_or_log(
    pipeline, caplog: pytest.LogCaptureFixture
) -> None:
    consumer = pipeline.consumer(max_attempts=2)
    raised: list[int] = []

    @consumer.handler
    def handle(record: ConsumedRecord) -> None:
        if n_of(record) == 12 and not raised:
            raised.append(12)
            raise DependencyUnavailable(f"vault said no to {SECRET}")

    feed = pipeline.feed(batch_size=100)
    with caplog.at_level(logging.DEBUG, logger="shardline"):
        feed.invoke(consumer.process)
    row = lease_item(pipeline)

    cause = row["stalledCause"]["S"]
    assert cause.startswith(
        "the handler reported a dependency unavailable: shardline.errors.DependencyUnavailable ["
    )
    assert not leaks(json.dumps(row)) and not leaks(caplog.text) and cause in caplog.text
