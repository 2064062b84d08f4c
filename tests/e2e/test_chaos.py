"""The whole pipeline under the heavy chaos profile: nothing lost, nothing applied twice.

HTTP → producer function → Kinesis (limits on, 30 % of entries throttled, request errors, lost
responses, latency, a split and a merge) → event-source mappings → consumer functions (killed
before, during and after their DynamoDB commit) → DynamoDB (transactions cancelled, throttled).
"""

from __future__ import annotations

import dataclasses
import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from local.chaos import KILL_POINTS, load_profile
from local.runtime import Runtime
from local.send import send, wait_and_verify
from local.status import collect, injected_faults
from tests.e2e.conftest import start_runtime

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(1500)]

RECORDS = 20_000
RATE = 700  # records/s: the send lasts ~30 s, so the split (10 s) and the merge (25 s) fall inside it


@pytest.fixture(scope="module")
def chaotic_runtime(cdk_out: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Runtime]:
    heavy = load_profile("heavy")
    # A kill every 8 consumer invocations (heavy: 150): an invocation carries up to 100 aggregates,
    # so 20,000 records make about 50 per group, and a CI-sized run must reach every commit boundary.
    profile = dataclasses.replace(heavy, seed=12, workers=dataclasses.replace(heavy.workers, kill_every=8))
    runtime = start_runtime(cdk_out, tmp_path_factory.mktemp("chaos-logs"), chaos=profile)
    try:
        yield runtime
    finally:
        runtime.stop()


def _get_json(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.loads(response.read())


def test_a_heavy_chaos_run_of_20000_records_loses_nothing_and_applies_nothing_twice(chaotic_runtime):
    runtime = chaotic_runtime
    report = send(
        f"{runtime.api_url}/streams", "events", count=RECORDS, size=100, max_size=4_000, keys=500,
        skew="zipf", rate=RATE, poison_rate=0.0005, seed=12, progress=False,
    )  # fmt: skip
    verdict = wait_and_verify(runtime.endpoint_url, runtime.app, report, timeout=1200, progress=False)
    print(verdict.render())
    print(json.dumps(report.as_dict(), indent=2))
    assert verdict.ok, verdict.render()
    assert len(report.accepted) >= RECORDS * 0.99  # the producer retries throttles; few end refused
    for result in verdict.groups:
        assert not result.lost and not result.duplicated and not result.wrong_counts, result.group.name
        assert not result.refused_present, result.group.name
    sink = next(result for result in verdict.groups if result.group.kind == "records")
    assert sink.poison_whole == sum(1 for r in report.accepted.values() if r.poison) > 0

    chaos = _get_json(f"{runtime.endpoint_url}/_shardline/chaos")
    actions = {reshard["action"]: reshard for reshard in chaos["reshards"]}
    assert set(actions) == {"split", "merge"} and all(r["done_at"] for r in actions.values()), chaos
    shards = _get_json(f"{runtime.endpoint_url}/_shardline/kinesis")["streams"]
    [stream] = [s for name, s in shards.items() if "events" in name.lower() or len(shards) == 1]
    assert len(stream["shards"]) >= 4 + 2 + 1  # the four, a split's two children, a merge's one

    status = collect(runtime.app, endpoint_url=runtime.endpoint_url, api_base=runtime.api.url)
    faults = injected_faults(status)
    print(json.dumps(faults, indent=2))
    for point in KILL_POINTS:
        assert faults.get(f"workers.kill_{point}", 0) >= 1, (point, faults)
    assert any(kind.startswith("kinesis.") and "throttle" in kind for kind in faults), faults
    assert any("lost_response" in kind for kind in faults), faults
    assert any(kind.startswith("dynamodb.") for kind in faults), faults
