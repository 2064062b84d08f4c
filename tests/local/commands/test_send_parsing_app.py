"""Property 7 of issue 42 against a real local app whose consumer parses its records
(tests/support/parsing_app): `send` with a payload template, and a verdict that tells the records
applied, dead-lettered (with their cause) and missing apart."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator

import pytest

from local.__main__ import main
from local.app.provision import client
from local.app.template import load
from local.commands.send import send
from local.commands.send_payloads import parse_template
from local.commands.verify import wait_and_verify
from local.commands.verify_render import render
from local.exit_codes import FAILED, OK
from local.runtime import Runtime
from tests.support.parsing_app import BAD_TENANT, DROPPED_TENANT, GROUP, ROUTE, parsing_assembly
from tests.support.runtime import start_runtime

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(900)]


@pytest.fixture(scope="module")
def parsing_runtime(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Runtime]:
    folder = tmp_path_factory.mktemp("parsing-app")
    runtime = start_runtime(parsing_assembly(folder), folder / "logs")
    try:
        yield runtime
    finally:
        runtime.stop()


def wait_until(done: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if done():
            return True
        time.sleep(1.0)
    return done()


def test_7_verdict_tells_applied_dead_lettered_and_missing_apart(parsing_runtime: Runtime) -> None:
    runtime = parsing_runtime
    app = load(runtime.settings.cdk_out, endpoint_url=runtime.endpoint_url)
    template = parse_template('{"order": "{id}", "tenant": "{i}", "at": "{now}"}')
    report = send(
        f"{runtime.api_url}/streams", ROUTE, count=20, keys=5, batch=5, payloads=template, progress=False
    )
    assert len(report.accepted) == 20
    bad = [seq for seq in range(20) if seq % 5 == BAD_TENANT]  # "{i}": the key's index, seq % 5 here
    dropped = [seq for seq in range(20) if seq % 5 == DROPPED_TENANT]
    # The consumers settle first (each bad record is retried, then dead-lettered): the verdict then
    # reads what they did, instead of waiting its timeout out for the dropped records.
    (group,) = [f for f in app.functions if f.environment.get("SHARDLINE_GROUP") == GROUP]
    sqs, dynamodb = client("sqs", runtime.endpoint_url), client("dynamodb", runtime.endpoint_url)
    dlq, table = group.environment["DLQ_URL"], group.environment["SINK_TABLE"]

    def settled() -> bool:
        depth = sqs.get_queue_attributes(QueueUrl=dlq, AttributeNames=["ApproximateNumberOfMessages"])
        items = dynamodb.scan(TableName=table, Select="COUNT")["Count"]
        return int(depth["Attributes"]["ApproximateNumberOfMessages"]) == len(bad) and items == 12

    assert wait_until(settled, 600)
    verdict = wait_and_verify(runtime.endpoint_url, app, report, timeout=5, progress=False)
    shown = render(verdict)
    (result,) = verdict.groups
    assert (result.applied, result.dlq_depth, result.missing) == (12, 4, 4), shown
    assert result.dead_lettered == bad and result.lost == dropped
    [(cause, letters)] = result.dead_letter_causes.items()
    assert cause == "ValueError: tenant 3 is closed"
    assert letters.count == 4 and letters.ids == [report.id_of(seq) for seq in bad] and letters.poison == 0
    assert not result.ok and not verdict.ok  # a dead-lettered record is not ok: it was not sent as poison
    assert verdict.stream.user_records == 20 and verdict.stream.ok  # the stream knows them by their ids
    as_json = verdict.as_dict()["groups"][0]
    assert (as_json["applied"], as_json["dlq_depth"], as_json["missing"]) == (12, 4, 4)
    assert as_json["dead_letter_causes"] == {cause: {"count": 4, "poison": 0, "ids": letters.ids}}
    assert f"{GROUP}: dead-lettered ×4 ValueError: tenant 3 is closed: {', '.join(letters.ids)}" in shown
    assert "verdict: 4 missing, 4 dead-lettered (not sent as poison), 0 duplicate effects" in shown
    assert "│ 12/20   │ 4 (4 not poison) │ 4 " in shown


def test_7_exit_codes_send_is_0_when_the_verdict_holds_1_when_it_fails_and_json_is_the_verdict_alone(
    parsing_runtime: Runtime, capsys: pytest.CaptureFixture[str]
) -> None:
    settings = parsing_runtime.settings
    where = ["--cdk-out", str(settings.cdk_out), "--endpoint-port", str(settings.endpoint_port),
             "--api-port", str(settings.api_port)]  # fmt: skip
    template = ["--payload-template", '{"order": "{id}", "tenant": "{i}"}', "--json", "--timeout", "300"]
    assert main([*where, "send", "--count", "9", "--keys", "3", *template]) == OK  # tenants 0-2: applied
    said = capsys.readouterr()
    verdict = json.loads(said.out)  # stdout is the verdict, whole; stderr has nothing
    assert said.err == "" and verdict["ok"] and verdict["groups"][0]["applied"] == 9
    assert main([*where, "send", "--count", "4", "--keys", "4", *template]) == FAILED  # tenant 3: DLQ
    said = capsys.readouterr()
    verdict = json.loads(said.out)
    assert said.err == "" and not verdict["ok"]
    assert verdict["groups"][0]["dead_letter_causes"]["ValueError: tenant 3 is closed"]["count"] == 1
