"""The local runtime as a team installs it: `shardline[local]`'s wheel, its `shardline` console script.

One wheel is built (no isolation, the pinned setuptools of .venv) from a copy of the repository
without `node_modules` (the dashboard's libraries are in the source tree) and installed with `--no-deps`
into fresh virtualenvs: one that finds the `local` extra's packages through a `.pth` naming .venv's
site-packages (which holds neither shardline nor a `local`), one with nothing. Every command runs
from an empty folder with PYTHONPATH and friends removed, so the source tree cannot be imported.

- The wheel holds `shardline/local/...` (the dashboard's page, its vendored libraries, the pins of
  the Lambda runtime's packages) and no top-level `local` (`top_level.txt` says `shardline` only).
- `shardline --help`, `shardline local --help` and `shardline local status --help` answer from the
  console script; `--app` is `--cdk-out`; `local` is not importable, `shardline.local` is, from the venv.
- The installed runtime starts its endpoint as `python -m shardline.local.endpoint` (derived from its
  package) and keeps its state out of the package (the user's cache and `.shardline/`).
- Without the extra, `shardline local ...` says how to install it (with the `local` extra) and exits 2.
- Installed, `shardline local up --app cdk.out` runs a team's app (tests/support/team_app) from the
  team's folder, installing the Lambda runtime's packages on its first run (from PyPI, as users get them).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from local.app.provision import client
from tests.support.runtime import free_port
from tests.support.team_app import team_assembly, team_template
from tests.support.wheel import build_shardline_wheel, clean_env, run, venv_with

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_shardline_wheel(tmp_path_factory.mktemp("local-wheel"))


def test_the_wheel_ships_the_runtime_as_shardline_local_and_no_top_level_local(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        top_level = next(n for n in names if n.endswith(".dist-info/top_level.txt"))
        entry_points = archive.read(next(n for n in names if n.endswith(".dist-info/entry_points.txt")))
        assert archive.read(top_level).decode().split() == ["shardline"]
    assert not {n for n in names if n.startswith("local/")}, "a top-level `local` package would collide"
    shipped = {name.removeprefix("shardline/local/") for name in names if name.startswith("shardline/local/")}
    source = {
        path.relative_to(ROOT / "local").as_posix()
        for path in (ROOT / "local").rglob("*")
        if path.is_file() and "__pycache__" not in path.parts
    }
    assert source <= shipped, f"not in the wheel: {sorted(source - shipped)}"
    assert {"cloudwatch/web/index.html", "lambda_/pins.txt", "lambda_/worker.py"} <= shipped
    # issue 42, 3: the dashboard's libraries, whichever way the package is built
    vendored = {"uPlot.iife.min.js", "uPlot.min.css", "marked.umd.js", "uPlot.LICENSE", "marked.LICENSE"}
    assert {f"cloudwatch/web/vendor/{name}" for name in vendored} <= shipped
    assert b"shardline = shardline._cli:main" in entry_points


def test_3_a_git_install_ships_the_dashboards_libraries(tmp_path: Path) -> None:
    """`pip install git+...` builds from a clone of the committed tree, without node_modules: the
    dashboard's libraries are part of that tree (`pip install .` and the wheel: above)."""
    dist = tmp_path / "dist"
    source = f"git+file://{ROOT}"
    run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation", "-w",
          str(dist), source], tmp_path)  # fmt: skip
    (built,) = dist.glob("*.whl")
    with zipfile.ZipFile(built) as archive:
        names = set(archive.namelist())
    vendored = {"uPlot.iife.min.js", "uPlot.min.css", "marked.umd.js", "uPlot.LICENSE", "marked.LICENSE"}
    assert {f"shardline/local/cloudwatch/web/vendor/{name}" for name in vendored} <= names


