"""A team's app as a hand-made cloud assembly (a template as `cdk synth` writes it, plain
CloudFormation): a stream with an enhanced fan-out consumer, a mapping on that consumer, a mapping on
a stream named by ARN only (an existing one), and a consumer with no sink table that forwards each
record's data to a queue of the template (tests/local/functions/forwarder)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

FORWARDER = Path(__file__).resolve().parents[1] / "local" / "functions" / "forwarder"
EXISTING = "arn:aws:kinesis:us-east-1:111122223333:stream/existing-orders"
#: What Lambda's event-source mapping calls on a stream with the function's role (AWS's Lambda guide,
#: "Lambda execution role permissions" for Kinesis).
STREAM_READS = [
    "kinesis:DescribeStream", "kinesis:DescribeStreamSummary", "kinesis:GetRecords",
    "kinesis:GetShardIterator", "kinesis:ListShards", "kinesis:ListStreams",
]  # fmt: skip


def team_template(**extra: Any) -> dict[str, Any]:
    resources: dict[str, Any] = {
        "Orders": {"Type": "AWS::Kinesis::Stream", "Properties": {"ShardCount": 2}},
        "OrdersFanOut": {
            "Type": "AWS::Kinesis::StreamConsumer",
            "Properties": {"StreamARN": {"Fn::GetAtt": ["Orders", "Arn"]}, "ConsumerName": "fan-out"},
        },
        "Forwarded": {"Type": "AWS::SQS::Queue", "Properties": {"VisibilityTimeout": 30}},
        "ForwarderRole": {"Type": "AWS::IAM::Role", "Properties": {"AssumeRolePolicyDocument": {}}},
        # What the team grants its function, as deployed: the mappings read with the function's
        # role (the stream, its consumer, the existing stream), the handler sends to the queue.
        "ForwarderPolicy": {
            "Type": "AWS::IAM::Policy",
            "Properties": {
                "PolicyName": "forwarder",
                "Roles": [{"Ref": "ForwarderRole"}],
                "PolicyDocument": {
                    "Version": "2012-10-17",
                    "Statement": [
                        {
                            "Effect": "Allow",
                            "Action": STREAM_READS,
                            "Resource": [{"Fn::GetAtt": ["Orders", "Arn"]}, EXISTING],
                        },
                        {
                            "Effect": "Allow",
                            "Action": ["kinesis:SubscribeToShard", "kinesis:DescribeStreamConsumer"],
                            "Resource": {"Fn::GetAtt": ["OrdersFanOut", "ConsumerARN"]},
                        },
                        {
                            "Effect": "Allow",
                            "Action": "sqs:SendMessage",
                            "Resource": {"Fn::GetAtt": ["Forwarded", "Arn"]},
                        },
                    ],
                },
            },
        },
        "Forwarder": {
            "Type": "AWS::Lambda::Function",
            "Metadata": {"aws:asset:path": "asset.forwarder"},
            "Properties": {
                "Runtime": "python3.12",
                "Handler": "app.handler",
                "Code": {"S3Bucket": "assets", "S3Key": "forwarder.zip"},
                "Role": {"Fn::GetAtt": ["ForwarderRole", "Arn"]},
                "Timeout": 30,
                "Environment": {"Variables": {"QUEUE_URL": {"Ref": "Forwarded"}}},
            },
        },
        "FanOutMapping": {
            "Type": "AWS::Lambda::EventSourceMapping",
            "Properties": {
                "EventSourceArn": {"Fn::GetAtt": ["OrdersFanOut", "ConsumerARN"]},
                "FunctionName": {"Ref": "Forwarder"},
                "StartingPosition": "TRIM_HORIZON",
                "BatchSize": 10,
            },
        },
        "ExistingMapping": {
            "Type": "AWS::Lambda::EventSourceMapping",
            "Properties": {
                "EventSourceArn": EXISTING,
                "FunctionName": {"Ref": "Forwarder"},
                "StartingPosition": "TRIM_HORIZON",
            },
        },
    }
    resources.update(extra)
    return {"Resources": resources}


def team_assembly(folder: Path, template: dict[str, Any]) -> Path:
    cdk_out = folder / "cdk.out"
    cdk_out.mkdir()
    shutil.copytree(FORWARDER, cdk_out / "asset.forwarder", ignore=shutil.ignore_patterns("__pycache__"))
    (cdk_out / "Team.template.json").write_text(json.dumps(template))
    artifact = {"type": "aws:cloudformation:stack", "properties": {"templateFile": "Team.template.json"}}
    (cdk_out / "manifest.json").write_text(json.dumps({"version": "48.0.0", "artifacts": {"Team": artifact}}))
    return cdk_out
