"""Issue 25, item 3, through `make local`'s runtime: an app whose API has clients takes requests only
with a client's key (each within its quota), and its producer's log names the caller and the shard
and sequence numbers of what it wrote."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from app import CDK_JSON, build
from local.commands.send import send
from local.commands.send_http import Client
from local.commands.verify import wait_and_verify
from local.commands.verify_render import render
from local.runtime import Runtime
from tests.support.runtime import start_runtime

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(900)]

CLIENTS = [
    {"name": "orders", "requestsPerDay": 1000},
    {"name": "billing", "requestsPerDay": 2},
]


@pytest.fixture(scope="module")
def keyed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Runtime]:
    context = copy.deepcopy(json.loads(CDK_JSON.read_text())["context"])
    context["shardline"]["api"]["clients"] = CLIENTS
    outdir = tmp_path_factory.mktemp("cdk.out")
    app, _ = build(context, outdir=str(outdir))
    app.synth()
    runtime = start_runtime(outdir, tmp_path_factory.mktemp("logs"))
    try:
        yield runtime
    finally:
        runtime.stop()


def key_of(runtime: Runtime, client: str) -> str:
    (plan,) = [plan for plan in runtime.app.apis[0].keys if plan.name.endswith(f"-{client}")]
    return plan.value


def post_one(runtime: Runtime, api_key: str | None, record_id: str) -> tuple[int, dict]:
    body = json.dumps({"records": [{"partitionKey": record_id, "data": "AA==", "id": record_id}]}).encode()
    client = Client(runtime.api_url, sign=True, api_key=api_key)
    try:
        status, _, answer = client.post(f"/{runtime.api_url.split('/', 3)[3]}/streams/events/records", body)
    finally:
        client.close()
    return status, answer


def test_3_a_clients_key_sends_and_every_record_reaches_both_groups_once(keyed):
    report = send(
        f"{keyed.api_url}/streams",
        "events",
        count=400,
        batch=100,
        progress=False,
        api_key=key_of(keyed, "orders"),
    )
    verdict = wait_and_verify(keyed.endpoint_url, keyed.app, report, timeout=600, progress=False)
    assert verdict.ok, render(verdict)
    assert len(report.accepted) == 400 and not report.failed


def test_3_without_a_known_key_the_api_refuses_and_nothing_is_written(keyed):
    for api_key in (None, "not-a-key"):
        status, answer = post_one(keyed, api_key, f"keyless-{api_key}")
        assert status == 403, answer


def test_3_a_client_past_its_daily_quota_gets_429_limit_exceeded(keyed):
    billing = key_of(keyed, "billing")
    assert [post_one(keyed, billing, f"billing-{n}")[0] for n in range(2)] == [200, 200]
    status, answer = post_one(keyed, billing, "billing-3")
    assert (status, answer.get("message")) == (429, "Limit Exceeded")
    assert post_one(keyed, key_of(keyed, "orders"), "orders-after")[0] == 200, (
        "the other client's quota is its own"
    )


def test_3_the_producers_log_names_the_caller_and_where_its_records_went(keyed):
    status, answer = post_one(keyed, key_of(keyed, "orders"), "audited-1")
    assert status == 200, answer
    (entry,) = answer["records"]
    answered = [
        json.loads(line)
        for path in Path(keyed.settings.log_dir).glob("*.log")
        for line in path.read_text().splitlines()
        if line.startswith("{") and '"message":"answered"' in line
    ]
    wrote = entry["shardId"], entry["sequenceNumber"]
    (line,) = [
        line
        for line in answered
        if wrote[1] in line.get("written", {}).get(wrote[0], {}).get("sequenceNumbers", ())
    ]
    assert line["service"] == "shardline-producer" and line["written"][wrote[0]]["records"] == 1
    assert line["caller.userArn"] == "arn:aws:iam::000000000000:root"
    assert line["caller.apiKeyId"] and line["caller.sourceIp"] == "127.0.0.1"
