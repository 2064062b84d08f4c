"""Issue 42: an app of the tests' own, not examples/orders — a ledger (tests/e2e/ledger/): a worker
group whose handler parses each entry and writes it to a table of its own key schema (account,
entry id), run by the local runtime and sent to by `shardline local send --payload-file`, as a team
sends its own data. Its verdict is exact (every entry applied, dead-lettered by its cause, or
missing: none), the table holds exactly the good entries, and its dashboard, in a real browser,
draws every widget with data: each chart, and the handler's own error lines in "Recent errors".
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from local.app.provision import client
from local.chaos.profiles import load_profile
from local.exit_codes import FAILED
from local.runtime import Runtime
from tests.support.dashboard_browser import browse
from tests.support.runtime import start_runtime

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[2]
LEDGER = Path(__file__).with_name("ledger") / "ledger_app.py"
COUNT = 400
LINES = 50  # the payload file's lines, cycled: each sent COUNT / LINES times
BAD = {
    10: ('"twelve"', "EUR", "app.InvalidEntry: amount: 'twelve' is not a decimal"),
    30: ('"7.25"', "eur", "app.InvalidEntry: currency: 'eur' is not three capitals"),
}

CHAOS = """
extends = "heavy"

[endpoint]
lost_response_rate = { kinesis = 0.2, dynamodb = 0.01, sqs = 0.01 }
sqs_send_error_rate = 0.75

[workers]
kill_every = 0
oom_every = 0
task_kill_every_s = 0
"""


def _payload_file(folder: Path) -> Path:
    lines = []
    for n in range(LINES):
        amount, currency, _ = BAD.get(n, (f'"{n}.50"', "EUR", ""))
        lines.append(f'{{"account": "acc-{n % 7}", "amount": {amount}, "currency": "{currency}"}}')
    path = folder / "entries.ndjson"
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture(scope="module")
def ledger(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Runtime]:
    spec = importlib.util.spec_from_file_location("ledger_app", LEDGER)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    folder = tmp_path_factory.mktemp("ledger")
    # Heavy chaos (throttles, lost replies and requests, brownouts, a split and a merge), more lost
    # PutRecords answers (the producer writes aggregates again: copies for the consumers to skip) and
    # a dead-letter queue that refuses three sends in four (shards stall on it), so every widget of the
    # dashboard has something to draw; the verdict is exact all the same. No worker task is killed:
    # a task killed while a bad entry runs alone dead-letters it as the crash's suspect, a true cause
    # but not the entry's (tests/e2e/test_worker_group_chaos.py kills them).
    profile = folder / "chaos.toml"
    profile.write_text(CHAOS)
    runtime = start_runtime(module.build(folder / "cdk.out"), folder / "logs", chaos=load_profile(profile))
    try:
        yield runtime
    finally:
        runtime.stop()


@pytest.fixture(scope="module")
def verdict(ledger: Runtime, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    payloads = _payload_file(tmp_path_factory.mktemp("payloads"))
    where = ["--app", str(ledger.settings.cdk_out), "--endpoint-port", str(ledger.settings.endpoint_port),
             "--api-port", str(ledger.settings.api_port)]  # fmt: skip
    sent = subprocess.run(
        [sys.executable, "-m", "local", "send", *where, "--payload-file", str(payloads),
         "--count", str(COUNT), "--keys", "8", "--records-per-request", "40", "--lose-replies", "0.1",
         "--rate", "8", "--timeout", "300", "--json"],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    said = f"{sent.stdout[-4000:]}\n{sent.stderr[-3000:]}"
    assert sent.returncode == FAILED, f"dead letters fail the run\n{said}"
    return dict(json.loads(sent.stdout))


def test_its_verdict_tells_each_entry_applied_or_dead_lettered_by_cause_and_none_missing(
    verdict: dict[str, Any],
) -> None:
    (group,) = verdict["groups"]
    bad = len(BAD) * COUNT // LINES
    assert group["group"] == "ledger-entries" and group["kind"] == "records"
    assert (group["expected"], group["applied"], group["dlq_depth"], group["missing"]) == (
        COUNT, COUNT - bad, bad, 0
    )  # fmt: skip
    causes = {cause: found["count"] for cause, found in group["dead_letter_causes"].items()}
    assert causes == {cause: COUNT // LINES for _, _, cause in BAD.values()}
    assert not group["lost"] and not group["duplicated"]
    assert verdict["send"]["accepted"] == COUNT and verdict["stream"]["unbacked"] == []


def test_its_table_holds_exactly_the_good_entries_under_its_own_keys(
    ledger: Runtime, verdict: dict[str, Any]
) -> None:
    dynamodb = client("dynamodb", ledger.endpoint_url)
    (table,) = [name for name in dynamodb.list_tables()["TableNames"] if "EntriesTable" in name]
    pages = dynamodb.get_paginator("scan").paginate(TableName=table)
    items = [item for page in pages for item in page["Items"]]
    assert len(items) == len({item["entry"]["S"] for item in items}) == COUNT - len(BAD) * COUNT // LINES
    assert {item["currency"]["S"] for item in items} == {"EUR"}
    assert {item["account"]["S"] for item in items} == {f"acc-{n}" for n in range(7)}
    seqs = [int(item["entry"]["S"].rsplit("-", 1)[1]) for item in items]
    assert all(seq % LINES not in BAD for seq in seqs), "a bad entry was written"


def test_its_dashboard_draws_every_widget_with_data(ledger: Runtime, verdict: dict[str, Any]) -> None:
    widgets = ledger.monitor.dashboards[0].widgets
    charts = {w["properties"]["title"] for w in widgets if w.get("type") == "metric"}
    # The workers publish their metrics every 60 s (METRICS_INTERVAL_SECONDS): their last minute,
    # the stalls among it, reaches the page at their next flush.
    deadline, page = time.monotonic() + 150, f"{ledger.api.url}/_dashboard?range=900&period=auto"
    while True:
        report = browse(page, "dashboard-ledger", "render", 120)
        shown = report["widgets"]
        empty = [w["title"] for w in shown if w["kind"] == "chart" and w["points"] < 1]
        if not empty or time.monotonic() > deadline:
            break
        time.sleep(10)
    assert len(shown) == len(widgets)
    assert report["met"] and not empty, empty  # five renders, each chart with a datapoint at least
    assert {w["title"] for w in shown if w["kind"] == "chart"} == charts
    assert all(w["canvas"] and w["colored"] for w in shown if w["kind"] == "chart"), "drawn, in colour"
    (errors,) = [w for w in shown if w["kind"] == "log"]
    assert errors["rows"] >= 1 and "invalid ledger entry" in errors["text"], errors  # the handler's own
