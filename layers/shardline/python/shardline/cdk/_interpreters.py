"""Finding an interpreter of a given Python version on this machine (no CDK import: the local
runtime uses it too, to run functions on their runtime's Python)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

__all__ = ["find_python"]


def find_python(version: str, *overrides: str) -> str | None:
    """An interpreter of Python `version` ("3.12"): the first of the environment variables
    `overrides` that is set, then `python3.12` on the PATH, then a pyenv install; None if none is."""
    candidates = [os.environ.get(name) for name in overrides] + [shutil.which(f"python{version}")]
    candidates += sorted(str(p) for p in Path.home().glob(f".pyenv/versions/{version}.*/bin/python{version}"))
    for candidate in filter(None, candidates):
        try:
            found = subprocess.run(
                [candidate, "-I", "-S", "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                capture_output=True,
                text=True,
                timeout=30,
            ).stdout.strip()
        except (OSError, subprocess.TimeoutExpired):
            continue
        if found == version:
            return candidate
    return None
