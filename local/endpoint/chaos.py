"""The endpoint's part of a chaos profile: faults injected into every call but the observers'.

`ChaosMiddleware` sits between the endpoint's own routes and moto. For a call whose User-Agent does
not carry `OBSERVER_AGENT`, by service (Kinesis, DynamoDB, SQS: told apart by `X-Amz-Target`):

- latency is added before the call is served;
- a request error answers it in the service's JSON shape without serving it (nothing happens);
- DynamoDB calls on the profile's tables: TransactWriteItems cancelled (`TransactionConflict`),
  reads and writes throttled — nothing written;
- SQS SendMessage(Batch) refused — nothing sent;
- a lost response: moto serves the call (it takes effect), then the connection is shut without a
  response, so the client sees a closed connection and cannot tell whether it landed (a
  SubscribeToShard is made, so a retry within 5 s is refused, and its stream is dropped);
- a lost request: the connection is shut without serving the call (nothing happens), which the
  client cannot tell from a lost response;
- a slow PutRecords: held longer than the producer's read timeout, then served (the write lands
  after the client gave up on it, perhaps after its retry landed);
- a brownout: for a while every PutRecords is answered 503 ServiceUnavailable, writing nothing;
- a producer function's reads (GetRecords, GetShardIterator, SubscribeToShard) refused with
  AccessDeniedException, as its write-only role would: the caller is found by its connection
  (`local.endpoint.callers`: the process holding the socket, on Linux) and is a producer when its
  environment names `PRODUCER_MARKER`.

PutRecords entries are refused one by one (`ProvisionedThroughputExceededException`,
`InternalFailure`) through the hook `kinesis.fixes.STATE.entry_fault`, before the shard limits
are charged: a refused entry is never written. The reshards at the profile's times are
`local.endpoint.resharder`'s. Every fault is counted in `ChaosState.injected` (`ChaosState.report`,
with the reshards done), served at `GET /_shardline/chaos`.
"""

from __future__ import annotations

import contextlib
import fnmatch
import json
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

from ..chaos.profiles import (
    OBSERVER_AGENT,
    PRODUCER_MARKER,
    REQUEST_ERROR_CODES,
    ChaosProfile,
    rng_for,
)
from ..limits import THROTTLED
from .callers import caller_environment, socket_inode
from .request_body import json_body
from .service_metrics import SERVICE_METRICS

StartResponse = Callable[..., Any]

_TARGET_PREFIXES = {"Kinesis_20131202.": "kinesis", "DynamoDB_20120810.": "dynamodb", "AmazonSQS.": "sqs"}
#: (HTTP status, message) of each injected request error; DynamoDB names its 500 differently.
_REQUEST_ERRORS = {
    "InternalFailure": (500, "We encountered an internal error. Please try again."),
    "ServiceUnavailable": (503, "The service is unavailable. Please try again shortly."),
    "ThrottlingException": (400, "Rate exceeded"),
}
_DYNAMODB_NAMES = {"InternalFailure": "InternalServerError"}
_DYNAMODB_PREFIX = "com.amazonaws.dynamodb.v20120810#"
_DYNAMODB_READS_AND_WRITES = {
    "GetItem", "PutItem", "UpdateItem", "DeleteItem", "Query", "Scan", "BatchGetItem",
    "BatchWriteItem", "TransactGetItems", "TransactWriteItems",
}  # fmt: skip
_DYNAMODB_READS = {"GetItem", "Query", "Scan", "BatchGetItem", "TransactGetItems"}
_RECORD_FAILURE_MESSAGE = "Internal service failure."
_KINESIS_READS = {"GetRecords", "GetShardIterator", "SubscribeToShard"}
#: Answered as a stream that lasts minutes: a lost response loses it once the call has taken effect.
_STREAMED = {"SubscribeToShard"}
#: In the User-Agent of a client in a Lambda execution environment (botocore adds AWS_EXECUTION_ENV).
_LAMBDA_AGENT = "exec-env/AWS_Lambda"


