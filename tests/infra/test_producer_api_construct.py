"""`shardline.cdk.ProducerApi` on its own (issue 28, item 1): routes for the streams it is given,
write-only grants, secure defaults, the overrides a platform team makes, and the API's refusals of
today for its props."""

from __future__ import annotations

import json
from typing import Any

import pytest
from aws_cdk import RemovalPolicy, Stack

from shardline.cdk import ApiClient, Layers, ProducerApi, Stream
from tests.support.cdk import ORDERS_ARN, actions_on, alone, resources


def api_in(stack: Stack, **props: Any) -> ProducerApi:
    orders = Stream.from_stream_arn(stack, "Orders", ORDERS_ARN)
    payments = Stream(
        stack, "Payments", stream_name="payments", shards=1, removal_policy=RemovalPolicy.DESTROY
    )
    return ProducerApi(
        stack, "Api", streams={"orders": orders, "pay": payments}, layers=Layers(stack, "Layers"), **props
    )


def test_each_route_reaches_the_function_which_only_writes_its_streams():
    template = alone(lambda stack: api_in(stack))
    [function] = resources(template, "AWS::Lambda::Function").values()
    streams = function["Properties"]["Environment"]["Variables"]["SHARDLINE_STREAMS"]
    assert json.loads(streams) == {
        "orders": {"streamName": "orders", "maxRecordSize": 1048576, "explicitHashKeys": False},
        "pay": {"streamName": "payments", "maxRecordSize": 1048576, "explicitHashKeys": False},
    }
    assert actions_on(template, ORDERS_ARN) == {"kinesis:PutRecords", "kinesis:ListShards"}
    [key_id] = [lid for lid in resources(template, "AWS::KMS::Key") if lid.startswith("Payments")]
    assert actions_on(template, {"Fn::GetAtt": [key_id, "Arn"]}) == {"kms:GenerateDataKey"}
    [method] = [
        m
        for m in resources(template, "AWS::ApiGateway::Method").values()
        if m["Properties"]["HttpMethod"] == "POST"
    ]
    assert method["Properties"]["AuthorizationType"] == "AWS_IAM"
    [stage] = resources(template, "AWS::ApiGateway::Stage").values()
    assert stage["Properties"]["StageName"] == "v1"
    assert resources(template, "AWS::ApiGateway::RestApi")
    assert len([lid for lid in resources(template, "AWS::KMS::Key") if lid.startswith("ApiLogsKey")]) == 1, (
        "no log key given: it makes its own"
    )


def test_overrides_reach_the_function_the_stage_and_the_logs():
    template = alone(
        lambda stack: api_in(
            stack,
            memory_mb=1024,
            timeout_seconds=20,
            throttle_rate=50,
            throttle_burst=60,
            reserved_concurrency=9,
            log_retention_days=90,
            removal_policy=RemovalPolicy.DESTROY,
            tags={"team": "orders"},
            function_props={"description": "orders producer"},
        )
    )
    [function] = resources(template, "AWS::Lambda::Function").values()
    props = function["Properties"]
    assert (props["MemorySize"], props["Timeout"], props["ReservedConcurrentExecutions"]) == (1024, 20, 9)
    assert props["Description"] == "orders producer" and {"Key": "team", "Value": "orders"} in props["Tags"]
    groups = resources(template, "AWS::Logs::LogGroup").values()
    assert {g["Properties"]["RetentionInDays"] for g in groups} == {90}
    assert {g["DeletionPolicy"] for g in groups} == {"Delete"}
    [stage] = resources(template, "AWS::ApiGateway::Stage").values()
    [setting] = stage["Properties"]["MethodSettings"]
    assert (setting["ThrottlingRateLimit"], setting["ThrottlingBurstLimit"]) == (50, 60)


def test_api_key_clients_get_their_own_key_and_plan():
    template = alone(lambda stack: api_in(stack, auth="api-key", clients=[ApiClient("shop", 10, 20, 100000)]))
    assert len(resources(template, "AWS::ApiGateway::ApiKey")) == 1
    [plan] = resources(template, "AWS::ApiGateway::UsagePlan").values()
    assert plan["Properties"]["Quota"] == {"Limit": 100000, "Period": "DAY"}


