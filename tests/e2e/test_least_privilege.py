"""Issue 40, properties 5 and 6: least privilege both ways, proven on the running app.

The app runs as `make local` runs it — every function, mapping poller and worker task under its own
role, every request authorized at the endpoint — and a `send` goes through it (poison records
included, so the dead-letter paths run). Then:

- **what is called is granted**: the run's verdict holds no AccessDenied (the endpoint recorded
  every call by principal, and refused none);
- **what is granted is called**: every (action, resource) a role's policies allow was called by one
  of the role's principals in the run, or is in `NOT_CALLED_IN_THIS_RUN` with the reason (an action
  AWS performs with the role, or a path the run does not take), so an unneeded grant is named;
- **the fault drill**: the template with one needed grant removed (the key counter's
  `dynamodb:UpdateItem`) stalls exactly that group, and `send`'s verdict and the endpoint's report
  name the missing action, the resource and the function.
"""

from __future__ import annotations

import fnmatch
import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from local.app import model
from local.commands.send import send
from local.commands.verify import wait_and_verify
from local.commands.verify_render import render
from local.iam.principals import sessions_of
from local.runtime import Runtime
from tests.support.runtime import start_runtime

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(1200)]

#: Grants the run is not expected to call: (action, a part of the resource's name, "" for any) -> why
#: the role holds it anyway (an action AWS performs with the role, or a path this run does not take).
NOT_CALLED_IN_THIS_RUN = {
    ("logs:CreateLogStream", ""): "Lambda writes the function's logs with its role (logs are files locally)",
    ("logs:PutLogEvents", ""): "Lambda writes the function's logs with its role (logs are files locally)",
    ("logs:CreateLogGroup", ""): "Lambda creates the function's log group with its role",
    ("xray:PutTraceSegments", ""): "Lambda's X-Ray integration sends the function's segments with its role",
    (
        "xray:PutTelemetryRecords",
        "",
    ): "Lambda's X-Ray integration sends the function's segments with its role",
    ("kinesis:DescribeStream", ""): "Lambda's poller (its older shard discovery)",
    ("kinesis:DescribeStreamSummary", ""): "the resharding probe, at a shard's end (no reshard in this run)",
    ("kinesis:SubscribeToShard", ""): "enhanced fan-out only",
    ("kinesis:DescribeStreamConsumer", ""): "enhanced fan-out only",
    (
        "sqs:SendMessage",
        "MappingFailures",
    ): "the mapping's on-failure destination: only when a batch is given up",
    ("sqs:SendMessage", "DeadLetters"): (
        "a group's dead letters: only a record its handler refuses (the key counter refuses none here)"
    ),
    ("sqs:ReceiveMessage", ""): "`redrive` reads the on-failure destination",
    ("sqs:DeleteMessage", ""): "`redrive`",
    ("sqs:GetQueueAttributes", ""): "`redrive`",
    ("s3:PutObject", ""): "a dead letter over SQS's 1 MiB goes to the group's bucket (none in this run)",
    ("s3:GetObject", ""): "`redrive` of a dead letter kept in the bucket",
    ("dynamodb:PutItem", "Leases"): "a lease row created whole: a redrive's claim, a child shard's start",
    ("dynamodb:GetItem", "Leases"): "the lease table's reads on a restart or a reshard",
    ("dynamodb:DeleteItem", ""): "a handler's Delete (the example sinks never delete)",
    ("dynamodb:BatchWriteItem", ""): "idempotent puts without ids (the run's records carry ids)",
    ("dynamodb:ConditionCheckItem", ""): "a handler's ConditionCheck (the example sinks have none)",
    ("kms:Decrypt", ""): "through a service, for a read of an encrypted resource the run may not make",
    ("kms:GenerateDataKey", ""): "through a service, for a write the run may not make",
}


def explained(action: str, resource: str) -> bool:
    return any(action == wanted and part in resource for (wanted, part) in NOT_CALLED_IN_THIS_RUN)


@pytest.fixture(scope="module")
def enforced_run(cdk_out: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Runtime, Any]]:
    runtime = start_runtime(cdk_out, tmp_path_factory.mktemp("logs"))
    try:
        report = send(f"{runtime.api_url}/streams", "events", count=2_000, poison_every=500, progress=False)
        verdict = wait_and_verify(runtime.endpoint_url, runtime.app, report, timeout=600, progress=False)
        yield runtime, verdict
    finally:
        runtime.stop()


def grants(role: model.Role) -> list[tuple[str, str, str]]:
    """(policy, action pattern, resource pattern) of every Allow of the role's policies."""
    found = []
    for name, document in role.policies:
        for statement in document.get("Statement", []):
            if statement.get("Effect") != "Allow":
                continue
            actions, resources = statement.get("Action", []), statement.get("Resource", [])
            for action in [actions] if isinstance(actions, str) else actions:
                for resource in [resources] if isinstance(resources, str) else resources:
                    found.append((name, action, resource))
    return found


