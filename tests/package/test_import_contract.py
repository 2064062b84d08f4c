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
LIB = "layers/shardline/python/shardline/"
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


@pytest.mark.parametrize(
    ("module", "line", "contract", "named"),
    [
        # The library importing the CDK app breaks the app's layers.
        (LIB + "errors.py", "import shardline.cdk._config  # noqa", "The app's parts",
         "shardline.errors -> shardline.cdk._config"),
        # Kinesis, at the bottom of the library, importing the Lambda adapter breaks the library's layers.
        (LIB + "kinesis/_limits.py", "import shardline.aws_lambda  # noqa", "The library:",
         "shardline.kinesis._limits -> shardline.aws_lambda"),
        # The consumer importing the producer breaks their independence.
        (LIB + "consumer/_dedup.py", "import shardline.producer  # noqa", "The library:",
         "shardline.consumer._dedup -> shardline.producer"),
        # The dashboard importing the API Gateway emulator, which publishes to it, makes a cycle.
        ("local/cloudwatch/monitor.py", "import local.apigw.server  # noqa", "No import cycles",
         ".cloudwatch -> .apigw"),
    ],
)  # fmt: skip
def test_5_an_import_that_points_up_breaks_its_contract(
    tree: Path, module: str, line: str, contract: str, named: str
):
    add_import(tree / module, line)
    result = lint_imports(tree)
    assert result.returncode != 0
    assert contract in result.stdout and "BROKEN" in result.stdout
    assert named in result.stdout
