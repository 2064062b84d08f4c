"""Issue 42, 7: the commands find the running app (no ports, no app folder repeated), and two apps
never share ports silently. Runs are registered by real processes (`... local up` on their command
line, as `_alive` requires) in a registry folder of the test's own."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from local import home, running
from local.__main__ import main
from local.exit_codes import NOT_RUNNING
from tests.support.runtime import free_port


@pytest.fixture(autouse=True)
def registry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "runs"
    monkeypatch.setattr(home, "runs_dir", lambda: folder)
    return folder


@pytest.fixture
def up_process() -> Iterator[Callable[[], subprocess.Popen[bytes]]]:
    """Processes whose command line says `local up`, as `shardline local up`'s does (they only sleep)."""
    started: list[subprocess.Popen[bytes]] = []

    def start() -> subprocess.Popen[bytes]:
        process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", "local", "up"])
        started.append(process)
        deadline = time.monotonic() + 10  # until it has exec'd: before, /proc shows the forking parent
        while not Path(f"/proc/{process.pid}/cmdline").read_bytes().endswith(b"local\0up\0"):
            assert time.monotonic() < deadline, "the process never showed its command line"
            time.sleep(0.01)
        return process

    yield start
    for process in started:
        process.kill()
        process.wait()


def a_run(
    process: subprocess.Popen[bytes], folder: Path, cdk_out: Path, *, api_port: int = 3000
) -> running.Run:
    run = running.Run(process.pid, str(folder.resolve()), str(cdk_out), None, free_port(), api_port)
    running.register(run)
    return run


def test_7_a_command_finds_the_app_up_from_its_folder(tmp_path, up_process):
    (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir()
    mine = a_run(up_process(), tmp_path / "a", tmp_path / "a" / "cdk.out")
    a_run(up_process(), tmp_path / "b", tmp_path / "b" / "cdk.out", api_port=3001)
    assert running.locate(tmp_path / "a") == running.Located(mine)


def test_7_the_only_app_up_is_found_from_anywhere(tmp_path, up_process):
    only = a_run(up_process(), tmp_path, tmp_path / "cdk.out")
    assert running.locate(Path("/")) == running.Located(only)


def test_7_several_apps_up_and_none_from_here_is_asked_not_guessed(tmp_path, up_process):
    (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir()
    a_run(up_process(), tmp_path / "a", tmp_path / "a" / "cdk.out")
    a_run(up_process(), tmp_path / "b", tmp_path / "b" / "cdk.out", api_port=3001)
    located = running.locate(Path("/"))
    assert located.run is None and located.problem is not None
    assert "2 apps are up" in located.problem and str(tmp_path / "a") in located.problem


def test_a_run_whose_process_is_gone_is_forgotten(tmp_path, up_process, registry):
    process = up_process()
    a_run(process, tmp_path, tmp_path / "cdk.out")
    process.kill()
    process.wait()
    assert running.runs() == [] and list(registry.glob("*.json")) == []


def test_7_status_without_ports_or_app_talks_to_the_running_app(
    tmp_path, up_process, cdk_out, capsys, monkeypatch
):
    monkeypatch.chdir(tmp_path)  # not the app's folder, and no cdk.out here
    run = a_run(up_process(), tmp_path / "elsewhere", cdk_out)  # nothing listens on its ports
    assert main(["status"]) == NOT_RUNNING
    shown = capsys.readouterr().out
    assert "endpoint not answering" in shown and f":{run.endpoint_port}" in shown, shown


def test_7_two_apps_never_share_ports_silently(tmp_path, up_process, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    other = a_run(up_process(), tmp_path / "orders", tmp_path / "orders" / "cdk.out")
    code = main(["up", "--endpoint-port", str(other.endpoint_port), "--api-port", str(free_port())])
    said = capsys.readouterr().out
    assert code == 2
    assert f"ports taken: the app up from {other.folder} (pid {other.pid})" in " ".join(said.split()), said
