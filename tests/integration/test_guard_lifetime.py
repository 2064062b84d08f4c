"""Issue 39, property 6, through the real key counter (functions/key_counter) on moto server: its
client-id guards live as long as a copy of their record can still be redriven. The guard TTL is the
one the CDK app renders for the key-counter group (`SHARDLINE_GUARD_TTL_SECONDS`, from cdk.json's
24 h retention and the DLQ's 14 days).

The world as the test makes it: records with client ids are counted once; time passes; DynamoDB's
TTL deletes every guard whose `expiresAt` has passed (at the earliest: DynamoDB deletes within days
*after* it, never before); then a redrive hands the same records to the group again under a lease
row of its own (no checkpoint, no aggregate state: as `shardline.consumer.redrive` runs, and 8 days
on, the producer-retry state has long dropped the lanes anyway). Left out: the redrive's own
transport (SQS, the dead-letter bucket) — the copies reach the handler as the stream held them."""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from shardline.consumer import LeaseTable
from shardline.kinesis import UserRecord
from shardline.producer import Producer, ProducerConfig
from shardline.testing import MappingReplay, read_shard
from tests.support.consumer_handlers import Function, aws
from tests.support.integration import create_stream, kinesis_client, unique_stream_name

DAY = 24 * 3600
STREAM_RETENTION_S = 24 * 3600  # cdk.json's retentionHours
DLQ_RETENTION_S = 14 * DAY  # the group's dead-letter queue
RECORDS, KEYS = 60, 7


def rendered_guard_ttl(cdk_out: Path) -> str | None:
    """The key-counter function's SHARDLINE_GUARD_TTL_SECONDS in the synthesized app (None: not set)."""
    [template] = [p for p in cdk_out.glob("*.template.json") if "Resources" in json.loads(p.read_text())]
    for resource in json.loads(template.read_text())["Resources"].values():
        variables = resource.get("Properties", {}).get("Environment", {}).get("Variables", {})
        if variables.get("SHARDLINE_GROUP") == "key-counter":
            value = variables.get("SHARDLINE_GUARD_TTL_SECONDS")
            return None if value is None else str(value)
    raise AssertionError("no key-counter function in the app")


class Group:
    """The key-counter group on moto server: a stream of RECORDS records with client ids, its counter
    table, and a lease table per run (the group's own, then each redrive's)."""

    def __init__(self, endpoint: str, guard_ttl: str | None) -> None:
        self.dynamodb = aws("dynamodb", endpoint)
        self.kinesis = kinesis_client(endpoint)
        self.stream = unique_stream_name("guards")
        create_stream(self.kinesis, self.stream, shard_count=2)
        self.sent = [
            UserRecord(f"key-{i % KEYS}", json.dumps({"n": i}).encode(), id=f"order-{i}")
            for i in range(RECORDS)
        ]
        producer = Producer(self.kinesis, self.stream, config=ProducerConfig(aggregation_max_size=300))
        self.sent_at = int(time.time())  # no record arrived before it
        assert all(result.success for result in producer.put_many(self.sent))
        self.counter = unique_stream_name("counts")
        self.dynamodb.create_table(
            TableName=self.counter,
            KeySchema=[{"AttributeName": "partitionKey", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "partitionKey", "AttributeType": "S"}],
            BillingMode="PAY_PER_REQUEST",
        )
        self.guard_ttl = guard_ttl

    def run(self) -> None:
        """Every record of the stream through the key counter, under a lease table of its own."""
        leases = unique_stream_name("leases")
        LeaseTable.create(self.dynamodb, leases)
        env = {"SHARDLINE_GROUP": "key-counter", "LEASE_TABLE": leases, "SINK_TABLE": self.counter,
               "POWERTOOLS_SERVICE_NAME": "key-counter"}  # fmt: skip
        if self.guard_ttl is not None:
            env["SHARDLINE_GUARD_TTL_SECONDS"] = self.guard_ttl
        function = Function("key_counter", env)
        for shard in self.kinesis.list_shards(StreamName=self.stream)["Shards"]:
            MappingReplay(read_shard(self.kinesis, self.stream, shard["ShardId"]), batch_size=10).drain(
                function.process
            )

    def items(self) -> list[dict[str, Any]]:
        pages = self.dynamodb.get_paginator("scan").paginate(TableName=self.counter, ConsistentRead=True)
        return [item for page in pages for item in page["Items"]]

    def counts(self) -> dict[str, int]:
        return {i["partitionKey"]["S"]: int(i["count"]["N"]) for i in self.items() if "count" in i}

    def expire(self, now: float) -> int:
        """DynamoDB's TTL at `now`, at its earliest: every item whose `expiresAt` passed is deleted."""
        gone = [i for i in self.items() if "expiresAt" in i and int(i["expiresAt"]["N"]) < now]
        for item in gone:
            self.dynamodb.delete_item(TableName=self.counter, Key={"partitionKey": item["partitionKey"]})
        return len(gone)


@pytest.fixture
def environment(moto_server, monkeypatch) -> str:
    for service in ("DYNAMODB", "KINESIS", "SQS"):
        monkeypatch.setenv(f"AWS_ENDPOINT_URL_{service}", moto_server)
    monkeypatch.setenv("POWERTOOLS_TRACE_DISABLED", "true")
    monkeypatch.setenv("POWERTOOLS_METRICS_NAMESPACE", "shardline-guard-test")
    monkeypatch.delenv("SHARDLINE_GUARD_TTL_SECONDS", raising=False)
    assert "SHARDLINE_GUARD_TTL_SECONDS" not in os.environ
    return str(moto_server)


@pytest.mark.parametrize(
    "days_later",
    [
        8,
        (STREAM_RETENTION_S + DLQ_RETENTION_S) / DAY,
    ],  # the 8 days; the last moment a copy can be redriven
    ids=["8-days", "retention-plus-dlq"],
)
def test_property_6_the_key_counter_s_guards_outlive_every_copy_a_redrive_can_bring(
    environment: str, cdk_out: Path, days_later: float
) -> None:
    group = Group(environment, rendered_guard_ttl(cdk_out))
    expected = dict(Counter(record.partition_key for record in group.sent))
    group.run()
    assert group.counts() == expected
    guards = [item for item in group.items() if "shardlineOnce" in item]
    assert len(guards) == RECORDS

    expired = group.expire(group.sent_at + days_later * DAY)
    group.run()  # the redrive: the same records, under a lease row of its own

    assert group.counts() == expected, f"{expired} guards expired before a copy could no longer come"
    assert expired == 0
