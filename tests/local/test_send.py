"""`send` and its verdict (`local.send`, `local.verify`), each behaviour against a real server.

`send` talks to a small HTTP server started here on a free loopback port that answers as the
producer API's contract says (200, 207 with failed entries, 503 + Retry-After, 429, 400) and keeps
what it received; it checks signatures by recomputing them with botocore. The verdict reads a
moto server (the `moto_server` fixture) holding a sink table, a counter table and a DLQ created
here and filled as the example consumers would fill them.
"""

from __future__ import annotations

import base64
import http.server
import json
import threading
import time
import uuid
import zlib
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.compat import HTTPHeaders
from botocore.credentials import Credentials

from local import model
from local.provision import client
from local.send import SendReport, parse_payload, send
from local.verify import SinkReader, wait_and_verify

pytestmark = pytest.mark.integration

SHARDS = 4


@dataclass
class Written:
    """A record the stub API accepted, where it says it went."""

    shard_id: str
    sequence_number: str
    key: str
    data: bytes


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes
    at: float

    @property
    def records(self) -> list[dict[str, Any]]:
        return json.loads(self.body)["records"]


@dataclass
class StubApi:
    """The producer API's answers, scripted: each request takes the next answer (then 200 forever).

    An answer is "200", ("207", [indexes that fail]), ("503", retry_after), "429" or "400".
    """

    script: list[Any] = field(default_factory=list)
    received: list[Received] = field(default_factory=list)
    written: list[Written] = field(default_factory=list)
    url: str = ""
    lock: threading.Lock = field(default_factory=threading.Lock)
    _sequence: int = 0

    def answer(self, request: Received) -> tuple[int, dict[str, str], dict[str, Any]]:
        with self.lock:
            self.received.append(request)
            step = self.script.pop(0) if self.script else "200"
            kind, arg = (step, None) if isinstance(step, str) else step
            records = request.records
            if kind == "400":
                return 400, {}, {"message": "1 invalid record; nothing was written", "errors": []}
            if kind == "429":
                return 429, {}, {"message": "Too Many Requests"}
            if kind == "503":
                failed = {"errorCode": "ProvisionedThroughputExceededException", "attempts": 3}
                body = {"failedRecordCount": len(records), "records": [failed] * len(records)}
                return 503, {"Retry-After": str(arg)}, body
            entries = []
            for index, record in enumerate(records):
                if kind == "207" and index in arg:
                    entries.append({"errorCode": "ProvisionedThroughputExceededException", "attempts": 3})
                    continue
                self._sequence += 1
                shard = f"shardId-{zlib.crc32(record['partitionKey'].encode()) % SHARDS:012d}"
                sequence = str(49_000_000_000_000_000_000 + self._sequence)
                data = base64.b64decode(record["data"])
                self.written.append(Written(shard, sequence, record["partitionKey"], data))
                entries.append({"shardId": shard, "sequenceNumber": sequence, "subSequenceNumber": None})
            failed_count = sum(1 for entry in entries if "errorCode" in entry)
            return (207 if failed_count else 200), {}, {"failedRecordCount": failed_count, "records": entries}


@pytest.fixture
def stub_api() -> Iterator[StubApi]:
    stub = StubApi()

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            headers = {name.lower(): value for name, value in self.headers.items()}
            status, extra, answer = stub.answer(Received(self.path, headers, body, time.monotonic()))
            raw = json.dumps(answer).encode()
            self.send_response(status)
            for name, value in {**extra, "Content-Type": "application/json"}.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    stub.url = f"http://127.0.0.1:{server.server_address[1]}/v1/streams"
    try:
        yield stub
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def _send(stub: StubApi, count: int, **options: Any) -> SendReport:
    return send(stub.url, "events", count=count, progress=False, **options)


# --- send --------------------------------------------------------------------------------------------


def test_send_retries_exactly_the_failed_entries_of_a_207_in_order(stub_api: StubApi) -> None:
    stub_api.script = [("207", [1, 3, 4])]
    report = _send(stub_api, 6, batch=6, concurrency=1)
    first, retry = stub_api.received
    sent = [r["data"] for r in first.records]
    assert [r["data"] for r in retry.records] == [sent[1], sent[3], sent[4]]
    assert len(report.accepted) == 6 and not report.failed
    assert report.retried_records == 3 and report.requests == 2