def test_the_console_script_runs_the_local_runtimes_command_line(wheel: Path, tmp_path: Path) -> None:
    bin_dir = venv_with(tmp_path / "venv", wheel, with_extra=True)
    empty = tmp_path / "project"
    empty.mkdir()
    shardline = str(bin_dir / "shardline")
    top = run([shardline, "--help"], empty).stdout
    assert "local" in top and "shardline <command>" in top
    local_help = run([shardline, "local", "--help"], empty).stdout
    assert "usage: shardline local" in local_help
    for command in ("up", "status", "send", "redrive"):
        assert command in local_help
    # issue 42, 8: the installed command speaks in its own words, not the repository's
    assert "python -m local" not in local_help and "make " not in local_help, local_help
    status_help = run([shardline, "local", "status", "--help"], empty).stdout
    assert "usage: shardline local status" in status_help and "--json" in status_help
    up_help = run([shardline, "local", "up", "--help"], empty).stdout
    assert "--app" in up_help and "--stream" in up_help
    # No synthesized app here: `up` says so (and how to make one), not a traceback.
    missing = run(
        [shardline, "local", "up", "--app", "nowhere"],
        empty,
        check=False,
        SHARDLINE_CACHE_DIR=str(tmp_path / "cache"),
    )
    assert missing.returncode == 2 and "no synthesized app in nowhere" in missing.stdout, missing

    probe = r"""
import importlib.util, json, sys
from shardline.local import home
from shardline.local.endpoint import handle
from shardline.local.lambda_ import runtimes
assert importlib.util.find_spec("local") is None, "a top-level local is importable"
endpoint = handle.Endpoint(port=0).start()
try:
    url = endpoint.url
finally:
    endpoint.stop()
print(json.dumps({"module": home.module("endpoint"), "root": str(handle.IMPORT_ROOT),
                  "cache": str(runtimes.ROOT), "state": str(home.state_dir()),
                  "repository": home.IN_REPOSITORY, "url": url, "up": home.UP_COMMAND}))
"""
    found = json.loads(
        run(
            [str(bin_dir / "python"), "-I", "-c", probe], empty, SHARDLINE_CACHE_DIR=str(tmp_path / "cache")
        ).stdout
    )
    assert found["module"] == "shardline.local.endpoint" and not found["repository"]
    assert Path(found["root"]).name == "site-packages", found
    assert found["cache"] == str(tmp_path / "cache" / "lambda") and found["state"] == ".shardline"
    assert found["url"].startswith("http://127.0.0.1:")
    assert found["up"] == "shardline local up"  # what `status` and `redrive` tell to run when nothing answers


def test_without_the_extra_the_console_script_names_it(wheel: Path, tmp_path: Path) -> None:
    bin_dir = venv_with(tmp_path / "venv", wheel, with_extra=False)
    done = run([str(bin_dir / "shardline"), "local", "--help"], tmp_path, check=False)
    assert done.returncode == 2, done
    assert 'with its `local` extra: pip install "<its folder or wheel>[local]"' in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.slow
def test_an_installed_runtime_runs_a_teams_app_from_its_project_folder(wheel: Path, tmp_path: Path) -> None:
    """`shardline local up --app cdk.out` from the team's folder: the Lambda runtime's packages
    installed into the cache on the first `up` (said so), the state in `.shardline/`, the app's
    fan-out mapping and existing stream running, `status` answering, Ctrl-C stopping everything."""
    bin_dir = venv_with(tmp_path / "venv", wheel, with_extra=True)
    project = tmp_path / "project"
    project.mkdir()
    team_assembly(project, team_template())
    endpoint_port, api_port = free_port(), free_port()
    ports = ["--endpoint-port", str(endpoint_port), "--api-port", str(api_port)]
    env = clean_env(SHARDLINE_CACHE_DIR=str(tmp_path / "cache"))
    command = [str(bin_dir / "shardline"), "local", "up", "--app", "cdk.out", "--stream", "existing-orders=2"]
    up = subprocess.Popen(
        [*command, *ports],
        cwd=project, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    output: list[str] = []
    try:
        assert up.stdout is not None
        for line in up.stdout:
            output.append(line)
            if "Ctrl-C stops everything" in line or "could not" in line:
                break
        text = "".join(output)
        assert "shardline is up" in text, text
        assert "installing the Lambda runtime's packages" in text and str(tmp_path / "cache") in text, text
        assert "created locally with 2 shard(s)" in text and "shardline local status" in text, text
        assert (project / ".shardline" / "up.pid").exists() and (project / ".shardline" / "logs").is_dir()
        assert (tmp_path / "cache" / "lambda" / "python3.12" / "site" / ".stamp").exists()
        endpoint = f"http://127.0.0.1:{endpoint_port}"
        kinesis, sqs = client("kinesis", endpoint), client("sqs", endpoint)
        orders = next(s for s in kinesis.list_streams()["StreamNames"] if "Orders" in s)
        sent = {f"order-{n}" for n in range(10)} | {f"existing-{n}" for n in range(5)}
        for body in sorted(sent):
            stream = orders if body.startswith("order") else "existing-orders"
            kinesis.put_record(StreamName=stream, PartitionKey=body, Data=body.encode())
        queue = next(url for url in sqs.list_queues()["QueueUrls"] if "Forwarded" in url)
        received: set[str] = set()
        deadline = time.monotonic() + 60
        while received != sent and time.monotonic() < deadline:
            for message in sqs.receive_message(QueueUrl=queue, MaxNumberOfMessages=10, WaitTimeSeconds=1).get(
                "Messages", []
            ):
                received.add(message["Body"])
        assert received == sent
        status = run(
            [str(bin_dir / "shardline"), "local", "status", "--app", "cdk.out", "--json", *ports], project
        )
        assert "existing-orders" in status.stdout
    finally:
        up.send_signal(signal.SIGINT)
        rest, _ = up.communicate(timeout=60)
    assert up.returncode == 0 and "stopped: no process left behind" in rest, rest
