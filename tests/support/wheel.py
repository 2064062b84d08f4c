"""shardline's wheel, built from the working tree, and fresh virtualenvs holding it: what the package
tests install, with PYTHONPATH and friends removed so the source tree cannot be imported."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_NOT_COPIED = shutil.ignore_patterns(
    ".git", ".venv", ".deploy-venv", ".local", ".locktool", "node_modules", "cdk.out", "build", "dist",
    "*.egg-info", "__pycache__", "*.pyc", ".pytest_cache", ".ruff_cache", ".mypy_cache", ".hypothesis",
    "tests", "bench",
)  # fmt: skip
TIMEOUT = 240


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON") and k != "VIRTUAL_ENV"}
    return {**env, **extra}


def run(command: list[str], cwd: Path, *, check: bool = True, **env: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        command, cwd=cwd, env=clean_env(**env), capture_output=True, text=True, timeout=TIMEOUT, check=False
    )
    if check and done.returncode != 0:
        pytest.fail(f"{' '.join(command)} exited {done.returncode}\n{done.stdout}\n{done.stderr}")
    return done


def build_shardline_wheel(folder: Path) -> Path:
    """shardline's wheel, built (no isolation, .venv's pinned setuptools) from a copy of the working
    tree without node_modules (the dashboard's libraries are in the source tree)."""
    copy = folder / "repository"
    shutil.copytree(ROOT, copy, ignore=_NOT_COPIED, symlinks=True)
    assert not (copy / "node_modules").exists(), "the wheel must not need npm's folder"
    dist = folder / "dist"
    run(
        [sys.executable, "-m", "build", "--no-isolation", "--wheel", "--outdir", str(dist), str(copy)], folder
    )
    (built,) = dist.glob("*.whl")
    return built


def venv_with(folder: Path, wheel: Path, *, with_extra: bool) -> Path:
    """A fresh virtualenv with the wheel (no dependencies); with the extra's packages borrowed from
    .venv through a `.pth`. Returns its bin folder."""
    run([sys.executable, "-m", "venv", str(folder)], folder.parent)
    python = folder / "bin" / "python"
    run(
        [str(python), "-m", "pip", "install", "--quiet", "--no-deps", "--no-index", str(wheel)], folder.parent
    )
    if with_extra:
        site = run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], folder)
        (Path(site.stdout.strip()) / "borrowed.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return folder / "bin"
