"""Matrix app "worker groups": two worker groups on one stream, one polling and one reading through
enhanced fan-out, their image built from the package with the team's handler folder; a Lambda group
on an existing stream named by its ARN (created locally, never by the app); IAM auth; a dashboard
with its alarms off. `python worker_groups.py` synthesizes it into $CDK_OUTDIR."""

from __future__ import annotations

from pathlib import Path

import aws_cdk as cdk
from aws_cdk import aws_dynamodb as dynamodb
from cdk_nag import AwsSolutionsChecks

from shardline.cdk import ConsumerGroup, Layers, Monitoring, ProducerApi, Sink, Stream, WorkerGroup

HANDLERS = Path(__file__).resolve().parent / "handlers"
RECORD_ID = dynamodb.Attribute(name="recordId", type=dynamodb.AttributeType.STRING)

app = cdk.App()
stack = cdk.Stack(app, "matrix-workers")
layers = Layers(stack, "Layers")
events = Stream(stack, "Events", stream_name="matrix-events", shards=2)
existing = Stream.from_stream_arn(
    stack, "Existing", f"arn:aws:kinesis:{stack.region}:{stack.account}:stream/matrix-existing", shards=1
)
api = ProducerApi(stack, "Api", streams={"events": events, "existing": existing}, layers=layers)
polling = WorkerGroup(
    stack,
    "Polling",
    name="polling",
    stream=events,
    code=HANDLERS / "recorder",
    sinks=[Sink.create(RECORD_ID, holds="records", writes=("Put",))],
    worker_count=2,
    log_key=api.log_key,
)
fan_out = WorkerGroup(
    stack,
    "FanOut",
    name="fan-out-workers",
    stream=events,
    code=HANDLERS / "recorder",
    sinks=[Sink.create(RECORD_ID, holds="records", writes=("Put",))],
    enhanced_fan_out=True,
    worker_count=1,
    cluster=polling.cluster,
    log_key=api.log_key,
    access_logs=polling.access_logs,
)
on_existing = ConsumerGroup(
    stack,
    "OnExisting",
    name="on-existing",
    stream=existing,
    layers=layers,
    code=HANDLERS / "recorder",
    sinks=[Sink.create(RECORD_ID, holds="records", writes=("Put",))],
    log_key=api.log_key,
    access_logs=polling.access_logs,
)
Monitoring(stack, "Monitoring", streams=[events, existing], api=api, groups=[polling, fan_out, on_existing],
           alarms_enabled=False, alarm_topic=False, dashboard_name="matrix-workers")  # fmt: skip
cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
app.synth()
