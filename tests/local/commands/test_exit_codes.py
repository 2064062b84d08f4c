"""Property 7 of issue 42: one table of exit statuses for every `shardline local` command
(`local.exit_codes`): 0 ok, 1 failed, 2 usage or bad input, 3 not running, 130 interrupted.
Status 0 and 1 of `send` (a verdict that holds, one that fails) are shown against a real app in
test_send_parsing_app; `up`'s in tests/e2e/test_cli and test_running."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from local import exit_codes, home
from local.__main__ import main
from local.exit_codes import INTERRUPTED, NOT_RUNNING, USAGE
from tests.support.parsing_app import parsing_assembly
from tests.support.runtime import free_port
from tests.support.send import StubApi

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def parsing_cdk_out(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return parsing_assembly(tmp_path_factory.mktemp("parsing-app"))


@pytest.fixture(autouse=True)
def registry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No app registered: the commands look where they are told."""
    folder = tmp_path / "runs"
    monkeypatch.setattr(home, "runs_dir", lambda: folder)
    return folder


def test_7_exit_codes_are_one_table_of_constants_that_help_shows(capsys: pytest.CaptureFixture[str]) -> None:
    assert (exit_codes.OK, exit_codes.FAILED, USAGE, NOT_RUNNING, INTERRUPTED) == (0, 1, 2, 3, 130)
    assert [code for code, _ in exit_codes.TABLE] == [0, 1, 2, 3, 130]
    with pytest.raises(SystemExit) as shown:
        main(["--help"])
    assert shown.value.code == 0
    said = " ".join(capsys.readouterr().out.split())
    for code, meaning in exit_codes.TABLE:
        assert f"{code} {' '.join(meaning.split())}" in said, said


@pytest.mark.parametrize("command", ["status", "send", "redrive order-writer", "usage"])
def test_7_exit_codes_usage_is_2_for_every_command(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as refused:
        main([*command.split(), "--no-such-option"])
    assert refused.value.code == USAGE
    if command != "usage":  # usage reads the runtime alone, not the app
        nowhere = ["--cdk-out", str(tmp_path / "nothing"), "--api-port", str(free_port())]
        assert main([*nowhere, *command.split()]) == USAGE
        assert f"no synthesized app in {tmp_path / 'nothing'}" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["status", "send --count 5", "redrive order-writer", "usage"])
def test_7_exit_codes_not_running_is_3_for_every_command(
    command: str, parsing_cdk_out: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ports = ["--endpoint-port", str(free_port()), "--api-port", str(free_port())]  # nothing listens
    assert main(["--cdk-out", str(parsing_cdk_out), *ports, *command.split()]) == NOT_RUNNING
    said = capsys.readouterr()
    assert "not answering" in said.out or "no app answers" in said.err or "no AWS endpoint" in said.err, said


def test_7_exit_codes_not_running_is_3_when_no_app_is_up_and_none_is_here(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["status"]) == NOT_RUNNING
    assert "no app is up" in capsys.readouterr().err


def test_7_exit_codes_interrupted_is_130(stub_api: StubApi, parsing_cdk_out: Path) -> None:
    """Ctrl-C while `send` posts: it stops and says so, status 130 (a real process, a real SIGINT)."""
    port = stub_api.url.split(":")[2].split("/")[0]
    where = ["--cdk-out", str(parsing_cdk_out), "--api-port", port, "--endpoint-port", port]
    command = [sys.executable, "-m", "local", *where, "send", "--count", "100000", "--rate", "20", "--json"]
    env = {**os.environ, "PYTHONPATH": f"{REPO / 'layers' / 'shardline' / 'python'}:{REPO}"}
    process = subprocess.Popen(
        command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        deadline = time.monotonic() + 60
        while not stub_api.received:  # it is sending
            assert process.poll() is None and time.monotonic() < deadline, process.communicate()
            time.sleep(0.05)
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == INTERRUPTED, err
    assert "send: interrupted" in err and out == ""