def test_send_retries_a_503_after_its_retry_after(stub_api: StubApi) -> None:
    stub_api.script = [("503", 1)]
    report = _send(stub_api, 5, batch=5, concurrency=1)
    first, retry = stub_api.received
    assert retry.body == first.body  # the same records, nothing was written the first time
    assert retry.at - first.at >= 0.9  # Retry-After: 1 was waited (less the clocks' granularity)
    assert len(report.accepted) == 5 and report.statuses[503] == 1


def test_send_retries_a_429(stub_api: StubApi) -> None:
    stub_api.script = ["429", "429"]
    report = _send(stub_api, 3, batch=3, concurrency=1)
    assert len(stub_api.received) == 3
    assert len({r.body for r in stub_api.received}) == 1
    assert len(report.accepted) == 3 and report.statuses[429] == 2 and report.retried_records == 6


def test_send_does_not_retry_a_refused_request(stub_api: StubApi) -> None:
    stub_api.script = ["400"]
    report = _send(stub_api, 4, batch=4, concurrency=1)
    assert len(stub_api.received) == 1
    assert sorted(report.failed) == [0, 1, 2, 3] and not report.accepted
    assert report.failed[0].startswith("HTTP 400")


class _SignedHeadersOnly(SigV4Auth):
    def __init__(self, signed: HTTPHeaders) -> None:
        super().__init__(Credentials(model.ACCESS_KEY, model.SECRET_KEY), "execute-api", model.REGION)
        self._signed = signed

    def headers_to_sign(self, request: AWSRequest) -> HTTPHeaders:
        return self._signed


def _expected_signature(received: Received) -> str:
    """The signature botocore computes for this request with the local credentials."""
    fields = dict(
        part.strip().split("=", 1) for part in received.headers["authorization"].split(" ", 1)[1].split(",")
    )
    signed = HTTPHeaders()
    for name in fields["SignedHeaders"].split(";"):
        signed[name] = received.headers[name]
    request = AWSRequest("POST", f"http://{received.headers['host']}{received.path}", data=received.body)
    request.context["timestamp"] = received.headers["x-amz-date"]
    signer = _SignedHeadersOnly(signed)
    return signer.signature(signer.string_to_sign(request, signer.canonical_request(request)), request)


def test_send_signs_each_request_with_sigv4(stub_api: StubApi) -> None:
    stub_api.script = [("207", [0])]
    _send(stub_api, 4, batch=2, concurrency=2)
    assert len(stub_api.received) == 3
    for received in stub_api.received:
        authorization = received.headers["authorization"]
        assert authorization.startswith("AWS4-HMAC-SHA256 Credential=test/")
        assert "/us-east-1/execute-api/aws4_request" in authorization
        assert authorization.endswith(f"Signature={_expected_signature(received)}")


def test_send_unsigned_sends_no_authorization(stub_api: StubApi) -> None:
    _send(stub_api, 2, sign=False)
    assert "authorization" not in stub_api.received[0].headers


def test_send_paces_to_the_rate(stub_api: StubApi) -> None:
    report = _send(stub_api, 300, batch=50, concurrency=4, rate=200)
    # The first request goes at once; the other 250 records take 250/200 s at most 200 records/s.
    assert len(report.accepted) == 300
    assert report.elapsed >= 1.2
    assert report.elapsed < 30  # generous: a 2-core shared machine
    # Each record's time is its first POST, after the pacing wait: the batches' times spread as they went.
    times = sorted({parse_payload(w.data)["t"] for w in stub_api.written})
    assert len(times) == 6 and times[-1] - times[0] >= 1.2


def test_send_uses_run_scoped_partition_keys(stub_api: StubApi) -> None:
    report = _send(stub_api, 30, keys=7, run_id="run-keys")
    keys = [(parse_payload(w.data)["seq"], w.key) for w in stub_api.written]
    assert {key for _, key in keys} == {f"run-keys-k{i}" for i in range(7)}
    assert all(key == f"run-keys-k{seq % 7}" for seq, key in keys)
    assert report.expected_counts() == Counter(f"run-keys-k{i % 7}" for i in range(30))


def test_send_payload_carries_run_id_sequence_and_post_time(stub_api: StubApi) -> None:
    before = time.time()
    report = _send(stub_api, 40, size=120, batch=10)
    after = time.time()
    fields = [parse_payload(w.data) for w in stub_api.written]
    assert all(len(w.data) == 120 for w in stub_api.written)
    assert sorted(f["seq"] for f in fields) == list(range(40))
    assert {f["run"] for f in fields} == {report.run_id}
    assert all(before <= f["t"] <= after for f in fields)
    assert all(report.accepted[f["seq"]].post_time == pytest.approx(f["t"], abs=1e-5) for f in fields)


