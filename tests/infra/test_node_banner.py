"""Issue 42, 9: jsii's end-of-life box for Node 20 is printed as raw bytes at every synth. shardline
cannot reword it (jsii starts at `import aws_cdk`, before any of shardline's code); the README says
so and names the variable that silences it, which this test holds true on the machine's Node."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

README = (Path(__file__).resolve().parents[2] / "README.md").read_text()
VARIABLE = "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION"
SYSTEM_NODE = "/usr/bin/node"


def _synth_stderr(**extra: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("JSII_SILENCE")}
    synth = [sys.executable, "-c", "import aws_cdk; aws_cdk.App().synth()"]
    done = subprocess.run(synth, env={**env, **extra}, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stderr


def test_9_the_readme_names_the_variable_that_silences_jsiis_node_banner() -> None:
    """On the machine's own Node (Debian's, outside the suite's pinned 24), as a team's synth runs."""
    node = SYSTEM_NODE if Path(SYSTEM_NODE).exists() else "node"
    version = subprocess.run([node, "--version"], capture_output=True, text=True, check=True).stdout.strip()
    major = int(re.match(r"v(\d+)", version).group(1))  # type: ignore[union-attr]
    assert f"{VARIABLE}=20" in README
    if major != 20:
        pytest.skip(f"{node} is Node {version}: jsii prints no end-of-life box")
    assert "b'!!" in _synth_stderr(JSII_NODE=node), "jsii's box, as raw bytes, on Node 20"
    assert "!!" not in _synth_stderr(JSII_NODE=node, **{VARIABLE: "20"})
