"""`send`'s verdict against consumer groups that declare what their sinks hold (`SHARDLINE_SINKS`), and
against one that declares nothing (checked by lag and errors), on moto server.

Each check is shown passing on the right data and failing on data with a record missing or applied
twice (or, for the undeclared group, with a shard behind, a function error, a healthy record in its
DLQ or an on-failure message): a check that cannot fail checks nothing.
"""

from __future__ import annotations

import base64
import datetime
import json
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from local.app import model
from local.app.provision import client
from local.commands.send import parse_payload
from local.commands.verify import wait_and_verify
from local.commands.verify_render import render
from local.commands.verify_verdict import COUNTER, LAG, NOT_DECLARED, RECORDS
from tests.support.send import Pipeline, StubApi, Written, _group, _send

pytestmark = pytest.mark.integration


def _table(endpoint: str, name: str, *keys: tuple[str, str]) -> dict[str, Any]:
    schema = {
        "KeySchema": [{"AttributeName": key, "KeyType": kind} for key, kind in keys],
        "AttributeDefinitions": [{"AttributeName": key, "AttributeType": "S"} for key, _ in keys],
        "BillingMode": "PAY_PER_REQUEST",
    }
    client("dynamodb", endpoint).create_table(TableName=name, **schema)
    return schema


class Team:
    """A team's app around the pipeline's stream: an `orders` group (a records sink keyed by tenant
    and item id, the id in `eventId`), a `tenants` group (counts in `orders` per `tenant`), and a
    `forwarder` group with no sink, each with its DLQ; the forwarder's mapping has an on-failure queue."""

    def __init__(self, pipeline: Pipeline) -> None:
        self.endpoint, self.stream = pipeline.endpoint, pipeline.stream
        suffix = uuid.uuid4().hex[:8]
        self.orders, self.tenants, self.leases = f"orders-{suffix}", f"tenants-{suffix}", f"leases-{suffix}"
        orders = _table(self.endpoint, self.orders, ("tenant", "HASH"), ("itemId", "RANGE"))
        tenants = _table(self.endpoint, self.tenants, ("tenant", "HASH"))
        leases = _table(self.endpoint, self.leases, ("leaseKey", "HASH"))
        sqs = client("sqs", self.endpoint)
        self.dlqs = {g: sqs.create_queue(QueueName=f"dlq-{g}-{suffix}")["QueueUrl"] for g in ("o", "t", "f")}
        self.on_failure = f"on-failure-{suffix}"
        self.on_failure_url = sqs.create_queue(QueueName=self.on_failure)["QueueUrl"]

        def consumer(group: str, dlq: str, sinks: list[dict[str, str]] | None) -> model.Function:
            env = {"SHARDLINE_GROUP": group, "LEASE_TABLE": self.leases, "DLQ_URL": self.dlqs[dlq]}
            if sinks is not None:
                env |= {"SINK_TABLE": sinks[0]["table"], "SHARDLINE_SINKS": json.dumps(sinks)}
            return model.Function(
                f"L{group}", f"fn-{group}-{suffix}", "app.handler", Path("."), environment=env
            )

        functions = (
            model.Function(
                "Producer", f"producer-{suffix}", "app.handler", Path("."),
                environment={"SHARDLINE_STREAMS": json.dumps({"events": {"streamName": self.stream}})},
            ),
            consumer("orders", "o", [{"table": self.orders, "holds": "records", "idAttribute": "eventId"}]),
            consumer("tenants", "t", [{"table": self.tenants, "holds": "counts",
                                       "keyAttribute": "tenant", "countAttribute": "orders"}]),
            consumer("forwarder", "f", None),
        )  # fmt: skip
        self.function = {f.environment.get("SHARDLINE_GROUP"): f.name for f in functions}
        self.app = model.LocalApp(
            stack_name="team",
            streams=(model.Stream("Events", self.stream, 4),),
            resources=(
                model.Resource("Orders", "AWS::DynamoDB::Table", self.orders, orders),
                model.Resource("Tenants", "AWS::DynamoDB::Table", self.tenants, tenants),
                model.Resource("Leases", "AWS::DynamoDB::Table", self.leases, leases),
            ),
            functions=functions,
            mappings=tuple(
                model.EventSourceMapping(
                    f"M{group}",
                    uuid.uuid4().hex,
                    self.function[group],
                    self.stream,
                    on_failure_arn=model.queue_arn(self.on_failure) if group == "forwarder" else None,
                )
                for group in ("orders", "tenants", "forwarder")
            ),
        )
        self.errors: Counter[str] = Counter()

    def order(self, w: Written) -> None:
        """What the orders handler writes for a record: an item of its own, the record's id in it."""
        item = {"tenant": {"S": w.key}, "itemId": {"S": uuid.uuid4().hex}, "eventId": {"S": str(w.id)}}
        client("dynamodb", self.endpoint).put_item(TableName=self.orders, Item=item)

    def count(self, written: list[Written]) -> None:
        for key, n in Counter(w.key for w in written).items():
            client("dynamodb", self.endpoint).update_item(
                TableName=self.tenants, Key={"tenant": {"S": key}}, UpdateExpression="ADD #n :n",
                ExpressionAttributeNames={"#n": "orders"}, ExpressionAttributeValues={":n": {"N": str(n)}},
            )  # fmt: skip

    def checkpoint(self, w: Written) -> None:
        """The forwarder's lease row of `w`'s shard, checkpointed at `w`."""
        item = {
            "leaseKey": {"S": w.shard_id},
            "checkpoint": {"S": w.sequence_number},
            "checkpointSubSequenceNumber": {"N": str(w.sub_sequence or 0)},
            "leaseCounter": {"N": "1"},
        }
        client("dynamodb", self.endpoint).put_item(TableName=self.leases, Item=item)

    def verify(self, report: Any, timeout: float = 10) -> Any:
        return wait_and_verify(
            self.endpoint, self.app, report, timeout=timeout, progress=False, poll_interval=0.1,
            function_errors=lambda function: self.errors[function],
        )  # fmt: skip


