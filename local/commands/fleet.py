"""Two more kinds of sender for the e2e chaos run and the soak, and the verdict on what they sent.

    fleet = forked_fleet(endpoint_url, stream_name, processes=3, per_process=1_000)
    pair = two_callers(api_url, "events", count=1_000)        # same ids, same Idempotency-Keys
    result = wait_applied(endpoint_url, app, stream_name, fleet.confirmed + pair.confirmed)
    assert result.ok, result.describe()

- A *forked producer fleet*: one library `Producer` created (and used) in this process, as an
  application creates it at module level, then forked (multiprocessing's "fork" context: a real
  `os.fork`, as gunicorn --preload or a prefork pool does) into `processes` children that each put
  their own records, with ids, straight to the local endpoint's Kinesis — while the parent keeps
  putting too. Copies of one producer must not send under one producer id: a consumer would skip
  one copy's aggregates as copies of another's.
- *Two callers sharing ids*: the same `send` run (the same ids, the same Idempotency-Key per
  request) POSTed by two principals — the local credentials (the account's root) and
  `model.PEER_ACCESS_KEY` (IAM user `peer`). The API stamps each request's principal on its
  records, so two callers' equal ids are two records; neither may be taken for a copy of the other.

The verdict (`wait_applied`) is by identity and by caller: every confirmed record is in each
event-sink-layout records sink exactly under its caller's scoped id (`id#<caller scope>/i/<id>`),
with its own data, and every counter counts each key exactly as many times as confirmed records
carry it (a record applied twice, or one of two callers' records skipped, shows there). A record
confirmed (a 2xx entry with a sequence number) and not applied is lost behind a success.
"""

from __future__ import annotations

import json
import multiprocessing
import secrets
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

from shardline.kinesis import UserRecord
from shardline.kpl._identity import NO_CALLER_SCOPE, caller_scope
from shardline.producer import Producer

from ..app import model
from ..app.provision import client
from .send import SendReport, send
from .verify_groups import consumer_groups
from .verify_readers import read_counts
from .verify_verdict import COUNTER, RECORDS

__all__ = [
    "PEER_CALLER",
    "ROOT_CALLER",
    "Applied",
    "CallersReport",
    "Expected",
    "FleetReport",
    "forked_fleet",
    "two_callers",
    "wait_applied",
]

#: The principals the local API stamps for its two credential pairs.
ROOT_CALLER = f"arn:aws:iam::{model.ACCOUNT}:root"
PEER_CALLER = f"arn:aws:iam::{model.ACCOUNT}:user/{model.PEER_ACCESS_KEY}"
FLEET_DEADLINE_S = 300.0  # seconds a process's put_many may take under chaos
ID_BATCH = 100  # BatchGetItem's limit on keys per call


@dataclass(frozen=True)
class Expected:
    """A record confirmed by Kinesis's word: it must be applied once, under its caller's scope."""

    scope: str
    id: str
    key: str
    data: bytes


@dataclass
class FleetReport:
    run_id: str
    processes: int
    per_process: int
    confirmed: list[Expected] = field(default_factory=list)
    # records without Kinesis's word: refused, or a forked copy's that died before it answered (those
    # may be in the stream): 0 in a whole run
    unconfirmed: int = 0
    elapsed: float = 0.0


def _fleet_records(run_id: str, process: int, count: int, keys: int, size: int) -> list[UserRecord]:
    records = []
    for i in range(count):
        head = json.dumps({"fleet": run_id, "p": process, "i": i}, separators=(",", ":"))
        data = head.encode().ljust(size, b".")
        records.append(UserRecord(f"{run_id}-k{i % keys}", data, id=f"{run_id}-p{process}-{i}"))
    return records


def _put(producer: Producer, records: list[UserRecord]) -> list[Expected]:
    results = producer.put_many(records, deadline=FLEET_DEADLINE_S)
    return [
        Expected(NO_CALLER_SCOPE, r.id or "", r.partition_key, r.data)
        for r, result in zip(records, results, strict=True)
        if result.success
    ]


