"""Every code example in the README runs as written, so an example can never rot.

Each ```python block runs on its own (a fresh namespace, as a user pasting it would), against moto's
in-process AWS (`mock_aws`): the examples create the streams, tables and queues they use. Each
```json block must parse; each ```toml block is a chaos profile `local.chaos` accepts. Blocks of other
languages (bash, text) are not executed.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from moto import mock_aws

README = Path(__file__).resolve().parents[2] / "README.md"
_FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.MULTILINE | re.DOTALL)


def _blocks(language: str) -> list[tuple[int, str]]:
    """(line number, code) of every fenced block of `language` in the README."""
    text = README.read_text()
    return [
        (text.count("\n", 0, match.start()) + 1, match.group(2))
        for match in _FENCE.finditer(text)
        if match.group(1) == language
    ]


PYTHON_BLOCKS = _blocks("python")
JSON_BLOCKS = _blocks("json")


def test_the_readme_has_python_examples() -> None:
    assert len(PYTHON_BLOCKS) >= 4, "the README lost its examples"


@pytest.mark.parametrize(("line", "code"), PYTHON_BLOCKS, ids=[f"line-{line}" for line, _ in PYTHON_BLOCKS])
def test_python_example_runs(line: int, code: str) -> None:
    namespace: dict[str, object] = {"__name__": "__main__"}  # run as a pasted script runs
    with mock_aws():
        exec(compile(code, f"README.md:{line}", "exec"), namespace)


@pytest.mark.parametrize(("line", "code"), JSON_BLOCKS, ids=[f"line-{line}" for line, _ in JSON_BLOCKS])
def test_json_example_parses(line: int, code: str) -> None:
    json.loads(code)


TOML_BLOCKS = _blocks("toml")


@pytest.mark.parametrize(("line", "code"), TOML_BLOCKS, ids=[f"line-{line}" for line, _ in TOML_BLOCKS])
def test_toml_example_is_a_valid_chaos_profile(line: int, code: str, tmp_path: Path) -> None:
    from local.chaos.profiles import load_profile

    path = tmp_path / "profile.toml"
    path.write_text(code)
    assert load_profile(path).active
