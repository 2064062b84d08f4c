"""The example consumer groups' handlers (functions/event_sink, functions/key_counter) on moto server:
the `stream` fixture (a stream, its groups' tables and queues, the handler modules imported from
their paths, their warm caches reset) and `drain`."""

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
from tests.support.integration import create_stream, kinesis_client, read_stream, unique_stream_name

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
