"""Helpers of the identity tests: a lossy HTTP proxy in front of a real Kinesis server, and a reader
of every copy in a stream with its aggregate id.

`LossyProxy` forwards each call to moto server or kinesis-mock over loopback, unchanged, and does
to PutRecords calls (or the operations named by `scripted`, e.g. DynamoDB's TransactWriteItems)
what a test scripts, one action per call (then passes the rest):

- `LOSE_AFTER`: the call is served (the write lands), then the connection is shut without a reply;
- `LOSE_BEFORE`: the connection is shut without forwarding (nothing lands);
- `slow(s)`: the call is held `s` seconds, then served — after the client's read timeout, so the
  write lands after the client gave up on it (and, often, after its resend);
- `BROWNOUT`: answered 503 ServiceUnavailable in Kinesis's JSON shape, nothing forwarded;
- `HANG`: never answered, never forwarded (the connection stays open until the proxy stops).

`after_forward`, if set, runs in the proxy after a served call and before its reply (or loss),
e.g. to reshard the stream between a lost copy and its resend. `calls` counts every call by
operation (server-side: what the producer really asked for).
"""

from __future__ import annotations

import contextlib
import http.client
import json
import socket
import threading
import time
from collections import Counter, deque
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, NamedTuple
from urllib.parse import urlsplit

import boto3
import botocore.config

from shardline.kinesis import UserRecord
from shardline.kpl._decode import decode_aggregate

LOSE_AFTER = "lose-after"
LOSE_BEFORE = "lose-before"
BROWNOUT = "brownout"
HANG = "hang"
PASS = "pass"


def slow(seconds: float) -> str:
    return f"slow:{seconds}"


class LossyProxy:
    """An HTTP proxy on 127.0.0.1 in front of `target_url`; see the module docstring."""

    def __init__(self, target_url: str, scripted: tuple[str, ...] = ("PutRecords",)) -> None:
        target = urlsplit(target_url)
        self._scripted = frozenset(scripted)
        self._target = (target.hostname or "127.0.0.1", target.port or 80)
        self._actions: deque[str] = deque()
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self.calls: Counter[str] = Counter()
        self.applied: Counter[str] = Counter()
        self.after_forward: Callable[[], None] | None = None
        self.pending = 0  # calls being served (a slow write still on its way)
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                proxy._serve(self)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def script(self, *actions: str) -> None:
        """The next scripted calls (PutRecords unless told), one action each."""
        with self._lock:
            self._actions.extend(actions)

    def wait_idle(self, timeout: float = 30.0) -> None:
        """Until no call is being served (every slow write has landed)."""
        deadline = time.monotonic() + timeout
        while self.pending and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not self.pending, "a proxied call is still being served"

    def stop(self) -> None:
        self._stopping.set()
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> LossyProxy:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # -- serving ------------------------------------------------------------------------------

    def _serve(self, handler: BaseHTTPRequestHandler) -> None:
        body = handler.rfile.read(int(handler.headers.get("Content-Length") or 0))
        operation = (handler.headers.get("X-Amz-Target") or "").rpartition(".")[2]
        with self._lock:
            self.calls[operation] += 1
            action = self._actions.popleft() if operation in self._scripted and self._actions else PASS
            self.applied[action] += action != PASS
            self.pending += 1
        try:
            if action == LOSE_BEFORE:
                return self._drop(handler)
            if action == HANG:
                self._stopping.wait()
                return self._drop(handler)
            if action == BROWNOUT:
                message = json.dumps(
                    {"__type": "ServiceUnavailable", "message": "Service Unavailable (injected)"}
                )
                return self._reply(
                    handler, 503, {"Content-Type": "application/x-amz-json-1.1"}, message.encode()
                )
            if action.startswith("slow:"):
                time.sleep(float(action.partition(":")[2]))
            status, headers, answer = self._forward(handler, body)
            if self.after_forward is not None and operation == "PutRecords":
                self.after_forward()
            if action == LOSE_AFTER:
                return self._drop(handler)
            self._reply(handler, status, headers, answer)
        finally:
            with self._lock:
                self.pending -= 1

    def _forward(self, handler: BaseHTTPRequestHandler, body: bytes) -> tuple[int, dict[str, str], bytes]:
        connection = http.client.HTTPConnection(*self._target, timeout=60)
        try:
            headers = {
                k: v for k, v in handler.headers.items() if k.lower() not in ("connection", "keep-alive")
            }
            connection.request("POST", handler.path, body=body, headers=headers)
            response = connection.getresponse()
            answer = response.read()
            kept = {
                k: v for k, v in response.getheaders() if k.lower() in ("content-type", "x-amzn-requestid")
            }
            return response.status, kept, answer
        finally:
            connection.close()

    @staticmethod
    def _reply(handler: BaseHTTPRequestHandler, status: int, headers: dict[str, str], body: bytes) -> None:
        try:
            handler.send_response(status)
            for key, value in headers.items():
                handler.send_header(key, value)
            handler.send_header("Content-Length", str(len(body)))
            handler.end_headers()
            handler.wfile.write(body)
        except OSError:
            handler.close_connection = True  # the client gave up (a slow write after its timeout)

    @staticmethod
    def _drop(handler: BaseHTTPRequestHandler) -> None:
        handler.close_connection = True
        with contextlib.suppress(OSError):
            handler.connection.shutdown(socket.SHUT_RDWR)


def producer_client(endpoint_url: str, read_timeout: float = 1.0) -> Any:
    """The producer's Kinesis client: no botocore retries, a short read timeout, and every call it
    makes counted by operation in `client.operations` (a botocore event hook, client-side)."""
    client = boto3.client(
        "kinesis",
        endpoint_url=endpoint_url,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        config=botocore.config.Config(
            retries={"total_max_attempts": 1}, connect_timeout=2, read_timeout=read_timeout
        ),
    )
    operations: Counter[str] = Counter()

    def count(model: Any, **_: Any) -> None:
        operations[model.name] += 1

    client.meta.events.register("before-call.kinesis.*", count)
    client.operations = operations
    return client


class Copy(NamedTuple):
    """One Kinesis record in the stream, de-aggregated."""

    shard_id: str
    sequence_number: str
    data: bytes
    aggregate_id: str | None
    records: list[UserRecord]


def read_copies(client: Any, name: str) -> list[Copy]:
    """Every Kinesis record of every shard (closed ones too), in shard order, de-aggregated."""
    copies: list[Copy] = []
    for shard in client.list_shards(StreamName=name)["Shards"]:
        shard_id = shard["ShardId"]
        iterator = client.get_shard_iterator(
            StreamName=name, ShardId=shard_id, ShardIteratorType="TRIM_HORIZON"
        )["ShardIterator"]
        while iterator:
            response = client.get_records(ShardIterator=iterator, Limit=10000)
            for record in response["Records"]:
                records, aggregate_id = decode_aggregate(record["Data"])
                copies.append(Copy(shard_id, record["SequenceNumber"], record["Data"], aggregate_id, records))
            iterator = response.get("NextShardIterator")
            if not response["Records"] and response.get("MillisBehindLatest", 0) == 0:
                break
    return copies
