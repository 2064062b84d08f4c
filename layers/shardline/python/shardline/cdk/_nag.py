"""cdk-nag acknowledgements: each finding we accept, on the resources it concerns, with the reason.

Nothing is acknowledged stack-wide: every acknowledgement is attached to the construct whose
resources raise the finding, so the same rule on a resource added later is reported again.
(Acknowledgements that belong to one construct's own choices live beside it: the dead-letter
bucket's in `consumer_group.py`, the access-log bucket's in `stack.py`, api-key auth's in
`producer_api.py`.)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aws_cdk import Acknowledgment, Validations
from constructs import IConstruct

if TYPE_CHECKING:
    from shardline.cdk._stack import PipelineStack

_MANAGED = "AwsSolutions::AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/{}]"

#: Every function's role. (No managed policy: each role writes its own log group only,
#: `shardline.cdk._function.execution_role`.)
FUNCTION_ROLE = {
    "AwsSolutions::AwsSolutions-IAM5[Resource::*]": "X-Ray's PutTraceSegments/PutTelemetryRecords, which "
    "support no resource-level permissions (tracing is on for every function).",
}
#: Every function: its runtime.
FUNCTION = {
    "AwsSolutions::AwsSolutions-L1": "python3.12, not the newest (3.14): it is the newest Python the "
    "build compiles the layer's bytecode for (a layer without .pyc compiles the library on every cold "
    "start from read-only /opt). Move RUNTIME in shardline.cdk._layers with an interpreter of the new "
    "version "
    "at hand; the Powertools layer follows it through its SSM parameter.",
}
#: The REST API, its stage, methods and the account-level logging role it creates.
API = {
    _MANAGED.format("AmazonAPIGatewayPushToCloudWatchLogs"): "AWS's managed policy for API Gateway's "
    "account-level logging role, which the stage's execution logs need.",
    "AwsSolutions::AwsSolutions-COG4": "Callers are services, authorized by IAM (SigV4) — or by API "
    "keys when configured — not Cognito users.",
    "AwsSolutions::AwsSolutions-APIG3": "WAF is an organisation-level choice; every caller is "
    "authorized (IAM by default, admitted by the resource policy's principals, or a client's API key) "
    "and throttled per stage and, with clients, per key with a daily quota.",
}
#: A stream encrypted with a key of ours.
CUSTOMER_KEY_STREAM = {
    "AwsSolutions::AwsSolutions-KDS3": "The stream uses a customer-managed KMS key with rotation, which "
    "this rule (asking for the aws/kinesis key) does not recognise.",
}
#: shardline's DLQ and the mapping's on-failure queue.
DEAD_LETTER_QUEUE = {
    "AwsSolutions::AwsSolutions-SQS3": "This queue is a dead-letter queue itself (poison records, or the "
    "mapping's on-failure messages).",
}


def acknowledge(stack: PipelineStack) -> None:
    """Attach each acknowledgement to the constructs whose resources it is about."""
    for function in [stack.api.function] + [group.function for group in stack.groups]:
        _acknowledge(function, FUNCTION)
        assert function.role is not None
        _acknowledge(function.role, FUNCTION_ROLE)
    for group in stack.groups:
        _acknowledge(group.dead_letters, DEAD_LETTER_QUEUE)
        _acknowledge(group.failures, DEAD_LETTER_QUEUE)
    _acknowledge(stack.api.api, API)
    for stream in stack.streams.values():
        if stream.key is not None:
            _acknowledge(stream, CUSTOMER_KEY_STREAM)


def _acknowledge(construct: IConstruct, rules: dict[str, str]) -> None:
    for rule, reason in rules.items():
        Validations.of(construct).acknowledge(Acknowledgment(id=rule, reason=reason))
