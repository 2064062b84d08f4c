"""The app's REST API on loopback, as API Gateway (REST, v1, `AWS_PROXY`) serves it.

Each request goes through API Gateway's steps in its order — size limit, resource and method
(403 `Missing Authentication Token` for anything else), stage throttling (token bucket), IAM
authorization (SigV4, `local._sigv4`), the request validator — then becomes a full v1 proxy event
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
import hashlib
import http.server
import json
import logging
import secrets
import socket
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

import jsonschema

from local import _sigv4
from local.model import ACCESS_KEY, ACCOUNT, SECRET_KEY, Invoker, Method, RestApi

log = logging.getLogger(__name__)

MAX_REQUEST_BYTES = 10 * 1024 * 1024  # API Gateway's payload quota
MAX_EVENT_BYTES = 6 * 1024 * 1024  # Lambda's synchronous invocation payload quota
INTEGRATION_TIMEOUT_S = 29.0  # API Gateway's default integration timeout
DEFAULT_RATE, DEFAULT_BURST = 10_000.0, 5_000  # the account-level throttle when the stage sets none
MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
# Headers API Gateway owns on the way out: a function's values are passed as x-amzn-Remapped-<name>.
REMAPPED = {"connection", "content-length", "date", "server", "transfer-encoding"}


@dataclass(frozen=True)
class GatewayError:
    """A gateway response: API Gateway's own answer, before or instead of the integration's."""

    status: int
    error_type: str
    message: str


class Refused(Exception):
    """Raised inside the pipeline to answer with a gateway response."""

    def __init__(self, error: GatewayError) -> None:
        super().__init__(error.message)
        self.error = error


MISSING_TOKEN = GatewayError(403, "MissingAuthenticationTokenException", "Missing Authentication Token")
TOO_LARGE = GatewayError(413, "BadRequestException", "Request Too Long")
THROTTLED = GatewayError(429, "TooManyRequestsException", "Too Many Requests")
BAD_BODY = GatewayError(400, "BadRequestException", "Invalid request body")
MALFORMED = GatewayError(502, "InternalServerErrorException", "Internal server error")
INTERNAL = GatewayError(500, "InternalServerErrorException", "Internal server error")
TIMED_OUT = GatewayError(504, "InternalServerErrorException", "Endpoint request timed out")


@dataclass(frozen=True)
class HttpRequest:
    """An incoming request, as an extra route (`ApiServer.add_route`) receives it."""

    method: str
    path: str  # still percent-encoded
    query: str
    headers: tuple[tuple[str, str], ...]
    body: bytes
    client_ip: str


@dataclass(frozen=True)
class HttpResponse:
    status: int
    headers: tuple[tuple[str, str], ...] = ()
    body: bytes = b""


RouteHandler = Callable[[HttpRequest], HttpResponse]


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


class TokenBucket:
    """API Gateway's throttle: `burst` requests at once, refilled at `rate` per second."""

    def __init__(self, rate: float, burst: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.rate, self.burst, self._clock = rate, burst, clock
        self._tokens, self._at = float(burst), clock()
        self._lock = threading.Lock()

    def take(self) -> bool:
        with self._lock:
            now = self._clock()
            self._tokens = min(self.burst, self._tokens + (now - self._at) * self.rate)
            self._at = now
            if self._tokens < 1:
                return False
            self._tokens -= 1
            return True


class _Resource:
    """A node of the resource tree: literal children first, then `{param}`, then `{param+}`."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.resource_id = hashlib.sha1(path.encode()).hexdigest()[:6]
        self.literals: dict[str, _Resource] = {}
        self.param: tuple[str, _Resource] | None = None
        self.greedy: tuple[str, _Resource] | None = None
        self.methods: dict[str, Method] = {}

    def child(self, segment: str) -> _Resource:
        path = f"{self.path.rstrip('/')}/{segment}"
        if segment.endswith("+}"):
            self.greedy = self.greedy or (segment[1:-2], _Resource(path))
            return self.greedy[1]
        if segment.startswith("{"):
            self.param = self.param or (segment[1:-1], _Resource(path))
            return self.param[1]
        return self.literals.setdefault(segment, _Resource(path))

    def match(self, segments: list[str], params: dict[str, str]) -> _Resource | None:
        if not segments:
            return self if self.methods else None
        head, rest = segments[0], segments[1:]
        if head in self.literals and (found := self.literals[head].match(rest, params)):
            return found
        if self.param and head and (found := self.param[1].match(rest, params)):
            params[self.param[0]] = head
            return found
        if self.greedy and head and self.greedy[1].methods:
            params[self.greedy[0]] = "/".join(segments)
            return self.greedy[1]
        return None


def _resource_tree(api: RestApi) -> _Resource:
    root = _Resource("/")
    for method in api.methods:
        node = root
        for segment in filter(None, method.path.split("/")):
            node = node.child(segment)
        node.methods[method.http_method.upper()] = method
    return root


def _request_time(now: float) -> str:
    t = datetime.fromtimestamp(now, UTC)
    return f"{t.day:02d}/{MONTHS[t.month - 1]}/{t.year}:{t:%H:%M:%S} +0000"


def _multi(pairs: list[tuple[str, str]]) -> tuple[dict[str, str] | None, dict[str, list[str]] | None]:
    """API Gateway's single-value map (last value wins) and multi-value map, or nulls when empty."""
    if not pairs:
        return None, None
    single: dict[str, str] = {}
    multi: dict[str, list[str]] = {}
    for key, value in pairs:
        single[key] = value
        multi.setdefault(key, []).append(value)
    return single, multi


def _proxy_response(payload: Any) -> tuple[int, list[tuple[str, str]], bytes]:
    """The HTTP answer in a Lambda proxy response; `Refused(MALFORMED)` as API Gateway judges it."""
    if not isinstance(payload, dict):
        raise Refused(MALFORMED)
    status, body = payload.get("statusCode"), payload.get("body")
    headers = payload.get("headers") or {}
    multi = payload.get("multiValueHeaders") or {}
    encoded = payload.get("isBase64Encoded", False)
    if type(status) is not int or not 100 <= status <= 599 or not isinstance(encoded, bool):
        raise Refused(MALFORMED)
    if not (body is None or isinstance(body, str)) or not isinstance(headers, dict):
        raise Refused(MALFORMED)
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in headers.items()):
        raise Refused(MALFORMED)
    if not isinstance(multi, dict) or not all(
        isinstance(k, str) and isinstance(v, list) and all(isinstance(x, str) for x in v)
        for k, v in multi.items()
    ):
        raise Refused(MALFORMED)
    try:
        data = base64.b64decode(body or "", validate=True) if encoded else (body or "").encode()
    except ValueError:
        raise Refused(MALFORMED) from None
    # Both maps merge; for a name in both, multiValueHeaders' values win.
    lines = [(k, v) for k, v in headers.items() if k.lower() not in {m.lower() for m in multi}]
    lines += [(k, v) for k, values in multi.items() for v in values]
    lines = [(f"x-amzn-Remapped-{k}" if k.lower() in REMAPPED else k, v) for k, v in lines]
    if not any(k.lower() == "content-type" for k, _ in lines):
        lines.append(("Content-Type", "application/json"))
    return status, lines, data


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
    ) -> None:
        self.api, self.invoker, self.host, self.port = api, invoker, host, port
        self.integration_timeout = integration_timeout
        self._credentials = dict(credentials or {ACCESS_KEY: SECRET_KEY})
        self._clock = clock
        self._tree = _resource_tree(api)
        self._bucket = TokenBucket(api.throttle_rate or DEFAULT_RATE, api.throttle_burst or DEFAULT_BURST)
        self._validators = {
            (m.path, m.http_method.upper(), ctype.lower()): jsonschema.Draft4Validator(schema)
            for m in api.methods
            for ctype, schema in m.request_models.items()
        }
        self._routes: list[tuple[str, RouteHandler]] = []
        self._pool = ThreadPoolExecutor(max_workers=256, thread_name_prefix="apigw-invoke")
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
                return handler(request)
        started = time.perf_counter()
        request_id = str(uuid.uuid4())
        try:
            if (len(request.body) if content_length is None else content_length) > MAX_REQUEST_BYTES:
                raise Refused(TOO_LARGE)
            status, headers, body = self._gateway(request, request_id)
        except Refused as refused:
            error = refused.error
            status, body = error.status, json.dumps({"message": error.message}).encode()
            headers = [("Content-Type", "application/json"), ("x-amzn-ErrorType", error.error_type)]
        headers += [
            ("x-amzn-RequestId", request_id),
            ("x-amz-apigw-id", base64.b64encode(secrets.token_bytes(11)).decode()),
            ("X-Amzn-Trace-Id", f"Root=1-{int(time.time()):08x}-{secrets.token_hex(12)}"),
        ]
        elapsed_ms = (time.perf_counter() - started) * 1000
        with self._lock:
            self._counts["requests"] += 1
            self._counts[str(status)[0]] = self._counts.get(str(status)[0], 0) + 1
            self._counts["throttled"] += status == 429
            self._latencies.append(elapsed_ms)
        return HttpResponse(status, tuple(headers), body)

    def _gateway(self, request: HttpRequest, request_id: str) -> tuple[int, list[tuple[str, str]], bytes]:
        """API Gateway's steps, in its order; `Refused` at the first that fails."""
        segments = [unquote(s) for s in request.path.split("/") if s]
        params: dict[str, str] = {}
        node = None
        if segments[:1] == [self.api.stage]:
            node, relative = self._tree.match(segments[1:], params), segments[1:]
        if node is None:
            params = {}
            node, relative = self._tree.match(segments, params), segments
        method = node and (node.methods.get(request.method) or node.methods.get("ANY"))
        if node is None or method is None:
            raise Refused(MISSING_TOKEN)
        if not self._bucket.take():
            raise Refused(THROTTLED)
        caller = self._authorize(request) if method.authorization == "AWS_IAM" else None
        query = parse_qsl(request.query, keep_blank_values=True)
        self._validate(method, request, params, query)
        event = self._event(request, request_id, node, params, "/" + "/".join(relative), query, caller)
        body = event["body"] or ""
        if len(body) > MAX_EVENT_BYTES - (1 << 18) and len(json.dumps(event)) > MAX_EVENT_BYTES:
            raise Refused(TOO_LARGE)  # Lambda refuses the invocation; API Gateway answers 413
        if method.function_name is None:
            raise Refused(INTERNAL)  # an integration other than AWS_PROXY: not supported locally
        future = self._pool.submit(self.invoker.invoke, method.function_name, event)
        try:
            result = future.result(timeout=self.integration_timeout)
        except FutureTimeout:
            raise Refused(TIMED_OUT) from None
        except Exception:  # no such function (KeyError), or the invoker failed: Lambda's 5XX
            log.exception("invoking %s failed", method.function_name)
            raise Refused(INTERNAL) from None
        if result.function_error:
            raise Refused(MALFORMED)
        return _proxy_response(result.payload)

    def _authorize(self, request: HttpRequest) -> _sigv4.Caller:
        signed = _sigv4.SignedRequest(
            request.method, request.path, request.query, request.headers, request.body
        )
        try:
            return _sigv4.verify(signed, self._credentials, datetime.fromtimestamp(self._clock(), UTC))
        except _sigv4.SignatureRejected as rejected:
            raise Refused(GatewayError(403, rejected.error_type, rejected.message)) from None

    def _validate(
        self, method: Method, request: HttpRequest, params: dict[str, str], query: list[tuple[str, str]]
    ) -> None:
        if method.validate_parameters:
            present = {
                "path": {k for k, v in params.items() if v},
                "querystring": {k for k, v in query if v},
                "header": {k.lower() for k, v in request.headers if v},
            }
            missing = []
            for key, required in method.required_parameters.items():
                _, _, where, name = key.split(".", 3)  # method.request.path.stream
                lookup = name.lower() if where == "header" else name
                if required and lookup not in present.get(where, set()):
                    missing.append(name)
            if missing:
                message = f"Missing required request parameters: [{', '.join(missing)}]"
                raise Refused(GatewayError(400, "BadRequestException", message))
        if method.validate_body and method.request_models:
            ctype = next((v for k, v in request.headers if k.lower() == "content-type"), "")
            ctype = ctype.split(";")[0].strip().lower() or "application/json"  # none: JSON assumed
            key = (method.path, method.http_method.upper())
            validator = self._validators.get((*key, ctype)) or self._validators.get((*key, "$default"))
            if validator is None:
                return  # no model for this content type: API Gateway does not validate
            try:
                document = json.loads(request.body)
            except ValueError:
                raise Refused(BAD_BODY) from None
            if not validator.is_valid(document):
                raise Refused(BAD_BODY)

    def _event(
        self,
        request: HttpRequest,
        request_id: str,
        node: _Resource,
        params: dict[str, str],
        path: str,
        query: list[tuple[str, str]],
        caller: _sigv4.Caller | None,
    ) -> dict[str, Any]:
        now = self._clock()
        lines = list(request.headers)
        names = {k.lower() for k, _ in lines}
        forwarded = next((v for k, v in lines if k.lower() == "x-forwarded-for"), None)
        lines = [(k, v) for k, v in lines if k.lower() != "x-forwarded-for"]
        lines.append(
            ("X-Forwarded-For", f"{forwarded}, {request.client_ip}" if forwarded else request.client_ip)
        )
        lines += [("X-Forwarded-Port", str(self.port)), ("X-Forwarded-Proto", "http")]
        if "x-amzn-trace-id" not in names:
            lines.append(("X-Amzn-Trace-Id", f"Root=1-{int(now):08x}-{secrets.token_hex(12)}"))
        headers, multi_headers = _multi(lines)
        query_single, query_multi = _multi(query)
        lower = {k.lower(): v for k, v in lines}
        domain = lower.get("host", self.host).rsplit(":", 1)[0]
        try:
            body, encoded = (request.body.decode() if request.body else None), False
        except UnicodeDecodeError:
            body, encoded = base64.b64encode(request.body).decode(), True
        identity = {
            "cognitoIdentityPoolId": None,
            "accountId": caller and caller.account_id,
            "cognitoIdentityId": None,
            "caller": caller and caller.account_id,
            "sourceIp": request.client_ip,
            "principalOrgId": None,
            "accessKey": caller and caller.access_key,
            "cognitoAuthenticationType": None,
            "cognitoAuthenticationProvider": None,
            "userArn": caller and caller.user_arn,
            "userAgent": lower.get("user-agent"),
            "user": caller and caller.account_id,
            "apiKey": None,
            "apiKeyId": None,
        }
        context = {
            "resourceId": node.resource_id,
            "resourcePath": node.path,
            "httpMethod": request.method,
            "extendedRequestId": base64.b64encode(secrets.token_bytes(11)).decode(),
            "requestTime": _request_time(now),
            "path": request.path,
            "accountId": ACCOUNT,
            "protocol": "HTTP/1.1",
            "stage": self.api.stage,
            "domainPrefix": domain.split(".")[0],
            "requestTimeEpoch": int(now * 1000),
            "requestId": request_id,
            "identity": identity,
            "domainName": domain,
            "deploymentId": hashlib.sha1(self.api.api_id.encode()).hexdigest()[:6],
            "apiId": self.api.api_id,
        }
        return {
            "resource": node.path,
            "path": path,
            "httpMethod": request.method,
            "headers": headers,
            "multiValueHeaders": multi_headers,
            "queryStringParameters": query_single,
            "multiValueQueryStringParameters": query_multi,
            "pathParameters": params or None,
            "stageVariables": None,
            "requestContext": context,
            "body": body,
            "isBase64Encoded": encoded,
        }


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
