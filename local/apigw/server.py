"""The app's REST API on loopback, as API Gateway (REST, v1, `AWS_PROXY`) serves it.

Each request goes through API Gateway's steps in its order — size limit, resource and method
(403 `Missing Authentication Token` for anything else), stage throttling (token bucket), IAM
authorization (SigV4, `local.iam.sigv4`), the request validator — then becomes a full v1 proxy event
for `Invoker.invoke`; the function's answer becomes the HTTP response, or 502/504 as API Gateway
answers. Refusals carry API Gateway's status, JSON message and `x-amzn-ErrorType`.

Path layout: the stage is served both under its name (`/v1/streams/s/records`, as the
`execute-api` URL) and at the root (`/streams/s/records`, as a custom domain mapped to the stage).
`event.path` is the resource-relative path in both cases; `requestContext.path` is the path as the
caller sent it (with `/v1` under the stage), as API Gateway sets them.
"""

from __future__ import annotations

import base64
import contextlib
import http.server
import json
import logging
import secrets
import socket
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Collection, Mapping
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from .._http import HttpRequest, HttpResponse, RouteHandler
from ..app.model import ACCOUNT, LOCAL_CREDENTIALS, REGION, Invoker, RestApi
from ..cloudwatch.metrics import Publish, no_metrics
from ..cloudwatch.usage import Usage
from ..iam import sigv4
from .access import KeyPlans, PolicyCaller, QuotaExceeded, invoke_allowed
from .steps import (
    DEFAULT_BURST,
    DEFAULT_RATE,
    FORBIDDEN,
    INTEGRATION_TIMEOUT_S,
    INTERNAL,
    MALFORMED,
    MAX_EVENT_BYTES,
    MAX_REQUEST_BYTES,
    MISSING_TOKEN,
    QUOTA_EXCEEDED,
    THROTTLED,
    TIMED_OUT,
    TOO_LARGE,
    GatewayError,
    Refused,
    RequestValidator,
    ThrottleBucket,
    build_event,
    proxy_response,
    resource_tree,
    route,
    wants_binary,
)

