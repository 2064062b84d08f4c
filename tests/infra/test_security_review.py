"""Issue 40's security review, in the constructs: each item a test named after it, on the default app's
template and on a worker group's (the one construct the default app does not use)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from aws_cdk import aws_dynamodb as dynamodb

from shardline.cdk import ConfigError, Sink, Stream, WorkerGroup, load_config
from tests.support.cdk import ORDERS_ARN, alone, default_context

#: Services whose AssumeRole of a role is not documented to carry aws:SourceAccount / aws:SourceArn,
#: so a trust condition on them would refuse the service itself: why, and where AWS says so.
NOT_SENT = {
    "lambda.amazonaws.com": "Lambda's execution-role page asks for the service principal only, and "
    "documents aws:SourceArn only where the function is the target (its resource policy): "
    "https://docs.aws.amazon.com/lambda/latest/dg/lambda-intro-execution-role.html, "
    "https://docs.aws.amazon.com/lambda/latest/dg/permissions-source-function-arn.html",
}
#: Roles of a service that sends the keys for its other roles, whose own page does not say it does.
NOT_SENT_FOR = {
    "ExecutionRole": "ECS's task execution role page shows a trust naming ecs-tasks.amazonaws.com alone; "
    "the confused-deputy conditions are documented for the task role (task-iam-roles.html), which has them: "
    "https://docs.aws.amazon.com/AmazonECS/latest/developerguide/task_execution_IAM_role.html",
}


@pytest.fixture(scope="module")
def app(synthesized) -> dict[str, Any]:
    _, path = synthesized
    resources: dict[str, Any] = json.loads(Path(path).read_text())["Resources"]
    return resources


@pytest.fixture(scope="module")
def workers() -> dict[str, Any]:
    def build(stack: Any) -> None:
        sink = Sink.create(dynamodb.Attribute(name="pk", type=dynamodb.AttributeType.STRING))
        stream = Stream.from_stream_arn(stack, "Orders", ORDERS_ARN)
        WorkerGroup(
            stack, "Workers", name="workers", stream=stream, code="functions/event_sink", sinks=[sink]
        )

    resources: dict[str, Any] = alone(build).to_json()["Resources"]
    return resources


def _of(resources: dict[str, Any], kind: str) -> dict[str, Any]:
    return {lid: r for lid, r in resources.items() if r["Type"] == kind}


def _listed(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def test_kms_via_service_on_the_producer_s_key_grant(app):
    """The producer writes the encrypted stream: GenerateDataKey on its key only through Kinesis."""
    [stream_key] = [
        r["Properties"]["StreamEncryption"]["KeyId"]["Fn::GetAtt"][0]
        for r in _of(app, "AWS::Kinesis::Stream").values()
    ]
    [role] = [lid for lid in _of(app, "AWS::IAM::Role") if lid.startswith("ProducerFunction")]
    on_key = [
        statement
        for policy in _of(app, "AWS::IAM::Policy").values()
        if {"Ref": role} in policy["Properties"]["Roles"]
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]
        if {"Fn::GetAtt": [stream_key, "Arn"]} in _listed(statement["Resource"])
    ]
    assert [s["Action"] for s in on_key] == ["kms:GenerateDataKey"]
    via = on_key[0]["Condition"]["StringEquals"]["kms:ViaService"]
    assert via == {"Fn::Join": ["", ["kinesis.", {"Ref": "AWS::Region"}, ".amazonaws.com"]]}


@pytest.mark.parametrize("which", ["app", "workers"])
def test_aws_source_account_on_every_service_trust_policy(which, request):
    resources = request.getfixturevalue(which)
    checked = []
    for lid, role in _of(resources, "AWS::IAM::Role").items():
        for statement in role["Properties"]["AssumeRolePolicyDocument"]["Statement"]:
            for service in _listed(statement.get("Principal", {}).get("Service", [])):
                if service in NOT_SENT or any(part in lid for part in NOT_SENT_FOR):
                    assert "Condition" not in statement, f"{lid}: {service} sends no aws:SourceAccount"
                    continue
                condition = statement.get("Condition", {}).get("StringEquals", {})
                assert condition.get("aws:SourceAccount") == {"Ref": "AWS::AccountId"}, (lid, statement)
                checked.append(service)
    assert checked, "a service trust with the condition was seen"


@pytest.mark.parametrize("which", ["app", "workers"])
def test_no_aws_managed_policy_attached_anywhere(which, request):
    """Not on a role (API Gateway's account logging role included), and no custom resource whose
    provider brings one (CDK's restrictDefaultSecurityGroup: AWSLambdaBasicExecutionRole)."""
    resources = request.getfixturevalue(which)
    managed = {
        lid: r["Properties"]["ManagedPolicyArns"]
        for lid, r in _of(resources, "AWS::IAM::Role").items()
        if r["Properties"].get("ManagedPolicyArns")
    }
    assert managed == {}
    assert not [lid for lid, r in resources.items() if r["Type"].startswith("Custom::")]
    assert not _of(resources, "AWS::IAM::ManagedPolicy")


def test_no_aws_managed_policy_the_api_logging_role_writes_logs_of_its_account_and_region_only(app):
    [role] = [
        r for lid, r in _of(app, "AWS::IAM::Role").items() if lid.startswith("ProducerApiCloudWatchRole")
    ]
    [policy] = role["Properties"]["Policies"]
    [statement] = policy["PolicyDocument"]["Statement"]
    assert not [a for a in statement["Action"] if a.startswith("logs:Get") or a.startswith("logs:Filter")]
    assert "AWS::AccountId" in json.dumps(statement["Resource"]) and statement["Resource"] != "*"


def _context(**api: Any) -> dict[str, Any]:
    context = default_context()["shardline"]
    context["api"] = {**context["api"], **api}
    return context


def test_a_stage_that_retains_data_requires_allowed_principals_or_allowed_organization():
    with pytest.raises(
        ConfigError, match=r"stage 'prod' retains its data.*allowedPrincipals.*allowedOrganization"
    ):
        load_config(_context(), stage="prod")
    assert load_config(_context(allowedOrganization="o-a1b2c3d4e5"), stage="prod").api.allowed_organization
    principal = "arn:aws:iam::123456789012:role/writer"
    assert load_config(_context(allowedPrincipals=[principal]), stage="prod").api.allowed_principals
    assert not load_config(_context(), stage="dev").retain_data  # a stage that keeps nothing: as before


def test_explicit_hash_keys_off_by_default_for_api_routes(app):
    [producer] = [
        r for lid, r in _of(app, "AWS::Lambda::Function").items() if lid.startswith("ProducerFunction")
    ]
    routes = json.loads(producer["Properties"]["Environment"]["Variables"]["SHARDLINE_STREAMS"])
    assert routes and all(route["explicitHashKeys"] is False for route in routes.values())
    context = default_context()["shardline"]
    context["streams"][0]["explicitHashKeys"] = True  # the option that turns them on
    assert load_config(context).streams[0].explicit_hash_keys is True


@pytest.mark.parametrize("which", ["app", "workers"])
def test_key_policies_with_explicit_key_users(which, request):
    """Every role granted a key of the stack through a service is named in that key's policy as a key
    user, with the same actions and kms:ViaService; the root's statement stays (administration)."""
    resources = request.getfixturevalue(which)
    keys = _of(resources, "AWS::KMS::Key")
    users: dict[tuple[str, str], set[str]] = {}  # (key, role) -> actions the key policy names the role for
    for lid, key in keys.items():
        statements = key["Properties"]["KeyPolicy"]["Statement"]
        assert any("root" in json.dumps(s.get("Principal")) for s in statements), f"{lid}: root kept"
        for statement in statements:
            for role in _listed(statement.get("Principal", {}).get("AWS", [])):
                if isinstance(role, dict) and "Fn::GetAtt" in role:
                    assert "kms:ViaService" in statement["Condition"]["StringEquals"], statement
                    named = users.setdefault((lid, role["Fn::GetAtt"][0]), set())
                    named.update(_listed(statement["Action"]))
    granted = 0
    for policy in _of(resources, "AWS::IAM::Policy").values():
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
            for target in _listed(statement["Resource"]):
                key = target.get("Fn::GetAtt", [None])[0] if isinstance(target, dict) else None
                if key not in keys:
                    continue
                for role in policy["Properties"]["Roles"]:
                    named = users.get((key, role["Ref"]), set())
                    assert set(_listed(statement["Action"])) <= named, (key, role, statement["Action"], named)
                    granted += 1
    assert granted and users, "the roles' key grants were seen"
