"""`shardline.cdk.Stream` on its own (issue 28, item 1): a new stream, encrypted by default, with the
props a platform team overrides; or a team's existing stream, by ARN or `IStream`, which gets only
the grants of who writes and reads it, no stream resource, and is still drawn by Monitoring."""

from __future__ import annotations

import pytest
from aws_cdk import Fn, RemovalPolicy, Stack
from aws_cdk import aws_kinesis as kinesis
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk.assertions import Template

from app import build
from shardline.cdk import ConfigError, ConsumerGroup, Layers, Monitoring, ProducerApi, Stream, load_config
from shardline.cdk._consumer_group import STREAM_ACTIONS
from tests.support.cdk import ORDERS_ARN, actions_on, alone, default_context, resources

INLINE = lambda_.Code.from_inline("def handler(event, context):\n    return {}\n")


def test_a_new_stream_is_encrypted_with_its_own_key_and_takes_the_overrides():
    def build_(stack: Stack) -> None:
        Stream(stack, "Orders", stream_name="orders", shards=2, retention_hours=48, max_record_size_kib=2048,
               removal_policy=RemovalPolicy.DESTROY, tags={"team": "orders"})  # fmt: skip

    template = alone(build_)
    [stream] = resources(template, "AWS::Kinesis::Stream").values()
    props = stream["Properties"]
    assert props["Name"] == "orders"
    assert props["ShardCount"] == 2
    assert props["RetentionPeriodHours"] == 48
    assert props["MaxRecordSizeInKiB"] == 2048
    assert props["StreamEncryption"]["EncryptionType"] == "KMS"
    [key_id] = resources(template, "AWS::KMS::Key")
    assert props["StreamEncryption"]["KeyId"] == {"Fn::GetAtt": [key_id, "Arn"]}
    assert stream["DeletionPolicy"] == "Delete"
    assert {"Key": "team", "Value": "orders"} in props["Tags"]
    assert resources(template, "AWS::KMS::Alias")  # alias/orders


def test_an_aws_managed_on_demand_stream_is_kept_by_default():
    template = alone(lambda stack: Stream(stack, "Orders", encryption="aws-managed"))
    [stream] = resources(template, "AWS::Kinesis::Stream").values()
    assert stream["Properties"]["StreamModeDetails"] == {"StreamMode": "ON_DEMAND"}
    assert stream["Properties"]["StreamEncryption"]["KeyId"] == "alias/aws/kinesis"
    assert stream["DeletionPolicy"] == "Retain"
    assert resources(template, "AWS::KMS::Key") == {}


def test_an_existing_stream_by_arn_gets_the_producer_s_and_the_group_s_grants_and_no_stream():
    def build_(stack: Stack) -> None:
        layers = Layers(stack, "Layers")
        stream = Stream.from_stream_arn(stack, "Orders", ORDERS_ARN)
        api = ProducerApi(stack, "Api", streams={"orders": stream}, layers=layers)
        group = ConsumerGroup(stack, "Writer", name="order-writer", stream=stream, layers=layers,
                              code=INLINE, handler="index.handler")  # fmt: skip
        Monitoring(stack, "Monitoring", streams=[stream], api=api, groups=[group])

    template = alone(build_)
    assert resources(template, "AWS::Kinesis::Stream") == {}
    assert actions_on(template, ORDERS_ARN) == {"kinesis:PutRecords", "kinesis:ListShards", *STREAM_ACTIONS}
    [mapping] = resources(template, "AWS::Lambda::EventSourceMapping").values()
    assert mapping["Properties"]["EventSourceArn"] == ORDERS_ARN
    # Monitoring draws it by its name, from the ARN.
    iterator_age = next(
        alarm["Properties"]
        for lid, alarm in resources(template, "AWS::CloudWatch::Alarm").items()
        if lid.startswith("MonitoringordersIteratorAge")
    )
    assert iterator_age["Dimensions"] == [{"Name": "StreamName", "Value": "orders"}]
    assert "kinesis." not in str(resources(template, "AWS::IAM::Policy")), "no stream key was given"


def test_an_existing_stream_by_a_token_arn_is_drawn_by_the_name_split_from_it():
    def build_(stack: Stack) -> None:
        stream = Stream.from_stream_arn(stack, "Orders", Fn.import_value("orders-stream-arn"))
        Monitoring(stack, "Monitoring", streams=[stream])

    template = alone(build_)
    [alarm] = resources(template, "AWS::CloudWatch::Alarm").values()
    assert alarm["Properties"]["AlarmDescription"].startswith("Orders:"), "the construct id names it"
    [dimension] = alarm["Properties"]["Dimensions"]
    assert "Fn::Split" in str(dimension["Value"]) and "orders-stream-arn" in str(dimension["Value"])


