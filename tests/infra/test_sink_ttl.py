"""Issue 25, item 5: the example sinks keep nothing forever. `consumerGroups[].sinkTtlDays` (1..36500,
default 30) reaches each consumer function as SINK_TTL_DAYS, and its sink table expires items by
their `expiresAt` (the attribute the handlers write)."""

from __future__ import annotations

import pytest
from aws_cdk.assertions import Template

from app import build
from shardline.aws_lambda import ConsumerEnvironment
from shardline.cdk._config import ConfigError, load
from shardline.consumer._once import EXPIRES_AT_ATTRIBUTE
from tests.support.cdk import default_context, placeholders, resources


def _ttl_by_group(template: Template) -> dict[str, int | None]:
    functions = resources(template, "AWS::Lambda::Function").values()
    return {
        variables["SHARDLINE_GROUP"]: ConsumerEnvironment.from_environ(
            {name: placeholders(value) for name, value in variables.items()}
        ).sink_ttl_days
        for variables in (f["Properties"]["Environment"]["Variables"] for f in functions)
        if "SHARDLINE_GROUP" in variables
    }


def test_5_each_consumer_function_carries_the_ttl_and_its_sink_expires_items_by_expires_at(template):
    assert _ttl_by_group(template) == {"event-sink": 30, "key-counter": 30}  # the default
    sinks = [
        table["Properties"]
        for table in resources(template, "AWS::DynamoDB::Table").values()
        # not the lease tables, nor the producer API's idempotency table (keyed by scoped id)
        if table["Properties"]["KeySchema"][0]["AttributeName"] not in ("leaseKey", "scopedId")
    ]
    assert len(sinks) == 2
    for sink in sinks:
        assert sink["TimeToLiveSpecification"] == {"AttributeName": EXPIRES_AT_ATTRIBUTE, "Enabled": True}
    assert EXPIRES_AT_ATTRIBUTE == "expiresAt"


def test_5_a_group_s_sink_ttl_days_is_its_own():
    context = default_context()
    context["shardline"]["consumerGroups"][1]["sinkTtlDays"] = 365
    _app, stack = build(context)
    assert _ttl_by_group(Template.from_stack(stack)) == {"event-sink": 30, "key-counter": 365}


@pytest.mark.parametrize("value", [0, 36501, -1, "30", 1.5, True])
def test_5_a_sink_ttl_out_of_range_fails_naming_the_key(value):
    context = default_context()["shardline"]
    context["consumerGroups"][0]["sinkTtlDays"] = value
    with pytest.raises(ConfigError, match=r"^shardline\.consumerGroups\[0\]\.sinkTtlDays: "):
        load(context)


def test_5_the_bounds_are_accepted():
    for days in (1, 36500):
        context = default_context()["shardline"]
        context["consumerGroups"][0]["sinkTtlDays"] = days
        assert load(context).consumer_groups[0].sink_ttl_days == days
