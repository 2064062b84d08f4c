"""`python -m local up` as a child process on free ports, and the /proc readings the benchmarks take of it.

    with UpProcess(cdk_out, workdir, extra_args=("--chaos", "heavy")) as up:
        up.start()                      # seconds to "shardline is up"
        up.processes()                  # pid -> role: up, endpoint, each function's workers
        rss_bytes(up.processes())       # pid -> resident memory

Used by `bench.local_runtime` and `bench.soak`.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
UP_LINE = "shardline is up"
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def child_env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")])}


#: How each app is built: the `build(...)` call its module makes, `{outdir}` filled in.
APPS = {
    "shardline": "from app import CDK_JSON, build; import json; "
    "build(json.loads(CDK_JSON.read_text())['context'], outdir={outdir!r})[0].synth()",
    "baseline": "from bench.baseline.app import build; build(outdir={outdir!r})[0].synth()",
}


def synthesize(outdir: Path, app: str = "shardline") -> Path:
    """`app` (this repository's, or the cost benchmark's baseline) synthesized into `outdir`, in a
    child, so jsii's node process ends with it."""
    command = [sys.executable, "-c", APPS[app].format(outdir=str(outdir))]
    subprocess.run(command, cwd=REPO_ROOT, env=child_env(), check=True, capture_output=True)
    return outdir


# --- a runtime as `make local` runs it --------------------------------------------------------------


class UpProcess:
    """`python -m local up` as a child on free ports; `start()` returns seconds to "shardline is up"."""

    def __init__(self, cdk_out: Path, workdir: Path, *, extra_args: Sequence[str] = ()) -> None:
        self.cdk_out, self.workdir = cdk_out, workdir
        self.extra_args = tuple(extra_args)
        self.endpoint_port, self.api_port = free_port(), free_port()
        self.endpoint_url = f"http://127.0.0.1:{self.endpoint_port}"
        self.log_dir = workdir / "logs"
        self.output: list[str] = []
        self._process: subprocess.Popen[str] | None = None

    def start(self, timeout: float = 120.0) -> float:
        self.workdir.mkdir(parents=True, exist_ok=True)
        command = [sys.executable, "-m", "local", "--cdk-out", str(self.cdk_out),
                   "--endpoint-port", str(self.endpoint_port), "--api-port", str(self.api_port),
                   "up", "--log-dir", str(self.log_dir), *self.extra_args]  # fmt: skip
        began = time.monotonic()
        self._process = subprocess.Popen(
            command,
            cwd=self.workdir,
            env=child_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        up = threading.Event()
        stdout = self._process.stdout
        assert stdout is not None

        def drain() -> None:  # for the child's whole life: a full pipe would block it
            for line in stdout:
                self.output.append(line.rstrip())
                if UP_LINE in line:
                    up.set()
            up.set()

        threading.Thread(target=drain, daemon=True, name="up-stdout").start()
        up.wait(timeout)
        elapsed = time.monotonic() - began
        if not any(UP_LINE in line for line in self.output):
            self.stop()
            raise RuntimeError("python -m local up did not come up:\n" + "\n".join(self.output[-30:]))
        return elapsed

    @property
    def pid(self) -> int:
        assert self._process is not None
        return self._process.pid

    def processes(self) -> dict[int, str]:
        """pid -> role of the runtime's processes: the up process, the endpoint, each function's workers."""
        table = proc_table()
        found, todo = {self.pid: "up (API, mappings)"}, [self.pid]
        while todo:
            parent = todo.pop()
            for pid, (ppid, cmdline) in table.items():
                if ppid == parent:
                    found[pid] = "endpoint" if b"local.endpoint" in cmdline else worker_function(pid)
                    todo.append(pid)
        return found

    def stop(self, timeout: float = 60.0) -> tuple[float, list[int]]:
        """SIGINT; seconds until it exited and no process naming its ports is left, and any left."""
        process, self._process = self._process, None
        if process is None:
            return 0.0, []
        began = time.monotonic()
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        ports = (str(self.endpoint_port).encode(), str(self.api_port).encode())
        deadline = time.monotonic() + timeout
        while (left := pids_naming(ports)) and time.monotonic() < deadline:
            time.sleep(0.02)
        return time.monotonic() - began, left

    def __enter__(self) -> UpProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def proc_table() -> dict[int, tuple[int, bytes]]:
    """pid -> (parent pid, command line) of every process."""
    table = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
                table[int(entry.name)] = (ppid, (entry / "cmdline").read_bytes())
            except (OSError, IndexError, ValueError):
                continue
    return table


def pids_naming(needles: tuple[bytes, ...]) -> list[int]:
    return [
        pid
        for pid, (_, cmdline) in proc_table().items()
        if pid != os.getpid() and any(needle in cmdline for needle in needles)
    ]


def cpu_seconds(pids: dict[int, str]) -> dict[int, float]:
    """pid -> user + system CPU seconds so far."""
    out = {}
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        out[pid] = (int(fields[11]) + int(fields[12])) / CLOCK_TICKS
    return out


def worker_function(pid: int) -> str:
    """A worker's function, from its command line or environment (the log names it)."""
    try:
        text = Path(f"/proc/{pid}/cmdline").read_bytes() + Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return "worker"
    for short in ("Producer", "eventsink", "keycounter"):
        if short.encode() in text:
            return f"worker {short}"
    return "worker"


def get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.loads(response.read())


def rss_bytes(pids: dict[int, str]) -> dict[int, int]:
    """pid -> resident set size in bytes (processes that are gone are left out)."""
    out = {}
    for pid in pids:
        try:
            out[pid] = int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * PAGE_SIZE
        except (OSError, IndexError, ValueError):
            continue
    return out