@pytest.mark.parametrize(
    ("props", "message"),
    [
        ({"auth": "api-key"}, r"clients: auth 'api-key' needs at least one client"),
        ({"auth": "open"}, r"auth: must be one of iam, api-key"),
        (
            {"auth": "api-key", "allowed_principals": ["111122223333"], "clients": [ApiClient("a", 1, 1, 1)]},
            r"allowed_principals: needs auth 'iam'",
        ),
        ({"allowed_principals": ["orders-service"]}, r"allowed_principals\[0\]: not an IAM principal"),
        ({"allowed_organization": "acme"}, r"allowed_organization: not an organization id"),
        ({"clients": [ApiClient("a", 1000, 1, 1)]}, r"clients\[0\]\.throttle_rate: a client's throttle"),
        ({"max_body_bytes": 10**8}, r"max_body_bytes: must be within"),
        ({"timeout_seconds": 60}, r"timeout_seconds: must be within 1\.\.29"),
        ({"function_props": {"environment": {"SHARDLINE_STREAMS": "{}"}}}, r"function_props\.environment"),
    ],
)
def test_today_s_api_refusals_hold_for_the_construct_naming_the_prop(props, message):
    with pytest.raises(ValueError, match=rf"^ProducerApi 'Api': {message}"):
        alone(lambda stack: api_in(stack, **props), nag=False)


def test_issue_39_the_idempotency_table_is_made_or_taken_with_exactly_its_two_calls_granted():
    """Made: on demand, PITR, TTL `expiresAt`, encrypted with a key of its own, hashes kept for the
    longest stream retention + 14 days + a day (as the consumers' guards). Taken (the team's own
    table and key): the function's environment names it and the same two calls (and Decrypt
    through DynamoDB) are granted on it."""
    from aws_cdk import aws_dynamodb as dynamodb
    from aws_cdk import aws_kms as kms

    template = alone(lambda stack: api_in(stack))
    [(lid, made)] = [(lid, t) for lid, t in resources(template, "AWS::DynamoDB::Table").items()]
    props = made["Properties"]
    assert props["KeySchema"] == [{"AttributeName": "scopedId", "KeyType": "HASH"}]
    assert props["TimeToLiveSpecification"] == {"AttributeName": "expiresAt", "Enabled": True}
    assert props["BillingMode"] == "PAY_PER_REQUEST"
    assert props["SSESpecification"]["KMSMasterKeyId"]["Fn::GetAtt"][0].startswith("ApiIdsKey")
    [function] = resources(template, "AWS::Lambda::Function").values()
    variables = function["Properties"]["Environment"]["Variables"]
    assert variables["IDEMPOTENCY_TABLE"] == {"Ref": lid}
    assert variables["IDEMPOTENCY_TTL_SECONDS"] == str(16 * 86_400)  # both streams keep 24 h
    assert actions_on(template, {"Fn::GetAtt": [lid, "Arn"]}) == {
        "dynamodb:BatchGetItem",
        "dynamodb:BatchWriteItem",
        "dynamodb:UpdateItem",  # issue 40: the per-caller counters (on by default in IAM mode)
    }

    def own_table(stack: Stack) -> None:
        key = kms.Key(stack, "TeamKey", enable_key_rotation=True)
        table = dynamodb.Table(
            stack, "TeamIds",
            partition_key=dynamodb.Attribute(name="scopedId", type=dynamodb.AttributeType.STRING),
            billing_mode=dynamodb.BillingMode.PAY_PER_REQUEST,
            encryption=dynamodb.TableEncryption.CUSTOMER_MANAGED, encryption_key=key,
            time_to_live_attribute="expiresAt",
            point_in_time_recovery_specification=dynamodb.PointInTimeRecoverySpecification(
                point_in_time_recovery_enabled=True
            ),
        )  # fmt: skip
        api_in(stack, idempotency_table=table)

    template = alone(own_table)
    [lid] = resources(template, "AWS::DynamoDB::Table")  # the team's, and no table of its own
    assert lid.startswith("TeamIds")
    [function] = resources(template, "AWS::Lambda::Function").values()
    assert function["Properties"]["Environment"]["Variables"]["IDEMPOTENCY_TABLE"] == {"Ref": lid}
    assert actions_on(template, {"Fn::GetAtt": [lid, "Arn"]}) == {
        "dynamodb:BatchGetItem",
        "dynamodb:BatchWriteItem",
        "dynamodb:UpdateItem",
    }
    [key_id] = [k for k in resources(template, "AWS::KMS::Key") if k.startswith("TeamKey")]
    assert actions_on(template, {"Fn::GetAtt": [key_id, "Arn"]}) == {"kms:Decrypt"}
