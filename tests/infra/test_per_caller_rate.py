"""Issue 40, security review: a per-caller rate limit in IAM mode, as configured and granted.

`perCallerRate` / `per_caller_rate` reaches the producer function as `PER_CALLER_RATE` (half the
stage's rate by default in IAM mode, 0 turns it off), and its role gets `dynamodb:UpdateItem` on the
idempotency table exactly when the limit is on (the call `_http_rate` makes: tests/infra/
test_permissions.py proves the other way, that every grant is called).
"""

from __future__ import annotations

from typing import Any

import pytest
from aws_cdk import Stack

from shardline.cdk import ApiClient, Layers, ProducerApi, Stream
from shardline.cdk._config_api import read_api
from shardline.cdk._config_reader import ConfigError
from tests.support.cdk import ORDERS_ARN, actions_on, alone, resources


def api_in(stack: Stack, **props: Any) -> ProducerApi:
    orders = Stream.from_stream_arn(stack, "Orders", ORDERS_ARN)
    return ProducerApi(stack, "Api", streams={"orders": orders}, layers=Layers(stack, "Layers"), **props)


def _function_and_table_actions(template: dict) -> tuple[dict, set[str]]:
    [function] = resources(template, "AWS::Lambda::Function").values()
    [table] = resources(template, "AWS::DynamoDB::Table")
    return function["Properties"]["Environment"]["Variables"], actions_on(
        template, {"Fn::GetAtt": [table, "Arn"]}
    )


def test_per_caller_rate_limit_in_iam_mode_is_on_by_default_at_half_the_stage_and_granted_updateitem():
    variables, actions = _function_and_table_actions(alone(lambda stack: api_in(stack, throttle_rate=40)))
    assert variables["PER_CALLER_RATE"] == "20"
    assert "dynamodb:UpdateItem" in actions

    variables, actions = _function_and_table_actions(alone(lambda stack: api_in(stack, per_caller_rate=7)))
    assert variables["PER_CALLER_RATE"] == "7"


def test_per_caller_rate_limit_in_iam_mode_off_has_no_variable_and_no_updateitem():
    for props in ({"per_caller_rate": 0}, {"auth": "api-key", "clients": [ApiClient("shop", 10, 20, 1000)]}):
        variables, actions = _function_and_table_actions(alone(lambda stack, p=props: api_in(stack, **p)))
        assert "PER_CALLER_RATE" not in variables, props
        assert actions == {"dynamodb:BatchGetItem", "dynamodb:BatchWriteItem"}, props


@pytest.mark.parametrize(
    ("props", "message"),
    [
        ({"per_caller_rate": 500}, r"per_caller_rate: must be 0 \(no per-caller limit\) or within 1\.\.100"),
        ({"per_caller_rate": 0.5}, r"per_caller_rate: must be 0"),
        (
            {"auth": "api-key", "clients": [ApiClient("a", 1, 1, 1)], "per_caller_rate": 5},
            r"per_caller_rate: needs auth 'iam'",
        ),
    ],
)
def test_per_caller_rate_limit_in_iam_mode_refusals_name_the_prop(props, message):
    with pytest.raises(ValueError, match=rf"^ProducerApi 'Api': {message}"):
        alone(lambda stack: api_in(stack, **props), nag=False)


def test_per_caller_rate_limit_in_iam_mode_configuration_key():
    assert read_api({}).per_caller_rate == 50.0  # half of the default throttleRate 100
    assert read_api({"throttleRate": 10}).per_caller_rate == 5.0
    assert read_api({"perCallerRate": 0}).per_caller_rate == 0.0
    assert read_api({"auth": "api-key", "clients": [{"name": "a", "requestsPerDay": 9}]}).per_caller_rate == 0
    with pytest.raises(ConfigError, match=r"^shardline\.api\.perCallerRate: must be 0"):
        read_api({"throttleRate": 10, "perCallerRate": 11})
    # One caller's window is one item: DynamoDB writes an item at most 1,000 times a second.
    assert read_api({"throttleRate": 5000}).per_caller_rate == 1000.0
    with pytest.raises(ConfigError, match=r"^shardline\.api\.perCallerRate: must be 0 .* within 1\.\.1000 "):
        read_api({"throttleRate": 5000, "perCallerRate": 2000})
