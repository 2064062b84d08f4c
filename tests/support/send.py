"""Shared fixtures and helpers of the `send` tests: a stub producer API and a moto-backed pipeline.

Wired to a pipeline (the `pipeline` fixture does it), the stub writes what it accepts into the
pipeline's moto stream as the producer does — one KPL aggregate per request, carrying an aggregate
id and each record's id — and answers with the real positions; `Pipeline.apply` then writes the
sinks as the consumers do, once per identity."""

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

from local.app import model
from local.app.provision import client
from local.commands.send import SendReport, send
from local.commands.verify import wait_and_verify
from shardline.consumer._dead_letters import dead_letter_message
from shardline.consumer._deaggregation import ConsumedRecord
from shardline.consumer._failure_text import failure_text
from shardline.kinesis import UserRecord
from shardline.kpl._encode import encode
from shardline.kpl._identity import AggregateId, new_producer_id

SHARDS = 4
GROUPS = ("event-sink", "key-counter")


@dataclass
class Written:
    """A record the stub API wrote (accepted or not), where it went."""

    shard_id: str
    sequence_number: str
    key: str
    data: bytes
    sub_sequence: int | None = None
    id: str | None = None
    aggregate_id: str | None = None


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes
    at: float

    @property
    def records(self) -> list[dict[str, Any]]:
        if self.headers.get("content-type") == "application/x-ndjson":
            return [json.loads(line) for line in self.body.splitlines() if line.strip()]
        return json.loads(self.body)["records"]


@dataclass
class StubApi:
    """The producer API's answers, scripted: each request takes the next answer (then 200 forever).

    An answer is "200", ("207", [indexes that fail, not written]), ("207?", [indexes written but
    answered OutcomeUnknown]), ("207w", [indexes answered `written: false`]), ("207m", [indexes
    answered `written: null`, written]), ("503", retry_after), "429", "400", "500", "502", "504"
    (nothing written), "drop" (everything written, the reply lost: the connection closes),
    "drop-before" (nothing written, the connection closes), "dup" (the aggregate written twice, as a
    producer resends it after a lost Kinesis reply; the answer names the second copy) or ("echo",
    [indexes answered with another record's id]).
    """

    script: list[Any] = field(default_factory=list)
    received: list[Received] = field(default_factory=list)
    written: list[Written] = field(default_factory=list)
    url: str = ""
    lock: threading.Lock = field(default_factory=threading.Lock)
    kinesis: Any = None  # a boto3 client: write into `stream` on moto (else positions are made up)
    stream: str = ""
    _sequence: int = 0
    _producer: str = field(default_factory=new_producer_id)
    _counter: int = 0

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
            if kind in ("500", "502", "504", "drop-before"):
                return (0 if kind == "drop-before" else int(kind)), {}, {"message": f"HTTP {kind} (scripted)"}
            if kind == "503":
                failed = {
                    "errorCode": "ProvisionedThroughputExceededException",
                    "attempts": 3,
                    "written": False,
                }
                body = {"failedRecordCount": len(records), "records": [failed] * len(records)}
                return 503, {"Retry-After": str(arg)}, body
            failing = set(arg or ()) if kind in ("207", "207w") else set()
            landed = [index for index in range(len(records)) if index not in failing]
            positions = self._write([records[index] for index in landed], copies=2 if kind == "dup" else 1)
            where = dict(zip(landed, positions, strict=True))
            entries: list[dict[str, Any]] = []
            for index, record in enumerate(records):
                if index in failing:
                    entry = {"errorCode": "ProvisionedThroughputExceededException", "attempts": 3}
                    entries.append(entry | ({"written": False} if kind == "207w" else {}))
                elif kind in ("207?", "207m") and index in arg:  # it landed; the API could not tell
                    code = "OutcomeUnknown" if kind == "207?" else "InternalFailure"
                    entry = {"errorCode": code, "errorMessage": "maybe", "attempts": 1}
                    entries.append(entry | ({"written": None} if kind == "207m" else {}))
                else:
                    shard, sequence, sub = where[index]
                    entry = {"shardId": shard, "sequenceNumber": sequence, "subSequenceNumber": sub}
                    if "id" in record:
                        entry["id"] = "someone-else" if kind == "echo" and index in arg else record["id"]
                    entries.append(entry)
            failed_count = sum(1 for entry in entries if "errorCode" in entry)
            if kind == "drop":
                return 0, {}, {}
            return (207 if failed_count else 200), {}, {"failedRecordCount": failed_count, "records": entries}

    def _write(self, records: list[dict[str, Any]], copies: int = 1) -> list[tuple[str, str, int | None]]:
        """Write `records` (one aggregate, `copies` times when wired to moto); each one's position."""
        if not records:
            return []
        if self.kinesis is None:
            positions = []
            for record in records:
                self._sequence += 1
                shard = f"shardId-{zlib.crc32(record['partitionKey'].encode()) % SHARDS:012d}"
                sequence = str(49_000_000_000_000_000_000 + self._sequence)
                self.written.append(self._written(record, shard, sequence, None, None))
                positions.append((shard, sequence, None))
            return positions
        self._counter += 1
        aggregate_id = AggregateId(self._producer, "0", self._counter, self._counter).encode()
        users = [
            UserRecord(record["partitionKey"], base64.b64decode(record["data"]), None, record.get("id"))
            for record in records
        ]
        blob = encode(users, aggregate_id)
        for _ in range(copies):
            answer = self.kinesis.put_record(
                StreamName=self.stream, PartitionKey=users[0].partition_key, Data=blob
            )
            shard, sequence = answer["ShardId"], answer["SequenceNumber"]
            for index, record in enumerate(records):
                self.written.append(self._written(record, shard, sequence, index, aggregate_id))
        return [(shard, sequence, index) for index in range(len(records))]

    @staticmethod
    def _written(
        record: dict[str, Any], shard: str, sequence: str, sub: int | None, aggregate_id: str | None
    ) -> Written:
        data = base64.b64decode(record["data"])
        return Written(shard, sequence, record["partitionKey"], data, sub, record.get("id"), aggregate_id)


