"""The whole pipeline under the heavy chaos profile: nothing lost, nothing applied twice — by identity.

HTTP → producer function → Kinesis (limits on, 30 % of entries throttled, request errors, lost
responses, lost requests, slow writes that land after the producer's read timeout, brownouts, the
producer's reads denied, latency, a split and a merge) → event-source mappings → consumer functions
(killed before, during and after their DynamoDB commit) → DynamoDB (transactions cancelled,
throttled). `send` gives every record an id and every request an `Idempotency-Key`, drops some of
the API's answers after the write, and posts every request that failed as a whole again as it was.

The verdict: 0 lost, 0 duplicate effects, counts exact, every accepted record at the sequence number
the API answered, and Kinesis-level duplicates above zero (copies of aggregates the producer resent,
records re-posted into the stream again) — the consumers' dedup, not luck, kept the sinks exact.

Meanwhile, two more senders (issue 39, `local.commands.fleet`): a forked producer fleet — one
library `Producer` created and used here, then forked into three processes that each put their own
records with ids straight to the endpoint's Kinesis while this process keeps putting — and two
callers sharing ids — the same run (ids, Idempotency-Keys) POSTed under two access keys. Their
verdict: every confirmed record applied exactly once in both example sinks, under its own caller
(two callers' equal ids are two records), nothing dropped behind a 2xx.
"""

from __future__ import annotations

import dataclasses
import json
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from local.chaos.profiles import KILL_POINTS, load_profile
from local.commands.fleet import CallersReport, FleetReport, forked_fleet, two_callers, wait_applied
from local.commands.send import send
from local.commands.status import collect, injected_faults
from local.commands.verify import physical_stream, wait_and_verify
from local.commands.verify_render import render
from local.runtime import Runtime
from tests.support.runtime import start_runtime

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(1500)]

RECORDS = 20_000
RATE = 700  # records/s: the send lasts ~30 s, so the split (10 s) and the merge (25 s) fall inside it
BATCH = 100  # records per request: ~200 requests
#: Of the API's answers, dropped after the write: with seed 12, the 93rd and the 128th answers (and the
#: 202nd, if there is one), so two or three requests (~200-300 records) are posted again and reach the
#: stream twice.
LOSE_REPLIES = 0.01
FLEET_PROCESSES, FLEET_PER_PROCESS = 3, 1_000  # forked copies, and records each (the parent puts as many)
CALLERS_COUNT, CALLERS_RATE = 1_000, 40  # records each caller posts, per second: ~25 s, inside the send