def _child(producer: Producer, records: list[UserRecord], answer: Connection) -> None:
    """A forked copy: put its own records through the producer it inherited; send back what was confirmed."""
    answer.send([(e.id, e.key, e.data) for e in _put(producer, records)])
    answer.close()


def forked_fleet(
    endpoint_url: str,
    stream_name: str,
    *,
    processes: int = 3,
    per_process: int = 1_000,
    keys: int = 20,
    size: int = 100,
    run_id: str | None = None,
) -> FleetReport:
    """One producer, used here, then forked into `processes` children that each put `per_process`
    records while this process puts as many again; what Kinesis confirmed (see the module)."""
    run_id = run_id or f"fleet-{time.strftime('%H%M%S')}-{secrets.token_hex(3)}"
    report = FleetReport(run_id, processes, per_process)
    began = time.monotonic()
    # As at an application's import: the client and the producer, used before the fork.
    producer = Producer(client("kinesis", endpoint_url), stream_name)
    report.confirmed += _put(producer, _fleet_records(run_id, 0, max(1, per_process // 10), keys, size))
    context = multiprocessing.get_context("fork")
    children = []
    for process in range(1, processes + 1):
        reader, writer = context.Pipe(duplex=False)
        records = _fleet_records(run_id, process, per_process, keys, size)
        child = context.Process(target=_child, args=(producer, records, writer), daemon=True)
        child.start()
        writer.close()
        children.append((child, reader))
    # The parent keeps putting through the same producer meanwhile.
    report.confirmed += _put(producer, _fleet_records(run_id, processes + 1, per_process, keys, size))
    for child, reader in children:
        confirmed: list[tuple[str, str, bytes]] = []
        if reader.poll(FLEET_DEADLINE_S + 60):
            try:
                confirmed = reader.recv()
            except EOFError:  # the child died without an answer
                confirmed = []
        reader.close()
        child.join(timeout=10)
        if child.is_alive():
            child.kill()
            child.join()
        report.confirmed += [Expected(NO_CALLER_SCOPE, *entry) for entry in confirmed]
    put = max(1, per_process // 10) + per_process * (processes + 1)
    report.unconfirmed = put - len(report.confirmed)
    report.elapsed = time.monotonic() - began
    return report


@dataclass
class CallersReport:
    """The same run, sent by two callers: each one's `send` report, and the records confirmed."""

    run_id: str
    reports: dict[str, SendReport]  # caller ARN -> its report
    confirmed: list[Expected] = field(default_factory=list)


def two_callers(
    api_url: str, stream: str, *, count: int, run_id: str | None = None, **options: Any
) -> CallersReport:
    """`send` the same run (`count` records: the same ids, the same Idempotency-Key per request) as
    the account's root and as IAM user `peer`, at once; `options` go to both `send`s."""
    run_id = run_id or f"callers-{time.strftime('%H%M%S')}-{secrets.token_hex(3)}"
    credentials = {
        ROOT_CALLER: (model.ACCESS_KEY, model.SECRET_KEY),
        PEER_CALLER: (model.PEER_ACCESS_KEY, model.PEER_SECRET_KEY),
    }
    reports: dict[str, SendReport] = {}

    def one(caller: str) -> None:
        reports[caller] = send(
            api_url,
            stream,
            count=count,
            run_id=run_id,
            progress=False,
            credentials=credentials[caller],
            **options,
        )

    threads = [
        threading.Thread(target=one, args=(caller,), name=f"send-as-{caller}") for caller in credentials
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    result = CallersReport(run_id, reports)
    for caller, report in reports.items():
        scope = caller_scope(caller)
        for seq, accepted in report.accepted.items():
            data = report.payload_of(seq, accepted.post_time)
            result.confirmed.append(Expected(scope, report.id_of(seq) or "", accepted.key, data))
    return result


@dataclass
class Applied:
    """What `wait_applied` found: per group, the confirmed records missing or holding other data,
    and the keys a counter counted otherwise than the confirmed records carry them."""

    expected: int
    missing: dict[str, list[Expected]] = field(default_factory=dict)  # group -> records not found
    wrong_data: dict[str, list[Expected]] = field(default_factory=dict)  # group -> found, other bytes
    wrong_counts: dict[str, dict[str, tuple[int, int]]] = field(default_factory=dict)  # key -> (got, want)
    groups: list[str] = field(default_factory=list)
    waited: float = 0.0

    @property
    def ok(self) -> bool:
        return bool(self.groups) and not any(
            (*self.missing.values(), *self.wrong_data.values(), *self.wrong_counts.values())
        )

    def describe(self) -> str:
        lines = [f"{self.expected} confirmed records, groups {self.groups}, waited {self.waited:.1f} s"]
        for name, records in self.missing.items():
            scopes = Counter(e.scope for e in records)
            lines.append(f"{name}: {len(records)} missing by scope {dict(scopes)}, e.g. {records[:3]}")
        for name, records in self.wrong_data.items():
            lines.append(f"{name}: {len(records)} with another record's data, e.g. {records[:3]}")
        for name, counts in self.wrong_counts.items():
            lines.append(
                f"{name}: {len(counts)} keys counted wrong (got, want), e.g. {list(counts.items())[:5]}"
            )
        return "\n".join(lines)


def _sink_items(dynamodb: Any, table: str, expected: list[Expected]) -> dict[tuple[str, str], bytes]:
    """(scope, id) -> data of the event-sink items keyed by these records' scoped ids."""
    found: dict[tuple[str, str], bytes] = {}
    for start in range(0, len(expected), ID_BATCH):
        keys = [
            {"pk": {"S": f"id#{e.scope}/i/{e.id}"}, "sk": {"S": "id"}}
            for e in expected[start : start + ID_BATCH]
        ]
        request: dict[str, Any] = {table: {"Keys": keys, "ConsistentRead": True}}
        while request:
            answer = dynamodb.batch_get_item(RequestItems=request)
            for item in answer["Responses"].get(table, []):
                scope, _, record_id = item["pk"]["S"].removeprefix("id#").partition("/i/")
                found[(scope, record_id)] = bytes(item.get("data", {}).get("B", b""))
            request = answer.get("UnprocessedKeys") or {}
    return found


def wait_applied(
    endpoint_url: str,
    app: model.LocalApp,
    stream_name: str,
    expected: list[Expected],
    *,
    timeout: float = 300,
    poll_interval: float = 1.0,
) -> Applied:
    """Poll every consumer group of `stream_name` until each `expected` record is applied once
    (see the module), or `timeout` seconds pass; what is still wrong then."""
    dynamodb = client("dynamodb", endpoint_url)
    groups = [
        g
        for g in consumer_groups(app, stream_name)
        if (g.kind == RECORDS and g.incremental) or g.kind == COUNTER
    ]
    want = Counter(e.key for e in expected)
    began = time.monotonic()
    while True:
        result = Applied(len(expected), groups=[g.name for g in groups])
        for group in groups:
            if group.kind == RECORDS:
                found = _sink_items(dynamodb, group.sink_table, expected)
                missing = [e for e in expected if (e.scope, e.id) not in found]
                wrong = [e for e in expected if found.get((e.scope, e.id), e.data) != e.data]
                if missing:
                    result.missing[group.name] = missing
                if wrong:
                    result.wrong_data[group.name] = wrong
            else:
                got = read_counts(
                    dynamodb, group.sink_table, want, group.key_attribute, group.count_attribute
                )
                counts = {k: (got.get(k, 0), n) for k, n in want.items() if got.get(k, 0) != n}
                if counts:
                    result.wrong_counts[group.name] = counts
        result.waited = time.monotonic() - began
        over = any(got > n for counts in result.wrong_counts.values() for got, n in counts.values())
        if result.ok or over or result.waited >= timeout:  # a count above its due never comes down
            return result
        time.sleep(poll_interval)
