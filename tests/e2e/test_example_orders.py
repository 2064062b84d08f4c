"""The example app in examples/orders, as a team has it: shardline installed from its wheel into a
fresh venv (the wheel with its `cdk` and `local` extras), none of this repository's folders importable.

It synthesizes offline and passes cdk-nag (the synth raises on an unacknowledged finding) and
cfn-lint; then the installed console script runs it (`shardline local up --app cdk.out`), `shardline
local send` posts orders through its API and gives its verdict, and the test reads the team's own
table and queue itself: every accepted order is in the orders table once, and in the FIFO queue
once; its dashboard is drawn.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest

from tests.support.runtime import free_port
from tests.support.team_venv import run, team_venv

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "orders"
ORDERS = 600


@pytest.fixture(scope="module")
def team(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A fresh venv with shardline[cdk,local] from the wheel, and a copy of the example app."""
    venv = team_venv(tmp_path_factory.mktemp("team"))
    app = venv.root / "orders"
    shutil.copytree(EXAMPLE, app, ignore=shutil.ignore_patterns("cdk.out", "__pycache__"))
    return {"root": venv.root, "venv": venv.venv, "python": venv.python, "app": app, "env": venv.env}


@pytest.fixture(scope="module")
def cdk_out(team: dict[str, Any]) -> Path:
    out = team["root"] / "cdk.out"
    run(
        [str(team["python"]), "-E", "-s", "app.py"],
        cwd=team["app"],
        env={**team["env"], "CDK_OUTDIR": str(out)},
    )
    return out


def test_the_example_sees_only_the_venv_and_itself(team: dict[str, Any]) -> None:
    probe = "import json, sys, shardline.cdk; print(json.dumps([sys.path, shardline.__file__]))"
    paths, library = json.loads(
        run([str(team["python"]), "-E", "-s", "-c", probe], cwd=team["app"], env=team["env"])
    )
    base = Path(sys.base_prefix).resolve()
    outside = [p for p in paths if p and not Path(p).resolve().is_relative_to(team["venv"].resolve())
               and not Path(p).resolve().is_relative_to(base)]  # fmt: skip
    assert outside == [], f"sys.path holds more than the venv, the interpreter and the app: {outside}"
    assert Path(library).resolve().is_relative_to(team["venv"].resolve())
    assert not any(Path(p).resolve().is_relative_to(REPO) for p in paths if p)
    with pytest.raises(subprocess.CalledProcessError):
        subprocess.run([str(team["python"]), "-E", "-s", "-c", "import local"], cwd=team["app"],
                       env=team["env"], check=True, capture_output=True)  # fmt: skip


def test_the_example_synthesizes_offline_and_passes_nag_and_cfn_lint(cdk_out: Path) -> None:
    template = json.loads((cdk_out / "orders.template.json").read_text())
    types = [resource["Type"] for resource in template["Resources"].values()]
    assert types.count("AWS::Lambda::EventSourceMapping") == 2
    assert "AWS::Kinesis::Stream" in types and "AWS::ApiGateway::RestApi" in types
    # The layer built from the installed package: the library, not its constructs nor the local runtime.
    (layer,) = [path.parent for path in cdk_out.glob("asset.*/python/shardline/__init__.py")]
    shipped = {path.relative_to(layer).parts[0] for path in layer.rglob("*.py")}
    assert {"consumer", "producer", "kpl"} <= shipped and not shipped & {"cdk", "local"}, shipped
    cfn_lint = str(Path(sys.executable).parent / "cfn-lint")
    template_file = str(cdk_out / "orders.template.json")
    lint = subprocess.run([cfn_lint, "--format", "parseable", template_file], capture_output=True, text=True,
                          timeout=300)  # fmt: skip
    errors = [line for line in lint.stdout.splitlines() if ":E" in line]
    assert not errors, "\n".join(errors)


