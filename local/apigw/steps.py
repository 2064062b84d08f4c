"""API Gateway's steps for one request, and its reading of a Lambda proxy answer.

Pure functions and small classes over a `RestApi`: the resource tree, the stage's token bucket,
the request validator, the REST (v1) proxy event, and the proxy answer's checks. `local.apigw.server`
runs them in API Gateway's order behind its HTTP server.
"""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import unquote

from .._http import HttpRequest
from ..app.model import ACCOUNT, Method, RestApi
from ..iam import sigv4
from .schema import Check, compile_model

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
FORBIDDEN = GatewayError(403, "ForbiddenException", "Forbidden")  # no or unknown x-api-key
THROTTLED = GatewayError(429, "TooManyRequestsException", "Too Many Requests")
QUOTA_EXCEEDED = GatewayError(429, "LimitExceededException", "Limit Exceeded")  # a usage plan's quota
BAD_BODY = GatewayError(400, "BadRequestException", "Invalid request body")
MALFORMED = GatewayError(502, "InternalServerErrorException", "Internal server error")
INTERNAL = GatewayError(500, "InternalServerErrorException", "Internal server error")
TIMED_OUT = GatewayError(504, "InternalServerErrorException", "Endpoint request timed out")


class ThrottleBucket:
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


class ResourceNode:
    """A node of the resource tree: literal children first, then `{param}`, then `{param+}`."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.resource_id = hashlib.sha1(path.encode()).hexdigest()[:6]
        self.literals: dict[str, ResourceNode] = {}
        self.param: tuple[str, ResourceNode] | None = None
        self.greedy: tuple[str, ResourceNode] | None = None
        self.methods: dict[str, Method] = {}

    def child(self, segment: str) -> ResourceNode:
        path = f"{self.path.rstrip('/')}/{segment}"
        if segment.endswith("+}"):
            self.greedy = self.greedy or (segment[1:-2], ResourceNode(path))
            return self.greedy[1]
        if segment.startswith("{"):
            self.param = self.param or (segment[1:-1], ResourceNode(path))
            return self.param[1]
        return self.literals.setdefault(segment, ResourceNode(path))

    def match(self, segments: list[str], params: dict[str, str]) -> ResourceNode | None:
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


def resource_tree(api: RestApi) -> ResourceNode:
    root = ResourceNode("/")
    for method in api.methods:
        node = root
        for segment in filter(None, method.path.split("/")):
            node = node.child(segment)
        node.methods[method.http_method.upper()] = method
    return root


def request_time(now: float) -> str:
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


#: The keys of a REST proxy response: AWS answers 502 for any other (tests/conformance/aws_recorded).
PROXY_RESPONSE_KEYS = frozenset({"statusCode", "headers", "multiValueHeaders", "body", "isBase64Encoded"})


def _status(value: Any) -> int:
    """The answer's status: 200 when absent, and a string of digits is read as the number (as AWS does)."""
    if value is None:
        return 200
    if isinstance(value, str) and value.isascii() and value.isdigit():
        value = int(value)
    if type(value) is not int or not 100 <= value <= 599:
        raise Refused(MALFORMED)
    return value


def _header_value(value: Any) -> str:
    """A header's value: a string, or a boolean written as JSON writes it (AWS answers `true`)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if not isinstance(value, str):
        raise Refused(MALFORMED)
    return value


def wants_binary(binary_media_types: tuple[str, ...], accept: str) -> bool:
    """Whether API Gateway turns a base64 proxy answer into bytes: the API declares a binary media
    type that the request's Accept names (`*/*` and `image/*` declared match their kind)."""
    wanted = [part.split(";", 1)[0].strip().lower() for part in accept.split(",") if part.strip()]
    for declared in (kind.lower() for kind in binary_media_types):
        if declared == "*/*" or any(
            kind == declared or (declared.endswith("/*") and kind.startswith(declared[:-1]))
            for kind in wanted
        ):
            return True
    return False


