"""What authorizing a request costs the local endpoint (issue 40): µs per `local.iam.evaluate`.

    python -m bench.iam_evaluate [--quick]

A typical role of the app: 10 statements (DynamoDB, Kinesis, KMS with `kms:ViaService`, SQS, logs,
CloudWatch, X-Ray, one Deny with a condition), as the CDK constructs synthesize them. Four requests:

- allowed, by the role's 7th statement (a DynamoDB write on the sink table);
- denied, no statement names the action (the issue's `dynamodb:BatchWriteItem`);
- a KMS Decrypt through DynamoDB, against the key policy naming the account root (both sides);
- an SQS send against the queue's TLS-only policy (a resource policy with a Deny and a condition).

The peer, measured in the same run: a plain dict look-up of (action, resource) in a set of grants,
the cheapest authorization there is (no wildcards, no conditions, no resource policy). The ratio says
how far the evaluator is from it; the issue's budget is the endpoint's throughput (`bench.local_endpoint`).
"""

from __future__ import annotations

import argparse
import platform
import sys
import timeit
from collections.abc import Callable
from typing import Any

from local.iam import Policy, Principal, Request, evaluate

ACCOUNT = "000000000000"
REGION = "us-east-1"
TABLE = f"arn:aws:dynamodb:{REGION}:{ACCOUNT}:table/EventSink"
LEASES = f"arn:aws:dynamodb:{REGION}:{ACCOUNT}:table/Leases"
STREAM = f"arn:aws:kinesis:{REGION}:{ACCOUNT}:stream/Events"
KEY = f"arn:aws:kms:{REGION}:{ACCOUNT}:key/1234abcd-12ab-34cd-56ef-1234567890ab"
QUEUE = f"arn:aws:sqs:{REGION}:{ACCOUNT}:EventSinkDlq"


def _statement(sid: str, actions: list[str], resources: list[str], **extra: Any) -> dict[str, Any]:
    return {"Sid": sid, "Effect": "Allow", "Action": actions, "Resource": resources, **extra}


ROLE_POLICY = {
    "Version": "2012-10-17",
    "Statement": [
        _statement(
            "Logs", ["logs:CreateLogStream", "logs:PutLogEvents"], [f"arn:aws:logs:{REGION}:{ACCOUNT}:*"]
        ),
        _statement("XRay", ["xray:PutTraceSegments", "xray:PutTelemetryRecords"], ["*"]),
        _statement(
            "Metrics",
            ["cloudwatch:PutMetricData"],
            ["*"],
            Condition={"StringEquals": {"cloudwatch:namespace": "shardline"}},
        ),
        _statement(
            "Stream",
            [
                "kinesis:DescribeStream*",
                "kinesis:GetRecords",
                "kinesis:GetShardIterator",
                "kinesis:ListShards",
            ],
            [STREAM],
        ),
        _statement("Consumer", ["kinesis:SubscribeToShard"], [f"{STREAM}/consumer/*"]),
        _statement(
            "Leases",
            ["dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:Query"],
            [LEASES, f"{LEASES}/index/*"],
        ),
        _statement(
            "Sink",
            [
                "dynamodb:PutItem",
                "dynamodb:UpdateItem",
                "dynamodb:ConditionCheckItem",
                "dynamodb:DescribeTable",
            ],
            [TABLE],
        ),
        _statement(
            "Key",
            ["kms:Decrypt", "kms:GenerateDataKey*"],
            [KEY],
            Condition={"StringEquals": {"kms:ViaService": [f"dynamodb.{REGION}.amazonaws.com"]}},
        ),
        _statement("Dlq", ["sqs:SendMessage", "sqs:GetQueueAttributes", "sqs:GetQueueUrl"], [QUEUE]),
        {
            "Sid": "NoDeletes",
            "Effect": "Deny",
            "Action": ["dynamodb:DeleteTable", "kinesis:DeleteStream"],
            "Resource": "*",
            "Condition": {"StringNotEquals": {"aws:PrincipalAccount": ACCOUNT}},
        },
    ],
}
KEY_POLICY = {
    "Statement": [
        {
            "Effect": "Allow",
            "Principal": {"AWS": f"arn:aws:iam::{ACCOUNT}:root"},
            "Action": "kms:*",
            "Resource": "*",
        }
    ]
}
QUEUE_POLICY = {
    "Statement": [
        {
            "Effect": "Deny",
            "Principal": {"AWS": "*"},
            "Action": "sqs:*",
            "Resource": QUEUE,
            "Condition": {"Bool": {"aws:SecureTransport": "false"}},
        }
    ]
}


def _cases() -> list[tuple[str, Callable[[], object], Callable[[], object], bool]]:
    role = Principal(
        arn=f"arn:aws:iam::{ACCOUNT}:role/EventSinkRole",
        account=ACCOUNT,
        policies=(Policy("EventSinkRoleDefaultPolicy", ROLE_POLICY),),
        session_arn=f"arn:aws:sts::{ACCOUNT}:assumed-role/EventSinkRole/event-sink",
    )
    key_policy = Policy("key policy of GroupKey", KEY_POLICY)
    queue_policy = Policy("queue policy of EventSinkDlq", QUEUE_POLICY)
    tls = {"aws:SecureTransport": "true"}
    put = Request(role, "dynamodb:PutItem", TABLE, tls)
    batch = Request(role, "dynamodb:BatchWriteItem", TABLE, tls)
    decrypt = Request(role, "kms:Decrypt", KEY, {**tls, "kms:ViaService": f"dynamodb.{REGION}.amazonaws.com"})
    send = Request(role, "sqs:SendMessage", QUEUE, tls)
    grants = {
        (action, resource)
        for action, resource in (
            ("dynamodb:PutItem", TABLE),
            ("kms:Decrypt", KEY),
            ("sqs:SendMessage", QUEUE),
            ("logs:PutLogEvents", "*"),
        )
    }

    def lookup(request: Request) -> Callable[[], object]:
        return lambda: (request.action, request.resource) in grants

    return [
        ("allowed (statement 7 of 10)", lambda: evaluate(put), lookup(put), True),
        ("denied (no statement)", lambda: evaluate(batch), lookup(batch), False),
        (
            "KMS via DynamoDB + key policy",
            lambda: evaluate(decrypt, key_policy, key_policy=True),
            lookup(decrypt),
            True,
        ),
        ("SQS + TLS-only queue policy", lambda: evaluate(send, queue_policy), lookup(send), True),
    ]


def _per_call_us(call: Callable[[], object], number: int, repeats: int) -> float:
    return min(timeit.repeat(call, number=number, repeat=repeats)) / number * 1e6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.iam_evaluate", description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats (a smoke run)")
    args = parser.parse_args(argv)
    number, repeats = (2_000, 3) if args.quick else (20_000, 7)
    print(
        f"IAM evaluation, µs per request (best of {repeats} × {number:,}); Python {platform.python_version()}"
    )
    print(f"{'request':<32}{'evaluate':>10}{'dict look-up':>14}{'ratio':>9}")
    for name, call, peer, expected in _cases():
        decision = call()
        allowed = getattr(decision, "allowed", None)
        if allowed is not expected:
            print(f"{name}: expected allowed={expected}, got {decision}", file=sys.stderr)
            return 1
        ours, theirs = _per_call_us(call, number, repeats), _per_call_us(peer, number, repeats)
        print(f"{name:<32}{ours:>10.2f}{theirs:>14.3f}{ours / theirs:>8.0f}×")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