class ChaosState:
    """The profile, the random sources, and what was injected (thread-safe)."""

    def __init__(self, profile: ChaosProfile) -> None:
        self.profile = profile
        self.injected: Counter[str] = Counter()
        self.reshards: list[dict[str, Any]] = [
            {"at_s": r.at_s, "action": r.action, "stream": r.stream, "done_at": None, "shards": []}
            for r in profile.reshards
        ]
        self._lock = threading.Lock()
        self._rngs = {
            site: rng_for(profile, site) for site in ("requests", "entries", "latency", "brownouts")
        }
        self._subject = threading.local()  # set per request: is this thread serving a subject's call?
        self._brownout_until = 0.0  # time.monotonic() until which every PutRecords is refused
        self._next_brownout: float | None = None  # when the next one begins (set by the first PutRecords)
        self._producers: dict[int, bool] = {}  # socket inode -> is the caller a producer function

    def in_brownout(self, now: float | None = None) -> bool:
        """True during a brownout (one begins when it is due: see `EndpointFaults.brownout_every_s`)."""
        faults = self.profile.endpoint
        every = faults.brownout_every_s
        if every <= 0:
            return False
        now = time.monotonic() if now is None else now
        with self._lock:
            rng = self._rngs["brownouts"]
            if self._next_brownout is None:
                self._next_brownout = now + rng.uniform(0, every)
            if now >= self._next_brownout:
                self._brownout_until = now + faults.brownout_s
                self._next_brownout = self._brownout_until + rng.uniform(0.5, 1.5) * every
                self.injected["kinesis.put_records.brownout"] += 1
            return now < self._brownout_until

    def is_producer(self, environ: dict[str, Any]) -> bool:
        """Whether the call comes from a producer function's process (remembered per connection)."""
        if _LAMBDA_AGENT not in environ.get("HTTP_USER_AGENT", ""):
            return False  # not from a Lambda execution environment (the runtime's poller, a test)
        inode = socket_inode(environ)
        if inode is None:
            return False
        with self._lock:
            known = self._producers.get(inode)
        if known is None:
            caller = caller_environment(inode)
            known = caller is not None and PRODUCER_MARKER in caller
            with self._lock:
                if len(self._producers) > 10_000:
                    self._producers.clear()
                self._producers[inode] = known
        return known

    def count(self, kind: str, amount: int = 1) -> None:
        with self._lock:
            self.injected[kind] += amount

    def chance(self, site: str, rate: float) -> bool:
        if rate <= 0:
            return False
        with self._lock:
            return self._rngs[site].random() < rate

    def choice(self, site: str, options: tuple[str, ...]) -> str:
        with self._lock:
            return self._rngs[site].choice(options)

    def latency_s(self) -> float:
        with self._lock:
            return self.profile.endpoint.latency.sample_ms(self._rngs["latency"]) / 1000

    def serving_subject(self, value: bool) -> None:
        self._subject.value = value

    def entry_fault(self) -> str | None:
        """For `kinesis.fixes`: the code to refuse one PutRecords entry with, or None to go on."""
        if not getattr(self._subject, "value", False):
            return None
        faults = self.profile.endpoint
        if self.chance("entries", faults.put_records_throttle_rate):
            self.count("kinesis.put_records.throttled_entries")
            return THROTTLED
        if self.chance("entries", faults.put_records_failure_rate):
            self.count("kinesis.put_records.failed_entries")
            return "InternalFailure"
        return None

    def report(self) -> dict[str, Any]:
        with self._lock:
            return {
                "profile": self.profile.name,
                "active": self.profile.active,
                "injected": dict(sorted(self.injected.items())),
                "reshards": [dict(r) for r in self.reshards],
            }


