"""The import layers (pyproject's [tool.importlinter], run by `make lint`): kept by the tree as it is,
and broken — naming the contract — by an import that points up."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")
PACKAGES = ("layers/shardline/python/shardline", "infra", "local", "bench")


def lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", "--config", str(root / "pyproject.toml")],
        cwd=root,
        env={"PYTHONPATH": f"{root / 'layers/shardline/python'}:{root}", "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A copy of the packages the contracts name, and the contracts."""
    for package in PACKAGES:
        shutil.copytree(ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def add_import(module: Path, line: str) -> None:
    text = module.read_text()
    marker = "from __future__ import annotations\n"
    assert marker in text, module
    module.write_text(text.replace(marker, marker + line + "\n", 1))


def test_5_the_tree_keeps_every_import_contract():
    result = lint_imports(ROOT)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "0 broken" in result.stdout


def test_5_the_library_importing_the_cdk_app_breaks_the_app_layers(tree: Path):
    add_import(tree / "layers/shardline/python/shardline/errors.py", "import infra.config  # noqa")
    result = lint_imports(tree)
    assert result.returncode != 0
    assert "The app's parts" in result.stdout and "BROKEN" in result.stdout
    assert "shardline.errors -> infra.config" in result.stdout


def test_5_kinesis_importing_the_lambda_adapter_breaks_the_library_layers(tree: Path):
    add_import(
        tree / "layers/shardline/python/shardline/kinesis/_limits.py", "import shardline.aws_lambda  # noqa"
    )
    result = lint_imports(tree)
    assert result.returncode != 0
    assert "The library:" in result.stdout and "BROKEN" in result.stdout
    assert "shardline.kinesis._limits -> shardline.aws_lambda" in result.stdout


def test_5_the_consumer_importing_the_producer_breaks_their_independence(tree: Path):
    add_import(
        tree / "layers/shardline/python/shardline/consumer/_dedup.py", "import shardline.producer  # noqa"
    )
    result = lint_imports(tree)
    assert result.returncode != 0
    assert "shardline.consumer._dedup -> shardline.producer" in result.stdout
