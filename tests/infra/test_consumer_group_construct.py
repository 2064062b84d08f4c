"""`shardline.cdk.ConsumerGroup` on its own (issue 28, item 1): the team's handler code and its own
sink tables (any key schema) reach the function's environment and grants, and nothing more; a group
without a sink has neither; the props a platform team overrides reach the resources; today's
refusals hold for the construct's props and after `mapping_props`/`function_props`."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from aws_cdk import Duration, RemovalPolicy, Stack
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sqs as sqs
from aws_cdk.assertions import Template

from shardline.aws_lambda import ConsumerEnvironment, SinkDeclaration
from shardline.cdk import ConsumerGroup, Layers, Sink, Stream
from shardline.cdk._consumer_group import LEASE_ACTIONS
from shardline.consumer._sink_writes import ALL_SINK_WRITES, sink_actions
from tests.support.cdk import ORDERS_ARN, actions_on, alone, placeholders, resources, statements

#: A sink declared with no `writes`: every kind the consumer's API can produce.
SINK_ACTIONS = sink_actions(ALL_SINK_WRITES)
INLINE = lambda_.Code.from_inline("def handler(event, context):\n    return {}\n")
STRING, NUMBER = dynamodb.AttributeType.STRING, dynamodb.AttributeType.NUMBER


def orders_table(stack: Stack, *, encrypted: bool = False) -> dynamodb.Table:
    return dynamodb.Table(
        stack,
        "OrdersTable",
        partition_key=dynamodb.Attribute(name="tenant", type=STRING),
        sort_key=dynamodb.Attribute(name="orderId", type=NUMBER),
        point_in_time_recovery_specification=dynamodb.PointInTimeRecoverySpecification(
            point_in_time_recovery_enabled=True
        ),
        encryption=dynamodb.TableEncryption.CUSTOMER_MANAGED if encrypted else None,
    )


def group_in(stack: Stack, **props: Any) -> ConsumerGroup:
    stream = Stream.from_stream_arn(stack, "Orders", ORDERS_ARN)
    defaults: dict[str, Any] = {"code": INLINE, "handler": "index.handler"}
    return ConsumerGroup(
        stack,
        "Writer",
        name="order-writer",
        stream=stream,
        layers=Layers(stack, "Layers"),
        **{**defaults, **props},
    )


def variables(template: Template) -> dict[str, Any]:
    [function] = [
        f
        for f in resources(template, "AWS::Lambda::Function").values()
        if f["Properties"]["Handler"] == "index.handler"
    ]
    found: dict[str, Any] = function["Properties"]["Environment"]["Variables"]
    return found


def table_id(template: Template, first_key: str) -> str:
    [lid] = [
        lid
        for lid, table in resources(template, "AWS::DynamoDB::Table").items()
        if table["Properties"]["KeySchema"][0]["AttributeName"] == first_key
    ]
    return lid


def test_the_team_s_sink_table_reaches_the_environment_and_its_grants_and_nothing_more():
    template = alone(
        lambda stack: group_in(
            stack, sinks=[Sink(orders_table(stack), holds="records", id_attribute="orderEventId")]
        )
    )
    sink, leases = table_id(template, "tenant"), table_id(template, "leaseKey")
    assert len(resources(template, "AWS::DynamoDB::Table")) == 2, "the team's and the lease table: no other"
    env = variables(template)
    assert env["SINK_TABLE"] == {"Ref": sink}
    declared = ConsumerEnvironment.from_environ({k: placeholders(v) for k, v in env.items()}).sinks
    assert declared == (
        SinkDeclaration(table="token-resolved-at-deploy-time", holds="records", id_attribute="orderEventId"),
    )
    assert {"Ref": sink} in env["SHARDLINE_SINKS"]["Fn::Join"][1]
    assert actions_on(template, {"Fn::GetAtt": [sink, "Arn"]}) == set(SINK_ACTIONS)
    assert actions_on(template, {"Fn::GetAtt": [leases, "Arn"]}) == set(LEASE_ACTIONS)
    mentioning = [s for s in statements(template) if sink in json.dumps(s["Resource"])]
    assert len(mentioning) == 1, "one statement on the sink: its actions, nothing else"


def test_a_sink_table_with_its_own_key_is_decrypted_through_dynamodb_only():
    template = alone(lambda stack: group_in(stack, sinks=[Sink(orders_table(stack, encrypted=True))]))
    sink = table_id(template, "tenant")
    [table] = [t for lid, t in resources(template, "AWS::DynamoDB::Table").items() if lid == sink]
    key_arn = table["Properties"]["SSESpecification"]["KMSMasterKeyId"]
    [statement] = [s for s in statements(template) if key_arn in (s["Resource"], *s["Resource"])]
    assert statement["Action"] == "kms:Decrypt"  # (merged with the group key's own Decrypt via DynamoDB)
    assert "dynamodb." in json.dumps(statement["Condition"])
    assert "SHARDLINE_SINKS" not in variables(template), "holds=None: nothing declared"


def test_a_group_without_a_sink_has_no_sink_table_no_sink_table_variable_and_no_sink_grants():
    template = alone(lambda stack: group_in(stack))
    env = variables(template)
    assert "SINK_TABLE" not in env and "SHARDLINE_SINKS" not in env
    assert list(resources(template, "AWS::DynamoDB::Table")) == [table_id(template, "leaseKey")]
    allowed = [s["Action"] if isinstance(s["Action"], list) else [s["Action"]] for s in statements(template)]
    dynamo = {action for actions in allowed for action in actions if action.startswith("dynamodb:")}
    assert dynamo == set(LEASE_ACTIONS)


def test_sinks_the_group_creates_and_the_team_s_side_by_side_the_first_is_sink_table():
    def build_(stack: Stack) -> None:
        counts = Sink.create(dynamodb.Attribute(name="partitionKey", type=STRING), holds="counts",
                             time_to_live_attribute="expiresAt")  # fmt: skip
        group_in(stack, sinks=[counts, Sink(orders_table(stack))])

    template = alone(build_)
    created = table_id(template, "partitionKey")
    props = resources(template, "AWS::DynamoDB::Table")[created]["Properties"]
    assert props["TimeToLiveSpecification"] == {"AttributeName": "expiresAt", "Enabled": True}
    assert props["SSESpecification"]["SSEEnabled"] is True and props["PointInTimeRecoverySpecification"]
    env = variables(template)
    assert env["SINK_TABLE"] == {"Ref": created}
    text = placeholders(env["SHARDLINE_SINKS"])
    assert json.loads(text) == [
        {"table": "token-resolved-at-deploy-time", "holds": "counts", "keyAttribute": "partitionKey",
         "countAttribute": "count"}
    ]  # fmt: skip
    assert actions_on(template, {"Fn::GetAtt": [table_id(template, "tenant"), "Arn"]}) == set(SINK_ACTIONS)


def test_a_folder_of_handler_code_is_an_asset(tmp_path: Path):
    (tmp_path / "app.py").write_text("def handler(event, context):\n    return {}\n")
    template = alone(lambda stack: group_in(stack, code=tmp_path, handler="app.handler"))
    [function] = [
        f
        for f in resources(template, "AWS::Lambda::Function").values()
        if f["Properties"]["Handler"] == "app.handler"
    ]
    assert "S3Key" in function["Properties"]["Code"]


def test_overrides_reach_the_function_its_logs_tables_queues_and_tags():
    template = alone(
        lambda stack: group_in(
            stack,
            memory_mb=1024,
            timeout_seconds=120,
            log_retention_days=7,
            removal_policy=RemovalPolicy.DESTROY,
            dead_letters_removal_policy=RemovalPolicy.DESTROY,
            reserved_concurrency=7,
            tags={"cost-centre": "orders"},
            function_props={"description": "order writer", "environment": {"TENANT_MODE": "strict"}},
            mapping_props={"batch_size": 500, "max_batching_window": Duration.seconds(5)},
        )
    )
    [function] = [
        f["Properties"]
        for f in resources(template, "AWS::Lambda::Function").values()
        if f["Properties"]["Handler"] == "index.handler"
    ]
    assert (function["MemorySize"], function["Timeout"], function["ReservedConcurrentExecutions"]) == (
        1024,
        120,
        7,
    )
    assert function["Description"] == "order writer"
    assert function["Environment"]["Variables"]["TENANT_MODE"] == "strict"
    assert {"Key": "cost-centre", "Value": "orders"} in function["Tags"]
    [log_group] = [g for g in resources(template, "AWS::Logs::LogGroup").values()]
    assert log_group["Properties"]["RetentionInDays"] == 7 and log_group["DeletionPolicy"] == "Delete"
    [leases] = resources(template, "AWS::DynamoDB::Table").values()
    assert leases["DeletionPolicy"] == "Delete" and leases["Properties"]["DeletionProtectionEnabled"] is False
    assert {q["DeletionPolicy"] for q in resources(template, "AWS::SQS::Queue").values()} == {"Delete"}
    [mapping] = resources(template, "AWS::Lambda::EventSourceMapping").values()
    assert (mapping["Properties"]["BatchSize"], mapping["Properties"]["MaximumBatchingWindowInSeconds"]) == (
        500,
        5,
    )


def test_by_default_the_group_keeps_its_data_and_the_mapping_has_shardline_s_safe_settings():
    template = alone(lambda stack: group_in(stack))
    [leases] = resources(template, "AWS::DynamoDB::Table").values()
    assert leases["DeletionPolicy"] == "Retain" and leases["Properties"]["DeletionProtectionEnabled"] is True
    [mapping] = resources(template, "AWS::Lambda::EventSourceMapping").values()
    props = mapping["Properties"]
    assert props["BisectBatchOnFunctionError"] is True
    assert props["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
    assert props["ParallelizationFactor"] == 1 and props["MaximumRetryAttempts"] == -1
    assert props["MaximumRecordAgeInSeconds"] == 24 * 3600 - 3600, "below the stream's retention"
    assert "OnFailure" in props["DestinationConfig"]
    [function] = [
        f
        for f in resources(template, "AWS::Lambda::Function").values()
        if f["Properties"]["Handler"] == "index.handler"
    ]
    assert function["Properties"]["ReservedConcurrentExecutions"] == 10, "an on-demand stream's reservation"
    assert resources(template, "AWS::S3::Bucket"), "an access-log bucket made for the dead-letter bucket"


def test_more_grants_are_the_team_s_on_group_function():
    def build_(stack: Stack) -> None:
        group = group_in(stack)
        sqs.Queue(stack, "Outbox", enforce_ssl=True).grant_send_messages(group.function)

    template = alone(build_, nag=False)
    assert any("sqs:SendMessage" in json.dumps(s) and "Outbox" in json.dumps(s) for s in statements(template))


AT = datetime(2026, 11, 1, tzinfo=UTC)


@pytest.mark.parametrize(
    ("props", "message"),
    [
        ({"parallelization": 2}, r"parallelization: must be 1, got 2"),
        ({"mapping_props": {"parallelization_factor": 3}}, r"parallelization: must be 1, got 3"),
        (
            {"retry_attempts": 3},
            r"retry_attempts: 3 must be -1 \(until the record age\) or above maxAttempts",
        ),
        ({"mapping_props": {"retry_attempts": 2}}, r"retry_attempts: 2 must be -1"),
        ({"max_record_age_seconds": 24 * 3600}, r"max_record_age_seconds: 86400 must be below the stream's"),
        ({"mapping_props": {"max_record_age": Duration.days(2)}}, r"max_record_age_seconds: 172800 must be"),
        ({"max_attempts": 1}, r"max_attempts: must be at least 2, got 1"),
        ({"starting_position": "AT_TIMESTAMP"}, r"starting_position_timestamp: required with AT_TIMESTAMP"),
        ({"starting_position_timestamp": AT}, r"starting_position_timestamp: only with AT_TIMESTAMP"),
        (
            {"starting_position": "AT_TIMESTAMP", "starting_position_timestamp": datetime(2026, 11, 1)},
            r"starting_position_timestamp: a datetime with its offset",
        ),
        ({"starting_position": "AT_SEQUENCE_NUMBER"}, r"starting_position: must be one of"),
        ({"batch_size": 20000}, r"batch_size: must be within 1\.\.10000"),
        ({"timeout_seconds": 1000}, r"timeout_seconds: must be within 3\.\.900"),
        (
            {"mapping_props": {"report_batch_item_failures": False}},
            r"mapping_props: report_batch_item_failures and bisect",
        ),
        ({"mapping_props": {"event_source_arn": ORDERS_ARN}}, r"mapping_props\.event_source_arn"),
        ({"function_props": {"runtime": lambda_.Runtime.PYTHON_3_13}}, r"function_props\.runtime: must stay"),
        (
            {"function_props": {"environment": {"LEASE_TABLE": "x"}}},
            r"function_props\.environment: LEASE_TABLE \(set from what the construct makes or derives\) "
            r"are shardline's own",
        ),
        ({"failure_detail": "everything"}, r"failure_detail: must be one of fingerprint, message"),
        ({"time_margin_seconds": 60}, r"time_margin_seconds: must be within 0\.1\.\.59"),
        ({"log_retention_days": 5000}, r"log_retention_days: must be within 1\.\.3653"),
    ],
)
def test_today_s_refusals_hold_for_the_construct_naming_the_group_and_the_prop(props, message):
    with pytest.raises(ValueError, match=rf"ConsumerGroup 'order-writer': {message}"):
        alone(lambda stack: group_in(stack, **props), nag=False)


def test_6_failure_detail_and_time_margin_are_props_that_reach_the_function():
    template = alone(lambda stack: group_in(stack, failure_detail="message", time_margin_seconds=5))
    assert (variables(template)["FAILURE_DETAIL"], variables(template)["TIME_MARGIN"]) == ("message", "5")
    default = alone(lambda stack: group_in(stack))
    assert (variables(default)["FAILURE_DETAIL"], variables(default)["TIME_MARGIN"]) == ("fingerprint", "2")


@pytest.mark.parametrize(
    ("variable", "prop"),
    [
        ("FAILURE_DETAIL", "failure_detail"),
        ("TIME_MARGIN", "time_margin_seconds"),
        ("MAX_ATTEMPTS", "max_attempts"),
    ],
)
def test_6_extra_environment_that_would_set_shardline_s_variable_is_refused_naming_the_prop(variable, prop):
    with pytest.raises(
        ValueError, match=rf"function_props\.environment: {variable} \(set by {prop}=\)"
    ) as refused:
        alone(lambda stack: group_in(stack, function_props={"environment": {variable: "x"}}), nag=False)
    assert prop in ConsumerGroup.__init__.__code__.co_varnames, f"the refusal points at {prop}, a real prop"
    assert "are shardline's own; set them through its props" in str(refused.value)


def test_6_the_configuration_s_failure_detail_reaches_the_group_and_a_wrong_one_is_refused():
    from shardline.cdk._config import load
    from shardline.cdk._config_reader import ConfigError
    from tests.support.cdk import default_context

    context = default_context()
    context["shardline"]["consumerGroups"][0]["failureDetail"] = "message"
    groups = load(context["shardline"]).consumer_groups
    assert [group.failure_detail for group in groups][:2] == ["message", "fingerprint"]
    context["shardline"]["consumerGroups"][0]["failureDetail"] = "all"
    with pytest.raises(ConfigError, match=r"consumerGroups\[0\]\.failureDetail: must be one of"):
        load(context["shardline"])


def test_a_group_may_start_at_a_time():
    template = alone(
        lambda stack: group_in(stack, starting_position="AT_TIMESTAMP", starting_position_timestamp=AT)
    )
    [mapping] = resources(template, "AWS::Lambda::EventSourceMapping").values()
    assert mapping["Properties"]["StartingPosition"] == "AT_TIMESTAMP"
    assert mapping["Properties"]["StartingPositionTimestamp"] == AT.timestamp()


@pytest.mark.parametrize(
    ("sink", "message"),
    [
        (lambda stack: Sink(), r"either a table or"),
        (
            lambda stack: Sink(orders_table(stack), holds="rows"),
            r"Sink: holds must be records or counts, got 'rows'",
        ),  # type: ignore[arg-type]
        (lambda stack: Sink(orders_table(stack), id_attribute=""), r"id_attribute must be a non-empty"),
    ],
)
def test_a_sink_that_cannot_be_declared_is_refused(sink, message):
    with pytest.raises(ValueError, match=message):
        alone(lambda stack: group_in(stack, sinks=[sink(stack)]), nag=False)
