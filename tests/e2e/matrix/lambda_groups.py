"""Matrix app "lambda groups": two streams behind one API keyed by clients' API keys; a group that
writes a table of the team's (a records sink), a group with no sink, and a group reading through
enhanced fan-out; alarms and a dashboard. `python lambda_groups.py` synthesizes it into $CDK_OUTDIR."""

from __future__ import annotations

from pathlib import Path

import aws_cdk as cdk
from aws_cdk import aws_dynamodb as dynamodb
from cdk_nag import AwsSolutionsChecks

from shardline.cdk import ApiClient, ConsumerGroup, Layers, Monitoring, ProducerApi, Sink, Stream

HANDLERS = Path(__file__).resolve().parent / "handlers"
RECORD_ID = dynamodb.Attribute(name="recordId", type=dynamodb.AttributeType.STRING)

app = cdk.App()
stack = cdk.Stack(app, "matrix-lambda")
layers = Layers(stack, "Layers")
orders = Stream(stack, "Orders", stream_name="matrix-orders", shards=2)
audit = Stream(stack, "Audit", stream_name="matrix-audit", shards=1)
api = ProducerApi(
    stack,
    "Api",
    streams={"orders": orders, "audit": audit},
    layers=layers,
    auth="api-key",
    clients=[ApiClient("team", throttle_rate=50, throttle_burst=100, requests_per_day=100_000)],
)
table = dynamodb.Table(
    stack,
    "Recorded",
    partition_key=RECORD_ID,
    billing_mode=dynamodb.BillingMode.PAY_PER_REQUEST,
    point_in_time_recovery_specification=dynamodb.PointInTimeRecoverySpecification(
        point_in_time_recovery_enabled=True
    ),
)
recorder = ConsumerGroup(
    stack,
    "Recorder",
    name="recorder",
    stream=orders,
    layers=layers,
    code=HANDLERS / "recorder",
    sinks=[Sink(table, holds="records", writes=("Put",))],
    log_key=api.log_key,
)
fan_out = ConsumerGroup(
    stack,
    "FanOut",
    name="fan-out",
    stream=orders,
    layers=layers,
    code=HANDLERS / "recorder",
    sinks=[Sink.create(RECORD_ID, holds="records", writes=("Put",))],  # a table made for the group
    enhanced_fan_out=True,
    log_key=api.log_key,
    access_logs=recorder.access_logs,
)
auditor = ConsumerGroup(
    stack,
    "Auditor",
    name="auditor",
    stream=audit,
    layers=layers,
    code=HANDLERS / "auditor",
    sinks=[],
    log_key=api.log_key,
    access_logs=recorder.access_logs,
)
Monitoring(stack, "Monitoring", streams=[orders, audit], api=api, groups=[recorder, fan_out, auditor],
           dashboard_name="matrix-lambda")  # fmt: skip
cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
app.synth()
