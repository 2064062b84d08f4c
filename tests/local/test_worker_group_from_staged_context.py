"""Issue 42, property 2, locally: a worker group runs from the build context its synth staged.

A team's app whose `WorkerGroup(code=...)` names a handler folder outside this repository is
synthesized; the local runtime reads its image asset and runs the worker from that staged context —
the copied handler folder as its working folder and the staged wheel of shardline (its sha256 checked
against shardline.lock, imported from the zip) as its library — so local runs what deploys. Records
put on the stream reach the sink, written by a handler that records which shardline it imported. A
wheel that is not the pinned one is refused, naming the task and what to do.
"""

from __future__ import annotations

import hashlib
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import aws_cdk as cdk
import pytest
from aws_cdk import aws_dynamodb as dynamodb

from local.app.provision import client
from local.app.template import TemplateError, load
from local.runtime import Runtime
from shardline.cdk import Sink, Stream, WorkerGroup
from tests.support.runtime import start_runtime

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPOSITORY = Path(__file__).resolve().parents[2]
HANDLER = """
import os

import shardline

SINK = os.environ["SINK_TABLE"]


def handle(record):
    item = {"pk": {"S": record.data.decode()}, "library": {"S": shardline.__file__}}
    return [{"Put": {"TableName": SINK, "Item": item}}]
"""


@pytest.fixture(scope="module")
def cdk_out(tmp_path_factory: pytest.TempPathFactory) -> Path:
    team = tmp_path_factory.mktemp("team")
    assert not team.resolve().is_relative_to(REPOSITORY)
    (team / "tally").mkdir()
    (team / "tally" / "app.py").write_text(HANDLER)
    app = cdk.App(outdir=str(team / "cdk.out"))
    stack = cdk.Stack(app, "tally")
    stream = Stream(stack, "Orders", stream_name="orders", shards=2)
    WorkerGroup(
        stack, "Workers", name="tally", stream=stream, code=team / "tally", handler_object="app:handle",
        worker_count=1, lease_duration_seconds=3,
        sinks=[Sink.create(dynamodb.Attribute(name="pk", type=dynamodb.AttributeType.STRING))],
    )  # fmt: skip
    app.synth()
    return team / "cdk.out"


def test_2_the_local_runtime_reads_a_worker_group_s_code_and_library_from_its_staged_context(
    cdk_out: Path,
) -> None:
    [service] = load(cdk_out, endpoint_url="http://127.0.0.1:9").workers
    staged = service.code_dir.parent
    assert staged.parent == cdk_out.resolve() and staged.name.startswith("asset.")
    assert service.code_dir == staged / "handler" and (service.code_dir / "app.py").read_text() == HANDLER
    assert service.library_dir.parent == staged and service.library_dir.suffix == ".whl"
    digest = hashlib.sha256(service.library_dir.read_bytes()).hexdigest()
    assert f"--hash=sha256:{digest}" in (staged / "shardline.lock").read_text()


def test_2_a_wheel_that_is_not_the_pinned_one_is_refused(cdk_out: Path, tmp_path: Path) -> None:
    copy = tmp_path / "cdk.out"
    shutil.copytree(cdk_out, copy)
    [wheel] = copy.glob("asset.*/shardline-*.whl")
    wheel.write_bytes(wheel.read_bytes() + b"\0")
    with pytest.raises(
        TemplateError, match=r"is not the wheel .*shardline\.lock pins .*synthesize the app again"
    ):
        load(copy, endpoint_url="http://127.0.0.1:9")
    (wheel.parent / "shardline.lock").unlink()
    wheel.unlink()
    with pytest.raises(TemplateError, match=r"holds no shardline to run .*give the group `code`"):
        load(copy, endpoint_url="http://127.0.0.1:9")


@pytest.fixture(scope="module")
def runtime(cdk_out: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Runtime]:
    started = start_runtime(cdk_out, tmp_path_factory.mktemp("logs"))
    try:
        yield started
    finally:
        started.stop()


def test_2_the_local_runtime_runs_the_worker_group_from_its_staged_wheel(runtime: Runtime) -> None:
    [service] = runtime.app.workers
    kinesis, dynamodb_ = client("kinesis", runtime.endpoint_url), client("dynamodb", runtime.endpoint_url)
    sent = {f"order-{n}" for n in range(20)}
    kinesis.put_records(
        StreamName=service.stream_name, Records=[{"Data": i.encode(), "PartitionKey": i} for i in sent]
    )
    table = service.environment["SINK_TABLE"]
    items: list[dict[str, dict[str, str]]] = []
    deadline = time.monotonic() + 90
    while len(items) < len(sent) and time.monotonic() < deadline:
        items = dynamodb_.scan(TableName=table)["Items"]
        time.sleep(0.5)
    assert {item["pk"]["S"] for item in items} == sent, service.log_files(runtime.settings.log_dir)
    # The worker imported shardline from the staged wheel: the code the image installs.
    assert {item["library"]["S"] for item in items} == {
        str(service.library_dir / "shardline" / "__init__.py")
    }
