"""Which botocore operation a request is: lookup tables built once per signing service from botocore's
service models (`local.iam.calls` names what the operation needs)."""

from __future__ import annotations

import contextlib
import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, unquote

from ._calls_types import Request, json_params

__all__ = ["Lookup", "Request", "lookup_for", "model_names"]

#: botocore service models per SigV4 signing service (the credential scope's service). Others are
#: looked up under their own name, when botocore has a model of it.
_MODELS = {
    "kinesis": ("kinesis",),
    "dynamodb": ("dynamodb", "dynamodbstreams"),
    "sqs": ("sqs",),
    "s3": ("s3",),
    "kms": ("kms",),
    "logs": ("logs",),
    "monitoring": ("cloudwatch",),
    "xray": ("xray",),
    "sts": ("sts",),
    "lambda": ("lambda",),
}

#: S3 virtual-host style: the bucket is the host's first labels (`b.s3.amazonaws.com`,
#: `b.s3.us-east-1.amazonaws.com`, `b.s3-website...`, `b.localhost:4566`).
_VHOST = re.compile(r"^(?P<bucket>[a-z0-9][a-z0-9.\-]*?)\.(?:s3[.\-]|localhost(?::\d+)?$)")
_PARAM = re.compile(r"\{([A-Za-z0-9_]+)(\+?)\}")


@dataclass(frozen=True)
class _Route:
    operation: str
    pattern: re.Pattern[str]
    literal_query: tuple[tuple[str, str | None], ...]  # from the requestUri: (key, value or None)
    x_id: str | None  # S3's `?x-id=<Operation>` hint, optional on the wire
    required_query: tuple[str, ...]  # required members the model places in the query string
    required_headers: tuple[str, ...]  # required members in headers (lower-cased)
    literal_length: int
    deprecated: bool  # a deprecated operation loses a tie (GetBucketLifecycle vs ...Configuration)

    def score(self, query: Mapping[str, str], headers: Mapping[str, str]) -> int | None:
        """How specifically this route matches (None: it does not)."""
        for key, value in self.literal_query:
            if key not in query or (value is not None and query[key] != value):
                return None
        if any(k not in query for k in self.required_query):
            return None
        if any(h not in headers for h in self.required_headers):
            return None
        constraints = len(self.literal_query) + len(self.required_query) + len(self.required_headers)
        return 2000 * constraints + 2 * self.literal_length + (0 if self.deprecated else 1)


@dataclass
class Lookup:
    """The operations of one signing service's models, by how a request names them."""

    targets: dict[str, frozenset[str]] = field(default_factory=dict)  # targetPrefix -> operations
    query_ops: frozenset[str] = frozenset()
    cbor: dict[str, frozenset[str]] = field(default_factory=dict)  # service segment -> operations
    routes: dict[str, list[_Route]] = field(default_factory=dict)  # method -> routes
    rest_protocol: str = ""
    s3: bool = False

    def protocol_of(self, request: Request) -> str:
        if "x-amz-target" in request.headers:
            return "json"
        if request.path.startswith("/service/") and self.cbor:
            return "smithy-rpc-v2-cbor"
        if self.query_ops and not self.routes:
            return "query"
        return self.rest_protocol or ("query" if self.query_ops else "")

    def identify(self, request: Request) -> tuple[str, str, dict[str, Any]] | None:
        """(operation, protocol, parameters) of the request, or None when no model names it."""
        target = request.headers.get("x-amz-target")
        if target is not None:
            prefix, _, operation = target.rpartition(".")
            if operation in self.targets.get(prefix, ()):
                return operation, "json", json_params(request.body)
            return None
        if self.cbor and request.path.startswith("/service/"):
            parts = request.path.split("/")  # ["", "service", <service>, "operation", <op>]
            if len(parts) == 5 and parts[3] == "operation" and parts[4] in self.cbor.get(parts[2], ()):
                return parts[4], "smithy-rpc-v2-cbor", _cbor(request.body)
            return None
        if self.query_ops:
            params = dict(parse_qsl(request.query, keep_blank_values=True))
            if request.body and "json" not in request.headers.get("content-type", ""):
                with contextlib.suppress(UnicodeDecodeError):  # a binary body holds no form
                    params.update(parse_qsl(request.body.decode("utf-8"), keep_blank_values=True))
            operation = params.get("Action", "")
            if operation in self.query_ops:
                return operation, "query", params
        if self.routes:
            return self._rest(request)
        return None

    def _rest(self, request: Request) -> tuple[str, str, dict[str, Any]] | None:
        path = request.path
        if self.s3:
            host = request.headers.get("host", "")
            vhost = _VHOST.match(host)
            if vhost is not None:
                path = "/" + vhost.group("bucket") + ("" if path == "/" else path)
        query = dict(parse_qsl(request.query, keep_blank_values=True))
        x_id = query.get("x-id")
        best: tuple[int, _Route, re.Match[str]] | None = None
        for route in self.routes.get(request.method, ()):
            if x_id is not None and route.x_id is not None and route.x_id != x_id:
                continue
            match = route.pattern.fullmatch(path)
            if match is None:
                continue
            score = route.score(query, request.headers)
            if score is not None and (best is None or score > best[0]):
                best = (score, route, match)
        if best is None:
            if path.endswith("/") and len(path) > 1 and path.count("/") == 2:
                # `/bucket/` (a bucket operation sent with a trailing slash) is the bucket's
                return self._rest(
                    Request(
                        request.method,
                        path[:-1],
                        request.query,
                        {k: v for k, v in request.headers.items() if k != "host"},
                        request.body,
                    )
                )
            return None
        params: dict[str, Any] = {k: unquote(v) for k, v in best[2].groupdict().items()}
        params["__query__"] = query
        return best[1].operation, self.rest_protocol, params


