"""The producer Lambda's app as the tests load it, and the API Gateway REST events and context they
invoke it with."""

from __future__ import annotations

import importlib.util
import sys
import time
import uuid
from pathlib import Path
from types import ModuleType
from typing import Any

import shardline.cdk

FUNCTIONS = Path(__file__).resolve().parents[2] / "functions"
PRODUCER_HANDLER = Path(shardline.cdk.__file__).resolve().parent / "_producer_handler"
NAMESPACE = "shardline-test"
ROUTE = "orders"


def load_app() -> ModuleType:
    """Import shardline/cdk/_producer_handler/app.py once (it is not a package), as Lambda would."""
    return function_module("producer")


class FakeContext:
    """The parts of a Lambda context that Powertools and the handler read; the clock really runs."""

    function_name = "shardline-producer"
    function_version = "$LATEST"
    memory_limit_in_mb = 512
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:shardline-producer"
    log_group_name = "/aws/lambda/shardline-producer"
    log_stream_name = "2024/01/01/[$LATEST]0123456789abcdef"

    def __init__(self, remaining_ms: int = 29_000) -> None:
        self.aws_request_id = str(uuid.uuid4())
        self._ends = time.monotonic() + remaining_ms / 1000.0

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self._ends - time.monotonic()) * 1000))


def rest_event(
    body: str | None,
    content_type: str | None = "application/json",
    *,
    stream: str = ROUTE,
    request_id: str | None = None,
    is_base64_encoded: bool = False,
    method: str = "POST",
    path: str | None = None,
    extra_headers: dict[str, str] | None = None,
) -> dict[str, Any]:
    """An API Gateway REST proxy event for POST /streams/{stream}/records (stage "prod"); another
    `method`, or another `path` (then as a greedy `/{proxy+}` resource delivers it)."""
    request_id = request_id or str(uuid.uuid4())
    headers = {
        **(extra_headers or {}),
        "Accept": "application/json",
        "Host": "abc123defg.execute-api.us-east-1.amazonaws.com",
        "User-Agent": "integration-test",
        "X-Amzn-Trace-Id": "Root=1-5e66d96f-7491f09xmpl79d18acf3d050",
        "X-Forwarded-For": "198.51.100.7",
        "X-Forwarded-Port": "443",
        "X-Forwarded-Proto": "https",
    }
    if content_type is not None:
        headers["Content-Type"] = content_type
    resource, parameters = "/streams/{stream}/records", {"stream": stream}
    if path is None:
        path = f"/streams/{stream}/records"
    else:
        resource, parameters = "/{proxy+}", {"proxy": path.lstrip("/")}
    now = time.time()
    return {
        "resource": resource,
        "path": path,
        "httpMethod": method,
        "headers": headers,
        "multiValueHeaders": {name: [value] for name, value in headers.items()},
        "queryStringParameters": None,
        "multiValueQueryStringParameters": None,
        "pathParameters": parameters,
        "stageVariables": None,
        "requestContext": {
            "resourceId": "a1b2c3",
            "resourcePath": resource,
            "httpMethod": method,
            "extendedRequestId": "LgTjCHzWoAMFxyw=",
            "requestTime": time.strftime("%d/%b/%Y:%H:%M:%S +0000", time.gmtime(now)),
            "path": f"/prod{path}",
            "accountId": "123456789012",
            "protocol": "HTTP/1.1",
            "stage": "prod",
            "domainPrefix": "abc123defg",
            "requestTimeEpoch": int(now * 1000),
            "requestId": request_id,
            "identity": {
                "cognitoIdentityPoolId": None,
                "accountId": "123456789012",
                "cognitoIdentityId": None,
                "caller": "AIDAXMPL",
                "sourceIp": "198.51.100.7",
                "principalOrgId": None,
                "accessKey": "AKIAXMPL",
                "cognitoAuthenticationType": None,
                "cognitoAuthenticationProvider": None,
                "userArn": "arn:aws:iam::123456789012:user/tester",
                "userAgent": "integration-test",
                "user": "AIDAXMPL",
            },
            "domainName": "abc123defg.execute-api.us-east-1.amazonaws.com",
            "apiId": "abc123defg",
        },
        "body": body,
        "isBase64Encoded": is_base64_encoded,
    }


def function_module(name: str, prefix: str = "shardline_producer_test") -> ModuleType:
    """functions/<name>/app.py (the producer: shardline's own), imported once per `prefix` (it is not
    a package), as Lambda would: each prefix is a warm function of its own."""
    module_name = f"{prefix}_{name}"
    module = sys.modules.get(module_name)
    if module is None:
        folder = PRODUCER_HANDLER if name == "producer" else FUNCTIONS / name
        spec = importlib.util.spec_from_file_location(module_name, folder / "app.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        spec.loader.exec_module(module)
    return module