@pytest.fixture(scope="module")
def running(team: dict[str, Any], cdk_out: Path) -> Iterator[dict[str, Any]]:
    endpoint_port, api_port = free_port(), free_port()
    where = ["--app", str(cdk_out), "--endpoint-port", str(endpoint_port), "--api-port", str(api_port)]
    script = str(team["venv"] / "bin" / "shardline")
    log = (team["root"] / "up.log").open("w")
    logs = str(team["root"] / "logs")
    up = subprocess.Popen([script, "local", "up", *where, "--log-dir", logs], cwd=team["root"],
                          env=team["env"], stdout=log, stderr=subprocess.STDOUT)  # fmt: skip
    try:
        deadline = time.monotonic() + 300
        while True:
            status = subprocess.run([script, "local", "status", "--json", *where], cwd=team["root"],
                                    env=team["env"], capture_output=True, text=True)  # fmt: skip
            if status.returncode == 0:
                break
            assert up.poll() is None, (team["root"] / "up.log").read_text()[-4000:]
            assert time.monotonic() < deadline, status.stdout + status.stderr
            time.sleep(1)
        yield {"script": script, "where": where, "endpoint": f"http://127.0.0.1:{endpoint_port}",
               "api": f"http://127.0.0.1:{api_port}", "up": up}  # fmt: skip
    finally:
        up.send_signal(signal.SIGINT)
        try:
            up.wait(timeout=60)
        except subprocess.TimeoutExpired:
            up.kill()
        log.close()


def aws(service: str, endpoint: str) -> Any:
    return boto3.client(service, endpoint_url=endpoint, region_name="us-east-1",
                        aws_access_key_id="test", aws_secret_access_key="test")  # fmt: skip


def test_orders_sent_through_its_api_land_once_in_its_table_and_its_queue(
    team: dict[str, Any], running: dict[str, Any]
) -> None:
    sent = subprocess.run(
        [running["script"], "local", "send", "--count", str(ORDERS), "--keys", "20", "--json",
         "--timeout", "300", *running["where"]],
        cwd=team["root"], env=team["env"], capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert sent.returncode == 0, sent.stdout[-6000:] + sent.stderr[-4000:]
    verdict = json.loads(sent.stdout)
    assert verdict["ok"] is True
    # The team's table and queue, read here, not through the verdict.
    dynamodb = aws("dynamodb", running["endpoint"])
    table = next(
        name for name in dynamodb.list_tables()["TableNames"] if "Orders" in name and "Lease" not in name
    )
    items = [
        item for page in dynamodb.get_paginator("scan").paginate(TableName=table) for item in page["Items"]
    ]
    order_ids = [item["orderId"]["S"] for item in items]
    assert len(order_ids) == ORDERS == len(set(order_ids))
    assert {item["tenantId"]["S"] for item in items} == {
        f"{order_ids[0].rsplit('-', 1)[0]}-k{k}" for k in range(20)
    }
    sqs = aws("sqs", running["endpoint"])
    (url,) = [
        url for url in sqs.list_queues()["QueueUrls"] if "OrdersOut" in url and "Undelivered" not in url
    ]
    forwarded: list[str] = []
    while True:
        messages = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, AttributeNames=["All"]).get(
            "Messages", []
        )
        if not messages:
            break
        forwarded += [m["Attributes"]["MessageDeduplicationId"] for m in messages]
        sqs.delete_message_batch(QueueUrl=url, Entries=[{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]}
                                                        for i, m in enumerate(messages)])  # fmt: skip
    assert sorted(forwarded) == sorted(order_ids)


def test_its_dashboard_is_drawn_with_what_the_orders_did(running: dict[str, Any]) -> None:
    """After the send (this module's tests run in order): the app's own dashboard, every widget drawn
    (none "unsupported"), its charts carrying data points, and the page's chart library served."""
    with urllib.request.urlopen(f"{running['api']}/_dashboard", timeout=30) as page:
        assert page.status == 200 and b"<html" in page.read().lower()
    with urllib.request.urlopen(f"{running['api']}/_dashboard/assets/uPlot.iife.min.js", timeout=30) as asset:
        assert asset.status == 200 and len(asset.read()) > 10_000
    with urllib.request.urlopen(f"{running['api']}/_dashboard/api/board?range=900", timeout=60) as answer:
        board = json.loads(answer.read())
    assert board["dashboards"] == ["orders"]
    widgets = board["widgets"]
    assert widgets and not [w["title"] for w in widgets if w["kind"] == "unsupported"]
    charts = [w for w in widgets if w["kind"] == "chart"]
    drawn = [w["title"] for w in charts if any(v for line in w["series"] for _, v in line["points"] if v)]
    assert any("order-writer" in title for title in drawn), drawn
