"""Issue 25, item 3: who may produce — the API's resource policy from configuration, a key and a
usage plan per client, and the caller's identity in the access log."""

from __future__ import annotations

import copy
import json

import pytest
from aws_cdk.assertions import Template

from app import build
from shardline.cdk._config import ConfigError, load
from shardline.cdk._producer_api import ACCESS_LOG_FIELDS
from tests.support.cdk import default_context, resources

ROLE = "arn:aws:iam::111122223333:role/orders-service"
ORG = "o-a1b2c3d4e5"


def synth(tmp_path, **api) -> dict:
    context = copy.deepcopy(default_context())
    context["shardline"]["api"] |= api
    app, stack = build(context, outdir=str(tmp_path))
    app.synth()  # cdk-nag runs: every finding acknowledged or fixed
    return Template.from_stack(stack).to_json()["Resources"]


def one(resources_: dict, kind: str) -> dict:
    (resource,) = [r for r in resources_.values() if r["Type"] == kind]
    return resource["Properties"]


def statements(resources_: dict) -> dict[str, dict]:
    return {s["Sid"]: s for s in one(resources_, "AWS::ApiGateway::RestApi")["Policy"]["Statement"]}


def test_3_by_default_only_this_accounts_principals_may_invoke(template):
    (api,) = resources(template, "AWS::ApiGateway::RestApi").values()
    policy = {s["Sid"]: s for s in api["Properties"]["Policy"]["Statement"]}
    assert set(policy) == {"AllowedPrincipals", "NoOneElse"}
    assert policy["AllowedPrincipals"]["Effect"] == "Allow"
    assert ":root" in json.dumps(policy["AllowedPrincipals"]["Principal"])
    deny = policy["NoOneElse"]
    assert (deny["Effect"], deny["Principal"], deny["Action"]) == ("Deny", {"AWS": "*"}, "execute-api:Invoke")
    assert deny["Condition"] == {"StringNotEquals": {"aws:PrincipalAccount": [{"Ref": "AWS::AccountId"}]}}


def test_3_configured_principals_and_organization_are_the_only_callers(tmp_path):
    policy = statements(synth(tmp_path, allowedPrincipals=[ROLE, "444455556666"], allowedOrganization=ORG))
    assert set(policy) == {"AllowedPrincipals", "AllowedOrganization", "NoOneElse"}
    assert policy["AllowedOrganization"]["Condition"] == {"StringEquals": {"aws:PrincipalOrgID": ORG}}
    # Refused: a caller that is neither the role, nor of the account, nor of the organization.
    assert policy["NoOneElse"]["Condition"] == {
        "ArnNotLike": {"aws:PrincipalArn": [ROLE]},
        "StringNotEquals": {"aws:PrincipalAccount": ["444455556666"], "aws:PrincipalOrgID": ORG},
    }


def test_3_each_client_has_its_own_key_and_usage_plan_with_throttle_and_quota(tmp_path):
    clients = [
        {"name": "orders", "throttleRate": 20, "throttleBurst": 40, "requestsPerDay": 100000},
        {"name": "billing", "requestsPerDay": 5000},
    ]
    found = synth(tmp_path, clients=clients)
    plans = {p["UsagePlanName"]: p for p in (r["Properties"] for r in found.values())
             if "UsagePlanName" in p}  # fmt: skip
    assert plans["shardline-dev-producer-orders"]["Throttle"] == {"BurstLimit": 40, "RateLimit": 20}
    assert plans["shardline-dev-producer-orders"]["Quota"] == {"Limit": 100000, "Period": "DAY"}
    assert plans["shardline-dev-producer-billing"]["Throttle"] == {"BurstLimit": 200, "RateLimit": 100}
    assert plans["shardline-dev-producer-billing"]["Quota"] == {"Limit": 5000, "Period": "DAY"}
    keys = [r for r in found.values() if r["Type"] == "AWS::ApiGateway::ApiKey"]
    assert sorted(k["Properties"]["Name"] for k in keys) == [
        "shardline-dev-producer-billing",
        "shardline-dev-producer-orders",
    ]
    assert all("Value" not in k["Properties"] for k in keys), "API Gateway makes the secret, not the template"
    assert len([r for r in found.values() if r["Type"] == "AWS::ApiGateway::UsagePlanKey"]) == 2
    method = next(
        r["Properties"] for r in found.values()
        if r["Type"] == "AWS::ApiGateway::Method" and r["Properties"]["HttpMethod"] == "POST"
    )  # fmt: skip
    assert (method["AuthorizationType"], method["ApiKeyRequired"]) == ("AWS_IAM", True)  # IAM plus key


@pytest.mark.parametrize(
    ("api", "key"),
    [
        ({"auth": "api-key"}, r"shardline\.api\.clients: auth 'api-key' needs at least one client"),
        ({"auth": "api-key", "clients": [{"name": "a", "requestsPerDay": 1}], "allowedPrincipals": [ROLE]},
         r"shardline\.api\.allowedPrincipals: needs auth 'iam'"),
        ({"allowedPrincipals": ["orders-service"]}, r"shardline\.api\.allowedPrincipals\[0\]: not an IAM"),
        ({"allowedOrganization": "acme"}, r"shardline\.api\.allowedOrganization: not an organization id"),
        ({"clients": [{"name": "a"}]}, r"shardline\.api\.clients\[0\]\.requestsPerDay: is required"),
        ({"clients": [{"name": "a", "requestsPerDay": 1, "throttleRate": 500}]},
         r"shardline\.api\.clients\[0\]\.throttleRate: a client's throttle"),
        ({"clients": [{"name": "a", "requestsPerDay": 1}, {"name": "a", "requestsPerDay": 2}]},
         r"shardline\.api\.clients\[1\]\.name: duplicate client 'a'"),
    ],
)  # fmt: skip
def test_3_a_bad_access_setting_fails_synth_naming_its_key(api, key):
    context = copy.deepcopy(default_context())
    context["shardline"]["api"] |= api
    with pytest.raises(ConfigError, match=key):
        load(context["shardline"])


def test_3_the_access_log_names_the_caller_and_the_request_the_producer_logs_under(template):
    (stage,) = resources(template, "AWS::ApiGateway::Stage").values()
    logged = json.loads(stage["Properties"]["AccessLogSetting"]["Format"])
    assert logged == ACCESS_LOG_FIELDS
    for field in ("userArn", "accountId", "principalOrgId", "apiKeyId", "sourceIp", "requestId", "status"):
        assert logged[field].startswith("$context."), field
