"""Property 7 of issue 42: `up --json` says, in one JSON line once the app is up, what a script needs
to talk to it (endpoints, API, app folder, pid, groups), and one more line when it stops; its words
go to stderr."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from local.__main__ import main
from local.exit_codes import OK
from tests.support.parsing_app import GROUP, parsing_assembly
from tests.support.runtime import free_port

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(600)]

REPO = Path(__file__).resolve().parents[3]


def test_7_up_json_prints_one_ready_line_then_a_stopped_line(tmp_path: Path) -> None:
    cdk_out = parsing_assembly(tmp_path / "app")
    endpoint_port, api_port = free_port(), free_port()
    ports = ["--endpoint-port", str(endpoint_port), "--api-port", str(api_port)]
    env = {**os.environ, "PYTHONPATH": f"{REPO / 'layers' / 'shardline' / 'python'}:{REPO}"}
    command = [sys.executable, "-m", "local", "--cdk-out", str(cdk_out), *ports, "up", "--json",
               "--log-dir", str(tmp_path / "logs")]  # fmt: skip
    up = subprocess.Popen(
        command, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert up.stdout is not None
        ready = json.loads(up.stdout.readline())  # the first line: once everything is up
        assert ready["event"] == "ready" and ready["pid"] == up.pid
        assert ready["endpoint_url"] == f"http://127.0.0.1:{endpoint_port}"
        assert ready["api_url"] == f"http://127.0.0.1:{api_port}/v1"
        assert ready["dashboard_url"].startswith(f"http://127.0.0.1:{api_port}/")
        assert ready["app"] == str(cdk_out.resolve()) and ready["folder"] == str(tmp_path.resolve())
        assert ready["streams"] == ["parsed-orders"] and ready["stack"] == "parsing"
        [group] = ready["groups"]
        assert group["group"] == GROUP and group["dlq_url"].startswith(ready["endpoint_url"])
        assert ready["credentials"] == {"access_key_id": "test", "secret_access_key": "test"}
        # What it says is where the app is: status, told those ports, finds it.
        where = ["--cdk-out", str(cdk_out), *ports]
        assert main([*where, "status", "--json"]) == OK
    finally:
        up.send_signal(signal.SIGINT)
        out, err = up.communicate(timeout=120)
    assert up.returncode == OK, err[-3000:]
    assert [json.loads(line) for line in out.splitlines()] == [{"event": "stopped", "pid": up.pid}]
    assert "shardline is up" in err and "stopped: no process left behind" in err  # the words: stderr
