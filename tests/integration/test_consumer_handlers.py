"""The example consumer groups' Lambda handlers (functions/event_sink, functions/key_counter) against
moto server (Kinesis, DynamoDB, SQS), fed real KPL aggregates by `shardline.testing.MappingReplay`.

Each handler module is imported from its path (functions/ is not a package), configured from the
environment as in Lambda, and its warm-container caches are reset between tests.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from shardline.consumer import LeaseTable
from shardline.kinesis import UserRecord
from shardline.producer import Producer
from shardline.testing import FakeLambdaContext
from tests.support.consumer_handlers import (
    NAMESPACE,
    RECORDS,
    Crash,
    CrashAfterTransaction,
    drain,
    sub_sequence,
)


def test_event_sink_writes_one_item_per_user_record_keyed_by_its_position(stream):
    sink_fn, _, sink = stream.group("event_sink", key="pk")

    drain(sink_fn, stream.feeds())

    items = stream.scan(sink)
    assert len(items) == RECORDS
    for shard, records in stream.shards.items():
        # A Query on the shard's partition reads its records in shard order (the padded sort key).
        pages = stream.dynamodb.get_paginator("query").paginate(
            TableName=sink,
            KeyConditionExpression="pk = :pk",
            ExpressionAttributeValues={":pk": {"S": f"{stream.name}#{shard}"}},
            ConsistentRead=True,
        )
        stored = [item for page in pages for item in page["Items"]]
        assert [(i["sequenceNumber"]["S"], sub_sequence(i)) for i in stored] == [
            (sequence, sub) for sequence, sub, _ in records
        ]
        for item, (sequence, sub, user) in zip(stored, records, strict=True):
            key = sink_fn.module.item_key(stream.name, shard, sequence, sub)
            assert {"pk": item["pk"], "sk": item["sk"]} == key
            assert item["sk"]["S"] == f"{sequence:0>129}#{sub or 0:06d}"
            assert item["data"]["B"] == user.data and item["partitionKey"]["S"] == user.partition_key
            assert float(item["approximateArrival"]["N"]) > 0
    metrics = sink_fn.metrics
    assert metrics["RecordsProcessed"] == RECORDS and metrics["RecordsFailed"] == 0


def test_event_sink_sends_a_record_too_large_for_an_item_whole_to_its_dlq(stream):
    big = UserRecord("key-big", b"x" * (400 * 1024))
    assert Producer(stream.kinesis, stream.name).put_many([big])[0].success
    sink_fn, _, sink = stream.group("event_sink", key="pk")
    sink_fn.env["MAX_ATTEMPTS"] = "2"
    sink_fn.env["FAILURE_DETAIL"] = "message"  # the handler's message names no data: let it say why

    drain(sink_fn, stream.feeds())

    assert len(stream.scan(sink)) == RECORDS
    messages = stream.sqs.receive_message(QueueUrl=sink_fn.env["DLQ_URL"], MaxNumberOfMessages=10)
    [letter] = [json.loads(message["Body"]) for message in messages["Messages"]]
    assert letter["partitionKey"] == "key-big" and letter["attempts"] == 2
    assert letter["group"] == sink_fn.env["SHARDLINE_GROUP"] and "do not fit" in letter["error"]
    assert sink_fn.metrics["RecordsSentToDLQ"] == 1


def test_key_counter_counts_each_key_exactly_when_every_batch_is_delivered_twice(stream):
    counter_fn, _, table = stream.group("key_counter", key="partitionKey")

    for feed in stream.feeds(batch_size=7):
        while not feed.finished:
            assert counter_fn.process(feed.next_event(), FakeLambdaContext()) == {"batchItemFailures": []}
            assert feed.invoke(counter_fn.process) == {"batchItemFailures": []}  # the same event again

    assert stream.counts(table) == stream.expected_counts()
    metrics = counter_fn.metrics
    assert metrics["RecordsProcessed"] == RECORDS and metrics["DuplicatesSkipped"] == RECORDS


@pytest.mark.parametrize("crash_at", [1, 3])
def test_key_counter_stays_exact_when_the_process_dies_after_its_transaction_landed(stream, crash_at):
    counter_fn, _, table = stream.group("key_counter", key="partitionKey")
    crashing = CrashAfterTransaction(stream.dynamodb, crash_at)
    counter_fn.module.function.clients["dynamodb"] = crashing  # what the handler's first invocation picks up

    outcomes = []
    for feed in stream.feeds(batch_size=10):
        while not feed.finished:
            outcomes.append(feed.invoke(counter_fn.process))

    assert [type(o) for o in outcomes].count(Crash) == 1, "one crash; MappingReplay delivered its batch again"
    assert stream.counts(table) == stream.expected_counts()
    metrics = counter_fn.metrics
    assert metrics["RecordsProcessed"] == RECORDS, "the record whose reply was lost did not run again"
    assert metrics["DuplicatesSkipped"] > 0, "the redelivered batch skipped what had landed"


def test_both_groups_read_the_same_stream_and_each_sees_every_record(stream):
    sink_fn, sink_leases, sink = stream.group("event_sink", key="pk")
    counter_fn, counter_leases, counters = stream.group("key_counter", key="partitionKey")

    sink_feeds, counter_feeds = stream.feeds(batch_size=10), stream.feeds(batch_size=25)
    while not all(feed.finished for feed in sink_feeds + counter_feeds):  # interleaved, as in Lambda
        for function, feeds in ((sink_fn, sink_feeds), (counter_fn, counter_feeds)):
            for feed in (feed for feed in feeds if not feed.finished):
                assert feed.invoke(function.process) == {"batchItemFailures": []}

    assert len(stream.scan(sink)) == RECORDS
    assert stream.counts(counters) == stream.expected_counts()
    for leases in (sink_leases, counter_leases):
        table = LeaseTable(stream.dynamodb, leases)
        for shard, records in stream.shards.items():
            assert table.get(shard).checkpoint.sequence == records[-1][0], f"{leases} {shard}"
    assert sink_fn.metrics["RecordsProcessed"] == counter_fn.metrics["RecordsProcessed"] == RECORDS


def emf_documents(text: str) -> list[dict[str, Any]]:
    documents = []
    for line in text.splitlines():
        if line.startswith("{"):
            document = json.loads(line)
            if "_aws" in document:
                documents.append(document)
    return documents


def test_each_invocation_publishes_its_consumer_metrics_as_emf_with_the_group_dimension(stream, capsys):
    counter_fn, _, _ = stream.group("key_counter", key="partitionKey")
    feed = stream.feeds(batch_size=10)[0]
    capsys.readouterr()

    first = feed.next_event()
    counter_fn.process(first, FakeLambdaContext())
    counter_fn.process(first, FakeLambdaContext())  # a replay: nothing processed, everything skipped

    documents = [d for d in emf_documents(capsys.readouterr().out) if "RecordsReceived" in d]
    assert len(documents) == 2
    group = counter_fn.env["SHARDLINE_GROUP"]
    for document in documents:
        [directive] = document["_aws"]["CloudWatchMetrics"]
        assert directive["Namespace"] == NAMESPACE and "ConsumerGroup" in directive["Dimensions"][0]
        assert document["ConsumerGroup"] == group and document["service"] == "key_counter"
    first_invocation, replay = documents
    processed = first_invocation["RecordsProcessed"]  # an EMF value is a list of samples
    assert processed == first_invocation["UserRecords"] and processed[0] > 0
    assert replay["DuplicatesSkipped"] == processed, "deltas, not totals"
    assert "RecordsProcessed" not in replay
