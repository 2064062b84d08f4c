"""Session-wide test setup: no real AWS, and real servers (moto, kinesis-mock) on loopback."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import boto3
import botocore.config
import pytest

from tests.support.node import NODE, use_project_node

# The shared fixtures, each defined once in the support package (`tests/support/__init__.py`).
pytest_plugins = [
    "tests.support.apigw",
    "tests.support.consumer_handlers",
    "tests.support.local_endpoint",
    "tests.support.send",
    "tests.support.workers",
]


REPO_ROOT = Path(__file__).resolve().parent.parent
KINESIS_LOCAL = REPO_ROOT / "node_modules" / "kinesis-local"
# Every Node use of the tests (jsii's kernel, the cdk CLI, kinesis-mock, the browser script) runs on
# the pinned, maintained Node: set before any test module imports aws_cdk.
use_project_node()
STARTUP_DEADLINE_S = 60.0

# No test may reach real AWS: dummy credentials, no profile, no config files, no instance metadata.
for _name in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN"):
    os.environ.pop(_name, None)
os.environ.update(
    {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_CONFIG_FILE": os.devnull,
        "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
        "AWS_EC2_METADATA_DISABLED": "true",
    }
)


def _free_ports(count: int) -> list[int]:
    """Ports free on 127.0.0.1 right now (all bound at once, so they are distinct)."""
    with contextlib.ExitStack() as stack:
        socks = [stack.enter_context(socket.socket()) for _ in range(count)]
        for sock in socks:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in socks]


def _log_tail(log: Path, limit: int = 4000) -> str:
    text = log.read_text(errors="replace") if log.exists() else ""
    return text[-limit:] or "(no output)"


def _wait_ready(name: str, proc: subprocess.Popen, log: Path, ready: Callable[[], bool]) -> None:
    """Poll ready() until it is true; fail with the server's output if it exits or the deadline passes."""
    deadline = time.monotonic() + STARTUP_DEADLINE_S
    while True:
        if proc.poll() is not None:
            pytest.fail(f"{name} exited with code {proc.returncode} during startup:\n{_log_tail(log)}")
        if ready():
            return
        if time.monotonic() > deadline:
            _stop(proc)
            pytest.fail(f"{name} did not answer within {STARTUP_DEADLINE_S:.0f} s:\n{_log_tail(log)}")
        time.sleep(0.1)


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


@contextlib.contextmanager
def _server(
    name: str, cmd: list[str], env: dict[str, str], log: Path, ready: Callable[[], bool]
) -> Iterator[None]:
    with log.open("wb") as out:
        proc = subprocess.Popen(
            cmd, cwd=REPO_ROOT, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT
        )
    try:
        _wait_ready(name, proc, log, ready)
        yield
    finally:
        _stop(proc)


def _answers_http(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2):
            return True
    except urllib.error.HTTPError:
        return True  # any HTTP status means the server is up
    except (urllib.error.URLError, OSError):
        return False


def _kinesis_answers(endpoint_url: str) -> bool:
    client = boto3.client(
        "kinesis",
        endpoint_url=endpoint_url,
        region_name="us-east-1",
        config=botocore.config.Config(retries={"max_attempts": 0}, connect_timeout=2, read_timeout=5),
    )
    try:
        client.list_streams()
    except Exception:
        return False
    return True


@pytest.fixture(scope="session")
def moto_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A moto server on 127.0.0.1 shared by a worker's tests; yields its endpoint URL."""
    yield from _moto(tmp_path_factory)