def unused_grants(app: model.LocalApp, calls: list[dict[str, Any]]) -> list[str]:
    """The grants no principal of their role called and no entry of NOT_CALLED_IN_THIS_RUN explains."""
    whos: dict[str, set[str]] = {}
    for session in sessions_of(app):
        whos.setdefault(session.role_arn, set()).add(session.who)
    unused = []
    for role in app.iam.roles:
        mine = [call for call in calls if call["who"] in whos.get(role.arn, set())]
        if role.arn not in whos:
            continue  # a service's role (API Gateway's logging): no code of the app runs as it
        for policy, action, resource in grants(role):
            used = any(
                fnmatch.fnmatchcase(call["action"].lower(), action.lower())
                and fnmatch.fnmatchcase(call["resource"], resource)
                for call in mine
            )
            if not used and not explained(action, resource):
                unused.append(f"{role.name} ({policy}): {action} on {resource}")
    return unused


def test_property_5_every_call_of_the_run_is_granted_and_every_grant_is_used_or_explained(
    enforced_run,
) -> None:
    runtime, verdict = enforced_run
    assert verdict.ok, render(verdict)
    iam = runtime.iam_report()
    assert iam["enforcing"] and iam["denials"]["total"] == 0, iam["denials"]
    whos = {call["who"] for call in iam["calls"]}
    for function in runtime.app.functions:  # every function ran as its own principal
        if function.logical_id.startswith(("Producer", "Group")):
            assert f"function {function.name}" in whos, whos
    unused = unused_grants(runtime.app, iam["calls"])
    assert unused == [], "\n".join(unused)


def test_property_5_an_unneeded_grant_is_named(enforced_run) -> None:
    runtime, _ = enforced_run
    app = runtime.app
    role = next(r for r in app.iam.roles if "Groupkeycounter" in r.logical_id)
    extra = {"Effect": "Allow", "Action": "dynamodb:DeleteTable", "Resource": "arn:aws:dynamodb:*:*:table/*"}
    widened = model.Role(
        role.logical_id, role.name, role.arn, (*role.policies, ("Extra", {"Statement": [extra]})), role.trust
    )
    roles = tuple(widened if r.arn == role.arn else r for r in app.iam.roles)
    wider = model.LocalApp(
        **{**app.__dict__, "iam": model.Iam(roles, app.iam.resource_policies, app.iam.keys)}
    )
    calls = runtime.iam_report()["calls"]
    named = set(unused_grants(wider, calls)) - set(unused_grants(app, calls))
    assert named == {f"{role.name} (Extra): dynamodb:DeleteTable on arn:aws:dynamodb:*:*:table/*"}


def without_grant(cdk_out: Path, into: Path, role_prefix: str, action: str) -> Path:
    """A copy of the cloud assembly whose template drops `action` from the role's default policy."""
    shutil.copytree(cdk_out, into)
    [template_path] = into.glob("*.template.json")
    template = json.loads(template_path.read_text())
    dropped = 0
    for logical_id, resource in template["Resources"].items():
        if resource["Type"] != "AWS::IAM::Policy" or not logical_id.startswith(role_prefix):
            continue
        for statement in resource["Properties"]["PolicyDocument"]["Statement"]:
            actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
            if action in actions:
                statement["Action"] = [a for a in actions if a != action]
                dropped += 1
    assert dropped, f"no {action} in {role_prefix}'s policies"
    template_path.write_text(json.dumps(template))
    return into


def test_property_5_fault_drill_a_removed_grant_stalls_exactly_that_group_named(
    cdk_out: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    drilled = without_grant(
        cdk_out,
        tmp_path_factory.mktemp("drill") / "cdk.out",
        "GroupkeycounterFunctionServiceRole",
        "dynamodb:UpdateItem",
    )
    logs = tmp_path_factory.mktemp("logs")
    runtime = start_runtime(drilled, logs)
    try:
        report = send(f"{runtime.api_url}/streams", "events", count=300, progress=False)
        verdict = wait_and_verify(runtime.endpoint_url, runtime.app, report, timeout=90, progress=False)
    finally:
        runtime.stop()
    groups = {result.group.name: result for result in verdict.groups}
    assert groups["event-sink"].ok, render(verdict)
    assert not groups["key-counter"].ok and not verdict.ok
    counter = next(f for f in runtime.app.functions if f.logical_id.startswith("Groupkeycounter"))
    named = {(d["who"], d["action"]) for d in verdict.access_denied}
    assert named == {(f"function {counter.name}", "dynamodb:UpdateItem")}, verdict.access_denied
    assert "ACCESS DENIED" in render(verdict) and "dynamodb:UpdateItem" in render(verdict)
    # ... and in the function's own log, as CloudWatch Logs would show it.
    logged = "".join(path.read_text(errors="replace") for path in logs.glob(f"*{counter.name}*"))
    assert "AccessDeniedException" in logged and "dynamodb:UpdateItem" in logged
