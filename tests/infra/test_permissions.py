"""Least privilege, proven against an oracle we did not write (issue 25, item 6).

For every function, its role's effective permissions are read from the synthesized template (every
AWS::IAM::Policy attached to the role, the role's inline policies, its managed policies, and any
resource policy that names the role) and expanded to (action, resource) pairs. Each pair must be
justified in one of two ways:

1. **The code calls it.** The action is an operation of the service's botocore model (botocore ships
   in the Lambda runtime: it is what the code calls through), and that operation's Python method
   name (`PutRecords` -> `.put_records(`) is called in the code the function ships: its handler
   folder and the shardline layer. The resource is one of the function's own (below), of the
   service's resource type.
2. **AWS uses the role for it on the function's behalf**, or the action authorises an operation the
   code calls — each such rule listed once in `ON_BEHALF` with the AWS page that says so.

A function's own resources are read from the template too, never from the policies: what its
environment names (by reference or by physical name), its event-source mapping's stream and
on-failure destination, its log group, and the KMS keys that encrypt those.

No `*` in an action; a `*` resource only where a rule says the service has no resource-level
permission (X-Ray).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

import botocore.session
import pytest
from botocore import xform_name

from tests.support.permissions import (
    SERVICES,
    Function,
    _key_of,
    read_functions,
)

# -- what AWS does with the role, and what an operation needs beyond its own action ------------


@dataclass(frozen=True)
class OnBehalf:
    """Actions a function's role needs although no line of its code calls them, on which resources."""

    why: str
    doc: str
    grants: Callable[[Function, dict], set[tuple[str, str]]]


def _own(function: Function, kind: str) -> set[str]:
    return function.own.get(kind, set())


def _keys(resources: dict, lids: set[str]) -> set[str]:
    return {key for lid in lids for key in _key_of(resources, lid)}


def _pairs(actions: list[str], lids: set[str], suffix: str = "") -> set[tuple[str, str]]:
    return {(action, f"<{lid}>{suffix}") for action in actions for lid in lids}


def _when_called(function: Function, method: str) -> bool:
    return method in function.called


ON_BEHALF = [
    OnBehalf(
        "Lambda's event-source mapping polls the mapped stream with the function's role",
        "https://docs.aws.amazon.com/lambda/latest/dg/services-kinesis-create.html",
        lambda f, r: _pairs(
            [
                "kinesis:DescribeStream",
                "kinesis:DescribeStreamSummary",
                "kinesis:GetRecords",
                "kinesis:GetShardIterator",
                "kinesis:ListShards",
            ],
            f.mapped_streams,
        ),
    ),
    OnBehalf(
        "... and reads a stream encrypted with a customer-managed key: kms:Decrypt on that key "
        "('AWS Lambda use[s] roles to consume Kinesis streams. Make sure to add the kms:Decrypt permission')",
        "https://docs.aws.amazon.com/streams/latest/dev/permissions-user-key-KMS.html",
        lambda f, r: _pairs(["kms:Decrypt"], _keys(r, f.mapped_streams)),
    ),
    OnBehalf(
        "Lambda sends a discarded batch's record to the mapping's on-failure SQS destination with the "
        "function's role (sqs:SendMessage)",
        "https://docs.aws.amazon.com/lambda/latest/dg/kinesis-on-failure-destination.html",
        lambda f, r: _pairs(["sqs:SendMessage"], f.on_failure),
    ),
    OnBehalf(
        "Sending to an SSE-KMS queue (the code's send_message, or the on-failure destination) needs "
        "kms:GenerateDataKey and kms:Decrypt on the queue's key",
        "https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-key-management.html",
        lambda f, r: _pairs(
            ["kms:GenerateDataKey", "kms:Decrypt"],
            _keys(
                r, f.on_failure | (_own(f, "AWS::SQS::Queue") if _when_called(f, "send_message") else set())
            ),
        ),
    ),
    OnBehalf(
        "Uploading an object to an SSE-KMS bucket (the code's put_object) needs kms:GenerateDataKey on "
        "the bucket's key",
        "https://docs.aws.amazon.com/AmazonS3/latest/userguide/UsingKMSEncryption.html",
        lambda f, r: _pairs(
            ["kms:GenerateDataKey"],
            _keys(r, _own(f, "AWS::S3::Bucket")) if _when_called(f, "put_object") else set(),
        ),
    ),
    OnBehalf(
        "Writing to a stream encrypted with a customer-managed key (the code's put_records) needs "
        "kms:GenerateDataKey on the stream's key; reading from it (get_records) kms:Decrypt",
        "https://docs.aws.amazon.com/streams/latest/dev/permissions-user-key-KMS.html",
        lambda f, r: (
            (
                _pairs(["kms:GenerateDataKey"], _keys(r, _own(f, "AWS::Kinesis::Stream")))
                if _when_called(f, "put_records")
                else set()
            )
            | (
                _pairs(["kms:Decrypt"], _keys(r, _own(f, "AWS::Kinesis::Stream")))
                if _when_called(f, "get_records")
                else set()
            )
        ),
    ),
    OnBehalf(
        "Reading or writing a table encrypted with a customer-managed key: DynamoDB decrypts the table "
        "key with the caller's permission (kms:Decrypt on the table's key)",
        "https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/encryption.howitworks.html",
        lambda f, r: _pairs(["kms:Decrypt"], _keys(r, _own(f, "AWS::DynamoDB::Table"))),
    ),
    # (No rule for dynamodb:ConditionCheckItem: a sink is granted it only when its `Sink.writes`
    # declares ConditionCheck entries, which no function of the default app returns — issue 40.)
    OnBehalf(
        "Active tracing: Lambda uploads trace segments and telemetry with the function's role; X-Ray "
        "has no resource-level permissions, so the resource is '*'",
        "https://docs.aws.amazon.com/lambda/latest/dg/services-xray.html",
        lambda f, r: (
            {("xray:PutTraceSegments", "*"), ("xray:PutTelemetryRecords", "*")} if f.tracing else set()
        ),
    ),
    OnBehalf(
        "Lambda writes the function's output to its log group with the function's role "
        "(CreateLogStream, PutLogEvents; the group itself is the template's, so no CreateLogGroup)",
        "https://docs.aws.amazon.com/aws-managed-policy/latest/reference/AWSLambdaBasicExecutionRole.html",
        lambda f, r: _pairs(
            ["logs:CreateLogStream", "logs:PutLogEvents"], {f.log_group} if f.log_group else set()
        ),
    ),
]


