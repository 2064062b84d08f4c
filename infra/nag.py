"""cdk-nag acknowledgements: each finding we accept, with the reason, in code."""

from __future__ import annotations

from aws_cdk import Acknowledgment, Stack, Validations

_MANAGED = "AwsSolutions::AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/{}]"

ACKNOWLEDGED = {
    _MANAGED.format("AWSLambdaBasicExecutionRole"): "AWS's minimal managed policy for a function's own logs.",
    _MANAGED.format("AmazonAPIGatewayPushToCloudWatchLogs"): "AWS's managed policy for API Gateway's "
    "account-level logging role, which execution and access logs need.",
    "AwsSolutions::AwsSolutions-IAM5[Resource::*]": "Only X-Ray's PutTraceSegments/PutTelemetryRecords, "
    "which support no resource-level permissions (tracing is on for every function).",
    "AwsSolutions::AwsSolutions-IAM5[Action::kms:GenerateDataKey*]": "CDK's grant on our own "
    "customer-managed key (one key resource), to send to encrypted queues and write encrypted streams.",
    "AwsSolutions::AwsSolutions-IAM5[Action::kms:ReEncrypt*]": "CDK's grant on our own customer-managed key "
    "(one key resource), paired with GenerateDataKey for encrypted queues.",
    "AwsSolutions::AwsSolutions-L1": "python3.13, one below the newest (3.14, for which Powertools also "
    "publishes layers): a runtime move changes the layer's SSM parameter and the Python the library runs "
    "on, so it is made on purpose (infra/layers.py RUNTIME), never by a synth.",
    "AwsSolutions::AwsSolutions-COG4": "The API uses IAM (SigV4) authorization, or API keys when configured: "
    "callers are services, not Cognito users.",
    "AwsSolutions::AwsSolutions-KDS3": "Streams use a customer-managed KMS key with rotation, stronger than "
    "the aws/kinesis key this rule asks for.",
    "AwsSolutions::AwsSolutions-APIG3": "WAF is an organisation-level choice; the API requires IAM "
    "authorization and has stage throttling.",
    "AwsSolutions::AwsSolutions-SQS3": "These queues are dead-letter queues themselves.",
}


def acknowledge(stack: Stack) -> None:
    for rule, reason in ACKNOWLEDGED.items():
        Validations.of(stack).acknowledge(Acknowledgment(id=rule, reason=reason))
