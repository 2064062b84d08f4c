"""The example consumer groups' Lambda handlers (functions/event_sink, functions/key_counter) against
moto server (Kinesis, DynamoDB, SQS), fed real KPL aggregates by `shardline.testing.MappingReplay`.

Each handler module is imported from its path (functions/ is not a package), configured from the
environment as in Lambda, and its warm-container caches are reset between tests.
"""

from __future__ import annotations

import importlib.util
import json
import os
import uuid
from collections import Counter
from pathlib import Path
from types import ModuleType
from typing import Any
from unittest import mock

import boto3
import pytest

from shardline.consumer import LeaseTable
from shardline.kinesis import UserRecord
from shardline.producer import Producer, ProducerConfig
from shardline.testing import FakeLambdaContext, MappingReplay, read_shard
from tests.integration.helpers import create_stream, kinesis_client, read_stream, unique_stream_name

FUNCTIONS = Path(__file__).resolve().parents[2] / "functions"
RECORDS = 200
KEYS = 13
NAMESPACE = "shardline-handler-test"

_modules: dict[str, ModuleType] = {}


def handler_module(name: str) -> ModuleType:
    """functions/<name>/app.py, imported once under a name of its own, its caches reset."""
    if name not in _modules:
        path = FUNCTIONS / name / "app.py"
        spec = importlib.util.spec_from_file_location(f"shardline_function_{name}", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        _modules[name] = module
    module = _modules[name]
    module.function.reset()
    return module


class LambdaContext:
    """What Powertools and the consumer read of a Lambda context."""

    def __init__(self, function_name: str, esm_context: FakeLambdaContext) -> None:
        self.function_name = function_name
        self.memory_limit_in_mb = 512
        self.invoked_function_arn = f"arn:aws:lambda:us-east-1:123456789012:function:{function_name}"
        self.aws_request_id = esm_context.aws_request_id
        self.get_remaining_time_in_millis = esm_context.get_remaining_time_in_millis


class Function:
    """A deployed consumer function: its module and environment; MappingReplay invokes `process`."""

    def __init__(self, name: str, env: dict[str, str]) -> None:
        self.name = name
        self.env = env
        with mock.patch.dict(os.environ, env):
            self.module = handler_module(name)

    def process(self, event: dict[str, Any], context: FakeLambdaContext) -> dict[str, Any]:
        with mock.patch.dict(os.environ, self.env):
            return self.module.handler(event, LambdaContext(self.name, context))

    @property
    def metrics(self) -> dict[str, Any]:
        assert self.module.function.consumer is not None, "not invoked yet"
        return self.module.function.consumer.metrics.snapshot()


class Crash(BaseException):
    """The Lambda process dies here."""


class CrashAfterTransaction:
    """A DynamoDB client whose `crash_at`-th TransactWriteItems lands, then the process dies unanswered."""

    def __init__(self, client: Any, crash_at: int) -> None:
        self._client = client
        self.crash_at = crash_at
        self.transactions = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    def transact_write_items(self, **kwargs: Any) -> Any:
        response = self._client.transact_write_items(**kwargs)
        self.transactions += 1
        if self.transactions == self.crash_at:
            raise Crash
        return response


def aws(service: str, endpoint: str) -> Any:
    return boto3.client(service, endpoint_url=endpoint, region_name="us-east-1")


class Stream:
    """A two-shard stream of RECORDS records over KEYS partition keys, in small KPL aggregates (a few
    records each, so a shard spans several batches and its sequence numbers differ in length)."""

    def __init__(self, endpoint: str) -> None:
        self.endpoint = endpoint
        self.kinesis = kinesis_client(endpoint)
        self.dynamodb = aws("dynamodb", endpoint)
        self.sqs = aws("sqs", endpoint)
        self.name = unique_stream_name("handlers")
        create_stream(self.kinesis, self.name, shard_count=2)
        producer = Producer(self.kinesis, self.name, config=ProducerConfig(aggregation_max_size=120))
        self.sent = [UserRecord(f"key-{i % KEYS}", json.dumps({"n": i}).encode()) for i in range(RECORDS)]
        assert all(result.success for result in producer.put_many(self.sent))
        self.shards = read_stream(self.kinesis, self.name)  # {shard: [(sequence, sub, UserRecord)]}
        assert sum(map(len, self.shards.values())) == RECORDS and all(self.shards.values())
        assert any(sub for records in self.shards.values() for _, sub, _ in records), "aggregated"
        for records in self.shards.values():
            sequences = {sequence for sequence, _, _ in records}
            assert len(sequences) > 10 and len({len(s) for s in sequences}) > 1, "several batches"

    def feeds(self, batch_size: int = 10) -> list[MappingReplay]:
        return [
            MappingReplay(read_shard(self.kinesis, self.name, shard), batch_size=batch_size)
            for shard in self.shards
        ]

    def group(self, function: str, key: str) -> tuple[Function, str, str]:
        """A consumer group for `function`: its lease table, its sink table (hash key `key`)."""
        suffix = uuid.uuid4().hex[:8]
        leases, sink = f"{function}-leases-{suffix}", f"{function}-sink-{suffix}"
        LeaseTable.create(self.dynamodb, leases)
        schema = [{"AttributeName": key, "KeyType": "HASH"}]
        attributes = [{"AttributeName": key, "AttributeType": "S"}]
        if key == "pk":
            schema.append({"AttributeName": "sk", "KeyType": "RANGE"})
            attributes.append({"AttributeName": "sk", "AttributeType": "S"})
        self.dynamodb.create_table(
            TableName=sink, KeySchema=schema, AttributeDefinitions=attributes, BillingMode="PAY_PER_REQUEST"
        )
        dlq = self.sqs.create_queue(QueueName=f"{function}-dlq-{suffix}")["QueueUrl"]
        env = {
            "SHARDLINE_GROUP": f"{function}-{suffix}",
            "LEASE_TABLE": leases,
            "SINK_TABLE": sink,
            "DLQ_URL": dlq,
            "POWERTOOLS_SERVICE_NAME": function,
        }
        return Function(function, env), leases, sink

    def scan(self, table: str) -> list[dict[str, Any]]:
        pages = self.dynamodb.get_paginator("scan").paginate(TableName=table, ConsistentRead=True)
        return [item for page in pages for item in page["Items"]]

    def counts(self, table: str) -> dict[str, int]:
        return {item["partitionKey"]["S"]: int(item["count"]["N"]) for item in self.scan(table)}

    def expected_counts(self) -> dict[str, int]:
        return dict(Counter(record.partition_key for record in self.sent))


@pytest.fixture
def stream(moto_server, monkeypatch) -> Stream:
    for service in ("DYNAMODB", "KINESIS", "SQS"):
        monkeypatch.setenv(f"AWS_ENDPOINT_URL_{service}", moto_server)
    monkeypatch.setenv("POWERTOOLS_TRACE_DISABLED", "true")
    monkeypatch.setenv("POWERTOOLS_METRICS_NAMESPACE", NAMESPACE)
    return Stream(moto_server)


def sub_sequence(item: dict[str, Any]) -> int | None:
    return int(item["subSequenceNumber"]["N"]) if "subSequenceNumber" in item else None


def drain(function: Function, feeds: list[MappingReplay]) -> None:
    for feed in feeds:
        feed.drain(function.process)


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