class ChaosMiddleware:
    """WSGI: the profile's request-level faults around `app` (moto); see the module's description."""

    def __init__(self, app: Callable[..., Iterable[bytes]], state: ChaosState) -> None:
        self.app = app
        self.state = state
        self.faults = state.profile.endpoint

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        service, operation = _service_of(environ)
        subject = service is not None and OBSERVER_AGENT not in environ.get("HTTP_USER_AGENT", "")
        self.state.serving_subject(subject)
        if not subject or service is None:
            return self.app(environ, start_response)
        state, faults = self.state, self.faults
        if faults.latency.active:
            time.sleep(state.latency_s())
        if service == "kinesis":
            early = self._kinesis_fault(environ, start_response, operation)
            if early is not None:
                return early
        if state.chance("requests", faults.lost_request_rate.get(service, 0.0)):
            state.count(f"{service}.lost_request")
            _body(environ)  # read, so the server does not take the body for the next request
            _drop_connection(environ)
            raise ConnectionResetError("chaos: request lost on purpose")
        if state.chance("requests", faults.request_error_rate.get(service, 0.0)):
            code = state.choice("requests", REQUEST_ERROR_CODES)
            state.count(f"{service}.request_error.{code}")
            return _request_error(start_response, service, code)
        refusal = self._service_fault(environ, service, operation)
        if refusal is not None:
            return refusal(start_response)
        if state.chance("requests", faults.lost_response_rate.get(service, 0.0)):
            return self._lose_response(environ, service, operation)
        return self.app(environ, start_response)

    def _kinesis_fault(
        self, environ: dict[str, Any], start_response: StartResponse, operation: str
    ) -> Iterable[bytes] | None:
        """A producer's read refused, a brownout's 503, or a slow PutRecords served late; else None."""
        state, faults = self.state, self.faults
        if operation in _KINESIS_READS and faults.producer_reads_denied and state.is_producer(environ):
            state.count("kinesis.producer_read_denied")
            message = (
                f"User is not authorized to perform: kinesis:{operation} (the producer's role only writes)"
            )
            return _error(start_response, 400, "kinesis", "AccessDeniedException", message)
        if operation != "PutRecords":
            return None
        if state.in_brownout():
            state.count("kinesis.put_records.brownout_refused")
            return _request_error(start_response, "kinesis", "ServiceUnavailable")
        if state.chance("requests", faults.slow_put_records_rate):
            state.count("kinesis.put_records.slow")
            time.sleep(faults.slow_put_records_s)  # the client's read timeout passes; then it lands
            return self.app(environ, start_response)
        return None

    def _service_fault(
        self, environ: dict[str, Any], service: str, operation: str
    ) -> Callable[[StartResponse], list[bytes]] | None:
        """A DynamoDB or SQS refusal the profile calls for on this call, or None."""
        state, faults = self.state, self.faults
        if service == "dynamodb" and operation in _DYNAMODB_READS_AND_WRITES:
            if not (faults.dynamodb_transaction_canceled_rate or faults.dynamodb_throttling_rate):
                return None
            body = _body(environ)
            tables = _tables(body)
            if not any(fnmatch.fnmatchcase(t, p) for t in tables for p in faults.dynamodb_tables):
                return None
            if operation == "TransactWriteItems" and state.chance(
                "requests", faults.dynamodb_transaction_canceled_rate
            ):
                state.count("dynamodb.transaction_canceled")
                return lambda start: _transaction_canceled(start, len(body.get("TransactItems", [])))
            if state.chance("requests", faults.dynamodb_throttling_rate):
                state.count("dynamodb.throttled")
                _throttle_metrics(operation, tables)
                return lambda start: _error(
                    start, 400, "dynamodb", _DYNAMODB_PREFIX + "ThrottlingException",
                    "Throughput exceeds the current capacity of your table or index.",
                )  # fmt: skip
        sends = ("SendMessage", "SendMessageBatch")
        if service == "sqs" and operation in sends and state.chance("requests", faults.sqs_send_error_rate):
            state.count("sqs.send_error")
            return lambda start: _request_error(start, "sqs", "InternalFailure")
        return None

    def _lose_response(self, environ: dict[str, Any], service: str, operation: str) -> list[bytes]:
        """Serve the call, drop its answer, and shut the connection (after the profile's delay)."""
        result = self.app(environ, lambda *args, **kwargs: lambda data: None)
        try:
            for _ in result:  # the answer is computed (and the call takes effect) as it is read
                if operation in _STREAMED:
                    break  # the subscription is made (its first message is out), then the line drops
        finally:
            close = getattr(result, "close", None)
            if close is not None:
                close()
        self.state.count(f"{service}.lost_response")
        if self.faults.lost_response_delay_s:
            time.sleep(self.faults.lost_response_delay_s)
        _drop_connection(environ)
        raise ConnectionResetError("chaos: response lost on purpose")  # werkzeug drops the connection


