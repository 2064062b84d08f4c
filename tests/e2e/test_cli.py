"""`python -m local up | status | send` as users run them: the commands against `up`, Ctrl-C, no orphan."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.runtime import free_port

# Whole-pipeline runs drain through the emulated DynamoDB: minutes on a loaded 2-core machine.
pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(1200)]

REPO_ROOT = Path(__file__).resolve().parents[2]


def processes_mentioning(*needles: str) -> list[int]:
    """Pids whose command line holds every needle (the runtime's children carry its ports or pid)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if all(needle in cmdline for needle in needles):
            found.append(int(entry.name))
    return found


def wait_until(predicate, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.2)
    return predicate()


class Up:
    """`python -m local up` in a child process on free ports, in its own working directory."""

    def __init__(self, cdk_out: Path, workdir: Path, *up_args: str) -> None:
        self.endpoint_port, self.api_port = free_port(), free_port()
        self.ports = ["--endpoint-port", str(self.endpoint_port), "--api-port", str(self.api_port)]
        self.common = [sys.executable, "-m", "local", "--cdk-out", str(cdk_out), *self.ports]
        env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
        self.env = env
        self.workdir = workdir
        self.output = workdir / "up.out"
        with self.output.open("w") as out:
            self.process = subprocess.Popen(
                [*self.common, "up", *up_args], cwd=workdir, env=env, stdout=out, stderr=subprocess.STDOUT
            )
        if not wait_until(lambda: "shardline is up" in self.output.read_text(), 120):
            self.process.kill()
            raise AssertionError(f"`up` did not come up:\n{self.output.read_text()[-3000:]}")

    def run(self, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*self.common, *args],
            cwd=self.workdir,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def children(self) -> list[int]:
        endpoint = processes_mentioning("local.endpoint", f"--parent-pid {self.process.pid}")
        workers = [
            pid
            for pid in processes_mentioning("lambda_/worker.py")
            if _parent_chain_has(pid, self.process.pid)
        ]
        return endpoint + workers


def _parent_chain_has(pid: int, ancestor: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return int(stat.rsplit(")", 1)[1].split()[1]) == ancestor


def test_up_serves_status_and_send_then_ctrl_c_stops_every_process(cdk_out, tmp_path):
    up = Up(cdk_out, tmp_path)
    try:
        children = up.children()
        assert len(children) >= 4  # the endpoint and a warm worker per function
        banner = up.output.read_text()
        for expected in (
            f"http://127.0.0.1:{up.api_port}/v1",
            f"http://127.0.0.1:{up.endpoint_port}",
            "make send",
            f"http://127.0.0.1:{up.api_port}/_dashboard",
            "23 alarms evaluated",
        ):
            assert expected in banner
        # What is not run is listed, not silently dropped: every key of the template, for one.
        (template,) = Path(cdk_out).glob("*.template.json")
        kinds = [r["Type"] for r in json.loads(template.read_text())["Resources"].values()]
        assert f"AWS::KMS::Key ×{kinds.count('AWS::KMS::Key')}" in banner

        sent = up.run("send", "--count", "500", "--json", "--timeout", "300")
        assert sent.returncode == 0, sent.stdout[-3000:] + sent.stderr[-3000:]
        verdict = json.loads(sent.stdout)
        assert verdict["ok"] and {g["group"] for g in verdict["groups"]} == {"event-sink", "key-counter"}

        status = up.run("status", "--json")
        assert status.returncode == 0, status.stderr
        report = json.loads(status.stdout)
        shards = report["kinesis"]["streams"]["shardline-dev-events"]["shards"]
        assert sum(shard["records_written"] for shard in shards.values()) > 0
        assert {group["group"] for group in report["groups"]} == {"event-sink", "key-counter"}
        assert all(len(group["leases"]) == 4 for group in report["groups"])
        assert all(group["depths"] == {"dlq": 0, "on_failure": 0} for group in report["groups"])
        invocations = {name: stats["invocations"] for name, stats in report["runtime"]["functions"].items()}
        assert all(count > 0 for count in invocations.values()), invocations
    finally:
        up.process.send_signal(signal.SIGINT)
        code = up.process.wait(timeout=60)
    assert code == 0, up.output.read_text()[-2000:]
    assert "no process left behind" in up.output.read_text()
    assert wait_until(lambda: not any(Path(f"/proc/{pid}").exists() for pid in children), 10), children


def test_a_killed_up_leaves_no_process_and_the_next_run_starts(cdk_out, tmp_path):
    up = Up(cdk_out, tmp_path)
    children = up.children()
    up.process.kill()  # no cleanup at all: the children must notice on their own
    up.process.wait(timeout=30)
    assert wait_until(lambda: not any(Path(f"/proc/{pid}").exists() for pid in children), 20), children
    again = Up(cdk_out, tmp_path)  # same working directory: the stale pid file is handled
    again.process.send_signal(signal.SIGINT)
    assert again.process.wait(timeout=60) == 0


def test_up_with_a_chaos_profile_says_so_and_status_counts_what_it_injects(cdk_out, tmp_path):
    profile = tmp_path / "requests.toml"
    profile.write_text("[endpoint]\nrequest_error_rate = { kinesis = 0.2, dynamodb = 0.2 }\n")
    up = Up(cdk_out, tmp_path, "--chaos", str(profile))
    try:
        assert "chaos profile requests" in up.output.read_text()
        shape = ("--size", "100-2000", "--skew", "hot", "--format", "ndjson")
        sent = up.run("send", "--count", "300", *shape, "--json", "--timeout", "300")
        assert sent.returncode == 0, sent.stdout[-3000:] + sent.stderr[-3000:]
        status = up.run("status", "--json")
        chaos = json.loads(status.stdout)["chaos"]
        assert chaos["profile"] == "requests" and chaos["active"]
        assert sum(n for kind, n in chaos["injected"].items() if "request_error" in kind) > 0
        shown = up.run("status")
        assert "chaos: profile requests" in shown.stdout and "request_error" in shown.stdout
    finally:
        up.process.send_signal(signal.SIGINT)
        assert up.process.wait(timeout=60) == 0


def test_a_bad_chaos_profile_is_refused_before_anything_starts(cdk_out, tmp_path):
    command = [sys.executable, "-m", "local", "--cdk-out", str(cdk_out), "up", "--chaos", "stormy"]
    done = subprocess.run(command, cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 2 and "no chaos profile 'stormy'" in done.stdout