def test_send_marks_every_nth_record_poison(stub_api: StubApi) -> None:
    report = _send(stub_api, 20, poison_every=5)
    poison = sorted(
        parse_payload(w.data)["seq"] for w in stub_api.written if parse_payload(w.data).get("poison")
    )
    assert poison == [4, 9, 14, 19]
    assert sorted(seq for seq, record in report.accepted.items() if record.poison) == poison


def test_send_records_where_each_record_was_written(stub_api: StubApi) -> None:
    report = _send(stub_api, 10, batch=3)
    by_seq = {parse_payload(w.data)["seq"]: w for w in stub_api.written}
    assert {seq: (r.shard_id, r.sequence_number) for seq, r in report.accepted.items()} == {
        seq: (w.shard_id, w.sequence_number) for seq, w in by_seq.items()
    }


# --- the verdict, against moto server -------------------------------------------------------------------


@dataclass
class Pipeline:
    """A sink table, a counter table and a DLQ on moto server, and the LocalApp that names them."""

    endpoint: str
    stream: str
    sink: str
    counter: str
    dlq_url: str
    app: model.LocalApp

    def dynamodb(self) -> Any:
        return client("dynamodb", self.endpoint)

    def write_sink(self, written: list[Written], *, stream: str | None = None) -> None:
        """What functions/event_sink writes for these records."""
        dynamodb = self.dynamodb()
        for w in written:
            item = {
                "pk": {"S": f"{stream or self.stream}#{w.shard_id}"},
                "sk": {"S": f"{w.sequence_number.zfill(129)}#{0:06d}"},
                "sequenceNumber": {"S": w.sequence_number},
                "partitionKey": {"S": w.key},
                "data": {"B": w.data},
                "approximateArrival": {"N": f"{time.time():.3f}"},
            }
            dynamodb.put_item(TableName=self.sink, Item=item)

    def count(self, written: list[Written]) -> None:
        """What functions/key_counter writes for these records."""
        dynamodb = self.dynamodb()
        for key, n in Counter(w.key for w in written).items():
            dynamodb.update_item(
                TableName=self.counter,
                Key={"partitionKey": {"S": key}},
                UpdateExpression="ADD #count :n",
                ExpressionAttributeNames={"#count": "count"},
                ExpressionAttributeValues={":n": {"N": str(n)}},
            )

    def dead_letter(self, w: Written, group: str) -> None:
        """What shardline's DeadLetterQueue sends for a poison record."""
        letter = {
            "version": 1,
            "id": uuid.uuid4().hex,
            "group": group,
            "stream": self.stream,
            "shardId": w.shard_id,
            "sequenceNumber": w.sequence_number,
            "subSequenceNumber": None,
            "partitionKey": w.key,
            "explicitHashKey": None,
            "data": base64.b64encode(w.data).decode(),
            "error": "ValueError: poison",
            "attempts": 3,
        }
        client("sqs", self.endpoint).send_message(QueueUrl=self.dlq_url, MessageBody=json.dumps(letter))


@pytest.fixture
def pipeline(moto_server: str) -> Pipeline:
    suffix = uuid.uuid4().hex[:8]
    stream, sink, counter, leases = (f"{n}-{suffix}" for n in ("events", "sink", "counter", "leases"))
    dynamodb = client("dynamodb", moto_server)
    sink_schema = {
        "KeySchema": [
            {"AttributeName": "pk", "KeyType": "HASH"},
            {"AttributeName": "sk", "KeyType": "RANGE"},
        ],
        "AttributeDefinitions": [
            {"AttributeName": "pk", "AttributeType": "S"},
            {"AttributeName": "sk", "AttributeType": "S"},
        ],
        "BillingMode": "PAY_PER_REQUEST",
    }
    counter_schema = {
        "KeySchema": [{"AttributeName": "partitionKey", "KeyType": "HASH"}],
        "AttributeDefinitions": [{"AttributeName": "partitionKey", "AttributeType": "S"}],
        "BillingMode": "PAY_PER_REQUEST",
    }
    dynamodb.create_table(TableName=sink, **sink_schema)
    dynamodb.create_table(TableName=counter, **counter_schema)
    dlq_url = client("sqs", moto_server).create_queue(QueueName=f"dlq-{suffix}")["QueueUrl"]

    def consumer(name: str, table: str) -> model.Function:
        env = {"SHARDLINE_GROUP": name, "SINK_TABLE": table, "LEASE_TABLE": leases, "DLQ_URL": dlq_url}
        return model.Function(f"L{name}", f"fn-{name}-{suffix}", "app.handler", Path("."), environment=env)

    producer_env = {"SHARDLINE_STREAMS": json.dumps({"events": {"streamName": stream}})}
    app = model.LocalApp(
        stack_name="test",
        streams=(model.Stream("Events", stream, SHARDS),),
        resources=(
            model.Resource("Sink", "AWS::DynamoDB::Table", sink, sink_schema),
            model.Resource("Counter", "AWS::DynamoDB::Table", counter, counter_schema),
        ),
        functions=(
            model.Function(
                "Producer", f"producer-{suffix}", "app.handler", Path("."), environment=producer_env
            ),
            consumer("event-sink", sink),
            consumer("key-counter", counter),
        ),
        mappings=tuple(
            model.EventSourceMapping(f"M{name}", uuid.uuid4().hex, f"fn-{name}-{suffix}", stream)
            for name in ("event-sink", "key-counter")
        ),
    )
    return Pipeline(moto_server, stream, sink, counter, dlq_url, app)