def _cbor(body: bytes) -> dict[str, Any]:
    if not body:
        return {}
    from botocore.parsers import RpcV2CBORParser

    parsed = RpcV2CBORParser()._initial_body_parse(body)
    return parsed if isinstance(parsed, dict) else {}


def _routes(model: Any) -> dict[str, list[_Route]]:
    routes: dict[str, list[_Route]] = {}
    for name in model.operation_names:
        operation = model.operation_model(name)
        uri = operation.http.get("requestUri", "/")
        path, _, literal = uri.partition("?")
        literal_query: list[tuple[str, str | None]] = []
        x_id = None
        for part in filter(None, literal.split("&")):
            key, eq, value = part.partition("=")
            if key == "x-id":
                x_id = value
            else:
                literal_query.append((key, value if eq else None))
        pattern, last = "", 0
        for param in _PARAM.finditer(path):
            pattern += re.escape(path[last : param.start()])
            pattern += f"(?P<{param.group(1)}>.+)" if param.group(2) else f"(?P<{param.group(1)}>[^/]+)"
            last = param.end()
        pattern += re.escape(path[last:])
        if path.endswith("/") and len(path) > 1:
            pattern += "?"  # `/{Bucket}/` answers `/b` and `/b/` alike
        shape = operation.input_shape
        required_query: list[str] = []
        required_headers: list[str] = []
        if shape is not None:
            for member in shape.required_members:
                where = shape.members[member].serialization
                if where.get("location") == "querystring":
                    required_query.append(where.get("name", member))
                elif where.get("location") == "header":
                    required_headers.append(where.get("name", member).lower())
        routes.setdefault(operation.http.get("method", "POST"), []).append(
            _Route(
                name,
                re.compile(pattern),
                tuple(literal_query),
                x_id,
                tuple(required_query),
                tuple(required_headers),
                len(_PARAM.sub("", path)),
                bool(operation.deprecated),
            )
        )
    return routes


def _build(signing_service: str) -> Lookup | None:
    import botocore.session

    session = botocore.session.get_session()
    names = _MODELS.get(signing_service)
    if names is None:
        names = (signing_service,) if signing_service in session.get_available_services() else ()
    if not names:
        return None
    lookup = Lookup()
    query_ops: set[str] = set()
    for name in names:
        model = session.get_service_model(name)
        protocols = model.metadata.get("protocols") or [model.protocol]
        operations = frozenset(model.operation_names)
        prefix = model.metadata.get("targetPrefix")
        if prefix and "json" in protocols:
            lookup.targets[prefix] = operations
        if "smithy-rpc-v2-cbor" in protocols and prefix:
            lookup.cbor[prefix] = operations
        if "query" in protocols or name == "sqs":  # SQS still answers its query form (awsQueryCompatible)
            query_ops |= operations
        if model.protocol in ("rest-json", "rest-xml"):
            lookup.routes = _routes(model)
            lookup.rest_protocol = model.protocol
            lookup.s3 = name == "s3"
    lookup.query_ops = frozenset(query_ops)
    return lookup


_LOOKUPS: dict[str, Lookup | None] = {}
_LOCK = threading.Lock()


def lookup_for(signing_service: str) -> Lookup | None:
    """The lookup of a signing service, built on first use (None: botocore has no model of it)."""
    try:
        return _LOOKUPS[signing_service]
    except KeyError:
        with _LOCK:
            if signing_service not in _LOOKUPS:
                _LOOKUPS[signing_service] = _build(signing_service)
            return _LOOKUPS[signing_service]


def model_names(signing_service: str) -> tuple[str, ...]:
    """The botocore models a signing service's requests are identified by."""
    return _MODELS.get(signing_service, (signing_service,))