def _drop_connection(environ: dict[str, Any]) -> None:
    connection = environ.get("werkzeug.socket")
    if connection is not None:
        with contextlib.suppress(OSError):
            connection.shutdown(socket.SHUT_RDWR)


def _throttle_metrics(operation: str, tables: set[str]) -> None:
    """What DynamoDB publishes for a throttled call: ThrottledRequests per table and operation, and
    the read or write throttle events of each table."""
    events = "ReadThrottleEvents" if operation in _DYNAMODB_READS else "WriteThrottleEvents"
    for table in tables:
        per_operation = {"TableName": table, "Operation": operation}
        SERVICE_METRICS.add("AWS/DynamoDB", "ThrottledRequests", per_operation, 1)
        SERVICE_METRICS.add("AWS/DynamoDB", events, {"TableName": table}, 1)


def _service_of(environ: dict[str, Any]) -> tuple[str | None, str]:
    target = environ.get("HTTP_X_AMZ_TARGET", "")
    for prefix, service in _TARGET_PREFIXES.items():
        if target.startswith(prefix):
            return service, target[len(prefix) :]
    return None, ""


def _body(environ: dict[str, Any]) -> dict[str, Any]:
    """The JSON body ({} when it is not a JSON object: moto answers that itself)."""
    return json_body(environ) or {}


def _tables(body: dict[str, Any]) -> set[str]:
    """The tables a DynamoDB call names (TableName, RequestItems, TransactItems)."""
    tables = {body["TableName"]} if isinstance(body.get("TableName"), str) else set()
    tables.update(body.get("RequestItems") or {})
    for item in body.get("TransactItems") or []:
        for operation in item.values():
            if isinstance(operation, dict) and isinstance(operation.get("TableName"), str):
                tables.add(operation["TableName"])
    return tables


def _request_error(start_response: StartResponse, service: str, code: str) -> list[bytes]:
    status, message = _REQUEST_ERRORS[code]
    if service == "dynamodb":
        code = _DYNAMODB_PREFIX + _DYNAMODB_NAMES.get(code, code)
    return _error(start_response, status, service, code, message)


def _transaction_canceled(start_response: StartResponse, items: int) -> list[bytes]:
    reasons = [{"Code": "None"} for _ in range(max(1, items))]
    reasons[-1] = {"Code": "TransactionConflict", "Message": "Transaction is ongoing for the item"}
    codes = ", ".join(reason["Code"] for reason in reasons)
    return _error(
        start_response, 400, "dynamodb", _DYNAMODB_PREFIX + "TransactionCanceledException",
        f"Transaction cancelled, please refer cancellation reasons for specific reasons [{codes}]",
        CancellationReasons=reasons,
    )  # fmt: skip


def _error(
    start_response: StartResponse, status: int, service: str, code: str, message: str, **extra: Any
) -> list[bytes]:
    """An error in the JSON protocol's shape (`__type`, `message`), as botocore parses it."""
    payload = json.dumps({"__type": code, "message": message, **extra}).encode()
    content_type = "application/x-amz-json-1.1" if service == "kinesis" else "application/x-amz-json-1.0"
    headers = [("Content-Type", content_type), ("Content-Length", str(len(payload)))]
    if service == "sqs":  # the JSON protocol of SQS also names the error in this header
        headers.append(("x-amzn-query-error", f"{code.rsplit('#', 1)[-1]};Receiver"))
    start_response(f"{status} {_REASONS.get(status, 'Error')}", headers)
    return [payload]


_REASONS = {400: "Bad Request", 500: "Internal Server Error", 503: "Service Unavailable"}
