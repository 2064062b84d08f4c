"""Issue 42, 5: `make dist` builds the wheel and the sdist a package index would take.

It runs in a copy of the repository (as a clone has it: no node_modules, no build output) with this
checkout's .venv, and is judged by what it leaves in dist/ and by `twine check --strict`, which
`make dist` runs itself: the metadata a registry needs, the README rendered as the project's page."""

from __future__ import annotations

import email.parser
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
VENV = Path(sys.prefix)  # the venv this test runs in (its python is a symlink out of it)
_NOT_COPIED = shutil.ignore_patterns(
    ".git", ".venv", ".deploy-venv", ".local", ".locktool", "node_modules", "cdk.out", "build", "dist",
    "*.egg-info", "__pycache__", "*.pyc", ".pytest_cache", ".ruff_cache", ".mypy_cache", ".hypothesis",
)  # fmt: skip

pytestmark = pytest.mark.slow


def test_5_make_dist_builds_a_wheel_and_an_sdist_that_pass_twine_check(tmp_path: Path) -> None:
    clone = tmp_path / "shardline"
    shutil.copytree(ROOT, clone, ignore=_NOT_COPIED, symlinks=True)
    done = subprocess.run(
        ["make", "-s", "dist", f"VENV={VENV}"],
        cwd=clone,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert done.stdout.count("PASSED") == 2, done.stdout[-2000:]
    (wheel,) = (clone / "dist").glob("shardline-*-py3-none-any.whl")
    (sdist,) = (clone / "dist").glob("shardline-*.tar.gz")
    with zipfile.ZipFile(wheel) as archive:
        metadata_name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        metadata = email.parser.Parser().parsestr(archive.read(metadata_name).decode())
        names = set(archive.namelist())
    assert metadata["Name"] == "shardline" and metadata["Requires-Python"] == ">=3.11"
    assert {"cdk", "lambda", "local"} <= set(metadata.get_all("Provides-Extra") or [])
    assert metadata["License-Expression"] or metadata["License"]
    assert metadata.get_all("Classifier"), "classifiers a registry lists"
    assert metadata.get_payload().startswith("# shardline"), "the README is the project's page"
    assert "shardline/local/cloudwatch/web/vendor/uPlot.iife.min.js" in names
    with tarfile.open(sdist) as archive:
        assert any(n.endswith("local/cloudwatch/web/vendor/marked.umd.js") for n in archive.getnames())
