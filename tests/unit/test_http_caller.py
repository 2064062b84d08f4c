"""Issue 39, property 2: `caller_of` reads the caller API Gateway authenticated, and nothing else.

The unauthenticated shape is AWS's own (tests/conformance/aws_recorded/apigw.json: a method with
no authorization and no API key gives `userArn: null` and no `apiKeyId`).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from shardline.aws_lambda import UnauthenticatedEvent, caller_of
from shardline.errors import ConfigurationError

RECORDED = json.loads(
    (Path(__file__).resolve().parents[1] / "conformance" / "aws_recorded" / "apigw.json").read_text()
)
ROLE = "arn:aws:sts::123456789012:assumed-role/orders-writer/i-0abc"


def recorded_event(**identity: Any) -> dict[str, Any]:
    event = copy.deepcopy(RECORDED["proxy_event"]["recorded"])
    event["requestContext"]["identity"].update(identity)
    return event


def test_property_2_an_event_api_gateway_did_not_authenticate_names_no_caller():
    with pytest.raises(UnauthenticatedEvent, match="neither userArn nor apiKeyId") as raised:
        caller_of(recorded_event())
    assert isinstance(raised.value, ConfigurationError)
    for event in ({}, {"requestContext": None}, {"requestContext": {"identity": "x"}}):
        with pytest.raises(UnauthenticatedEvent):
            caller_of(event)
    with pytest.raises(UnauthenticatedEvent):
        caller_of(recorded_event(userArn="", apiKeyId=""))


def test_property_2_the_caller_is_the_iam_principal_else_the_api_keys_id():
    assert caller_of(recorded_event(userArn=ROLE)) == ROLE
    assert caller_of(recorded_event(apiKeyId="v8qb0b3mm1", apiKey="secret-value")) == "apikey:v8qb0b3mm1"
    # IAM with a client's key beside it: the principal is the caller.
    assert caller_of(recorded_event(userArn=ROLE, apiKeyId="v8qb0b3mm1")) == ROLE


def test_property_2_nothing_the_client_sends_makes_the_caller():
    event = recorded_event()
    event["headers"] = {**(event.get("headers") or {}), "X-Caller": ROLE, "userArn": ROLE}
    event["multiValueHeaders"] = {**(event.get("multiValueHeaders") or {}), "X-Caller": [ROLE]}
    event["body"] = json.dumps({"caller": ROLE, "requestContext": {"identity": {"userArn": ROLE}}})
    event["queryStringParameters"] = {"userArn": ROLE}
    with pytest.raises(UnauthenticatedEvent):
        caller_of(event)