def _verify(pipeline: Pipeline, report: SendReport, timeout: float = 20) -> Any:
    return wait_and_verify(
        pipeline.endpoint, pipeline.app, report, timeout=timeout, progress=False, poll_interval=0.1
    )


def _group(verdict: Any, name: str) -> Any:
    return next(g for g in verdict.groups if g.group.name == name)


def test_verify_passes_when_each_record_is_in_the_sink_once_and_counts_are_exact(
    stub_api: StubApi, pipeline: Pipeline
) -> None:
    report = _send(stub_api, 200, keys=9, batch=50)
    pipeline.write_sink(stub_api.written)
    pipeline.count(stub_api.written)
    verdict = _verify(pipeline, report)
    assert verdict.ok, verdict.render()
    sink, counter = _group(verdict, "event-sink"), _group(verdict, "key-counter")
    assert (sink.group.kind, counter.group.kind) == ("records", "counter")
    assert sink.processed == counter.processed == 200
    assert sink.latency_s["p50"] >= 0 and sink.latency_s["max"] >= sink.latency_s["p99"]
    assert sink.drain_s is not None and counter.drain_s is not None
    assert json.loads(json.dumps(verdict.as_dict()))["ok"] is True
    assert "event-sink" in verdict.render() and "key-counter" in verdict.render()


def test_verify_detects_a_lost_record(stub_api: StubApi, pipeline: Pipeline) -> None:
    report = _send(stub_api, 50, batch=50)
    lost = stub_api.written[17]
    pipeline.write_sink([w for w in stub_api.written if w is not lost])
    pipeline.count(stub_api.written)
    verdict = _verify(pipeline, report, timeout=2)
    sink = _group(verdict, "event-sink")
    assert not verdict.ok and verdict.timed_out
    assert sink.lost == [parse_payload(lost.data)["seq"]] and sink.drain_s is None
    assert _group(verdict, "key-counter").ok


def test_verify_detects_a_duplicated_record(stub_api: StubApi, pipeline: Pipeline) -> None:
    report = _send(stub_api, 50, batch=50)
    pipeline.write_sink(stub_api.written)
    again = stub_api.written[3]
    # The same record written again further down its shard (a producer retry that had landed).
    pipeline.write_sink([Written(again.shard_id, "59000000000000000000000", again.key, again.data)])
    pipeline.count(stub_api.written)
    verdict = _verify(pipeline, report)
    assert not verdict.ok
    assert _group(verdict, "event-sink").duplicated == {parse_payload(again.data)["seq"]: 2}


def test_verify_detects_a_wrong_count(stub_api: StubApi, pipeline: Pipeline) -> None:
    report = _send(stub_api, 60, keys=6, batch=60)
    pipeline.write_sink(stub_api.written)
    pipeline.count([*stub_api.written, stub_api.written[0]])  # one record counted twice
    verdict = _verify(pipeline, report)
    counter = _group(verdict, "key-counter")
    assert not verdict.ok and _group(verdict, "event-sink").ok
    assert counter.wrong_counts == {stub_api.written[0].key: (10, 11)}


