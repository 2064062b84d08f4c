"""Issue 40, security review: the per-caller rate limit in IAM mode, through `make local`'s runtime.

The local API puts the SigV4 signing principal in `requestContext.identity.userArn`, as API Gateway
does (`test` signs as the account's root, `peer` as IAM user `peer`), and the producer function runs
under its own role with every call authorized at the endpoint: its counters are written with the
`dynamodb:UpdateItem` the template grants it. With `perCallerRate: 1`, a caller posting faster than
one request a second gets 429 with `Retry-After` and none of those records reaches the stream, while
the other caller is served in the same second. No clock is injected here (the function runs in its
own process): the test measures the seconds its posts span and bounds the accepted by it. And the
drill: the same template without the producer's `dynamodb:UpdateItem` answers 500, nothing written,
with the endpoint naming the denied action and the function — never a limit silently off.
"""

from __future__ import annotations

import copy
import json
import math
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from app import CDK_JSON, build
from local.app import model
from local.commands.send_http import Client
from local.commands.verify import access_denied, physical_stream
from local.runtime import Runtime
from tests.support.integration import read_stream
from tests.support.runtime import start_runtime

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(900)]

ROOT = (model.ACCESS_KEY, model.SECRET_KEY)
PEER = (model.PEER_ACCESS_KEY, model.PEER_SECRET_KEY)


@pytest.fixture(scope="module")
def limited_out(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """This app's cloud assembly, each IAM caller's share one request a second."""
    context = copy.deepcopy(json.loads(CDK_JSON.read_text())["context"])
    context["shardline"]["api"]["perCallerRate"] = 1
    outdir = tmp_path_factory.mktemp("cdk.out")
    app, _ = build(context, outdir=str(outdir))
    app.synth()
    return outdir


@pytest.fixture(scope="module")
def limited(limited_out: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Runtime]:
    runtime = start_runtime(limited_out, tmp_path_factory.mktemp("logs"))
    try:
        yield runtime
    finally:
        runtime.stop()


def post(runtime: Runtime, credentials: tuple[str, str], record_id: str) -> tuple[int, dict[str, str], dict]:
    body = json.dumps({"records": [{"partitionKey": record_id, "data": "AA==", "id": record_id}]}).encode()
    client = Client(runtime.api_url, sign=True, credentials=credentials)
    try:
        return client.post(f"/{runtime.api_url.split('/', 3)[3]}/streams/events/records", body)
    finally:
        client.close()


def aws(service: str, runtime: Runtime) -> object:
    import boto3

    return boto3.client(service, endpoint_url=runtime.endpoint_url, region_name="us-east-1",
                        aws_access_key_id="test", aws_secret_access_key="test")  # fmt: skip


def resource_name(runtime: Runtime, kind: str, part: str) -> str:
    (name,) = [r.name for r in runtime.app.resources if r.type == kind and part in r.name]
    return name


def test_per_caller_rate_limit_in_iam_mode_locally_a_caller_over_its_share_gets_429_the_other_is_served(
    limited,
):
    started = time.time()
    answers = [post(limited, ROOT, f"root-{n}") for n in range(6)]
    peer_status, _, peer_body = post(limited, PEER, "peer-0")
    ended = time.time()

    statuses = [status for status, _, _ in answers]
    windows = math.floor(ended) - math.floor(started) + 1  # the one-second windows the posts spanned
    assert set(statuses) <= {200, 429} and statuses.count(200) <= windows < 6, (statuses, windows)
    refused = [(n, headers, body) for n, (status, headers, body) in enumerate(answers) if status == 429]
    assert refused, statuses
    assert all(h["retry-after"] == "1" and b == {"message": "Too Many Requests"} for _, h, b in refused)
    assert peer_status == 200, peer_body  # the other caller's share is its own

    stream = physical_stream(limited.app, "events")
    landed = {
        user.id for entries in read_stream(aws("kinesis", limited), stream).values() for *_, user in entries
    }
    assert {f"root-{n}" for n, _, _ in refused}.isdisjoint(landed), "a 429 wrote nothing"
    assert {f"root-{n}" for n, s in enumerate(statuses) if s == 200} | {"peer-0"} <= landed

    # Counted in the idempotency table by the function's own role (UpdateItem, authorized locally).
    ids = resource_name(limited, "AWS::DynamoDB::Table", "ProducerIds")
    items = aws("dynamodb", limited).scan(TableName=ids)["Items"]  # type: ignore[attr-defined]
    counters = {
        item["scopedId"]["S"].rsplit("/", 1)[0]
        for item in items
        if item["scopedId"]["S"].startswith("#rate/")
    }
    assert counters == {"#rate/arn:aws:iam::000000000000:root", "#rate/arn:aws:iam::000000000000:user/peer"}


def without_producer_update_item(cdk_out: Path, into: Path) -> Path:
    """A copy of the cloud assembly whose producer role's policy drops `dynamodb:UpdateItem`."""
    shutil.copytree(cdk_out, into)
    [template_path] = into.glob("*.template.json")
    template = json.loads(template_path.read_text())
    dropped = 0
    for logical_id, resource in template["Resources"].items():
        if resource["Type"] == "AWS::IAM::Policy" and logical_id.startswith("ProducerFunctionServiceRole"):
            for statement in resource["Properties"]["PolicyDocument"]["Statement"]:
                actions = (
                    statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
                )
                if "dynamodb:UpdateItem" in actions:
                    statement["Action"] = [a for a in actions if a != "dynamodb:UpdateItem"]
                    dropped += 1
    assert dropped == 1, "the producer's role is granted UpdateItem once, on its idempotency table"
    template_path.write_text(json.dumps(template))
    return into


def test_per_caller_rate_limit_in_iam_mode_locally_without_its_grant_is_a_500_named_never_a_limit_off(
    limited_out: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    drilled = without_producer_update_item(limited_out, tmp_path_factory.mktemp("drill") / "cdk.out")
    runtime = start_runtime(drilled, tmp_path_factory.mktemp("logs"))
    try:
        since = time.time() - 1
        status, _, body = post(runtime, ROOT, "drilled-0")
        denied = access_denied(runtime.endpoint_url, since=since)
        stream = physical_stream(runtime.app, "events")
        landed = [
            user for entries in read_stream(aws("kinesis", runtime), stream).values() for *_, user in entries
        ]
    finally:
        runtime.stop()
    assert status == 500 and "request id" in body["message"], body
    assert landed == [], "nothing was written"
    producer = next(f for f in runtime.app.functions if f.logical_id.startswith("ProducerFunction"))
    assert {(d["who"], d["action"]) for d in denied} == {
        (f"function {producer.name}", "dynamodb:UpdateItem")
    }, denied
