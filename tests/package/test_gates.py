"""The lint gates `make lint` runs, on code written to break them: ruff's complexity gate (mccabe,
max 12) and its format check refuse what they should."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RUFF = Path(sys.executable).with_name("ruff")


def ruff(*args: str, path: Path) -> subprocess.CompletedProcess[str]:
    command = [str(RUFF), *args, "--config", str(ROOT / "pyproject.toml"), str(path)]
    return subprocess.run(command, capture_output=True, text=True, timeout=60)


def branching(branches: int) -> str:
    body = "".join(f"    if x == {n}:\n        return {n}\n" for n in range(branches))
    return f"def pick(x: int) -> int:\n{body}    return -1\n"


def test_5_a_function_over_twelve_branches_fails_the_complexity_gate(tmp_path: Path):
    at_limit, over = tmp_path / "at_limit.py", tmp_path / "over.py"
    at_limit.write_text(branching(11))  # complexity 12
    over.write_text(branching(12))  # complexity 13
    assert ruff("check", "--select", "C901", path=at_limit).returncode == 0
    refused = ruff("check", "--select", "C901", path=over)
    assert refused.returncode == 1 and "`pick` is too complex (13 > 12)" in refused.stdout


def test_5_unformatted_code_fails_the_format_check(tmp_path: Path):
    module = tmp_path / "module.py"
    module.write_text("x = {  'a':1 }\n")
    refused = ruff("format", "--check", path=module)
    assert refused.returncode == 1 and "would be reformatted" in refused.stdout
    module.write_text('x = {"a": 1}\n')
    assert ruff("format", "--check", path=module).returncode == 0
