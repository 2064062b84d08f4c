"""The tests' own app (not examples/orders): a ledger. An API takes entries keyed by account, a
worker group parses each and writes it to an entries table of the team's own key schema (account,
entry id); a dashboard with its alarms. Synthesized by `build(outdir)`."""

from __future__ import annotations

from pathlib import Path

import aws_cdk as cdk
from aws_cdk import aws_dynamodb as dynamodb

from shardline.cdk import Layers, Monitoring, ProducerApi, Sink, Stream, WorkerGroup

HANDLERS = Path(__file__).resolve().parent / "handlers"
STRING = dynamodb.AttributeType.STRING


def build(outdir: Path) -> Path:
    app = cdk.App(outdir=str(outdir))
    stack = cdk.Stack(app, "ledger")
    layers = Layers(stack, "Layers")
    stream = Stream(stack, "Ledger", stream_name="ledger", shards=2)
    api = ProducerApi(stack, "Api", streams={"ledger": stream}, layers=layers)
    entries = dynamodb.Table(
        stack,
        "EntriesTable",
        partition_key=dynamodb.Attribute(name="account", type=STRING),
        sort_key=dynamodb.Attribute(name="entry", type=STRING),
        billing_mode=dynamodb.BillingMode.PAY_PER_REQUEST,
        point_in_time_recovery_specification=dynamodb.PointInTimeRecoverySpecification(
            point_in_time_recovery_enabled=True
        ),
    )
    workers = WorkerGroup(
        stack,
        "Entries",
        name="ledger-entries",
        stream=stream,
        code=HANDLERS / "entries",
        sinks=[Sink(entries, holds="records", id_attribute="entry", writes=("Put",))],
        worker_count=2,
        failure_detail="message",
        log_key=api.log_key,
    )
    Monitoring(stack, "Monitoring", streams=[stream], api=api, groups=[workers], dashboard_name="ledger")
    app.synth()
    return outdir
