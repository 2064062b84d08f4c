"""A worker consumer group on the local endpoint: a stream, its lease and sink tables, and worker
processes (`shardline worker`) started, paused, killed and stopped by the tests.

The handler every worker runs (`sink_handler.py`, written into the group's folder) applies each
record once per id as a transactional `ADD applied :1` on the item keyed by the record's payload
id, in the checkpoint's transaction: a sink item at 2 is a record applied twice, a missing one a
record lost. The item also says which shard applied it and when its handler ran (`appliedAt`).
`SLOW_MS` makes each record take that long (a batch that is mid-flight when a worker
is killed); a record whose payload says `"hang": true` never returns.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3

from shardline.consumer import Lease, LeaseTable

REPO = Path(__file__).resolve().parents[2]
LIBRARY = REPO / "layers" / "shardline" / "python"

HANDLER = """
import json, os, time
SINK = os.environ["SINK_TABLE"]
SLOW = float(os.environ.get("SLOW_MS", "0")) / 1000.0

def handle(record):
    if SLOW:
        time.sleep(SLOW)
    body = json.loads(record.data)
    if body.get("hang"):
        time.sleep(3600)  # a handler that never returns: the batch's time budget interrupts it
    return [{"Update": {
        "TableName": SINK,
        "Key": {"pk": {"S": body["id"]}},
        "UpdateExpression": "ADD applied :one SET #shard = :shard, appliedAt = :at",
        "ExpressionAttributeNames": {"#shard": "shard"},
        "ExpressionAttributeValues": {
            ":one": {"N": "1"}, ":shard": {"S": record.shard_id}, ":at": {"N": repr(time.time())}
        },
    }}]
