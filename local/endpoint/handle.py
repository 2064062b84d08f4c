"""The endpoint seen from its parent: `python -m local.endpoint` (installed: `shardline.local.endpoint`)
started as a child, awaited, stopped.

    with Endpoint(port=0) as endpoint:   # port 0: a free one, chosen by the child
        boto3.client("kinesis", endpoint_url=endpoint.url, ...)

The child (`local.endpoint.server`) stops by itself when its parent dies, so a killed parent leaves
no orphan.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import IO

from .. import home
from ..chaos.profiles import ChaosProfile

#: The folder holding the runtime's top package: the child imports it from there, wherever it is.
IMPORT_ROOT = home.import_root()
READY_LINE = "shardline-endpoint-ready"


class Endpoint:
    """The endpoint as a child process on `host:port` (0: any free port); `start()` waits until ready."""

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 4566,
        *,
        limits: bool = True,
        log_path: Path | None = None,
        startup_timeout: float = 60.0,
        chaos: ChaosProfile | None = None,
    ) -> None:
        self.host = host
        self.port = port
        self.limits = limits
        self.chaos = chaos
        self.log_path = log_path
        self.startup_timeout = startup_timeout
        self.started_in = 0.0  # seconds from spawn to ready
        self._process: subprocess.Popen[str] | None = None
        self._log: IO[str] | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        """The endpoint process's id while it runs (its memory is what the soak watches)."""
        return self._process.pid if self._process is not None else None

    def start(self) -> Endpoint:
        began = time.monotonic()
        command = [sys.executable, "-m", home.module("endpoint"), "--host", self.host,
                   "--port", str(self.port), "--parent-pid", str(os.getpid())]  # fmt: skip
        if not self.limits:
            command.append("--no-limits")
        if self.chaos is not None and self.chaos.active:
            command += ["--chaos", self.chaos.to_json()]
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(IMPORT_ROOT), os.environ.get("PYTHONPATH", "")]),
        }
        if self.log_path is not None:
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
            self._log = self.log_path.open("a", encoding="utf-8")
        self._process = subprocess.Popen(
            command,
            cwd=IMPORT_ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=self._log,
            text=True,
        )
        try:
            self.port = self._await_ready_line()
            if not wait_ready(self.url, timeout=max(1.0, began + self.startup_timeout - time.monotonic())):
                raise RuntimeError(f"the endpoint at {self.url} did not answer")
        except BaseException:
            self.stop()
            raise
        self.started_in = time.monotonic() - began
        return self

    def _await_ready_line(self) -> int:
        """The port the child bound, from the line it prints once listening."""
        assert self._process is not None and self._process.stdout is not None
        found: list[int] = []
        ready = threading.Event()
        stdout, log = self._process.stdout, self._log

        def read() -> None:
            # Drains stdout for the child's whole life: a full pipe would block anything moto prints.
            try:
                for line in stdout:
                    if not found and line.startswith(READY_LINE):
                        found.append(int(line.split()[1]))
                        ready.set()
                    elif log is not None and not log.closed:
                        log.write(line)
            except (OSError, ValueError):
                pass  # closed by stop()
            finally:
                ready.set()

        threading.Thread(target=read, daemon=True, name="endpoint-stdout").start()
        ready.wait(self.startup_timeout)
        if not found:
            code = self._process.poll()
            raise RuntimeError(
                f"the endpoint did not start (exit code {code}); see {self.log_path or 'stderr'}"
            )
        return found[0]

    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the child (SIGTERM, then SIGKILL after `timeout`) and wait for it; safe to call twice."""
        process, self._process = self._process, None
        if process is not None:
            if process.poll() is None:
                process.terminate()
                try:
                    process.wait(timeout)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
            if process.stdout is not None:
                process.stdout.close()
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self) -> Endpoint:
        return self.start() if self._process is None else self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def wait_ready(url: str, timeout: float = 30.0) -> bool:
    """Whether `GET {url}/_shardline/health` answers 200 within `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(f"{url}/_shardline/health", timeout=2) as response:
                if response.status == 200:
                    return True
        except OSError:
            pass
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