@pytest.fixture(scope="module")
def chaotic_runtime(cdk_out: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Runtime]:
    heavy = load_profile("heavy")
    # A kill every 8 consumer invocations (heavy: 150): an invocation carries up to 100 aggregates,
    # so 20,000 records make about 50 per group, and a CI-sized run must reach every commit boundary.
    # The producer's faults more often than heavy's, so a run of ~400 PutRecords meets each of them.
    endpoint = dataclasses.replace(
        heavy.endpoint,
        lost_request_rate={**heavy.endpoint.lost_request_rate, "kinesis": 0.02},
        slow_put_records_rate=0.015,
        brownout_every_s=10.0,
    )
    profile = dataclasses.replace(
        heavy, seed=12, endpoint=endpoint, workers=dataclasses.replace(heavy.workers, kill_every=8)
    )
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
    stream_name = physical_stream(runtime.app, "events")
    extras: dict[str, FleetReport | CallersReport] = {}

    def fleet() -> None:
        extras["fleet"] = forked_fleet(
            runtime.endpoint_url, stream_name, processes=FLEET_PROCESSES, per_process=FLEET_PER_PROCESS
        )

    def callers() -> None:
        extras["callers"] = two_callers(
            f"{runtime.api_url}/streams", "events", count=CALLERS_COUNT, rate=CALLERS_RATE, batch=100,
            keys=50, seed=13, lose_replies=0.02,
        )  # fmt: skip

    others = [threading.Thread(target=fleet, name="fleet"), threading.Thread(target=callers, name="callers")]
    began = time.monotonic()
    for thread in others:
        thread.start()
    report = send(
        f"{runtime.api_url}/streams", "events", count=RECORDS, size=100, max_size=4_000, keys=500,
        skew="zipf", rate=RATE, batch=BATCH, poison_rate=0.0005, seed=12, progress=False,
        lose_replies=LOSE_REPLIES,
    )  # fmt: skip
    for thread in others:
        thread.join(timeout=600)
    sent = time.monotonic()
    verdict = wait_and_verify(runtime.endpoint_url, runtime.app, report, timeout=600, progress=False)
    print(render(verdict))
    print(json.dumps({k: v for k, v in verdict.as_dict().items() if k != "groups"}, indent=2, default=str))
    fleet_report, pair = extras["fleet"], extras["callers"]
    assert isinstance(fleet_report, FleetReport) and isinstance(pair, CallersReport), extras
    applied = wait_applied(
        runtime.endpoint_url, runtime.app, stream_name, fleet_report.confirmed + pair.confirmed, timeout=300
    )
    print(applied.describe())
    timing = f"send {sent - began:.1f} s (fleet {fleet_report.elapsed:.1f} s)"
    print(f"{timing}, verdict {time.monotonic() - sent:.1f} s")
    assert verdict.ok, render(verdict)

    # The forked fleet: every record of the parent and of each forked copy confirmed; the two
    # callers: each one's run accepted whole, with the same ids.
    fleet_records = FLEET_PER_PROCESS * (FLEET_PROCESSES + 1) + FLEET_PER_PROCESS // 10
    assert fleet_report.unconfirmed == 0, fleet_report.unconfirmed
    assert len(fleet_report.confirmed) == fleet_records
    assert len({e.id for e in fleet_report.confirmed}) == fleet_records
    assert len(pair.reports) == 2, pair.reports
    for caller_report in pair.reports.values():
        assert len(caller_report.accepted) == CALLERS_COUNT and not caller_report.failed, (
            caller_report.as_dict()
        )
    assert len({e.id for e in pair.confirmed}) == CALLERS_COUNT  # the same ids, twice: 2,000 records
    # Every confirmed record of both, once in each example sink under its own caller's scope, with
    # its own data, and counted exactly: nothing dropped behind a 2xx, nothing applied twice.
    assert applied.ok and set(applied.groups) == {g.group.name for g in verdict.groups}, applied.describe()

    # Every record accepted, with Kinesis's word for it; requests that failed as a whole re-posted.
    assert len(report.accepted) == RECORDS and not report.failed, report.as_dict()
    assert report.replies_lost >= 2 and len(report.reposted) >= 2 * BATCH
    # The verdict by identity: 0 lost, 0 duplicate effects, counts exact, each id once per sink.
    assert verdict.lost == 0 and verdict.duplicate_effects == 0
    for result in verdict.groups:
        assert not result.lost and not result.duplicated and not result.wrong_counts, result.group.name
        assert not result.refused_present and not result.wrong_ids, result.group.name
    assert {result.group.kind for result in verdict.groups} == {"records", "counter"}
    sink = next(result for result in verdict.groups if result.group.kind == "records")
    assert sink.poison_whole == sum(1 for r in report.accepted.values() if r.poison) > 0
    # The stream: no success without a sequence number, and copies that dedup (not luck) kept out.
    stream = verdict.stream
    assert stream.read and not stream.unbacked and not stream.refused_in_stream and stream.wrong_ids == 0
    assert stream.duplicates > 0 and stream.reposted_records > 0, stream
    assert stream.without_aggregate_id == 0  # every Kinesis record the producer sent is an aggregate

    chaos = _get_json(f"{runtime.endpoint_url}/_shardline/chaos")
    actions = {reshard["action"]: reshard for reshard in chaos["reshards"]}
    assert set(actions) == {"split", "merge"} and all(r["done_at"] for r in actions.values()), chaos
    shards = _get_json(f"{runtime.endpoint_url}/_shardline/kinesis")["streams"]
    [stream_shards] = [s for name, s in shards.items() if "events" in name.lower() or len(shards) == 1]
    assert len(stream_shards["shards"]) >= 4 + 2 + 1  # the four, a split's two children, a merge's one

    status = collect(runtime.app, endpoint_url=runtime.endpoint_url, api_base=runtime.api.url)
    faults = injected_faults(status)
    print(json.dumps(faults, indent=2))
    for point in KILL_POINTS:
        assert faults.get(f"workers.kill_{point}", 0) >= 1, (point, faults)
    assert any(kind.startswith("kinesis.") and "throttle" in kind for kind in faults), faults
    assert faults.get("kinesis.lost_response", 0) >= 1, faults  # lost replies after the write
    assert faults.get("kinesis.lost_request", 0) >= 1, faults  # lost before it
    assert faults.get("kinesis.put_records.slow", 0) >= 1, faults  # landed after the read timeout
    assert faults.get("kinesis.put_records.brownout_refused", 0) >= 1, faults
    assert any(kind.startswith("dynamodb.") for kind in faults), faults
    # The producer's reads are denied (as its role denies them), and it never tried one.
    assert chaos["profile"] and load_profile("heavy").endpoint.producer_reads_denied
    assert faults.get("kinesis.producer_read_denied", 0) == 0, faults