def _seq(w: Written) -> int:
    return int(parse_payload(w.data)["seq"])


@pytest.fixture
def team(pipeline: Pipeline) -> Team:
    return Team(pipeline)


def test_the_verdict_reads_each_groups_declaration(stub_api: StubApi, team: Team) -> None:
    report = _send(stub_api, 40, keys=5, batch=20)
    for w in stub_api.written:
        team.order(w)
    team.count(stub_api.written)
    for w in _last_per_shard(stub_api.written):
        team.checkpoint(w)
    verdict = team.verify(report)
    assert verdict.ok, render(verdict)
    orders, tenants, forwarder = (_group(verdict, name) for name in ("orders", "tenants", "forwarder"))
    assert (orders.group.kind, orders.group.source, orders.group.incremental) == (RECORDS, "declared", False)
    assert (tenants.group.kind, tenants.group.key_attribute, tenants.group.count_attribute) == (
        COUNTER, "tenant", "orders",
    )  # fmt: skip
    assert (forwarder.group.kind, forwarder.group.source) == (LAG, NOT_DECLARED)
    assert orders.applied == tenants.applied == forwarder.applied == 40
    assert forwarder.function_errors == 0 and not forwarder.behind
    assert "forwarder: sink not declared: checked by lag and errors only; caught up with the stream: yes" in (
        render(verdict)
    )


def test_a_records_sink_of_any_key_schema_is_checked_by_id(stub_api: StubApi, team: Team) -> None:
    report = _send(stub_api, 30, keys=3, batch=30)
    missing = stub_api.written[11]
    for w in stub_api.written:
        if w is not missing:
            team.order(w)
    verdict = team.verify(report, timeout=1.5)
    orders = _group(verdict, "orders")
    assert not verdict.ok and not orders.ok and orders.lost == [_seq(missing)]
    team.order(missing)
    assert _group(team.verify(report), "orders").ok
    twice = stub_api.written[4]
    team.order(twice)  # applied twice: a second item carrying the same id
    orders = _group(team.verify(report), "orders")
    assert not orders.ok and orders.duplicated == {_seq(twice): 2}
    assert len(orders.duplicated_at[_seq(twice)]) == 2 and all(
        "|" in key for key in orders.duplicated_at[_seq(twice)]
    )


