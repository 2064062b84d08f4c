"""A consumer group's own sink table (issue 28, item 1): any key schema, given in the group's
configuration, reaches the table, the function's environment and its grants — and nothing more."""

from __future__ import annotations

import json
from typing import Any

import pytest
from aws_cdk.assertions import Template

from app import build
from shardline.cdk import ConfigError, load_config
from tests.support.cdk import default_context, placeholders, resources

ORDERS = {"partitionKey": {"name": "tenant", "type": "S"}, "sortKey": {"name": "orderId", "type": "N"}}


def synth_with(sink: Any) -> Template:
    context = default_context()
    context["shardline"]["consumerGroups"][0]["sink"] = sink
    app, stack = build(context)
    app.synth()  # cdk-nag too
    return Template.from_stack(stack)


def test_a_custom_key_schema_reaches_the_table_the_environment_and_the_grants():
    template = synth_with(ORDERS)
    tables = resources(template, "AWS::DynamoDB::Table")
    [(sink_id, sink)] = [
        (lid, t)
        for lid, t in tables.items()
        if {k["AttributeName"] for k in t["Properties"]["KeySchema"]} == {"tenant", "orderId"}
    ]
    props = sink["Properties"]
    assert props["KeySchema"] == [
        {"AttributeName": "tenant", "KeyType": "HASH"},
        {"AttributeName": "orderId", "KeyType": "RANGE"},
    ]
    assert sorted((a["AttributeName"], a["AttributeType"]) for a in props["AttributeDefinitions"]) == [
        ("orderId", "N"),
        ("tenant", "S"),
    ]
    assert props["TimeToLiveSpecification"] == {"AttributeName": "expiresAt", "Enabled": True}
    functions = resources(template, "AWS::Lambda::Function")
    users = [
        f
        for f in functions.values()
        if f["Properties"]["Environment"]["Variables"].get("SINK_TABLE") == {"Ref": sink_id}
    ]
    assert len(users) == 1, "the group's own function, and only it, is told of its sink"
    writers = [
        policy
        for policy in resources(template, "AWS::IAM::Policy").values()
        if sink_id in str(policy["Properties"]["PolicyDocument"]["Statement"])
    ]
    assert len(writers) == 1, "only the group's function may write its sink"


@pytest.mark.parametrize(
    ("sink", "message"),
    [
        ({"partitionKey": {"name": "id", "type": "X"}}, r"sink\.partitionKey\.type"),
        (
            {"partitionKey": {"name": "id"}, "sortKey": {"name": "id"}},
            r"sink\.sortKey\.name: 'id' is the partition",
        ),
        ({"sortKey": {"name": "s"}}, r"sink\.partitionKey"),
        ({"partitionKey": {"name": "id"}, "gsi": []}, r"sink: unknown keys \['gsi'\]"),
        ("ledger", r"sink"),
    ],
)
def test_a_sink_the_table_cannot_have_is_refused_naming_the_key(sink, message):
    context = default_context()["shardline"]
    context["consumerGroups"][0]["sink"] = sink
    with pytest.raises(ConfigError, match=rf"^shardline\.consumerGroups\[0\]\.{message}"):
        load_config(context)


def test_a_custom_sink_may_declare_what_it_holds_for_whoever_checks_the_group():
    template = synth_with({**ORDERS, "holds": "records", "idAttribute": "orderEventId"})
    [declared] = [
        f["Properties"]["Environment"]["Variables"]["SHARDLINE_SINKS"]
        for f in resources(template, "AWS::Lambda::Function").values()
        if "orderEventId" in str(f["Properties"]["Environment"]["Variables"].get("SHARDLINE_SINKS"))
    ]
    text = placeholders(declared)
    assert json.loads(text) == [
        {"table": "token-resolved-at-deploy-time", "holds": "records", "idAttribute": "orderEventId"}
    ]


def test_an_undeclared_custom_sink_declares_nothing():
    template = synth_with(ORDERS)
    declared = [
        f["Properties"]["Environment"]["Variables"].get("SHARDLINE_SINKS")
        for f in resources(template, "AWS::Lambda::Function").values()
        if f["Properties"]["Environment"]["Variables"].get("SHARDLINE_GROUP") == "event-sink"
    ]
    assert declared == [None]


@pytest.mark.parametrize(
    ("sink", "message"),
    [
        ({**ORDERS, "holds": "rows"}, r"sink\.holds: must be one of records, counts"),
        ({**ORDERS, "idAttribute": "orderEventId"}, r"sink\.holds: required with idAttribute"),
        ({**ORDERS, "holds": "counts", "countAttribute": ""}, r"sink\.countAttribute: must be 1-64"),
    ],
)
def test_a_custom_sink_s_declaration_is_checked_naming_the_key(sink, message):
    context = default_context()["shardline"]
    context["consumerGroups"][0]["sink"] = sink
    with pytest.raises(ConfigError, match=rf"^shardline\.consumerGroups\[0\]\.{message}"):
        load_config(context)
