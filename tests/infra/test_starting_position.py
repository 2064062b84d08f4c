"""A new consumer group may start at a time (AT_TIMESTAMP) instead of replaying the whole retention
(issue 28, item 3): the mapping gets the position and the timestamp; what the mapping would refuse
is refused at synth, naming the key."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from aws_cdk.assertions import Template

from app import build
from shardline.aws_lambda import ConsumerEnvironment
from shardline.cdk import ConfigError, load_config
from tests.support.cdk import default_context, placeholders, resources


def test_a_group_starting_at_a_timestamp_gets_that_position_and_time():
    context = default_context()
    group = context["shardline"]["consumerGroups"][0]
    group["startingPosition"] = "AT_TIMESTAMP"
    group["startingPositionTimestamp"] = "2026-11-01T00:00:00Z"
    app, stack = build(context)
    app.synth()  # cdk-nag too
    mappings = resources(Template.from_stack(stack), "AWS::Lambda::EventSourceMapping")
    starts = sorted(
        (m["Properties"]["StartingPosition"], m["Properties"].get("StartingPositionTimestamp"))
        for m in mappings.values()
    )
    expected = datetime(2026, 11, 1, tzinfo=UTC).timestamp()
    assert starts == [("AT_TIMESTAMP", expected), ("TRIM_HORIZON", None)]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"startingPosition": "AT_TIMESTAMP"}, r"startingPositionTimestamp: required with AT_TIMESTAMP"),
        (
            {"startingPosition": "AT_TIMESTAMP", "startingPositionTimestamp": "2026-11-01 00:00"},
            r"startingPositionTimestamp: not an ISO 8601 time with its offset",
        ),
        (
            {"startingPositionTimestamp": "2026-11-01T00:00:00Z"},
            r"startingPositionTimestamp: only with AT_TIMESTAMP",
        ),
        ({"startingPosition": "AT_SEQUENCE_NUMBER"}, r"startingPosition"),
    ],
)
def test_what_the_mapping_would_refuse_is_refused_at_synth(change, message):
    context = default_context()["shardline"]
    context["consumerGroups"][0].update(change)
    with pytest.raises(ConfigError, match=rf"^shardline\.consumerGroups\[0\]\.{message}"):
        load_config(context)


def test_property_5_each_groups_function_is_told_where_its_mapping_starts() -> None:
    """The function decides whether a child waits for a parent without a lease row from where its
    mapping starts (`_resharding`): its environment says the mapping's position, timestamp and
    maximum record age, read back through `ConsumerEnvironment`."""
    context = default_context()
    group = context["shardline"]["consumerGroups"][0]
    group["startingPosition"] = "AT_TIMESTAMP"
    group["startingPositionTimestamp"] = "2026-11-01T00:00:00Z"
    _, stack = build(context)
    template = Template.from_stack(stack)
    functions = resources(template, "AWS::Lambda::Function")
    told = []
    for mapping in resources(template, "AWS::Lambda::EventSourceMapping").values():
        properties = mapping["Properties"]
        function = functions[properties["FunctionName"]["Ref"]]
        variables = function["Properties"]["Environment"]["Variables"]
        env = ConsumerEnvironment.from_environ(
            {name: placeholders(value) for name, value in variables.items()}
        )
        assert env.starting_position == properties["StartingPosition"]
        assert env.starting_position_timestamp == properties.get("StartingPositionTimestamp")
        assert env.max_record_age_seconds == properties["MaximumRecordAgeInSeconds"]
        told.append((env.starting_position, env.starting_position_timestamp))
    expected = datetime(2026, 11, 1, tzinfo=UTC).timestamp()
    assert sorted(told) == [("AT_TIMESTAMP", expected), ("TRIM_HORIZON", None)]