@pytest.fixture
def stub_api() -> Iterator[StubApi]:
    stub = StubApi()

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            headers = {name.lower(): value for name, value in self.headers.items()}
            status, extra, answer = stub.answer(Received(self.path, headers, body, time.monotonic()))
            if status == 0:  # the answer is lost: the connection closes without one
                self.close_connection = True
                return
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


@dataclass
class Pipeline:
    """A sink table, a counter table and a DLQ for each group on moto server, and the LocalApp that
    names them (`dlq_url` is the event sink's, `counter_dlq_url` the counter's)."""

    endpoint: str
    stream: str
    sink: str
    counter: str
    dlq_url: str
    app: model.LocalApp
    counter_dlq_url: str = ""

    def dynamodb(self) -> Any:
        return client("dynamodb", self.endpoint)

    def write_sink(
        self, written: list[Written], *, stream: str | None = None, by_position: bool = False
    ) -> None:
        """What functions/event_sink writes for these records (`by_position`: every item keyed by its
        position, as a sink that ignores client ids would write them)."""
        dynamodb = self.dynamodb()
        for w in written:
            position = {
                "pk": {"S": f"{stream or self.stream}#{w.shard_id}"},
                "sk": {"S": f"{w.sequence_number.zfill(129)}#{w.sub_sequence or 0:06d}"},
            }
            key = {"pk": {"S": f"id#-/i/{w.id}"}, "sk": {"S": "id"}} if w.id and not by_position else position
            item = {
                **key,
                "sequenceNumber": {"S": w.sequence_number},
                "partitionKey": {"S": w.key},
                "data": {"B": w.data},
                "approximateArrival": {"N": f"{time.time():.3f}"},
            }
            if w.id is not None:
                item["recordId"] = {"S": w.id}
            if w.aggregate_id is not None:
                item["aggregateId"] = {"S": w.aggregate_id}
            dynamodb.put_item(TableName=self.sink, Item=item)

    def apply(self, written: list[Written], *, skip: Any = None) -> list[Written]:
        """What both consumer groups do with what the stream took: each identity once (a record's id,
        else its aggregate's copy and index), in stream order; `skip(w)` leaves a record out."""
        once: dict[Any, Written] = {}
        for w in written:
            identity = w.id if w.id is not None else (w.aggregate_id, w.sub_sequence, w.data)
            once.setdefault(identity, w)
        applied = [w for w in once.values() if skip is None or not skip(w)]
        self.write_sink(applied)
        self.count(applied)
        return applied

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

    def dead_letter(self, w: Written, group: str, error: BaseException | None = None) -> None:
        """What shardline's DeadLetterQueue sends for a record that failed with `error` (its id, its
        error's type, fingerprint and message as `dead_letter_message` writes them)."""
        record = ConsumedRecord(
            self.stream, w.shard_id, w.sequence_number, w.sub_sequence, w.key, None, w.data, time.time(),
            aggregate_id=w.aggregate_id, id=w.id,
        )  # fmt: skip
        cause = failure_text(error or ValueError("poison"), "message").text
        letter = dead_letter_message(record, group, cause, 3, time.time())
        queue = self.counter_dlq_url if group == "key-counter" else self.dlq_url
        client("sqs", self.endpoint).send_message(QueueUrl=queue, MessageBody=json.dumps(letter))


@pytest.fixture
def pipeline(moto_server: str, stub_api: StubApi) -> Pipeline:
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
    # The stream exists (its shards are the stub's), so the verdict can list every shard.
    client("kinesis", moto_server).create_stream(StreamName=stream, ShardCount=SHARDS)
    sqs = client("sqs", moto_server)
    queues = {group: sqs.create_queue(QueueName=f"dlq-{group}-{suffix}")["QueueUrl"] for group in GROUPS}

    def consumer(name: str, table: str) -> model.Function:
        env = {"SHARDLINE_GROUP": name, "SINK_TABLE": table, "LEASE_TABLE": leases, "DLQ_URL": queues[name]}
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
    stub_api.kinesis, stub_api.stream = client("kinesis", moto_server), stream
    return Pipeline(moto_server, stream, sink, counter, queues["event-sink"], app, queues["key-counter"])


def _verify(pipeline: Pipeline, report: SendReport, timeout: float = 180) -> Any:
    """The verdict, as soon as every group has drained (`timeout` only bounds a run that never does:
    a loaded machine may take long to write the sink, and a verdict cut short is a false failure)."""
    return wait_and_verify(
        pipeline.endpoint, pipeline.app, report, timeout=timeout, progress=False, poll_interval=0.1
    )


def _group(verdict: Any, name: str) -> Any:
    return next(g for g in verdict.groups if g.group.name == name)
