"""Shared fixtures and helpers of the worker tests: Function records, process checks, a REST event."""

import os
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from local.app.model import ACCOUNT, Function
from local.lambda_.workers import Functions

REPO = Path(__file__).resolve().parents[2]
TEST_FUNCTIONS = Path(__file__).resolve().parents[1] / "local" / "functions"  # test functions, as folders
#: The public Powertools layer as the app's template names it (the pinned version's SSM parameter).
POWERTOOLS_LAYER = "/aws/service/powertools/python/arm64/python3.12/3.37.0"
UNUSED_ENDPOINT = "http://127.0.0.1:9"  # functions that make no AWS call
LOG_STREAM = re.compile(r"^\d{4}/\d{2}/\d{2}/\[\$LATEST\][0-9a-f]{32}$")
REPORT = re.compile(
    r"^REPORT RequestId: (?P<id>[0-9a-f-]{36})\tDuration: \d+\.\d{2} ms\tBilled Duration: \d+ ms\t"
    r"Memory Size: (?P<memory>\d+) MB\tMax Memory Used: (?P<used>\d+) MB\t"
)
TIMESTAMP = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z"
GONE_DEADLINE_S = 15.0


def function(name: str, handler: str = "app.handler", **settings: Any) -> Function:
    """A test function from tests/local/functions, with the public Powertools layer as the app's have."""
    settings.setdefault("public_layers", (POWERTOOLS_LAYER,))
    return Function(
        logical_id=name.title(),
        name=f"test-{name}",
        handler=handler,
        code_dir=TEST_FUNCTIONS / name,
        **settings,
    )


@pytest.fixture
def make_functions(tmp_path: Path) -> Iterator[Callable[..., Functions]]:
    """Builds a `Functions` (logs under tmp_path) and closes every one built at teardown."""
    built: list[Functions] = []

    def make(*functions: Function, endpoint_url: str = UNUSED_ENDPOINT, **options: Any) -> Functions:
        pool = Functions(functions, endpoint_url=endpoint_url, log_dir=tmp_path / "logs", **options)
        built.append(pool)
        return pool

    yield make
    for pool in built:
        pool.close()


def gone(pid: int) -> bool:
    """True once the process no longer exists (reaped, not a zombie)."""
    return not Path(f"/proc/{pid}").exists()


def wait_until(condition: Callable[[], bool], deadline_s: float = GONE_DEADLINE_S) -> bool:
    ends = time.monotonic() + deadline_s
    while not condition():
        if time.monotonic() > ends:
            return False
        time.sleep(0.05)
    return True


def worker_children() -> list[int]:
    """Processes whose parent is this one and that run local/lambda_/worker.py."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            cmdline = (entry / "cmdline").read_bytes()
        except (OSError, IndexError, ValueError):
            continue
        if ppid == os.getpid() and b"lambda_/worker.py" in cmdline:
            found.append(int(entry.name))
    return found


def in_parallel(calls: list[Callable[[], Any]]) -> list[Any]:
    results: list[Any] = [None] * len(calls)

    def run(index: int) -> None:
        results[index] = calls[index]()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    return results


def worker_state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/status").read_text().split("State:")[1].split("\n")[0].lower()
    except (OSError, IndexError):
        return "gone"


def rest_event(route: str, body: str) -> dict[str, Any]:
    """The REST (v1) proxy event API Gateway sends for POST /streams/{stream}/records."""
    now = time.time()
    headers = {"Content-Type": "application/json", "Host": "abc123.execute-api.us-east-1.amazonaws.com"}
    return {
        "resource": "/streams/{stream}/records",
        "path": f"/streams/{route}/records",
        "httpMethod": "POST",
        "headers": headers,
        "multiValueHeaders": {name: [value] for name, value in headers.items()},
        "queryStringParameters": None,
        "multiValueQueryStringParameters": None,
        "pathParameters": {"stream": route},
        "stageVariables": None,
        "requestContext": {
            "resourceId": "a1b2c3",
            "resourcePath": "/streams/{stream}/records",
            "httpMethod": "POST",
            "requestTime": time.strftime("%d/%b/%Y:%H:%M:%S +0000", time.gmtime(now)),
            "path": f"/v1/streams/{route}/records",
            "accountId": ACCOUNT,
            "protocol": "HTTP/1.1",
            "stage": "v1",
            "requestTimeEpoch": int(now * 1000),
            "requestId": str(uuid.uuid4()),
            # An IAM-authorized request's identity (the producer stamps `userArn` as the caller).
            "identity": {
                "sourceIp": "127.0.0.1",
                "userAgent": "test",
                "accountId": ACCOUNT,
                "caller": ACCOUNT,
                "user": ACCOUNT,
                "accessKey": "test",
                "userArn": f"arn:aws:iam::{ACCOUNT}:root",
            },
            "apiId": "abc123",
        },
        "body": body,
        "isBase64Encoded": False,
    }
