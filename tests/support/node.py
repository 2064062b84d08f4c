"""The Node every Node use of the tests runs on: the one package-lock.json pins (node-linux-<arch>, an
LTS line still maintained), not whatever `node` the machine has; and the end of life of each release
line, to prove it is maintained."""

from __future__ import annotations

import os
import re
from datetime import date
from pathlib import Path
from typing import Any

__all__ = ["NODE", "NODE_END_OF_LIFE", "node_major", "processes_of", "use_project_node"]

ROOT = Path(__file__).resolve().parents[2]
NODE_BIN = ROOT / "node_modules" / ".bin"
#: The pinned Node (`npm ci` installs it from package-lock.json).
NODE = NODE_BIN / "node"
#: Each Node release line's end of life, from https://nodejs.org/en/about/previous-releases
#: (cross-checked with https://endoflife.date/nodejs); a line missing here fails the test that reads it.
NODE_END_OF_LIFE = {
    18: date(2025, 4, 30),
    20: date(2026, 4, 30),
    22: date(2027, 4, 30),
    24: date(2028, 4, 30),
}


def node_major(version: str) -> int:
    """22 for "v22.1.0"."""
    found = re.fullmatch(r"v?(\d+)\.\d+\.\d+", version.strip())
    if found is None:
        raise ValueError(f"not a Node version: {version!r}")
    return int(found.group(1))


def use_project_node() -> None:
    """This process's Node uses run on the pinned Node: jsii's kernel (`JSII_NODE`, read by jsii when
    it starts its kernel) and every `node` a child looks up on the PATH (the cdk CLI's shebang,
    kinesis-mock, the browser script). Nothing changes when it is not installed (`make setup`)."""
    if not NODE.exists():
        return
    os.environ["JSII_NODE"] = str(NODE)
    path = os.environ.get("PATH", "")
    if not path.startswith(f"{NODE_BIN}{os.pathsep}"):
        os.environ["PATH"] = f"{NODE_BIN}{os.pathsep}{path}"


def processes_of(parent: int) -> list[dict[str, Any]]:
    """The live descendants of `parent` (Linux /proc): pid, executable (resolved), command line."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], list(children.get(parent, []))
    while todo:
        pid = todo.pop()
        todo += children.get(pid, [])
        try:
            exe = Path(os.readlink(f"/proc/{pid}/exe")).resolve()
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
        except OSError:
            continue
        found.append({"pid": pid, "exe": exe, "cmdline": cmdline})
    return found
