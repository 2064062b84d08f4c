"""What a team's app may hold that this repository's does not, run under the local runtime from a
hand-made cloud assembly (a template as `cdk synth` writes it, plain CloudFormation):

- enhanced fan-out: an `AWS::Kinesis::StreamConsumer` registered on the endpoint, and a mapping whose
  `EventSourceArn` is `{"Fn::GetAtt": [consumer, "ConsumerARN"]}`, reading with the consumer's own
  budget (the endpoint proves it: no share of a shard's 5 GetRecords a second);
- a stream named by ARN but not defined (an existing one), created locally with the shards asked for;
- a consumer with no sink table that calls SQS (SendMessageBatch to a queue of the template).

The template refusals Kinesis would give (a bad consumer name, a consumer twice) are checked too.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

from local.app import model
from local.app.provision import client
from local.app.template import TemplateError, load
from local.limits import CONSUMER_HEADER
from local.runtime import Runtime, Settings
from tests.support.runtime import free_port, start_runtime
from tests.support.team_app import team_assembly, team_template


def test_a_consumer_arn_and_an_undefined_stream_are_read_from_the_template(tmp_path: Path) -> None:
    app = load(
        team_assembly(tmp_path, team_template()), endpoint_url="http://127.0.0.1:4566", shards={"other": 3}
    )
    (consumer,) = app.stream_consumers
    orders = next(s for s in app.streams if s.logical_id == "Orders")
    assert (consumer.name, consumer.stream_name) == ("fan-out", orders.name)
    assert consumer.arn.startswith(f"{orders.arn}/consumer/fan-out:")
    by_id = {m.logical_id: m for m in app.mappings}
    assert (by_id["FanOutMapping"].stream_name, by_id["FanOutMapping"].consumer_name) == (
        orders.name,
        "fan-out",
    )
    assert (by_id["ExistingMapping"].stream_name, by_id["ExistingMapping"].consumer_name) == (
        "existing-orders",
        None,
    )
    existing = next(s for s in app.streams if s.name == "existing-orders")
    assert (existing.defined, existing.shard_count, orders.defined) == (False, 1, True)


@pytest.mark.parametrize(
    ("extra", "refusal"),
    [
        ({"Bad": {"Type": "AWS::Kinesis::StreamConsumer", "Properties": {
            "StreamARN": {"Fn::GetAtt": ["Orders", "Arn"]}, "ConsumerName": "no spaces"}}}, "ConsumerName"),
        ({"Twice": {"Type": "AWS::Kinesis::StreamConsumer", "Properties": {
            "StreamARN": {"Fn::GetAtt": ["Orders", "Arn"]}, "ConsumerName": "fan-out"}}},
         "ResourceInUseException"),
    ],
    ids=["bad-name", "same-name-twice"],
)  # fmt: skip
def test_the_template_is_refused_where_kinesis_would_refuse_it(
    tmp_path: Path, extra: dict[str, Any], refusal: str
) -> None:
    with pytest.raises(TemplateError, match=refusal):
        load(team_assembly(tmp_path, team_template(**extra)), endpoint_url="http://127.0.0.1:4566")


@pytest.mark.slow
def test_a_teams_fan_out_consumer_existing_stream_and_queue_forwarder_run_locally(tmp_path: Path) -> None:
    steps: list[tuple[str, str]] = []
    settings = Settings(
        cdk_out=team_assembly(tmp_path, team_template()), endpoint_port=free_port(), api_port=free_port(),
        log_dir=tmp_path / "logs", existing_streams={"existing-orders": 2},
    )  # fmt: skip
    runtime = Runtime(settings, on_step=lambda name, detail: steps.append((name, detail))).start()
    try:
        resources = dict(steps)["resources"]
        assert "1 registered stream consumer(s) (enhanced fan-out)" in resources
        assert (
            "stream existing-orders is named by the app but not defined (an existing stream): " in resources
        )
        assert "created locally with 2 shard(s)" in resources
        app = runtime.app
        assert app is not None
        endpoint = runtime.endpoint_url
        kinesis, sqs = client("kinesis", endpoint), client("sqs", endpoint)
        orders = next(s for s in app.streams if s.logical_id == "Orders")
        registered = kinesis.list_stream_consumers(StreamARN=orders.arn)["Consumers"]
        assert [c["ConsumerName"] for c in registered] == ["fan-out"]
        existing = kinesis.describe_stream_summary(StreamName="existing-orders")["StreamDescriptionSummary"]
        assert existing["OpenShardCount"] == 2
        sent = {f"fan-out-{n}" for n in range(25)} | {f"existing-{n}" for n in range(15)}
        for body in sorted(sent):
            stream = orders.name if body.startswith("fan-out") else "existing-orders"
            kinesis.put_record(StreamName=stream, PartitionKey=body, Data=body.encode())
        queue = model.queue_url(endpoint, next(r.name for r in app.resources if r.logical_id == "Forwarded"))
        received: set[str] = set()
        deadline = time.monotonic() + 60
        while received != sent and time.monotonic() < deadline:
            for message in sqs.receive_message(QueueUrl=queue, MaxNumberOfMessages=10, WaitTimeSeconds=1).get(
                "Messages", []
            ):
                received.add(message["Body"])
                sqs.delete_message(QueueUrl=queue, ReceiptHandle=message["ReceiptHandle"])
        assert received == sent
        fan_out = next(r for r in runtime.runners if r.mapping.consumer_name == "fan-out")
        assert sum(shard["batches"] for shard in fan_out.stats().values()) >= 1
    finally:
        runtime.stop()


@pytest.mark.slow
def test_a_registered_consumer_reads_outside_the_shared_five_calls_a_second(tmp_path: Path) -> None:
    runtime = start_runtime(team_assembly(tmp_path, team_template()), tmp_path / "logs")
    try:
        for runner in runtime.runners:  # the mappings' own reads would share the budget: stop them
            runner.stop(timeout=5)
        app = runtime.app
        assert app is not None
        orders = next(s for s in app.streams if s.logical_id == "Orders")
        shared = client("kinesis", runtime.endpoint_url, retries={"total_max_attempts": 1})
        subscribed = client("kinesis", runtime.endpoint_url, retries={"total_max_attempts": 1})

        def as_consumer(name: str) -> Any:
            def add(request: Any, **_: Any) -> None:
                request.headers[CONSUMER_HEADER] = name

            return add

        subscribed.meta.events.register("before-sign.kinesis.GetRecords", as_consumer("fan-out"))
        shard = shared.list_shards(StreamName=orders.name)["Shards"][0]["ShardId"]

        def iterator(reader: Any) -> str:
            answer = reader.get_shard_iterator(
                StreamName=orders.name, ShardId=shard, ShardIteratorType="LATEST"
            )
            return str(answer["ShardIterator"])

        shared_iterator, subscribed_iterator = iterator(shared), iterator(subscribed)
        time.sleep(1.1)  # a whole second of budget
        throttled = 0
        for _ in range(10):
            try:
                shared.get_records(ShardIterator=shared_iterator)
            except ClientError as error:
                assert error.response["Error"]["Code"] == "ProvisionedThroughputExceededException"
                throttled += 1
        assert throttled >= 1, "the shared readers' 5 calls a second were not enforced"
        for _ in range(12):  # the same second: the consumer's reads are its own
            subscribed.get_records(ShardIterator=subscribed_iterator)
        stranger = client("kinesis", runtime.endpoint_url, retries={"total_max_attempts": 1})
        stranger.meta.events.register("before-sign.kinesis.GetRecords", as_consumer("nobody"))
        with pytest.raises(ClientError, match="ResourceNotFoundException"):
            stranger.get_records(ShardIterator=iterator(stranger))
    finally:
        runtime.stop()