def test_a_counts_sink_with_its_own_attribute_names_is_checked_per_key(stub_api: StubApi, team: Team) -> None:
    report = _send(stub_api, 30, keys=3, batch=30)
    team.count(stub_api.written[1:])  # one record never counted
    tenants = _group(team.verify(report, timeout=1.5), "tenants")
    key = stub_api.written[0].key
    expected = sum(1 for w in stub_api.written if w.key == key)
    assert not tenants.ok and tenants.wrong_counts == {key: (expected, expected - 1)}
    team.count(stub_api.written[:2])  # the missing one, and one counted twice
    tenants = _group(team.verify(report), "tenants")
    second = stub_api.written[1].key
    assert not tenants.ok and tenants.wrong_counts[second][1] == tenants.wrong_counts[second][0] + 1


def test_an_undeclared_group_is_checked_by_its_lag_and_its_errors(stub_api: StubApi, team: Team) -> None:
    report = _send(stub_api, 40, keys=8, batch=40)
    lasts = _last_per_shard(stub_api.written)
    behind = lasts[0]
    before = max((w for w in stub_api.written if w.shard_id == behind.shard_id and w is not behind),
                 key=lambda w: (int(w.sequence_number), w.sub_sequence or 0))  # fmt: skip
    for w in [*lasts[1:], before]:  # the last record of one shard not processed
        team.checkpoint(w)
    forwarder = _group(team.verify(report, timeout=1.5), "forwarder")
    assert not forwarder.ok and list(forwarder.behind) == [behind.shard_id]
    assert "NO (1 shard(s) behind" in render(team.verify(report, timeout=0.2))
    team.checkpoint(behind)
    assert _group(team.verify(report), "forwarder").ok
    team.errors[team.function["forwarder"]] = 1  # a function error during the run
    assert not _group(team.verify(report), "forwarder").ok
    team.errors.clear()
    _on_failure_message(team, behind)  # Lambda gave up a batch
    forwarder = _group(team.verify(report), "forwarder")
    assert not forwarder.ok and forwarder.on_failure == 1


def test_an_undeclared_groups_healthy_record_in_its_dlq_fails_it(stub_api: StubApi, team: Team) -> None:
    report = _send(stub_api, 10, batch=10)
    for w in _last_per_shard(stub_api.written):
        team.checkpoint(w)
    dead = stub_api.written[3]
    letter = {"version": 1, "group": "forwarder", "stream": team.stream, "shardId": dead.shard_id,
              "sequenceNumber": dead.sequence_number, "partitionKey": dead.key,
              "data": base64.b64encode(dead.data).decode()}  # fmt: skip
    client("sqs", team.endpoint).send_message(QueueUrl=team.dlqs["f"], MessageBody=json.dumps(letter))
    forwarder = _group(team.verify(report), "forwarder")
    assert not forwarder.ok and forwarder.dead_lettered == [_seq(dead)]


def _last_per_shard(written: list[Written]) -> list[Written]:
    last: dict[str, Written] = {}
    for w in written:
        if w.shard_id not in last or (int(w.sequence_number), w.sub_sequence or 0) > (
            int(last[w.shard_id].sequence_number), last[w.shard_id].sub_sequence or 0
        ):  # fmt: skip
            last[w.shard_id] = w
    return sorted(last.values(), key=lambda w: w.shard_id)


def _on_failure_message(team: Team, w: Written) -> None:
    now = datetime.datetime.now(datetime.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    message = {
        "requestContext": {"requestId": uuid.uuid4().hex, "condition": "RetryAttemptsExhausted"},
        "version": "1.0",
        "timestamp": now,
        "KinesisBatchInfo": {"shardId": w.shard_id, "streamArn": model.stream_arn(team.stream),
                             "startSequenceNumber": w.sequence_number,
                             "endSequenceNumber": w.sequence_number},
    }  # fmt: skip
    client("sqs", team.endpoint).send_message(QueueUrl=team.on_failure_url, MessageBody=json.dumps(message))
