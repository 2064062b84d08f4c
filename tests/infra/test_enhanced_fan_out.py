"""Enhanced fan-out per consumer group (issue 28, item 3): `enhanced_fan_out=True` (config key
`enhancedFanOut`) registers a stream consumer of the group's own, puts the mapping on its ARN, and
grants SubscribeToShard and DescribeStreamConsumer on it alone; what Kinesis refuses is refused at
synth, naming the group and the setting."""

from __future__ import annotations

from datetime import UTC, datetime
from itertools import pairwise
from typing import Any

import pytest
from aws_cdk import Stack
from aws_cdk import aws_lambda as lambda_
from aws_cdk.assertions import Template

from app import build
from shardline.cdk import ConfigError, ConsumerGroup, Layers, Stream, load_config
from shardline.cdk._consumer_group import CONSUMER_ACTIONS, STREAM_ACTIONS
from shardline.cdk._group_rules import MAX_STREAM_CONSUMERS
from tests.support.cdk import ORDERS_ARN, actions_on, alone, default_context, resources

INLINE = lambda_.Code.from_inline("def handler(event, context):\n    return {}\n")


def groups_on(stack: Stack, stream: Stream, count: int, **props: Any) -> list[ConsumerGroup]:
    layers = Layers(stack, "Layers")
    return [
        ConsumerGroup(
            stack,
            f"G{index}",
            name=f"group-{index}",
            stream=stream,
            layers=layers,
            code=INLINE,
            handler="index.handler",
            enhanced_fan_out=True,
            **props,
        )
        for index in range(count)
    ]


def test_a_fan_out_group_reads_through_its_own_consumer_with_just_its_grants():
    def build_(stack: Stack) -> None:
        groups_on(stack, Stream(stack, "Orders", stream_name="orders", shards=2), 1)

    template = alone(build_)
    [(consumer_id, consumer)] = resources(template, "AWS::Kinesis::StreamConsumer").items()
    [stream_id] = resources(template, "AWS::Kinesis::Stream")
    assert consumer["Properties"] == {
        "ConsumerName": "group-0",
        "StreamARN": {"Fn::GetAtt": [stream_id, "Arn"]},
    }
    [mapping] = resources(template, "AWS::Lambda::EventSourceMapping").values()
    consumer_arn = {"Fn::GetAtt": [consumer_id, "ConsumerARN"]}
    assert mapping["Properties"]["EventSourceArn"] == consumer_arn
    assert actions_on(template, consumer_arn) == set(CONSUMER_ACTIONS)
    assert actions_on(template, {"Fn::GetAtt": [stream_id, "Arn"]}) == set(STREAM_ACTIONS)


def test_a_group_without_fan_out_registers_no_consumer_and_reads_the_stream():
    template = alone(
        lambda stack: ConsumerGroup(
            stack,
            "G",
            name="g",
            stream=Stream.from_stream_arn(stack, "Orders", ORDERS_ARN),
            layers=Layers(stack, "Layers"),
            code=INLINE,
            handler="index.handler",
        )
    )
    assert resources(template, "AWS::Kinesis::StreamConsumer") == {}
    [mapping] = resources(template, "AWS::Lambda::EventSourceMapping").values()
    assert mapping["Properties"]["EventSourceArn"] == ORDERS_ARN
    assert "kinesis:SubscribeToShard" not in str(resources(template, "AWS::IAM::Policy"))


def test_consumers_of_one_stream_are_registered_one_after_another():
    template = alone(lambda stack: groups_on(stack, Stream.from_stream_arn(stack, "Orders", ORDERS_ARN), 3))
    consumers = resources(template, "AWS::Kinesis::StreamConsumer")
    assert {c["Properties"]["StreamARN"] for c in consumers.values()} == {ORDERS_ARN}
    ordered = sorted(consumers.items(), key=lambda item: item[1]["Properties"]["ConsumerName"])
    assert "DependsOn" not in ordered[0][1]
    for (previous, _), (_, consumer) in pairwise(ordered):
        assert consumer["DependsOn"] == [previous], "Kinesis creates at most 5 consumers at a time"


def test_a_fan_out_group_may_start_at_a_time():
    moment = datetime(2026, 11, 1, tzinfo=UTC)
    template = alone(
        lambda stack: groups_on(
            stack,
            Stream.from_stream_arn(stack, "Orders", ORDERS_ARN),
            1,
            starting_position="AT_TIMESTAMP",
            starting_position_timestamp=moment,
        )
    )
    [mapping] = resources(template, "AWS::Lambda::EventSourceMapping").values()
    assert mapping["Properties"]["StartingPosition"] == "AT_TIMESTAMP"
    assert mapping["Properties"]["StartingPositionTimestamp"] == moment.timestamp()
    assert "ConsumerARN" in str(mapping["Properties"]["EventSourceArn"])


def test_more_consumers_than_kinesis_registers_on_one_stream_are_refused():
    def build_(stack: Stack) -> None:
        groups_on(stack, Stream.from_stream_arn(stack, "Orders", ORDERS_ARN), MAX_STREAM_CONSUMERS + 1)

    with pytest.raises(
        ValueError, match=r"ConsumerGroup 'group-20': enhanced_fan_out: the stream already has 20"
    ):
        alone(build_, nag=False)


@pytest.mark.parametrize(
    ("props", "message"),
    [
        (
            {"consumer_name": "group-0"},
            r"ConsumerGroup 'group-1': consumer_name: the stream already has a consumer",
        ),
        ({"consumer_name": "no spaces"}, r"consumer_name: 'no spaces' is no Kinesis consumer name"),
    ],
)
def test_a_consumer_kinesis_would_refuse_is_refused_naming_the_group(props, message):
    with pytest.raises(ValueError, match=message):
        alone(
            lambda stack: groups_on(stack, Stream.from_stream_arn(stack, "O", ORDERS_ARN), 2, **props),
            nag=False,
        )


def test_the_config_s_enhanced_fan_out_reaches_its_group_only():
    context = default_context()
    context["shardline"]["consumerGroups"][0]["enhancedFanOut"] = True
    app, stack = build(context)
    app.synth()  # cdk-nag too
    template = Template.from_stack(stack)
    [(consumer_id, consumer)] = resources(template, "AWS::Kinesis::StreamConsumer").items()
    assert consumer["Properties"]["ConsumerName"] == "event-sink"
    sources = sorted(
        str(m["Properties"]["EventSourceArn"])
        for m in resources(template, "AWS::Lambda::EventSourceMapping").values()
    )
    assert sum("ConsumerARN" in source for source in sources) == 1
    assert actions_on(template, {"Fn::GetAtt": [consumer_id, "ConsumerARN"]}) == set(CONSUMER_ACTIONS)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            lambda c: c["consumerGroups"][0].update(enhancedFanOut="yes"),
            r"consumerGroups\[0\]\.enhancedFanOut: must be true",
        ),
        (
            lambda c: c["consumerGroups"].extend(
                dict(c["consumerGroups"][0], name=f"g{i}", enhancedFanOut=True)
                for i in range(MAX_STREAM_CONSUMERS + 1)
            ),
            r"consumerGroups\[22\]\.enhancedFanOut: stream 'events' would have more than 20",
        ),
    ],
)
def test_the_config_s_fan_out_kinesis_would_refuse_is_refused_naming_the_key(change, message):
    context = default_context()["shardline"]
    change(context)
    context["concurrencyBudget"] = 1_000_000
    with pytest.raises(ConfigError, match=rf"^shardline\.{message}"):
        load_config(context)