__all__ = ["ApiServer", "ApiStats", "HttpRequest", "HttpResponse", "RouteHandler"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ApiStats:
    """What CloudWatch's API Gateway metrics would show: Count, 4XXError, 5XXError, Latency."""

    requests: int
    status_2xx: int
    status_4xx: int
    status_5xx: int
    throttled: int
    latency_p50_ms: float
    latency_p99_ms: float


class ApiServer:
    """One `RestApi` stage on `http://host:port`, plus extra local routes (`add_route`)."""

    def __init__(
        self,
        api: RestApi,
        invoker: Invoker,
        host: str = "127.0.0.1",
        port: int = 3000,
        *,
        credentials: Mapping[str, str] | None = None,  # access key -> secret key
        integration_timeout: float = INTEGRATION_TIMEOUT_S,
        clock: Callable[[], float] = time.time,  # the server's wall clock, for SigV4's window
        api_keys: Collection[str] | None = None,  # for api_key_required methods; None: the template's
        publish: Publish = no_metrics,  # Count, 4XXError, 5XXError, Latency, as API Gateway's metrics
        usage: Usage | None = None,  # the ledger each request to the stage is billed in
    ) -> None:
        self.api, self.invoker, self.host, self.port = api, invoker, host, port
        self.integration_timeout = integration_timeout
        self._credentials = dict(credentials or LOCAL_CREDENTIALS)
        self._clock = clock
        self._key_plans = KeyPlans(api.keys)
        # Only a key in a usage plan on this stage opens a keyed method, as in API Gateway: with
        # no usage plan, every keyed request is refused.
        self._api_keys = frozenset(api_keys if api_keys is not None else (plan.value for plan in api.keys))
        self._publish = publish
        self.usage = usage if usage is not None else Usage()
        self._tree = resource_tree(api)
        self._bucket = ThrottleBucket(api.throttle_rate or DEFAULT_RATE, api.throttle_burst or DEFAULT_BURST)
        self._validator = RequestValidator(api)
        self._routes: list[tuple[str, RouteHandler]] = []
        self._pool: ThreadPoolExecutor | None = None
        self._httpd: _Server | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._counts = {"requests": 0, "2": 0, "4": 0, "5": 0, "throttled": 0}
        self._latencies: deque[float] = deque(maxlen=10_000)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def add_route(self, prefix: str, handler: RouteHandler) -> None:
        """Serve `prefix` and everything under it with `handler` instead of the API (e.g. `/_dashboard`)."""
        self._routes.append((prefix.rstrip("/"), handler))

    def start(self) -> None:
        # Invocations run beside the connection threads so the integration timeout can cut them off.
        self._pool = ThreadPoolExecutor(max_workers=256, thread_name_prefix="apigw-invoke")
        self._httpd = _Server((self.host, self.port), _Handler)
        self._httpd.app = self
        self.port = self._httpd.server_address[1]  # port 0 asks for a free one
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.1,), name="apigw")
        self._thread.start()

    def stop(self) -> None:
        if self._httpd is None:
            return
        self._httpd.shutdown()
        self._httpd.close_connections()  # idle keep-alive connections end their threads
        self._httpd.server_close()  # joins the connection threads
        assert self._thread is not None
        self._thread.join()
        assert self._pool is not None
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._httpd = None

    def stats(self) -> ApiStats:
        with self._lock:
            counts, latencies = dict(self._counts), sorted(self._latencies)

        def percentile(q: float) -> float:
            return latencies[min(len(latencies) - 1, int(q * len(latencies)))] if latencies else 0.0

        return ApiStats(
            requests=counts["requests"],
            status_2xx=counts["2"],
            status_4xx=counts["4"],
            status_5xx=counts["5"],
            throttled=counts["throttled"],
            latency_p50_ms=percentile(0.50),
            latency_p99_ms=percentile(0.99),
        )

    def dispatch(self, request: HttpRequest, content_length: int | None = None) -> HttpResponse:
        """Answer one request: an extra route's, or API Gateway's (`content_length` as declared)."""
        for prefix, handler in self._routes:
            if request.path == prefix or request.path.startswith(prefix + "/"):
                try:
                    return handler(request)
                except Exception:
                    log.exception("route %s failed", prefix)
                    return HttpResponse(500, (("Content-Type", "text/plain"),), b"Internal server error")
        started = time.perf_counter()
        # API Gateway's two ids: x-amzn-RequestId (requestId) and x-amz-apigw-id (extendedRequestId).
        ids = (str(uuid.uuid4()), base64.b64encode(secrets.token_bytes(11)).decode())
        try:
            if (len(request.body) if content_length is None else content_length) > MAX_REQUEST_BYTES:
                raise Refused(TOO_LARGE)
            status, headers, body = self._gateway(request, ids)
        except Refused as refused:
            error = refused.error
            status, body = error.status, json.dumps({"message": error.message}).encode()
            headers = [("Content-Type", "application/json"), ("x-amzn-ErrorType", error.error_type)]
        headers += [
            ("x-amzn-RequestId", ids[0]),
            ("x-amz-apigw-id", ids[1]),
            ("X-Amzn-Trace-Id", f"Root=1-{int(time.time()):08x}-{secrets.token_hex(12)}"),
        ]
        elapsed_ms = (time.perf_counter() - started) * 1000
        with self._lock:
            self._counts["requests"] += 1
            self._counts[str(status)[0]] = self._counts.get(str(status)[0], 0) + 1
            self._counts["throttled"] += status == 429
            self._latencies.append(elapsed_ms)
        self.usage.add("apigateway", self.api.name, requests=1)
        dimensions = {"ApiName": self.api.name, "Stage": self.api.stage}
        for name, value in (("Count", 1), ("4XXError", status // 100 == 4), ("5XXError", status // 100 == 5)):
            self._publish("AWS/ApiGateway", name, dimensions, int(value))
        self._publish("AWS/ApiGateway", "Latency", dimensions, elapsed_ms)
        return HttpResponse(status, tuple(headers), body)

    def _gateway(
        self, request: HttpRequest, ids: tuple[str, str]
    ) -> tuple[int, list[tuple[str, str]], bytes]:
        """API Gateway's steps, in its order; `Refused` at the first that fails."""
        node, params, path = route(self._tree, self.api.stage, request.path)
        method = node.methods.get(request.method) or node.methods.get("ANY")
        if method is None:
            raise Refused(MISSING_TOKEN)
        if not self._bucket.take():
            raise Refused(THROTTLED)
        caller = self._authorize(request) if method.authorization == "AWS_IAM" else None
        if caller is not None:
            self._check_policy(caller, request.method, path)
        api_key = self._api_key(request) if method.api_key_required else None
        query = parse_qsl(request.query, keep_blank_values=True)
        self._validator.check(method, request, params, query)
        event = build_event(
            request,
            ids,
            node,
            params,
            path,
            query,
            caller,
            api_key,
            api=self.api,
            port=self.port,
            now=self._clock(),
        )
        body = event["body"] or ""
        if len(body) > MAX_EVENT_BYTES - (1 << 18) and len(json.dumps(event)) > MAX_EVENT_BYTES:
            raise Refused(TOO_LARGE)  # Lambda refuses the invocation; API Gateway answers 413
        if method.function_name is None:
            raise Refused(INTERNAL)  # an integration other than AWS_PROXY: not supported locally
        assert self._pool is not None, "start() first"
        # Not queued behind a busy reservation: Lambda throttles API Gateway's invocation, and API
        # Gateway answers the caller 500 (a proxy integration has no response from the function).
        future = self._pool.submit(self.invoker.invoke, method.function_name, event, wait=False)
        try:
            result = future.result(timeout=self.integration_timeout)
        except FutureTimeout:
            raise Refused(TIMED_OUT) from None
        except Exception:  # no such function (KeyError), throttled, or the invoker failed: Lambda's 5XX
            log.exception("invoking %s failed", method.function_name)
            raise Refused(INTERNAL) from None
        if result.function_error:
            raise Refused(MALFORMED)
        accept = next((value for name, value in request.headers if name.lower() == "accept"), "")
        return proxy_response(result.payload, binary=wants_binary(self.api.binary_media_types, accept))

    def _api_key(self, request: HttpRequest) -> str:
        key = next((v for k, v in request.headers if k.lower() == "x-api-key"), "")
        if key not in self._api_keys:
            raise Refused(FORBIDDEN)
        if key in self._key_plans.plans:
            try:
                admitted = self._key_plans.admit(key)
            except QuotaExceeded:
                raise Refused(QUOTA_EXCEEDED) from None
            if not admitted:
                raise Refused(THROTTLED)
        return key

    def _check_policy(self, caller: sigv4.Caller, method: str, path: str) -> None:
        """The resource policy's verdict on an IAM caller (`local.apigw.access`)."""
        principal = PolicyCaller(caller.user_arn, caller.account_id)
        if not invoke_allowed(self.api.policy, principal, ACCOUNT):
            api = f"arn:aws:execute-api:{REGION}:{ACCOUNT}:{self.api.api_id}"
            resource = f"{api}/{self.api.stage}/{method}{path}"
            raise Refused(
                GatewayError(
                    403,
                    "AccessDeniedException",
                    f"User: {principal.arn} is not authorized to perform: execute-api:Invoke on "
                    f"resource: {resource} with an explicit deny",
                )
            )

    def _authorize(self, request: HttpRequest) -> sigv4.Caller:
        signed = sigv4.SignedRequest(
            request.method, request.path, request.query, request.headers, request.body
        )
        try:
            return sigv4.verify(signed, self._credentials, datetime.fromtimestamp(self._clock(), UTC))
        except sigv4.SignatureRejected as rejected:
            raise Refused(GatewayError(403, rejected.error_type, rejected.message)) from None


class _Server(http.server.ThreadingHTTPServer):
    """A thread per connection (HTTP/1.1 keep-alive), each closed and joined on `ApiServer.stop`."""

    daemon_threads = False
    block_on_close = True
    app: ApiServer

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._connections: set[socket.socket] = set()
        self._connections_lock = threading.Lock()
        super().__init__(*args, **kwargs)

    def get_request(self) -> tuple[socket.socket, Any]:
        sock, address = super().get_request()
        with self._connections_lock:
            self._connections.add(sock)
        return sock, address

    def shutdown_request(self, request: Any) -> None:
        with self._connections_lock:
            self._connections.discard(request)
        super().shutdown_request(request)

    def close_connections(self) -> None:
        with self._connections_lock:
            connections = list(self._connections)
        for sock in connections:
            with contextlib.suppress(OSError):  # already closed by the client
                sock.shutdown(socket.SHUT_RDWR)


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive
    disable_nagle_algorithm = True  # headers and body leave at once, no delayed-ACK stall
    server: _Server

    def __getattr__(self, name: str) -> Any:
        if name.startswith("do_"):  # every method goes through API Gateway's routing
            return self._serve
        raise AttributeError(name)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the API's metrics are in `ApiServer.stats`."""

    def _serve(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_REQUEST_BYTES:
            self._discard(length)  # refused unread, but drained so the client gets to read the 413
            body = b""
        elif "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            body = self._read_chunked()
            length = len(body)
        else:
            body = self.rfile.read(length) if length else b""
        path, _, query = self.path.partition("?")
        headers = tuple(self.headers.items())
        request = HttpRequest(
            self.command, urlsplit(path).path or "/", query, headers, body, self.client_address[0]
        )
        self._write(self.server.app.dispatch(request, content_length=length))

    def _discard(self, length: int) -> None:
        if length > 8 * MAX_REQUEST_BYTES:
            self.close_connection = True  # not worth draining: the connection ends instead
            return
        while length > 0 and (chunk := self.rfile.read(min(length, 1 << 20))):
            length -= len(chunk)

    def _read_chunked(self) -> bytes:
        chunks, total = [], 0
        while size := int(self.rfile.readline().split(b";")[0].strip() or b"0", 16):
            total += size
            if total > MAX_REQUEST_BYTES:
                self.close_connection = True
                return b"\0" * (MAX_REQUEST_BYTES + 1)  # stands for the refused body
            chunks.append(self.rfile.read(size))
            self.rfile.readline()
        while self.rfile.readline() not in (b"\r\n", b"\n", b""):  # trailers
            pass
        return b"".join(chunks)

    def _write(self, response: HttpResponse) -> None:
        lines = [f"{self.protocol_version} {response.status} {self.responses.get(response.status, ('',))[0]}"]
        lines.append(f"Date: {self.date_time_string()}")
        lines += [f"{name}: {value}" for name, value in response.headers]
        lines.append(f"Content-Length: {len(response.body)}")
        lines.append("Connection: close" if self.close_connection else "Connection: keep-alive")
        head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1", errors="replace")
        self.wfile.write(head if self.command == "HEAD" else head + response.body)
