"""The apps this user has up: where each one's runtime listens, so the other commands find it.

`shardline local up` registers its run (`register`) in a folder of the user's (`home.runs_dir()`):
its pid, the folder it was started from, its app (`cdk.out`, the stack) and its two ports. The
commands that talk to a running app (`status`, `send`, `usage`, `redrive`), given neither ports
nor an app, take the one run from the current folder, else the only run there is (`locate`): a
team does not repeat the ports and the app folder, and one app's `send` cannot post into another
app's API on the default ports. `up` refuses ports another run holds (`holder_of`), naming it.

A run killed without cleaning up leaves its file: a file whose pid is gone (or is no longer a
`local up`) is removed when read.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from . import home

__all__ = ["Located", "Run", "holder_of", "is_local_up", "locate", "register", "runs"]


@dataclass(frozen=True)
class Run:
    pid: int
    folder: str  # where `up` was started (absolute)
    cdk_out: str  # the app it runs (absolute)
    stack: str | None
    endpoint_port: int
    api_port: int


@dataclass(frozen=True)
class Located:
    """Where a command finds the app: the run it chose (None: nothing registered, the defaults)."""

    run: Run | None
    problem: str | None = None  # several runs and none from this folder: what to say


def register(run: Run) -> Path:
    """Record `run` (removed by the caller with `unlink` when it stops)."""
    folder = home.runs_dir()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{run.pid}.json"
    path.write_text(json.dumps(asdict(run)))
    return path


def runs() -> list[Run]:
    """The runs registered and still up, oldest pid first."""
    folder = home.runs_dir()
    found: list[Run] = []
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        try:
            run = Run(**json.loads(path.read_text()))
        except (OSError, ValueError, TypeError):
            path.unlink(missing_ok=True)
            continue
        if is_local_up(run.pid):
            found.append(run)
        else:
            path.unlink(missing_ok=True)
    return sorted(found, key=lambda run: run.pid)


def locate(cwd: Path | None = None) -> Located:
    """The run a command without ports or app talks to: this folder's, else the only one."""
    here = str((cwd or Path.cwd()).resolve())
    live = runs()
    mine = [run for run in live if run.folder == here]
    if mine:
        return Located(mine[-1])
    if len(live) == 1:
        return Located(live[0])
    if not live:
        return Located(None)
    listed = "; ".join(f"{run.folder} (pid {run.pid}, API port {run.api_port})" for run in live)
    return Located(None, f"{len(live)} apps are up and none from this folder: {listed}. Run the command "
                         "from an app's folder, or give its --app and ports")  # fmt: skip


def holder_of(endpoint_port: int, api_port: int) -> Run | None:
    """A run (not this process) that listens on either port."""
    ports = {endpoint_port, api_port}
    return next(
        (run for run in runs() if run.pid != os.getpid() and ports & {run.endpoint_port, run.api_port}), None
    )


def is_local_up(pid: int) -> bool:
    """Is `pid` a live `local up` (not a process that took the pid of one gone)?"""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return b"local" in cmdline and b"up" in cmdline
