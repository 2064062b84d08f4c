"""A worker consumer group in the whole pipeline, under the heavy chaos profile with its tasks killed.

The repository's app with one more group, `event-workers` (`"driver": "workers"`: the event sink's
handler run by two `shardline worker` tasks, `local.ecs`), synthesized in process and started by the
local runtime as `make local` starts it. Heavy chaos (throttles, lost requests and replies, DynamoDB
faults, a split and a merge, Lambda consumers killed around their commits) and, for the workers, a
task SIGKILLed every few seconds wherever it is; the service replaces it. The verdict by identity for
every group, the worker group among them: 0 lost, 0 duplicate effects, counts exact.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from rich.console import Console

from local.chaos.profiles import load_profile
from local.commands.send import send
from local.commands.status import collect, render
from local.commands.verify import wait_and_verify
from local.commands.verify_render import render as render_verdict
from local.runtime import Runtime
from tests.support.runtime import start_runtime

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(1200)]

WORKERS = "event-workers"
RECORDS = 6_000
KILL_EVERY_S = 6.0


@pytest.fixture(scope="module")
def workers_cdk_out(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The repository's app with a worker group beside its Lambda groups."""
    from app import CDK_JSON, build

    context = json.loads(CDK_JSON.read_text())["context"]
    context["shardline"]["consumerGroups"].append(
        {
            "name": WORKERS,
            "stream": "events",
            "handler": "functions/event_sink",
            "sink": "events",
            "driver": "workers",
            "workers": {"count": 2, "leaseDurationSeconds": 6},
        }
    )
    outdir = tmp_path_factory.mktemp("cdk.out")
    app, _ = build(context, outdir=str(outdir))
    app.synth()
    return outdir


@pytest.fixture(scope="module")
def chaotic_runtime(workers_cdk_out: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Runtime]:
    heavy = load_profile("heavy")
    workers = dataclasses.replace(heavy.workers, kill_every=8, task_kill_every_s=KILL_EVERY_S)
    profile = dataclasses.replace(heavy, seed=30, workers=workers)
    runtime = start_runtime(workers_cdk_out, tmp_path_factory.mktemp("logs"), chaos=profile)
    try:
        yield runtime
    finally:
        runtime.stop()


def test_a_worker_group_under_heavy_chaos_with_its_tasks_killed_loses_nothing_and_applies_nothing_twice(
    chaotic_runtime,
):
    runtime = chaotic_runtime
    [service] = runtime.app.workers
    assert service.name == WORKERS and service.desired_count == 2
    report = send(
        f"{runtime.api_url}/streams", "events", count=RECORDS, size=100, keys=200, rate=400, batch=100,
        poison_rate=0.0, seed=30, progress=False, lose_replies=0.01,
    )  # fmt: skip
    verdict = wait_and_verify(runtime.endpoint_url, runtime.app, report, timeout=600, progress=False)
    assert verdict.ok, render_verdict(verdict)
    assert verdict.lost == 0 and verdict.duplicate_effects == 0
    by_group = {result.group.name: result for result in verdict.groups}
    assert WORKERS in by_group, sorted(by_group)
    workers = by_group[WORKERS]
    assert workers.ok and not workers.lost and not workers.duplicated, workers
    assert len(report.accepted) == RECORDS

    stats = runtime.stats()["workers"][WORKERS]
    assert stats["killed"] >= 2 and stats["replaced"] >= 2, stats  # tasks died mid-run and came back
    status = collect(runtime.app, endpoint_url=runtime.endpoint_url, api_base=runtime.api.url)
    [group] = [group for group in status["groups"] if group.get("workers") == WORKERS]
    assert group["leases"] and all(lease["checkpoint"] for lease in group["leases"])
    console = Console(record=True, width=160)
    render(status, console)
    text = console.export_text()
    assert f"consumer group {WORKERS}" in text and "running of 2" in text, text
    for task in stats["tasks"]:  # each task, with the leases it holds (a killed one's expire)
        assert task["task"] in text
