"""Issue 24 across the wire, on moto server with the real `LeaseTable`: a batch handler's one list
of writes with one refused write loses nothing and dead-letters only its record; a sink table
that does not exist, and a transaction DynamoDB cancels for an item collection over 10 GB, stall
the shard loudly and blame no record — and once the cause is gone, everything is applied."""

from __future__ import annotations

import base64
import json
import time
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

from shardline.consumer import ConsumedRecord, DeadLetterQueue, KinesisConsumer, client_config
from shardline.testing import FakeLambdaContext
from tests.support.identity import HANG, LossyProxy
from tests.support.integration import n_of


def _put(table: str, record: ConsumedRecord, **extra: Any) -> dict[str, Any]:
    return {"Put": {"TableName": table, "Item": {"id": {"S": str(n_of(record))}}, **extra}}


def _sink_ids(pipeline) -> set[int]:
    return {int(item["id"]["S"]) for item in pipeline.sink_items()}


def _lettered(pipeline) -> list[int]:
    return sorted(json.loads(base64.b64decode(letter["data"]))["n"] for letter in pipeline.dead_letters())


@pytest.mark.parametrize("sink_conflicts", ["fail", "skip"])
def test_loss_a_refused_write_in_a_one_list_chunk_is_pinned_on_its_record_over_moto(pipeline, sink_conflicts):
    consumer = pipeline.consumer(
        dlq=DeadLetterQueue(pipeline.sqs, pipeline.queue_url), sink_conflicts=sink_conflicts
    )

    @consumer.batch_handler
    def handle(chunk: list[ConsumedRecord]) -> list[dict[str, Any]]:
        writes = []
        for record in chunk:
            if n_of(record) == 25:  # its condition can never hold
                writes.append(_put(pipeline.sink, record, ConditionExpression="attribute_exists(id)"))
            else:
                writes.append(_put(pipeline.sink, record))
        return writes

    pipeline.feed(batch_size=100).drain(consumer.process)

    everything = set(range(len(pipeline.sent)))
    assert _sink_ids(pipeline) == everything - {25}, "every good record applied, none lost"
    assert _lettered(pipeline) == ([25] if sink_conflicts == "fail" else [])
    row = pipeline.leases.get(pipeline.shard_id)
    assert row.failed_at is None and row.inflight is None


def test_stalled_a_sink_table_that_does_not_exist_stalls_loudly_then_everything_applies(pipeline):
    consumer = pipeline.consumer(dlq=DeadLetterQueue(pipeline.sqs, pipeline.queue_url))
    missing = f"{pipeline.sink}-not-yet"

    @consumer.handler
    def handle(record: ConsumedRecord) -> list[dict[str, Any]]:
        return [_put(missing, record)]

    feed = pipeline.feed(batch_size=100)
    for _ in range(10):
        feed.invoke(consumer.process)
    row = pipeline.leases.get(pipeline.shard_id)
    assert row.stalls == 10 and row.stalled_cause is not None
    assert "ResourceNotFoundException" in row.stalled_cause and "does not exist" in row.stalled_cause
    snapshot = consumer.metrics.snapshot()
    assert snapshot["ShardStalls"] == 10 and snapshot["RecordsFailed"] == 0
    assert row.failed_at is None and pipeline.dead_letters() == [], "no record blamed"

    pipeline.dynamodb.create_table(
        TableName=missing,
        KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    feed.drain(consumer.process)
    items = pipeline.dynamodb.scan(TableName=missing, ConsistentRead=True)["Items"]
    assert sorted(int(item["id"]["S"]) for item in items) == list(range(len(pipeline.sent)))
    row = pipeline.leases.get(pipeline.shard_id)
    assert row.stalled_cause is None and row.stalls == 0


class _CollectionTooLarge:
    """DynamoDB over moto, but a transaction with sink writes is cancelled as DynamoDB cancels one
    whose item collection (a table with a local index) is over 10 GB, while `full` is set."""

    def __init__(self, dynamodb: Any) -> None:
        self._dynamodb = dynamodb
        self.full = True

    def __getattr__(self, name: str) -> Any:
        return getattr(self._dynamodb, name)

    def transact_write_items(self, **request: Any) -> Any:
        if self.full:
            reasons = [{"Code": "None"}] + [
                {"Code": "ItemCollectionSizeLimitExceeded", "Message": "Collection size exceeded"}
            ] * (len(request["TransactItems"]) - 1)
            raise ClientError(
                {
                    "Error": {"Code": "TransactionCanceledException", "Message": "Transaction cancelled"},
                    "CancellationReasons": reasons,
                },
                "TransactWriteItems",
            )
        return self._dynamodb.transact_write_items(**request)


def test_stalled_an_item_collection_over_10_gb_stalls_the_shard_and_blames_no_record(pipeline):
    dynamodb = _CollectionTooLarge(pipeline.dynamodb)
    pipeline.leases = pipeline.lease_table(dynamodb)
    consumer = pipeline.consumer(dlq=DeadLetterQueue(pipeline.sqs, pipeline.queue_url))
    consumer.handler(lambda record: [_put(pipeline.sink, record)])
    feed = pipeline.feed(batch_size=100)
    for _ in range(6):
        feed.invoke(consumer.process)
    row = pipeline.leases.get(pipeline.shard_id)
    assert row.stalled_cause is not None and "ItemCollectionSizeLimitExceeded" in row.stalled_cause
    assert consumer.metrics.snapshot()["RecordsFailed"] == 0 and pipeline.dead_letters() == []
    dynamodb.full = False
    feed.drain(consumer.process)
    assert _sink_ids(pipeline) == set(range(len(pipeline.sent)))


def test_good_a_commit_that_hangs_times_out_within_the_margin_and_stalls_blaming_no_record(pipeline):
    """shardline's own DynamoDB calls run within the time budget: with `client_config(margin)` a
    commit DynamoDB never answers times out inside the margin (boto3's default would read for
    60 s, twice the function's timeout here), the shard stalls, no record is blamed — and the next
    delivery applies everything."""
    margin, timeout_s = 2.0, 10.0
    with LossyProxy(pipeline.endpoint, scripted=("TransactWriteItems",)) as proxy:
        dynamodb = boto3.client(
            "dynamodb",
            endpoint_url=proxy.url,
            region_name="us-east-1",
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
            config=client_config(margin),
        )
        consumer = KinesisConsumer("test-group", pipeline.lease_table(dynamodb), time_margin=margin)

        @consumer.handler
        def handle(record: ConsumedRecord) -> list[dict[str, Any]]:
            return [_put(pipeline.sink, record)]

        replay = pipeline.feed(batch_size=100)
        proxy.script(HANG, HANG)  # the commit and its one retry are never answered
        ends = time.monotonic() + timeout_s
        context = FakeLambdaContext(lambda: int((ends - time.monotonic()) * 1000))
        started = time.monotonic()
        answer = replay.invoke(consumer.process, context)
        took = time.monotonic() - started

        assert took < timeout_s, f"the invocation outlived the function's timeout: {took:.1f} s"
        assert answer["batchItemFailures"], "the batch is retried"
        snapshot = consumer.metrics.snapshot()
        assert snapshot["ShardStalls"] == 1 and snapshot["RecordsFailed"] == 0
        row = pipeline.leases.get(pipeline.shard_id)
        assert row.stalled_cause is not None and "timeout" in row.stalled_cause.lower()
        assert row.failed_at is None
        replay.drain(consumer.process)
    assert _sink_ids(pipeline) == set(range(len(pipeline.sent)))
