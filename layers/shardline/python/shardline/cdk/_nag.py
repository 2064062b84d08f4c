"""cdk-nag acknowledgements: each finding shardline's constructs accept, with the reason.

Nothing is acknowledged stack-wide: each construct acknowledges, as it is built, the findings its
own choices raise on its own resources (a function's runtime and X-Ray statement, a dead-letter
queue's own DLQ, a customer-managed stream key, the API's auth and logging role, the access-log
bucket's own logging), so the same rule on a resource added later is reported again, and every
construct is nag-clean alone.
"""

from __future__ import annotations

from aws_cdk import Acknowledgment, Validations
from aws_cdk import aws_lambda as lambda_
from constructs import IConstruct

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
    "AwsSolutions::AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:logs:<AWS::Region>:<AWS::AccountId>:"
    "log-group:*]": "API Gateway's account-level logging role (inline, no managed policy): it is shared "
    "by every API of the account and region, whose execution-log groups API Gateway names and creates "
    "itself (API-Gateway-Execution-Logs_<api>/<stage>); only log writes, on this account and region's.",
    "AwsSolutions::AwsSolutions-COG4": "Callers are services, authorized by IAM (SigV4) — or by API "
    "keys when configured — not Cognito users.",
    "AwsSolutions::AwsSolutions-APIG3": "WAF is an organisation-level choice; every caller is "
    "authorized (IAM by default, admitted by the resource policy's principals, or a client's API key) "
    "and throttled per stage and, with clients, per key with a daily quota.",
    "AwsSolutions::AwsSolutions-APIG2": "The method validates its parameters; the body's records are "
    "validated by the function, which names each invalid record's index and field and writes nothing "
    "(a request model's refusal is a bare 'Invalid request body': the caller could not tell which "
    "record to fix).",
}
#: shardline's DLQ and the mapping's on-failure queue.
DEAD_LETTER_QUEUE = {
    "AwsSolutions::AwsSolutions-SQS3": "This queue is a dead-letter queue itself (poison records, or the "
    "mapping's on-failure messages).",
}


def acknowledge_rules(construct: IConstruct, rules: dict[str, str]) -> None:
    """Acknowledge `rules` on `construct` and what it contains, each with its reason."""
    for rule, reason in rules.items():
        Validations.of(construct).acknowledge(Acknowledgment(id=rule, reason=reason))


def acknowledge_function(function: lambda_.Function) -> None:
    """A shardline function's runtime, and its role's X-Ray statement."""
    acknowledge_rules(function, FUNCTION)
    if function.role is not None:
        acknowledge_rules(function.role, FUNCTION_ROLE)


def acknowledge(scope: IConstruct) -> None:
    """Kept for apps written when the acknowledgements were attached afterwards: each construct now
    acknowledges its own findings as it is built, so there is nothing left to attach (`scope` is
    not touched). An app that calls it is unchanged; one that does not is nag-clean too."""
    del scope
