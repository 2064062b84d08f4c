"""Who runs as whom: the template's roles and policies read for the endpoint, and each piece of the
app given credentials of its own principal (issue 40, property 1)."""

from __future__ import annotations

from pathlib import Path

import pytest

from local.app import model
from local.app.template import load
from local.iam.principals import endpoint_config, session_credentials, sessions_of
from local.lambda_.workers import function_environment


@pytest.fixture(scope="module")
def app(cdk_out: Path) -> model.LocalApp:
    return load(cdk_out, endpoint_url="http://127.0.0.1:4566")


def _actions(role: model.Role) -> set[str]:
    found = set()
    for _, document in role.policies:
        for statement in document["Statement"]:
            action = statement["Action"]
            found |= {action} if isinstance(action, str) else set(action)
    return found


def test_each_role_is_read_with_every_policy_attached_to_it(app: model.LocalApp) -> None:
    wanted = {"Producer": "kinesis:PutRecords", "Groupeventsink": "dynamodb:PutItem"}
    wanted["Groupkeycounter"] = "dynamodb:UpdateItem"
    for prefix, action in wanted.items():
        function = next(f for f in app.functions if f.logical_id.startswith(prefix))
        role = app.iam.role(function.role_arn)
        assert role is not None and action in _actions(role), function.name
    # Resolved to local ARNs: no intrinsic is left in any policy.
    assert "Fn::" not in str(app.iam.roles) and "'Ref'" not in str(app.iam.roles)


def test_queue_and_key_policies_and_the_keys_of_encrypted_resources_are_read(app: model.LocalApp) -> None:
    queues = [r for r in app.resources if r.type == "AWS::SQS::Queue"]
    for queue in queues:
        assert model.queue_arn(queue.name) in app.iam.resource_policies, queue.name
    [stream] = [s for s in app.streams if s.defined]
    key = app.iam.keys[stream.arn]
    assert key.startswith(f"arn:aws:kms:{model.REGION}:{model.ACCOUNT}:key/")
    assert key in app.iam.resource_policies  # its key policy, for use through Kinesis


def test_every_function_mapping_and_task_gets_keys_of_its_own_role(app: model.LocalApp) -> None:
    sessions = sessions_of(app)
    keys = [session.credentials[0] for session in sessions]
    assert len(set(keys)) == len(keys)  # no two pieces of the app share a principal's keys
    assert session_credentials("arn:aws:iam::000000000000:role/r", "s") == session_credentials(
        "arn:aws:iam::000000000000:role/r", "s"
    )  # the same on every run: a restarted worker signs alike
    for function in app.functions:
        env = function_environment(function, "http://127.0.0.1:4566", "stream")
        assert (env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"]) == session_credentials(
            function.role_arn, function.name
        )
        assert env["AWS_ACCESS_KEY_ID"] != model.ACCESS_KEY
    config = endpoint_config(app, sessions)
    for session in sessions:
        entry = config["principals"][session.credentials[0]]
        assert entry["arn"] == session.role_arn and entry["policies"], session.who
        assert entry["session_arn"] == session.session_arn and not entry["root"]
