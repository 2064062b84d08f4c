"""What IAM enforcement costs the local runtime (issue 40, "Performance"): authorization's cost per
request at the endpoint, and each consumer group's drain with enforcement on and off, in one run.

    python -m bench.iam_enforcement [--quick]

1. Per request: the endpoint's `Enforcer` in this process, in front of a WSGI app that answers at
   once, on requests botocore really signed (PutRecords of 500, a TransactWriteItems of 4 items, a
   GetRecords, a SendMessage): µs per request installed (SigV4 check, the request's actions, each
   evaluated) against the same middleware not installed (a pass-through), best of 5.
2. Drain: `python -m local up` and `python -m local up --no-iam`, alternated (on, off, on, off) on
   fresh runtimes; each sends the same records and waits for every group's checkpoints; records/s of
   each group from the first POST to its last checkpoint (`bench.local_runtime.ingest_and_drain`).
   The target: enforcement costs at most 10 % (on ÷ off ≥ 0.90), best run of each.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import io
import json
import os
import platform
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import boto3
from botocore.config import Config

from bench.local_runtime import ingest_and_drain
from bench.report import Report, Row, Target, render
from bench.up_process import synthesize
from local.app import model
from local.app.template import load
from local.iam.enforcer import Enforcer
from local.iam.principals import endpoint_config, sessions_of

REQUESTS = 2_000


def _log(message: str) -> None:
    print(f"[bench] {message}", file=sys.stderr, flush=True)


def _signed_requests(app: model.LocalApp) -> dict[str, tuple[Any, str, str]]:
    """name -> (botocore's prepared request, access key, secret) of a function's everyday calls."""
    sessions = {session.who: session for session in sessions_of(app)}
    producer = next(f for f in app.functions if f.logical_id.startswith("Producer"))
    counter = next(f for f in app.functions if f.logical_id.startswith("Groupkeycounter"))
    sink = next(r.name for r in app.resources if r.logical_id.startswith("GroupkeycounterSink"))
    queue = next(r.name for r in app.resources if r.logical_id.startswith("GroupkeycounterDeadLetters"))
    stream = next(s.name for s in app.streams)
    captured: dict[str, tuple[Any, str, str]] = {}

    def capture(name: str, who: str, service: str, operation: str, **request: Any) -> None:
        key, secret = sessions[who].credentials
        client = boto3.client(
            service,
            endpoint_url="http://127.0.0.1:4566",
            region_name=model.REGION,
            aws_access_key_id=key,
            aws_secret_access_key=secret,
            config=Config(retries={"total_max_attempts": 1}),
        )

        def keep(request: Any, **_: Any) -> Any:
            captured[name] = (request, key, secret)
            raise _Captured

        client.meta.events.register("before-send", keep)
        with contextlib.suppress(_Captured):
            getattr(client, operation)(**request)

    records = [{"Data": b"x" * 100, "PartitionKey": f"k{i}"} for i in range(500)]
    capture(
        "PutRecords (500)",
        f"function {producer.name}",
        "kinesis",
        "put_records",
        StreamName=stream,
        Records=records,
    )
    update = {
        "TableName": sink,
        "Key": {"partitionKey": {"S": "k"}},
        "UpdateExpression": "ADD #c :one",
        "ExpressionAttributeNames": {"#c": "count"},
        "ExpressionAttributeValues": {":one": {"N": "1"}},
    }
    capture(
        "TransactWriteItems (4)",
        f"function {counter.name}",
        "dynamodb",
        "transact_write_items",
        TransactItems=[{"Update": update}] * 4,
    )
    capture(
        "GetRecords",
        f"mapping of {counter.name}",
        "kinesis",
        "get_records",
        ShardIterator=_iterator(stream),
        Limit=100,
    )
    capture(
        "SendMessage",
        f"function {counter.name}",
        "sqs",
        "send_message",
        QueueUrl=model.queue_url("http://127.0.0.1:4566", queue),
        MessageBody="x",
    )
    return captured


class _Captured(Exception):
    """The request is built and signed: keep it, send nothing."""


def _iterator(stream: str) -> str:
    """A shard iterator as the local endpoint issues them (`local.endpoint.kinesis.fixes`)."""
    return base64.b64encode(
        f"{stream}:shardId-000000000000:49000000000000000000000000000000000000000000000000000000:0".encode()
    ).decode()


def _environ(request: Any) -> dict[str, Any]:
    body = request.body if isinstance(request.body, bytes) else (request.body or b"")
    if not isinstance(body, bytes):
        body = body.encode()
    path, _, query = request.url.split("://", 1)[1].partition("/")[2].partition("?")
    environ = {
        "REQUEST_METHOD": request.method,
        "PATH_INFO": "/" + path,
        "RAW_URI": "/" + path + (f"?{query}" if query else ""),
        "QUERY_STRING": query,
        "CONTENT_LENGTH": str(len(body)),
        "wsgi.input": io.BytesIO(body),
    }
    for name, value in request.headers.items():
        value = value.decode() if isinstance(value, bytes) else value
        key = name.upper().replace("-", "_")
        environ[key if key in ("CONTENT_TYPE", "CONTENT_LENGTH") else f"HTTP_{key}"] = value
    environ["HTTP_HOST"] = "127.0.0.1:4566"
    return environ


def per_request(app: model.LocalApp, count: int) -> dict[str, dict[str, float]]:
    """µs per request through the enforcer, installed and not, per kind of request (best of 5)."""
    answered: list[str] = []

    def moto(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        start_response("200 OK", [])
        return [b"{}"]

    def start_response(status: str, headers: list[tuple[str, str]]) -> None:
        answered.append(status)

    config = endpoint_config(app, sessions_of(app))
    figures: dict[str, dict[str, float]] = {}
    for name, (request, _, _) in _signed_requests(app).items():
        timings = {}
        for mode in ("off", "on"):
            enforcer = Enforcer(moto)
            if mode == "on":
                enforcer.install(json.loads(json.dumps(config)))
            best = float("inf")
            for _ in range(5):
                environs = [_environ(request) for _ in range(count)]
                answered.clear()
                began = time.perf_counter()
                for environ in environs:
                    enforcer(environ, start_response)
                best = min(best, (time.perf_counter() - began) / count * 1e6)
            assert answered == ["200 OK"] * count, f"{name} ({mode}): {set(answered)}"
            timings[mode] = best
        figures[name] = timings
    return figures


def measure(quick: bool) -> tuple[list[Row], dict[str, Any]]:
    count = 10_000 if quick else 40_000
    rows: list[Row] = []
    details: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="bench-iam-") as tmp:
        root = Path(tmp)
        _log("iam: synthesizing the app")
        cdk_out = synthesize(root / "cdk.out")
        app = load(cdk_out, endpoint_url="http://127.0.0.1:4566")
        _log("iam: µs per request through the enforcer")
        details["per_request_us"] = per_request(app, REQUESTS // (10 if quick else 1))
        for name, timing in details["per_request_us"].items():
            rows.append(Row(f"endpoint authorization, {name}", "µs", timing["on"] - timing["off"]))
        runs: dict[str, list[dict[str, Any]]] = {"on": [], "off": []}
        for index, mode in enumerate(("on", "off", "on", "off")):
            _log(f"iam: drain of {count:,} records, enforcement {mode} (run {index + 1} of 4)")
            extra = () if mode == "on" else ("--no-iam",)
            runs[mode].append(ingest_and_drain(cdk_out, root / f"drain-{index}", count, 8, extra))
        details["drains"] = runs
    groups = [group["group"] for group in runs["on"][0]["groups"]]
    for group in groups:

        def best(mode: str, name: str = group) -> float:
            rates = [
                g["records_per_s"] or 0.0 for run in runs[mode] for g in run["groups"] if g["group"] == name
            ]
            return max(rates)

        on, off = best("on"), best("off")
        rows.append(
            Row(
                f"drain of {group}, enforcement on ÷ off",
                "rec/s",
                on,
                peer="enforcement off",
                peer_value=off,
                target=Target("ratio", ">=", 0.90),
            )
        )
    return rows, details


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer records and requests")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    rows, details = measure(args.quick)
    from bench import peers

    meta = {
        "python": platform.python_version(),
        "platform": f"{platform.system()} {platform.machine()}",
        "cpus": len(os.sched_getaffinity(0)),
        "repeats": 2,
        "seed": 0,
        "quick": args.quick,
        **peers.versions(),
    }
    meta["seconds"] = time.perf_counter() - started
    notes = [
        f"{name}: {t['on']:.0f} µs installed, {t['off']:.0f} µs passed through"
        for name, t in details["per_request_us"].items()
    ]
    for mode, runs in details["drains"].items():
        for run in runs:
            rates = ", ".join(f"{g['group']} {g['records_per_s'] or 0:,.0f} rec/s" for g in run["groups"])
            notes.append(f"drain, enforcement {mode}: {rates}")
    print(render(Report(meta=meta, rows=rows, notes=notes, details=details)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