"""


def clients(endpoint: str) -> dict[str, Any]:
    options = {
        "endpoint_url": endpoint,
        "region_name": "us-east-1",
        "aws_access_key_id": "test",
        "aws_secret_access_key": "test",
    }
    return {name: boto3.client(name, **options) for name in ("kinesis", "dynamodb", "sqs")}


@dataclass
class WorkerGroup:
    """One group's resources on the endpoint, and its worker processes by name."""

    endpoint: str
    folder: Path
    shards: int = 4
    name: str = field(default_factory=lambda: f"wg-{uuid.uuid4().hex[:8]}")
    lease_duration: float = 3.0
    workers: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        aws = clients(self.endpoint)
        self.kinesis, self.dynamodb, self.sqs = aws["kinesis"], aws["dynamodb"], aws["sqs"]
        self.stream, self.leases, self.sink = (
            f"{self.name}-stream",
            f"{self.name}-leases",
            f"{self.name}-sink",
        )
        self.kinesis.create_stream(StreamName=self.stream, ShardCount=self.shards)
        self.kinesis.get_waiter("stream_exists").wait(StreamName=self.stream)
        LeaseTable.create(self.dynamodb, self.leases)
        self.dynamodb.create_table(
            TableName=self.sink,
            KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
            BillingMode="PAY_PER_REQUEST",
        )
        self.folder.mkdir(parents=True, exist_ok=True)
        (self.folder / "sink_handler.py").write_text(HANDLER)
        self.table = LeaseTable(self.dynamodb, self.leases)
        self.dlq_url = self.sqs.create_queue(QueueName=f"{self.name}-dlq")["QueueUrl"]
        self.sent: list[str] = []

    # -- records --------------------------------------------------------------------------------

    def send(self, count: int, *, keys: int = 64, hang: frozenset[int] = frozenset()) -> list[str]:
        """Put `count` records with unique ids over `keys` partition keys (those at the indexes in
        `hang` hang their handler); their ids."""
        ids = [f"r-{len(self.sent) + n}" for n in range(count)]
        for start in range(0, count, 500):
            chunk = ids[start : start + 500]
            entries = [
                {
                    "Data": json.dumps({"id": rid, **({"hang": True} if start + n in hang else {})}).encode(),
                    "PartitionKey": f"k{sum(map(ord, rid)) % keys}",
                }
                for n, rid in enumerate(chunk)
            ]
            while entries:
                answer = self.kinesis.put_records(StreamName=self.stream, Records=entries)
                entries = [e for e, r in zip(entries, answer["Records"], strict=True) if "ErrorCode" in r]
                if entries:
                    time.sleep(0.2)
        self.sent += ids
        return ids

    def items(self) -> list[dict[str, Any]]:
        return [
            item
            for page in self.dynamodb.get_paginator("scan").paginate(TableName=self.sink)
            for item in page["Items"]
        ]

    def applied(self) -> Counter[str]:
        """How many times each id was applied, from the sink."""
        return Counter({item["pk"]["S"]: int(item["applied"]["N"]) for item in self.items()})

    def wait_applied(self, timeout: float = 120.0) -> Counter[str]:
        """The sink once every id sent is there (or the timeout passed)."""
        deadline = time.monotonic() + timeout
        while True:
            counts = self.applied()
            if set(self.sent) <= set(counts) or time.monotonic() > deadline:
                return counts
            time.sleep(0.5)

    def rows(self) -> list[Lease]:
        return self.table.leases()

    def owners(self) -> Counter[str]:
        """Open leases held per worker (rows not at SHARD_END, owned)."""
        return Counter(
            row.owner for row in self.rows() if row.owner and row.checkpoint.sequence != "SHARD_END"
        )

    def wait_for(self, predicate: Any, timeout: float = 60.0, interval: float = 0.25) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if predicate():
                return True
            time.sleep(interval)
        return bool(predicate())

    # -- workers --------------------------------------------------------------------------------

    def dead_letters(self) -> list[dict[str, Any]]:
        """The dead-letter queue's messages (read, not deleted)."""
        answer = self.sqs.receive_message(QueueUrl=self.dlq_url, MaxNumberOfMessages=10, VisibilityTimeout=0)
        return [json.loads(message["Body"]) for message in answer.get("Messages", [])]

    def start(self, name: str, *extra: str, slow_ms: int = 0) -> subprocess.Popen[bytes]:
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(LIBRARY), str(self.folder)]),
            "AWS_ACCESS_KEY_ID": "test",
            "AWS_SECRET_ACCESS_KEY": "test",
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_REGION": "us-east-1",
            "SINK_TABLE": self.sink,
            "SLOW_MS": str(slow_ms),
            "LOG_LEVEL": "INFO",
        }
        command = [
            sys.executable, "-m", "shardline._cli", "worker",
            "--stream", self.stream,
            "--group", self.name,
            "--lease-table", self.leases,
            "--handler", "sink_handler:handle",
            "--dlq-url", self.dlq_url,
            "--endpoint-url", self.endpoint,
            "--lease-duration", str(self.lease_duration),
            "--owner", name,
            "--metrics-interval", "3600",
            *extra,
        ]  # fmt: skip
        log = open(self.folder / f"{name}.log", "ab")  # noqa: SIM115 -- the child's, closed with it
        process = subprocess.Popen(command, cwd=self.folder, env=env, stdout=log, stderr=subprocess.STDOUT)
        self.workers[name] = process
        return process

    def signal(self, name: str, signum: int) -> None:
        self.workers[name].send_signal(signum)

    def stop_all(self, timeout: float = 30.0) -> None:
        for process in self.workers.values():
            if process.poll() is None:
                process.send_signal(signal.SIGCONT)
                process.terminate()
        for process in self.workers.values():
            try:
                process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    def log(self, name: str) -> str:
        return (self.folder / f"{name}.log").read_text(errors="replace")


def worker_group(endpoint: str, folder: Path, **options: Any) -> Iterator[WorkerGroup]:
    group = WorkerGroup(endpoint, folder, **options)
    try:
        yield group
    finally:
        group.stop_all()
