"""Property 7 of issue 42: `send`'s records carry the user's payloads — a JSON template filled per
record, or the lines of an ndjson file — and a bad template or file is refused before anything is
sent (`local.commands.send_payloads`), against a stub producer API on loopback."""

from __future__ import annotations

import base64
import datetime
import json
from pathlib import Path
from typing import Any

import pytest

from local.__main__ import main
from local.commands.send_payloads import PayloadError, load_payload_file, parse_template
from local.commands.send_shapes import ShapeError
from tests.support.parsing_app import parsing_assembly
from tests.support.send import StubApi, _send

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def parsing_cdk_out(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return parsing_assembly(tmp_path_factory.mktemp("parsing-app"))


def _data(stub: StubApi) -> list[Any]:
    return [json.loads(base64.b64decode(r["data"])) for request in stub.received for r in request.records]


def test_7_send_payload_template_fills_each_record(stub_api: StubApi) -> None:
    template = parse_template(
        '{"order": "{id}", "n": "{seq}", "tenant": "{i}", "label": "#{seq:03d} of {run}", '
        '"key": "{key}", "at": "{now}", "text": "{seq!s}", "braces": "{{x}}", "tags": ["{i}", 7, null]}'
    )
    report = _send(stub_api, 12, keys=5, batch=4, payloads=template, run_id="run-t")
    assert len(report.accepted) == 12 and not report.failed
    records = [r for request in stub_api.received for r in request.records]
    for record, data in zip(records, _data(stub_api), strict=True):
        seq = data["n"]
        assert record["id"] == data["order"] == f"run-t-{seq}"
        assert record["partitionKey"] == data["key"] == f"run-t-k{seq % 5}"
        assert data["tenant"] == seq % 5 and data["tags"] == [seq % 5, 7, None]  # "{i}" alone: a number
        assert (
            data["label"] == f"#{seq:03d} of run-t" and data["text"] == str(seq) and data["braces"] == "{x}"
        )
        at = datetime.datetime.fromisoformat(data["at"].replace("Z", "+00:00")).timestamp()
        assert abs(at - report.accepted[seq].post_time) < 0.001  # {now}: its first POST
        assert report.payload_of(seq, report.accepted[seq].post_time) == base64.b64decode(record["data"])
    assert sorted(d["n"] for d in _data(stub_api)) == list(range(12))
    assert report.as_dict()["payloads"] == "template --payload-template"


def test_7_send_payload_file_cycles_its_lines(stub_api: StubApi, tmp_path: Path) -> None:
    lines = ['{"sku": "a", "qty": 1}', "", '{"sku": "b",   "qty": 2}', '["c"]']
    path = tmp_path / "orders.ndjson"
    path.write_text("\n".join(lines) + "\n")
    payloads = load_payload_file(path)
    report = _send(stub_api, 7, batch=3, payloads=payloads, concurrency=1, run_id="run-f")
    sent = {
        r["id"]: json.loads(base64.b64decode(r["data"]))
        for request in stub_api.received
        for r in request.records
    }
    cycle = [{"sku": "a", "qty": 1}, {"sku": "b", "qty": 2}, ["c"]]  # the blank line skipped
    assert sent == {f"run-f-{seq}": cycle[seq % 3] for seq in range(7)}
    assert base64.b64decode(stub_api.received[0].records[1]["data"]) == b'{"sku":"b","qty":2}'  # compact
    assert len(report.accepted) == 7 and report.as_dict()["payloads"] == f"3 payloads of {path}"


def test_7_a_bad_payload_file_is_refused_naming_the_line_and_nothing_is_sent(
    stub_api: StubApi, tmp_path: Path, parsing_cdk_out: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "orders.ndjson"
    path.write_text('{"sku": "a"}\n{"sku": "b"}\n{"sku": c}\n')
    port = stub_api.url.split(":")[2].split("/")[0]
    where = ["--cdk-out", str(parsing_cdk_out), "--api-port", port, "--endpoint-port", port]
    code = main([*where, "send", "--count", "5", "--payload-file", str(path), "--no-wait"])
    assert code == 2 and stub_api.received == []
    assert (
        f"{path}: line 3: not JSON (column 9: Expecting value); nothing was sent" in capsys.readouterr().err
    )
    # The same command with the line fixed sends: it was the line, not the command, that was refused.
    path.write_text('{"sku": "a"}\n{"sku": "b"}\n{"sku": "c"}\n')
    assert main([*where, "send", "--count", "5", "--payload-file", str(path), "--no-wait"]) == 0
    assert len(_data(stub_api)) == 5


@pytest.mark.parametrize(
    ("template", "said"),
    [
        ('{"a": {"b": ["x", "{nope}"]}}', "field $.a.b[1]: unknown placeholder {nope}"),
        ('{"a": "{seq.real}"}', "field $.a: unknown placeholder {seq.real}"),
        ('{"a": "{id!r}"}', "field $.a: conversion !r"),
        ('{"a": "{seq:q}"}', "field $.a: bad format spec {seq:q}"),
        ('{"a": "half {"}', "field $.a: Single '{' encountered"),
        ('{"a": 1,}', "--payload-template: not JSON: line 1 column 9"),
    ],
)
def test_7_a_bad_template_is_refused_naming_the_field(template: str, said: str) -> None:
    with pytest.raises(PayloadError) as refused:
        parse_template(template)
    assert said in str(refused.value)


def test_7_a_template_file_is_named_in_its_errors(tmp_path: Path) -> None:
    path = tmp_path / "order.json"
    path.write_text('{\n  "order": "{id}",\n  "x": "{oops}"\n}')
    with pytest.raises(PayloadError, match=rf"^{path}: field \$\.x: unknown placeholder \{{oops\}}"):
        parse_template(f"@{path}")
    path.write_text('{"order": "{id}"}')
    assert parse_template(f"@{path}").describe() == f"template {path}"


def test_7_a_template_without_ids_or_with_poison_is_refused_and_nothing_is_sent(stub_api: StubApi) -> None:
    template = parse_template('{"order": "{id}"}')
    with pytest.raises(ShapeError, match=r"needs ids .* the verdict knows such records by their ids alone"):
        _send(stub_api, 5, payloads=template, ids=False)
    with pytest.raises(ShapeError, match="--poison-rate takes send's own payloads"):
        _send(stub_api, 5, payloads=template, poison_rate=0.5)
    assert stub_api.received == []


def test_7_records_per_request_is_the_request_size_and_batch_its_alias(
    stub_api: StubApi, parsing_cdk_out: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    port = stub_api.url.split(":")[2].split("/")[0]
    where = ["--cdk-out", str(parsing_cdk_out), "--api-port", port, "--endpoint-port", port]
    assert main([*where, "send", "--count", "7", "--records-per-request", "3", "--no-wait"]) == 0
    assert sorted(len(request.records) for request in stub_api.received) == [1, 3, 3]
    assert main([*where, "send", "--count", "4", "--batch", "2", "--no-wait"]) == 0
    assert [len(request.records) for request in stub_api.received[3:]] == [2, 2]
    assert main([*where, "send", "--count", "4", "--records-per-request", "501", "--no-wait"]) == 2
    assert "--records-per-request: 1 to 500, got 501" in capsys.readouterr().err
    assert len(stub_api.received) == 5
