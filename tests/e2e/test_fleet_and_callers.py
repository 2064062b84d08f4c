"""Issue 39, properties 1 and 2 on the whole local pipeline without chaos, in about a minute: the
heavy-chaos run's two extra senders (`local.commands.fleet`) alone, so a regression shows fast.

A forked producer fleet (a library `Producer` used here, then forked into two processes that each
put 100 records with ids straight to the endpoint's Kinesis while this process puts 100 more) and
two callers sharing ids (one `send` run of 100 records — the same ids, the same Idempotency-Keys —
POSTed as `test` and as `peer`): every confirmed record in the event sink under its own caller's
scoped id with its own data, and every key counted exactly by the key counter.

On the code before issue 39 this fails: with the producer id drawn once per process tree (not per
incarnation), the forked copies' 200 records are confirmed and never applied (the consumers take
their aggregates for copies of each other's); with no caller stamped by the API, both callers get
2xx answers for all 100 records, and one caller's 100 are never applied (every key counted 10
times instead of 20).
"""

from __future__ import annotations

import pytest

from local.commands.fleet import PEER_CALLER, ROOT_CALLER, forked_fleet, two_callers, wait_applied
from local.commands.verify import physical_stream

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(600)]

PROCESSES, PER_PROCESS, CALLERS_COUNT = 2, 100, 100


def test_property_1_and_2_a_forked_fleet_and_two_callers_sharing_ids_apply_every_record_once_per_caller(
    runtime,
):
    stream_name = physical_stream(runtime.app, "events")
    fleet = forked_fleet(runtime.endpoint_url, stream_name, processes=PROCESSES, per_process=PER_PROCESS)
    pair = two_callers(f"{runtime.api_url}/streams", "events", count=CALLERS_COUNT, batch=50, keys=10, seed=1)

    assert fleet.unconfirmed == 0
    assert len(fleet.confirmed) == PER_PROCESS * (PROCESSES + 1) + PER_PROCESS // 10
    assert set(pair.reports) == {ROOT_CALLER, PEER_CALLER}
    for report in pair.reports.values():
        assert len(report.accepted) == CALLERS_COUNT and not report.failed, report.as_dict()
    applied = wait_applied(
        runtime.endpoint_url, runtime.app, stream_name, fleet.confirmed + pair.confirmed, timeout=120
    )
    print(applied.describe())
    assert applied.ok and set(applied.groups) == {"event-sink", "key-counter"}, applied.describe()
