"""Issue 25, item 3, in the local runtime: the API's resource policy refuses whom AWS would, and each
client's key meets its own usage plan (throttle, quota) — read from the synthesized template."""

from __future__ import annotations

import copy
import json

import pytest

from app import build
from local.apigw.access import PolicyCaller, invoke_allowed
from local.app.model import ACCOUNT, KeyPlan, Method
from local.app.template import load
from tests.support.apigw import RECORDS, post_records
from tests.support.cdk import default_context

LOCAL_ROOT = PolicyCaller(f"arn:aws:iam::{ACCOUNT}:root", ACCOUNT)
ROLE = "arn:aws:iam::111122223333:role/orders-service"
ORG = "o-a1b2c3d4e5"


def local_api(tmp_path, **api):
    context = copy.deepcopy(default_context())
    context["shardline"]["api"] |= api
    app, _ = build(context, outdir=str(tmp_path))
    app.synth()
    (rest_api,) = load(tmp_path, endpoint_url="http://127.0.0.1:1").apis
    return rest_api


def test_3_the_default_policy_admits_this_accounts_callers_and_no_other(tmp_path):
    policy = local_api(tmp_path).policy
    assert invoke_allowed(policy, LOCAL_ROOT, ACCOUNT)
    assert invoke_allowed(policy, PolicyCaller(f"arn:aws:iam::{ACCOUNT}:role/ci", ACCOUNT), ACCOUNT)
    assert not invoke_allowed(policy, PolicyCaller(ROLE, "111122223333"), ACCOUNT)


def test_3_configured_principals_and_organization_refuse_everyone_else(tmp_path):
    policy = local_api(tmp_path, allowedPrincipals=[ROLE], allowedOrganization=ORG).policy
    assert invoke_allowed(policy, PolicyCaller(ROLE, "111122223333"), ACCOUNT)
    in_org = PolicyCaller("arn:aws:iam::999988887777:role/x", "999988887777", ORG)
    assert invoke_allowed(policy, in_org, ACCOUNT)
    # This account's own root is refused too: the explicit Deny outweighs its identity policy.
    assert not invoke_allowed(policy, LOCAL_ROOT, ACCOUNT)
    outside = PolicyCaller("arn:aws:iam::999988887777:role/x", "999988887777", "o-zzzzzzzzzz")
    assert not invoke_allowed(policy, outside, ACCOUNT)


def test_3_the_local_api_answers_403_to_a_caller_the_policy_denies(start, tmp_path):
    policy = local_api(tmp_path, allowedPrincipals=[ROLE]).policy
    server, invoker = start(policy=policy)
    status, _, body = post_records(server)  # signed with the local credentials: this account's root
    assert status == 403, body
    assert json.loads(body)["message"].startswith(f"User: arn:aws:iam::{ACCOUNT}:root is not authorized")
    assert invoker.events == [], "nothing was invoked"


def test_3_each_clients_key_meets_its_own_quota_and_throttle(start):
    keyed = Method(path=RECORDS.path, http_method="POST", function_name="producer", authorization="AWS_IAM",
                   api_key_required=True)  # fmt: skip
    keys = (
        KeyPlan("orders", "key-orders", throttle_rate=100, throttle_burst=100, quota_limit=2),
        KeyPlan("billing", "key-billing", throttle_rate=0.001, throttle_burst=1),
    )
    server, invoker = start(methods=(keyed,), keys=keys)

    def post(key: str) -> tuple[int, bytes]:
        status, _, body = post_records(server, headers={"x-api-key": key})
        return status, body

    assert [post("key-orders")[0] for _ in range(2)] == [200, 200]
    status, body = post("key-orders")
    assert (status, json.loads(body)["message"]) == (429, "Limit Exceeded")  # its quota for the day
    assert post("key-billing")[0] == 200
    status, body = post("key-billing")
    assert (status, json.loads(body)["message"]) == (429, "Too Many Requests")  # its own throttle
    assert post("unknown")[0] == 403
    assert len(invoker.events) == 3


def test_3_the_template_gives_the_local_api_each_clients_key_and_plan(tmp_path):
    clients = [{"name": "orders", "throttleRate": 20, "throttleBurst": 40, "requestsPerDay": 1000}]
    api = local_api(tmp_path, clients=clients)
    (plan,) = api.keys
    assert plan.name == "shardline-dev-producer-orders"
    assert (plan.throttle_rate, plan.throttle_burst, plan.quota_limit, plan.quota_period) == (
        20,
        40,
        1000,
        "DAY",
    )
    assert plan.value.startswith("local-") and len(plan.value) >= 20
    assert all(method.api_key_required for method in api.methods if method.http_method == "POST")


@pytest.mark.parametrize("operator", ["StringNotLike", "IpAddress"])
def test_3_a_deny_with_a_condition_the_local_runtime_cannot_evaluate_refuses(operator):
    deny = {"Effect": "Deny", "Principal": "*", "Action": "execute-api:Invoke", "Resource": "*"}
    policy = {"Statement": [deny | {"Condition": {operator: {"aws:SourceIp": "10.0.0.0/8"}}}]}
    assert not invoke_allowed(policy, LOCAL_ROOT, ACCOUNT)
