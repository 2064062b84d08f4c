"""Where the local runtime keeps what it writes, in this repository and installed.

In this repository (`python -m local`, `make local`) everything is under `.local/` at its root:
the functions' runtime packages and the Powertools layer (`.local/lambda`, which `make setup`
installs from requirements-dev.lock), the run's pid file and the functions' logs.

Installed (with the `local` extra, `shardline local up`), a team runs it from its own
project folder, and two kinds of state part ways:

- the Lambda runtime's packages and the Powertools layer are the same for every project: they are
  cached per user, in `$SHARDLINE_CACHE_DIR`, else `$XDG_CACHE_HOME/shardline`, else
  `~/.cache/shardline` (installed by the first `up`, which says so, from the pins the package ships);
- a run's pid file and logs belong to the project: `$SHARDLINE_STATE_DIR`, else `.shardline/` in the
  folder `up` is started from (beside the team's `cdk.out`; add it to `.gitignore`).
"""

from __future__ import annotations

import os
from pathlib import Path

#: The package's import name: `local` in this repository, `shardline.local` installed.
PACKAGE = __package__ or "local"
#: Run from this repository's source folder (not installed as `shardline.local`).
IN_REPOSITORY = PACKAGE == "local"
#: What starts the local runtime, in the words of how it is installed (for the lines it prints).
UP_COMMAND = "make local" if IN_REPOSITORY else "shardline local up"
#: The repository's root (in the repository only).
REPOSITORY = Path(__file__).resolve().parents[1] if IN_REPOSITORY else None


def state_dir() -> Path:
    """A run's own files: its pid and, by default, its logs (relative to the working folder)."""
    if REPOSITORY is not None:
        return Path(".local")
    return Path(os.environ.get("SHARDLINE_STATE_DIR") or ".shardline")


def cache_dir() -> Path:
    """The Lambda runtime's packages and public layers, shared by every run of this user."""
    if REPOSITORY is not None:
        return REPOSITORY / ".local" / "lambda"
    explicit = os.environ.get("SHARDLINE_CACHE_DIR")
    if explicit:
        return Path(explicit).expanduser() / "lambda"
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base).expanduser() / "shardline" / "lambda"


def runs_dir() -> Path:
    """Where the apps this user has up are registered (`local.running`), beside the cache."""
    return cache_dir().parent / "runs"


def module(name: str) -> str:
    """The dotted name of the runtime's module `name` (e.g. "endpoint"), for `python -m`."""
    return f"{PACKAGE}.{name}"


def import_root() -> Path:
    """The folder that holds the runtime's top package (the repository, or site-packages): what a
    child started with `python -m` needs on its path."""
    return Path(__file__).resolve().parents[PACKAGE.count(".") + 1]