@pytest.fixture(scope="module")
def own_moto_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A moto server for one module alone: for tests that create resources under fixed names (a
    deployed stack's) that another module, run earlier on the same worker, may have created."""
    yield from _moto(tmp_path_factory)


def _moto(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    (port,) = _free_ports(1)
    endpoint = f"http://127.0.0.1:{port}"
    cmd = [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)]
    log = tmp_path_factory.mktemp("moto-server") / "server.log"
    with _server("moto server", cmd, dict(os.environ), log, lambda: _answers_http(endpoint + "/")):
        yield endpoint


@pytest.fixture(scope="session")
def kinesis_mock(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """kinesis-mock (npm kinesis-local) serving plain HTTP on 127.0.0.1; yields its endpoint URL."""
    main_js = KINESIS_LOCAL / "main.js"
    if not main_js.exists():
        pytest.fail(f"{main_js.relative_to(REPO_ROOT)} is missing: run `make setup` first")
    plain_port, tls_port = _free_ports(2)
    endpoint = f"http://127.0.0.1:{plain_port}"
    env = {
        **os.environ,
        "KINESIS_MOCK_CERT_PATH": str(KINESIS_LOCAL / "server.json"),
        "KINESIS_MOCK_PLAIN_PORT": str(plain_port),
        "KINESIS_MOCK_TLS_PORT": str(tls_port),
        "CREATE_STREAM_DURATION": "100ms",
        "SPLIT_SHARD_DURATION": "200ms",
        "MERGE_SHARDS_DURATION": "200ms",
        "UPDATE_SHARD_COUNT_DURATION": "200ms",
        # One kinesis-mock serves the whole session and its streams stay: the account's default 50
        # open shards ran out once the resharding tests (lineage, redrive tails) joined the suite.
        "SHARD_LIMIT": "10000",
        "ROOT_LOG_LEVEL": "ERROR",
        "LOG_LEVEL": "ERROR",
        "AWS_REGION": "us-east-1",
    }
    log = tmp_path_factory.mktemp("kinesis-mock") / "server.log"
    with _server("kinesis-mock", [str(NODE), str(main_js)], env, log, lambda: _kinesis_answers(endpoint)):
        yield endpoint


@pytest.fixture(scope="session")
def cdk_out(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The default app synthesized (in process, offline) into a cloud assembly, as `make synth` does."""
    import json

    from app import CDK_JSON, build

    outdir = tmp_path_factory.mktemp("cdk.out")
    app, _ = build(json.loads(CDK_JSON.read_text())["context"], outdir=str(outdir))
    app.synth()
    return outdir


def pytest_sessionstart(session: pytest.Session) -> None:
    """The Lambda runtime's packages and the Powertools layer the local workers import, as `make setup`
    installs them (skipped when the lock has not changed): a bare `pytest` runs as `make test` does.
    Once, by the process that starts the suite: xdist's workers start after it and share the folder."""
    if hasattr(session.config, "workerinput"):
        return
    from local.lambda_.runtimes import install

    install()


#: Tests that run one at a time, one after another on one worker: each starts a whole local
#: runtime (the endpoint, the API, a dozen workers, often a browser) that takes both cores of the build
#: machine at moments and times drains; two at once starved each other into false failures.
SERIAL_FOLDER = "tests/e2e/"


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """xdist's by-file distribution, but every `SERIAL_FOLDER` test in one unit of work: it is the
    largest unit, so one worker starts it first while the others take the rest file by file. An
    explicit `--dist` other than load/loadfile is left to xdist."""
    from xdist.scheduler import LoadFileScheduling

    if config.getvalue("dist") not in ("load", "loadfile"):
        return None

    class SerialEndToEnd(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return SERIAL_FOLDER if nodeid.startswith(SERIAL_FOLDER) else super()._split_scope(nodeid)

    return SerialEndToEnd(config, log)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Each suite folder's total test time (setup, call and teardown of its tests, summed over the
    workers), beside `--durations`' slowest tests: where the suite's minutes go."""
    totals: dict[str, float] = {}
    counts: dict[str, int] = {}
    for reports in terminalreporter.stats.values():
        for report in reports:
            nodeid, duration = getattr(report, "nodeid", ""), getattr(report, "duration", None)
            if not nodeid.startswith("tests/") or duration is None:
                continue
            folder = "/".join(nodeid.split("::")[0].split("/")[:2])
            totals[folder] = totals.get(folder, 0.0) + duration
            if getattr(report, "when", "") == "call" or getattr(report, "outcome", "") == "skipped":
                counts[folder] = counts.get(folder, 0) + 1
    if not totals:
        return
    terminalreporter.write_sep("=", "time by suite folder (test seconds, summed over workers)")
    for folder, seconds in sorted(totals.items(), key=lambda item: -item[1]):
        terminalreporter.write_line(f"{seconds:9.1f} s  {counts.get(folder, 0):5d} tests  {folder}")
    terminalreporter.write_line(f"{sum(totals.values()):9.1f} s  {sum(counts.values()):5d} tests  in all")
