"""A team's venv: shardline's wheel, built by this run from the working tree, installed with its `cdk`
and `local` extras into a fresh virtualenv outside the repository, as a team installs it.

The extras' packages are the versions this repository is tested with (`pip freeze` of .venv as
constraints): the same packages the team's pip would pick, found in pip's cache. HOME is the team's
own, PYTHONPATH and friends are not passed on, so nothing of the repository is importable.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class TeamVenv:
    root: Path  # the team's folder: HOME, the venv, the wheel
    venv: Path
    env: dict[str, str]

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    @property
    def shardline(self) -> Path:
        return self.venv / "bin" / "shardline"

    def run(self, command: list[str], *, cwd: Path, timeout: float = 900, **env: str) -> str:
        """Run a command as the team would; fail with its output unless it exits 0."""
        return run(command, cwd=cwd, env={**self.env, **env}, timeout=timeout)


def run(command: list[str], *, cwd: Path, env: dict[str, str], timeout: float = 900) -> str:
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{command[:3]} failed:\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
    return done.stdout


def team_venv(root: Path) -> TeamVenv:
    """Build the wheel from the working tree and install it with its extras into `root/venv`."""
    env = {"PATH": os.environ["PATH"], "HOME": str(root), "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    # HOME is the team's own; pip keeps the machine's cache (what it downloaded for .venv).
    env["PIP_CACHE_DIR"] = os.environ.get("PIP_CACHE_DIR", str(Path.home() / ".cache" / "pip"))
    wheels = root / "wheels"
    run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(wheels),
         str(REPO)], cwd=root, env=env)  # fmt: skip
    (wheel,) = wheels.glob("shardline-*.whl")
    pins = run([sys.executable, "-m", "pip", "freeze", "--exclude-editable"], cwd=root, env=env)
    constraints = root / "constraints.txt"
    constraints.write_text(
        "".join(f"{line}\n" for line in pins.splitlines() if not line.startswith("shardline"))
    )
    venv = root / "venv"
    run([sys.executable, "-m", "venv", str(venv)], cwd=root, env=env)
    # --no-compile: byte-compiling every module of aws-cdk-lib was 45 of a fixture's ~80 s; the
    # interpreter compiles what the team's commands import, as it would from a read-only install.
    run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-compile", "-c", str(constraints),
         f"{wheel}[cdk,local]"], cwd=root, env=env)  # fmt: skip
    return TeamVenv(root=root, venv=venv, env=env)
