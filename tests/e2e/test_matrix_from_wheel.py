"""Issue 42, property 1: every construct runs locally from the wheel.

A matrix of team apps (tests/e2e/matrix/), each synthesized by shardline's wheel installed in a fresh
venv outside the repository (tests/support/team_venv.py: nothing of the repository importable), then
brought up by the installed console script from the app's folder, sent to through its API, verified
and stopped, as a team runs it:

    CDK_OUTDIR=cdk.out python <app>.py   # as `cdk synth` runs it
    shardline local up                   # ports given: the suite runs apps side by side
    shardline local send --stream S --json    # from the app's folder: finds the app up from there
    Ctrl-C

What each app covers is in its module's docstring; together: Lambda groups with a sink table of the
team's, with a created one and with none; enhanced fan-out; several streams; clients' API keys;
worker groups (polling and enhanced fan-out) built from the package; an existing stream by ARN; alarms off.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.runtime import free_port
from tests.support.team_venv import TeamVenv, team_venv

pytestmark = pytest.mark.slow

MATRIX = Path(__file__).resolve().parent / "matrix"
COUNT = 300  # records per stream: enough for every shard of every stream to hold some


@dataclass(frozen=True)
class MatrixApp:
    script: str
    #: route -> the groups a send to it must report, each ok
    groups: dict[str, set[str]]


APPS = {
    "lambda-groups": MatrixApp("lambda_groups.py", {"orders": {"recorder", "fan-out"}, "audit": {"auditor"}}),
    "worker-groups": MatrixApp(
        "worker_groups.py", {"events": {"polling", "fan-out-workers"}, "existing": {"on-existing"}}
    ),
}


@pytest.fixture(scope="module")
def team(tmp_path_factory: pytest.TempPathFactory) -> TeamVenv:
    return team_venv(tmp_path_factory.mktemp("matrix-team"))


def _up(team: TeamVenv, project: Path) -> tuple[subprocess.Popen[bytes], Path]:
    ports = ["--endpoint-port", str(free_port()), "--api-port", str(free_port())]
    log = project / "up.log"
    with log.open("wb") as out:
        up = subprocess.Popen([str(team.shardline), "local", "up", *ports], cwd=project, env=team.env,
                              stdout=out, stderr=subprocess.STDOUT)  # fmt: skip
    deadline = time.monotonic() + 300
    while True:  # `status` from the app's folder: it finds the app up from there, no ports repeated
        status = subprocess.run([str(team.shardline), "local", "status", "--json"], cwd=project, env=team.env,
                                capture_output=True, text=True, timeout=120)  # fmt: skip
        if status.returncode == 0:
            return up, log
        assert up.poll() is None, log.read_text()[-4000:]
        assert time.monotonic() < deadline, status.stdout + status.stderr
        time.sleep(1)


def _stop(up: subprocess.Popen[bytes], log: Path) -> None:
    up.send_signal(signal.SIGINT)
    try:
        code = up.wait(timeout=90)
    except subprocess.TimeoutExpired:
        up.kill()
        raise
    assert code == 0, log.read_text()[-4000:]
    assert "no process left behind" in log.read_text()


@pytest.mark.parametrize("name", list(APPS))
def test_1_every_construct_runs_locally_from_the_wheel(name: str, team: TeamVenv, tmp_path: Path) -> None:
    app = APPS[name]
    project = tmp_path / name
    shutil.copytree(MATRIX, project, ignore=shutil.ignore_patterns("__pycache__", "cdk.out"))
    # As `cdk synth` runs it: CDK_OUTDIR names the assembly's folder.
    team.run([str(team.python), "-E", "-s", app.script], cwd=project, CDK_OUTDIR=str(project / "cdk.out"))
    assert (project / "cdk.out" / "manifest.json").is_file()
    up, log = _up(team, project)
    try:
        for route, expected in app.groups.items():
            sent = subprocess.run(
                [str(team.shardline), "local", "send", "--stream", route, "--count", str(COUNT),
                 "--keys", "12", "--timeout", "240", "--json"],
                cwd=project, env=team.env, capture_output=True, text=True, timeout=600,
            )  # fmt: skip
            assert sent.returncode == 0, f"{route}:\n{sent.stdout[-6000:]}\n{sent.stderr[-3000:]}"
            verdict = json.loads(sent.stdout)
            groups = {group["group"]: group for group in verdict["groups"]}
            assert set(groups) == expected, route
            for group in groups.values():
                assert group["ok"] is True, group
                assert group["expected"] == COUNT and not group["lost"], group
            assert verdict["send"]["accepted"] == COUNT, verdict["send"]
    finally:
        _stop(up, log)
    after = subprocess.run([str(team.shardline), "local", "status", "--json"], cwd=project, env=team.env,
                           capture_output=True, text=True, timeout=120)  # fmt: skip
    assert after.returncode != 0, "status still finds an app after it stopped"