def test_verify_reports_dlq_depth_and_poison_records_whole(stub_api: StubApi, pipeline: Pipeline) -> None:
    report = _send(stub_api, 30, poison_every=10)
    poison = [w for w in stub_api.written if parse_payload(w.data).get("poison")]
    healthy = [w for w in stub_api.written if w not in poison]
    pipeline.write_sink(healthy)
    pipeline.count(healthy)
    for w in poison:  # both groups share the test's one queue: each letter twice (ids differ)
        pipeline.dead_letter(w, "event-sink")
    verdict = _verify(pipeline, report)
    sink = _group(verdict, "event-sink")
    assert verdict.ok, verdict.render()
    assert sink.dlq_depth == 3 and sink.poison_whole == 3 and not sink.poison_missing
    # The letters are still in the queue for the next reader (read without being consumed).
    attributes = client("sqs", pipeline.endpoint).get_queue_attributes(
        QueueUrl=pipeline.dlq_url, AttributeNames=["ApproximateNumberOfMessages"]
    )
    assert attributes["Attributes"]["ApproximateNumberOfMessages"] == "3"


def test_verify_detects_a_healthy_record_in_the_dlq(stub_api: StubApi, pipeline: Pipeline) -> None:
    report = _send(stub_api, 20)
    dead = stub_api.written[5]
    pipeline.write_sink([w for w in stub_api.written if w is not dead])
    pipeline.count([w for w in stub_api.written if w is not dead])
    pipeline.dead_letter(dead, "event-sink")
    verdict = _verify(pipeline, report)
    assert not verdict.ok
    seq = parse_payload(dead.data)["seq"]
    assert _group(verdict, "event-sink").dead_lettered == [seq] and _group(verdict, "event-sink").lost == []
    assert _group(verdict, "key-counter").dead_lettered == [seq]


def test_verify_reads_the_sink_incrementally(stub_api: StubApi, pipeline: Pipeline) -> None:
    earlier = _send(stub_api, 40, run_id="run-earlier")
    pipeline.write_sink(stub_api.written)  # an earlier run's records, below this run's positions
    stub_api.written.clear()
    report = _send(stub_api, 100, batch=20, run_id="run-now")
    shards = {w.shard_id for w in stub_api.written}
    reader = SinkReader(pipeline.dynamodb(), pipeline.sink, pipeline.stream, "run-now")
    for shard_id in shards:
        first = min((w.sequence_number for w in stub_api.written if w.shard_id == shard_id), key=int)
        reader.add_shard(shard_id, first)
    pipeline.write_sink(stub_api.written[:60])
    reader.poll()
    assert reader.items_read == 60 and reader.queries == len(shards)
    reader.poll()  # nothing new: one Query per partition, no item read again
    assert reader.items_read == 60 and reader.queries == 2 * len(shards)
    pipeline.write_sink(stub_api.written[60:])
    reader.poll()
    assert reader.items_read == 100 and sorted(reader.positions) == list(range(100))
    assert len(earlier.accepted) == 40 and len(report.accepted) == 100


def test_verify_reads_only_new_items_while_the_sink_fills(stub_api: StubApi, pipeline: Pipeline) -> None:
    report = _send(stub_api, 120, batch=10)
    done = threading.Event()

    def fill() -> None:
        for start in range(0, 120, 20):
            pipeline.write_sink(stub_api.written[start : start + 20])
            time.sleep(0.3)
        pipeline.count(stub_api.written)
        done.set()

    filler = threading.Thread(target=fill)
    filler.start()
    try:
        verdict = _verify(pipeline, report)
    finally:
        filler.join()
    sink = _group(verdict, "event-sink")
    assert verdict.ok, verdict.render()
    assert sink.items_read == 120  # many polls, each item read once
    assert sink.queries > len({w.shard_id for w in stub_api.written})  # it did poll more than once


def test_verify_measures_latency_from_post_to_first_seen_and_drain_after_the_last_post(
    stub_api: StubApi, pipeline: Pipeline
) -> None:
    report = _send(stub_api, 40)
    time.sleep(1.0)  # the consumers are a second behind
    pipeline.write_sink(stub_api.written)
    pipeline.count(stub_api.written)
    verdict = _verify(pipeline, report)
    sink, counter = _group(verdict, "event-sink"), _group(verdict, "key-counter")
    assert verdict.ok, verdict.render()
    assert 1.0 <= sink.latency_s["p50"] <= sink.latency_s["p99"] <= sink.latency_s["max"]
    assert sink.drain_s >= 1.0 and counter.drain_s >= 1.0
    assert verdict.as_dict()["latency_resolution_s"] == 0.1