def test_an_existing_istream_with_its_key_grants_writing_through_the_key_not_reading():
    def build_(stack: Stack) -> None:
        key = kms.Key.from_key_arn(stack, "TheirKey", "arn:aws:kms:us-east-1:111122223333:key/abc-123")
        theirs = kinesis.Stream.from_stream_attributes(
            stack, "Theirs", stream_arn=ORDERS_ARN, encryption_key=key
        )
        stream = Stream.from_stream(stack, "Orders", theirs)
        ProducerApi(stack, "Api", streams=[stream], layers=Layers(stack, "Layers"))

    template = alone(build_)
    key_arn = "arn:aws:kms:us-east-1:111122223333:key/abc-123"
    assert actions_on(template, key_arn) == {"kms:GenerateDataKey"}
    [function] = resources(template, "AWS::Lambda::Function").values()
    assert (
        '"orders": {"streamName": "orders"'
        in function["Properties"]["Environment"]["Variables"]["SHARDLINE_STREAMS"]
    ), "routed under the name from its ARN"


@pytest.mark.parametrize(
    ("props", "message"),
    [
        ({"shards": 0}, r"Stream 'Orders': shards: must be an integer within 1\.\.500"),
        ({"retention_hours": 12}, r"Stream 'Orders': retention_hours"),
        ({"max_record_size_kib": 20000}, r"Stream 'Orders': max_record_size_kib"),
        ({"encryption": "none"}, r"Stream 'Orders': encryption"),
        (
            {"stream_props": {"encryption": kinesis.StreamEncryption.UNENCRYPTED}},
            r"Stream 'Orders': stream_props\.encryption: an unencrypted stream is refused",
        ),
    ],
)
def test_a_stream_it_cannot_make_safely_is_refused_naming_the_prop(props, message):
    with pytest.raises(ValueError, match=message):
        alone(lambda stack: Stream(stack, "Orders", **props), nag=False)


def test_stream_props_reach_the_stream():
    template = alone(
        lambda stack: Stream(
            stack, "Orders", shards=1, stream_props={"shard_level_metrics": [kinesis.ShardLevelMetrics.ALL]}
        )
    )
    [stream] = resources(template, "AWS::Kinesis::Stream").values()
    assert stream["Properties"]["DesiredShardLevelMetrics"] == ["ALL"]


def test_a_configured_stream_may_name_an_existing_one_which_gets_grants_and_no_stream():
    context = default_context()
    context["shardline"]["streams"][0] = {
        "name": "events",
        "arn": ORDERS_ARN,
        "keyArn": "arn:aws:kms:us-east-1:111122223333:key/abc-123",
        "retentionHours": 48,
    }
    app, stack = build(context)
    app.synth()  # cdk-nag too
    template = Template.from_stack(stack)
    assert resources(template, "AWS::Kinesis::Stream") == {}
    assert {"kinesis:PutRecords", "kinesis:ListShards"} <= actions_on(template, ORDERS_ARN)
    mappings = resources(template, "AWS::Lambda::EventSourceMapping").values()
    assert [m["Properties"]["EventSourceArn"] for m in mappings] == [ORDERS_ARN, ORDERS_ARN]
    key = "arn:aws:kms:us-east-1:111122223333:key/abc-123"
    assert actions_on(template, key) == {"kms:GenerateDataKey", "kms:Decrypt"}


@pytest.mark.parametrize(
    ("stream", "message"),
    [
        ({"name": "events", "arn": "orders"}, r"\.arn: not a Kinesis stream ARN"),
        ({"name": "events", "arn": ORDERS_ARN, "shards": 2}, r"\.shards: a new stream's setting"),
        ({"name": "events", "arn": ORDERS_ARN, "encryption": "aws-managed"}, r"\.encryption: a new stream's"),
        ({"name": "events", "arn": ORDERS_ARN, "keyArn": "alias/x"}, r"\.keyArn: not a KMS key ARN"),
    ],
)
def test_an_existing_stream_s_keys_are_checked_naming_the_key(stream, message):
    context = default_context()["shardline"]
    context["streams"][0] = stream
    with pytest.raises(ConfigError, match=rf"^shardline\.streams\[0\]{message}"):
        load_config(context)
