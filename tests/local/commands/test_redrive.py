"""`python -m local redrive GROUP` (`local.commands.redrive`): what a group's on-failure queue points at, put
back through the group's own function code, on the local endpoint.

The on-failure message is the local mapping runner's own: a batch it gave up on (the function
failed it, no retry allowed). The group's code is the repository's `functions/event_sink` (a
`ConsumerFunction`), with the shardline layer, run as Lambda packages it.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest

from local.app import model
from local.commands.redrive import RedriveError, RedriveOutcome, redrive_group
from shardline.consumer import LeaseTable
from tests.support.esm import CallableInvoker
from tests.support.esm.aws import client, create_stream, new_queue, put, seqs, wait_until
from tests.support.esm.harness import FUNCTION, mapping, running
from tests.support.workers import POWERTOOLS_LAYER

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[3]
GROUP = "redrive-group"


def always_fails(event: dict[str, Any]) -> None:
    raise RuntimeError("the shard is stalled")


class App:
    """A one-shard stream whose only batch the mapping discarded to the on-failure queue, and the
    event_sink group (its lease table and sink) that never applied it."""

    def __init__(self, endpoint: str, tmp_path: Path) -> None:
        self.endpoint, self.log_dir = endpoint, tmp_path / "logs"
        kinesis, self.dynamodb, self.sqs = (client(s, endpoint) for s in ("kinesis", "dynamodb", "sqs"))
        self.stream = create_stream(kinesis)
        self.sent = seqs(put(kinesis, self.stream, *[json.dumps({"n": n}).encode() for n in range(6)]))
        self.queue_arn, self.queue_url = new_queue(endpoint)
        esm = mapping(self.stream, batch_size=6, maximum_retry_attempts=0, on_failure_arn=self.queue_arn)
        with running(endpoint, esm, CallableInvoker(FUNCTION, always_fails), retry_base_delay=0.05):
            wait_until(lambda: self.depth() == 1, what="the on-failure message")
        leases, self.sink = f"leases-{uuid.uuid4().hex[:8]}", f"sink-{uuid.uuid4().hex[:8]}"
        LeaseTable.create(self.dynamodb, leases)
        self.dynamodb.create_table(
            TableName=self.sink,
            KeySchema=[
                {"AttributeName": "pk", "KeyType": "HASH"},
                {"AttributeName": "sk", "KeyType": "RANGE"},
            ],
            AttributeDefinitions=[
                {"AttributeName": "pk", "AttributeType": "S"},
                {"AttributeName": "sk", "AttributeType": "S"},
            ],
            BillingMode="PAY_PER_REQUEST",
        )
        sink_function = model.Function(
            logical_id="EventSink",
            name=FUNCTION,
            handler="app.handler",
            code_dir=REPO / "functions" / "event_sink",
            layer_dirs=(REPO / "layers" / "shardline",),
            public_layers=(POWERTOOLS_LAYER,),
            timeout_seconds=30,
            environment={"SHARDLINE_GROUP": GROUP, "LEASE_TABLE": leases, "SINK_TABLE": self.sink},
        )
        self.app = model.LocalApp("redrive-test", functions=(sink_function,), mappings=(esm,))

    def depth(self) -> int:
        name = "ApproximateNumberOfMessages"
        attributes = self.sqs.get_queue_attributes(QueueUrl=self.queue_url, AttributeNames=[name])
        return int(attributes["Attributes"][name])

    def redrive(self, group: str = GROUP) -> tuple[int, list[str]]:
        lines: list[str] = []
        code = redrive_group(
            self.app, group, endpoint_url=self.endpoint, log_dir=self.log_dir, say=lines.append
        )
        return code, lines

    def applied(self) -> list[str]:
        items = self.dynamodb.scan(TableName=self.sink, ConsistentRead=True)["Items"]
        return sorted((item["sequenceNumber"]["S"] for item in items), key=int)


def test_the_redrive_command_applies_the_discarded_batch_once_and_deletes_the_message(
    local_endpoint, tmp_path
):
    app = App(local_endpoint, tmp_path)
    assert app.applied() == []

    code, lines = app.redrive()

    assert code == 0, lines
    assert app.applied() == app.sent  # every record of the batch, once
    assert "6 records read, 6 applied, 0 already applied" in lines[0] and "message deleted" in lines[0]
    assert app.depth() == 0
    code, lines = app.redrive()  # nothing left to redrive
    assert (code, lines) == (
        0,
        [f"consumer group {GROUP}: 0 redriven and deleted, 0 left in {app.queue_url}"],
    )


def test_a_message_whose_records_are_gone_is_kept_and_said_so(local_endpoint, tmp_path):
    app = App(local_endpoint, tmp_path)
    [message] = app.sqs.receive_message(QueueUrl=app.queue_url)["Messages"]
    app.sqs.delete_message(QueueUrl=app.queue_url, ReceiptHandle=message["ReceiptHandle"])
    gone = json.loads(message["Body"])
    before = str(int(app.sent[0]) - 1)  # a batch older than anything the shard still holds
    gone["KinesisBatchInfo"].update(startSequenceNumber=before, endSequenceNumber=before)
    app.sqs.send_message(QueueUrl=app.queue_url, MessageBody=json.dumps(gone))

    code, lines = app.redrive()

    assert code == 1
    assert f"MISSING every record from {before} to {before}: no longer in the stream" in lines[0]
    assert "message kept" in lines[0]
    assert lines[-1].endswith(f"0 redriven and deleted, 1 left in {app.queue_url}")
    assert app.depth() == 1 and app.applied() == []  # visible again, for the next run


def test_a_group_the_command_cannot_redrive_is_refused_with_its_reason(local_endpoint, tmp_path):
    app = App(local_endpoint, tmp_path)
    with pytest.raises(RedriveError, match="no consumer group 'nope' in this app"):
        app.redrive("nope")
    echo = model.Function(
        logical_id="Echo",
        name=FUNCTION,
        handler="app.handler",
        code_dir=REPO / "tests" / "local" / "functions" / "echo",
        layer_dirs=(REPO / "layers" / "shardline",),
        public_layers=(POWERTOOLS_LAYER,),
        environment={"SHARDLINE_GROUP": GROUP, "LEASE_TABLE": "leases", "SINK_TABLE": "sink"},
    )
    app.app = model.LocalApp("redrive-test", functions=(echo,), mappings=app.app.mappings)
    with pytest.raises(RedriveError, match="defines 0 consumers"):
        app.redrive()
    assert app.depth() == 1  # nothing was received


def test_7_redrive_json_says_what_was_redriven(local_endpoint, tmp_path):
    """`redrive --json` prints the `RedriveOutcome`: each message's redrive, how many went through
    (and were deleted) and how many are left."""
    app = App(local_endpoint, tmp_path)
    outcome = RedriveOutcome()
    code = redrive_group(
        app.app, GROUP, endpoint_url=app.endpoint, log_dir=app.log_dir, say=lambda _: None, outcome=outcome
    )
    printed = json.loads(json.dumps(outcome.as_dict(), default=str))  # as `redrive --json` prints it
    assert code == 0
    assert {k: printed[k] for k in ("ok", "group", "queue_url", "redriven", "left")} == {
        "ok": True, "group": GROUP, "queue_url": app.queue_url, "redriven": 1, "left": 0,
    }  # fmt: skip
    [message] = printed["messages"]
    assert message["deleted"] and message["ok"]
    assert (message["result"]["records_read"], message["result"]["processed"]) == (6, 6)
    assert message["result"]["complete"] and not message["result"]["missing"]