# -- the oracle ---------------------------------------------------------------------------------

_SESSION = botocore.session.get_session()


def operation_method(action: str) -> str | None:
    """`kinesis:PutRecords` -> `put_records` when PutRecords is an operation of botocore's model of
    the service; None when the action is no operation (e.g. dynamodb:ConditionCheckItem)."""
    prefix, operation = action.split(":", 1)
    model = _SESSION.get_service_model(SERVICES[prefix][0])
    return xform_name(operation) if operation in model.operation_names else None


def unjustified(function: Function, template: dict) -> list[str]:
    """Every (action, resource) of the function's role that neither its code nor a rule justifies."""
    resources = template["Resources"]
    on_behalf = set().union(*(rule.grants(function, resources) for rule in ON_BEHALF))
    problems = [f"managed policy {arn}: its permissions are not in the template" for arn in function.managed]
    for action, resource in sorted(function.permissions):
        prefix = action.split(":", 1)[0]
        if "*" in action or prefix not in SERVICES:
            problems.append(f"{action} on {resource}: a wildcard or unknown action")
            continue
        if (action, resource) in on_behalf:
            continue
        method = operation_method(action)
        kind = SERVICES[prefix][1]
        suffix = "/*" if kind == "AWS::S3::Bucket" else ""
        owned = {f"<{lid}>{suffix}" for lid in _own(function, kind)} if kind else set()
        if method is None:
            problems.append(f"{action} on {resource}: no {prefix} operation, and no rule grants it")
        elif method not in function.called:
            problems.append(f"{action} on {resource}: .{method}( is called nowhere in the code it ships")
        elif resource not in owned:
            problems.append(f"{action} on {resource}: not one of its own resources {sorted(owned)}")
    return problems


def table(functions: dict[str, Function]) -> str:
    lines = []
    for function in functions.values():
        lines.append(f"{function.logical_id} (role {function.role})")
        lines += [f"    {action:32} {resource}" for action, resource in sorted(function.permissions)]
    return "\n".join(lines)


@pytest.fixture(scope="module")
def functions(synthesized) -> tuple[dict, dict[str, Function]]:
    _, path = synthesized
    raw = json.loads(path.read_text())
    return raw, read_functions(raw, path.parent, path.name.removesuffix(".template.json"))


def test_6_every_permission_of_every_function_is_called_by_its_code_or_used_by_aws_for_it(functions):
    raw, found = functions
    assert len(found) == 3
    print("\n" + table(found))
    problems = {lid: unjustified(f, raw) for lid, f in found.items()}
    problems = {lid: p for lid, p in problems.items() if p}
    assert not problems, "\n".join(f"{lid}:\n  " + "\n  ".join(p) for lid, p in problems.items())


def test_6_the_oracle_maps_actions_to_botocore_operations_and_finds_the_calls(functions):
    """The oracle itself: botocore knows the operations, the scan sees the calls (so a pass is not
    an empty scan), and a permission nobody calls is reported."""
    raw, found = functions
    assert operation_method("kinesis:PutRecords") == "put_records"
    assert operation_method("kinesis:SubscribeToShard") == "subscribe_to_shard"
    assert operation_method("dynamodb:ConditionCheckItem") is None
    consumer = next(f for f in found.values() if f.mapped_streams)
    assert {"put_item", "update_item", "send_message", "put_object"} <= consumer.called
    assert "subscribe_to_shard" not in consumer.called
    stream = next(iter(consumer.mapped_streams))
    consumer.permissions.add(("kinesis:SubscribeToShard", f"<{stream}>"))
    consumer.permissions.add(("logs:PutLogEvents", "*"))
    try:
        problems = "\n".join(unjustified(consumer, raw))
    finally:
        consumer.permissions -= {("kinesis:SubscribeToShard", f"<{stream}>"), ("logs:PutLogEvents", "*")}
    assert ".subscribe_to_shard( is called nowhere" in problems
    assert "logs:PutLogEvents on *" in problems


def test_6_every_rule_of_what_aws_does_for_a_function_cites_its_page_and_is_used(functions):
    """Each exception is listed once, cites the AWS page it comes from, and justifies a permission
    some role holds (a rule nobody needs is an exception nobody should keep)."""
    raw, found = functions
    assert len({rule.why for rule in ON_BEHALF}) == len(ON_BEHALF)
    held = set().union(*(f.permissions for f in found.values()))
    for rule in ON_BEHALF:
        assert rule.doc.startswith("https://docs.aws.amazon.com/"), rule
        granted = set().union(*(rule.grants(f, raw["Resources"]) for f in found.values()))
        assert granted & held, f"no role needs: {rule.why}"