def proxy_response(payload: Any, *, binary: bool = False) -> tuple[int, list[tuple[str, str]], bytes]:
    """The HTTP answer in a Lambda proxy response; `Refused(MALFORMED)` as API Gateway judges it.
    A base64 body (`isBase64Encoded`) is decoded only when `binary` (see `wants_binary`); otherwise
    API Gateway passes its text through as it is."""
    if not isinstance(payload, dict) or not payload.keys() <= PROXY_RESPONSE_KEYS:
        # A key the REST API does not know (`cookies` is the HTTP API's) makes the whole answer malformed.
        raise Refused(MALFORMED)
    status, body = _status(payload.get("statusCode")), payload.get("body")
    headers = payload.get("headers") or {}
    multi = payload.get("multiValueHeaders") or {}
    encoded = payload.get("isBase64Encoded", False)
    if not isinstance(encoded, bool):
        raise Refused(MALFORMED)
    if not (body is None or isinstance(body, str)) or not isinstance(headers, dict):
        raise Refused(MALFORMED)
    headers = {k: _header_value(v) for k, v in headers.items()}
    if not isinstance(multi, dict) or not all(
        isinstance(k, str) and isinstance(v, list) and all(isinstance(x, str) for x in v)
        for k, v in multi.items()
    ):
        raise Refused(MALFORMED)
    try:
        data = base64.b64decode(body or "", validate=True) if encoded and binary else (body or "").encode()
    except ValueError:
        raise Refused(MALFORMED) from None
    # Both maps merge, multiValueHeaders' first (as AWS answers); a name and value in both once.
    lines = [(k, v) for k, values in multi.items() for v in values]
    seen = {(k.lower(), v) for k, v in lines}
    lines += [(k, v) for k, v in headers.items() if (k.lower(), v) not in seen]
    lines = [(f"x-amzn-Remapped-{k}" if k.lower() in REMAPPED else k, v) for k, v in lines]
    if not any(k.lower() == "content-type" for k, _ in lines):
        lines.append(("Content-Type", "application/json"))
    return status, lines, data


def route(tree: ResourceNode, stage: str, path: str) -> tuple[ResourceNode, dict[str, str], str]:
    """The resource for a path (under the stage's name or at the root), its parameters, its
    stage-relative path; `Refused(MISSING_TOKEN)` when no resource matches."""
    segments = [unquote(s) for s in path.split("/") if s]
    params: dict[str, str] = {}
    node = None
    if segments[:1] == [stage]:
        node, relative = tree.match(segments[1:], params), segments[1:]
    if node is None:
        params = {}
        node, relative = tree.match(segments, params), segments
    if node is None:
        raise Refused(MISSING_TOKEN)
    return node, params, "/" + "/".join(relative)


class RequestValidator:
    """The methods' request validators, with each model compiled once."""

    def __init__(self, api: RestApi) -> None:
        self._models: dict[tuple[str, str, str], Check] = {
            (m.path, m.http_method.upper(), ctype.lower()): compile_model(schema)
            for m in api.methods
            for ctype, schema in m.request_models.items()
        }

    def check(
        self, method: Method, request: HttpRequest, params: dict[str, str], query: list[tuple[str, str]]
    ) -> None:
        """`Refused` with the validator's 400 when a required parameter is missing or the body fails."""
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
            model_key = (method.path, method.http_method.upper())
            is_valid = self._models.get((*model_key, ctype)) or self._models.get((*model_key, "$default"))
            if is_valid is None:
                return  # no model for this content type: API Gateway does not validate
            try:
                document = json.loads(request.body)
            except ValueError:
                raise Refused(BAD_BODY) from None
            if not is_valid(document):
                raise Refused(BAD_BODY)


def build_event(
    request: HttpRequest,
    ids: tuple[str, str],  # requestId, extendedRequestId
    node: ResourceNode,
    params: dict[str, str],
    path: str,
    query: list[tuple[str, str]],
    caller: sigv4.Caller | None,
    api_key: str | None,
    api: RestApi,
    port: int,
    now: float,
) -> dict[str, Any]:
    """The REST (v1) proxy event for one request, as API Gateway hands it to the function."""
    lines = list(request.headers)
    names = {k.lower() for k, _ in lines}
    forwarded = next((v for k, v in lines if k.lower() == "x-forwarded-for"), None)
    lines = [(k, v) for k, v in lines if k.lower() != "x-forwarded-for"]
    lines.append(("X-Forwarded-For", f"{forwarded}, {request.client_ip}" if forwarded else request.client_ip))
    lines += [("X-Forwarded-Port", str(port)), ("X-Forwarded-Proto", "http")]
    if "x-amzn-trace-id" not in names:
        lines.append(("X-Amzn-Trace-Id", f"Root=1-{int(now):08x}-{secrets.token_hex(12)}"))
    headers, multi_headers = _multi(lines)
    query_single, query_multi = _multi(query)
    lower = {k.lower(): v for k, v in lines}
    domain = lower.get("host", "localhost")  # the Host header as sent (AWS recorded the two equal)
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
    }
    if api_key is not None:  # AWS's identity has no API key fields for a method without a key
        identity.update(apiKey=api_key, apiKeyId=hashlib.sha1(api_key.encode()).hexdigest()[:10])
    context = {
        "resourceId": node.resource_id,
        "resourcePath": node.path,
        "httpMethod": request.method,
        "extendedRequestId": ids[1],
        "requestTime": request_time(now),
        "path": request.path,
        "accountId": ACCOUNT,
        "protocol": "HTTP/1.1",
        "stage": api.stage,
        "domainPrefix": domain.split(":")[0].split(".")[0],
        "requestTimeEpoch": int(now * 1000),
        "requestId": ids[0],
        "identity": identity,
        "domainName": domain,
        "deploymentId": hashlib.sha1(api.api_id.encode()).hexdigest()[:6],
        "apiId": api.api_id,
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
