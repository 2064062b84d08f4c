"""Build hygiene (issue 40's security review): the layer is built in a private temporary folder,
`make deploy` installs the runtime lock only, function assets ship an allow-list, and the Node
toolchain is one that is still maintained."""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from aws_cdk import App, Stack

from shardline.cdk import ConsumerGroup, Layers, Stream
from shardline.cdk._layers import build_layer
from tests.support.cdk import ORDERS_ARN, alone
from tests.support.node import NODE, NODE_END_OF_LIFE, node_major, processes_of

ROOT = Path(__file__).resolve().parents[2]
FUNCTIONS = ROOT / "functions"


# --- the layer's build folder ----------------------------------------------------------------------


def test_layer_built_in_a_private_temporary_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The folder is `mkdtemp`'s (0700, a name nobody can guess) under the temporary folder of the
    moment, never the old fixed `<tmp>/shardline-layer-<uid>` another local user could create first
    (here: a symlink to a folder of theirs); and it is gone once the layer is staged."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (tmp_path / f"shardline-layer-{os.getuid()}").symlink_to(theirs)

    folders = [build_layer()[0] for _ in range(2)]
    try:
        for folder in folders:
            assert folder.parent == tmp_path, folder
            assert stat.S_IMODE(folder.lstat().st_mode) == 0o700, oct(folder.lstat().st_mode)
            assert not folder.is_symlink() and folder.lstat().st_uid == os.getuid()
            assert (folder / "python" / "shardline" / "__init__.py").is_file()
            assert re.fullmatch(r"shardline-layer-[A-Za-z0-9_]{8,}", folder.name), folder.name
            assert folder.name not in (f"shardline-layer-{os.getuid()}", f"shardline-layer-{os.getpid()}")
        assert folders[0] != folders[1], "a name that can be guessed"
        assert list(theirs.iterdir()) == [], "the layer was built in a folder another user made"
    finally:
        for folder in folders:
            shutil.rmtree(folder, ignore_errors=True)

    # Staged into the cloud assembly, the build folder is removed: nothing is left in the temporary folder.
    outdir = tmp_path / "cdk.out"
    Layers(Stack(App(outdir=str(outdir)), "Layer"), "Layers")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["theirs", f"shardline-layer-{os.getuid()}", "cdk.out"]
    )
    assert any((asset / "python" / "shardline" / "__init__.py").is_file() for asset in outdir.glob("asset.*"))


# --- make deploy -------------------------------------------------------------------------------------


def test_make_deploy_installs_the_runtime_lock_only(tmp_path: Path):
    """`make -n -B deploy` (a dry run, every prerequisite out of date): its pip installs read
    requirements.lock with hashes and no dependency resolution, never requirements-dev.lock, into a
    venv of its own; `cdk deploy` runs the app with that venv's Python. And that lock is enough: every
    module a synthesis of the app loads comes from the standard library, the repository, or a
    package of requirements.lock."""
    dry = subprocess.run(["make", "-n", "-B", "deploy"], cwd=ROOT, capture_output=True, text=True, check=True)
    lines = dry.stdout.splitlines()
    installs = [line for line in lines if "pip install" in line]
    assert installs, dry.stdout
    for line in installs:
        assert "requirements-dev.lock" not in line, line
        assert re.search(r"--require-hashes --no-deps -r requirements\.lock\b", line), line
        assert ".deploy-venv/bin/python" in line, line
    assert not any("requirements-dev.lock" in line or ".venv/bin" in line for line in lines), dry.stdout
    assert any(".deploy-venv/bin/python -m pip check" in line for line in lines), dry.stdout
    [deploy] = [line for line in lines if " deploy " in line and "cdk" in line]
    assert re.search(r"--app ['\"]?\.deploy-venv/bin/python app\.py", deploy), deploy

    # Every module a synthesis loads, in a fresh interpreter, and the distribution it belongs to.
    probe = (
        "import importlib.metadata as md, json, sys, app\n"
        f"app.build(outdir={str(tmp_path / 'cdk.out')!r})[0].synth()\n"
        "owners = md.packages_distributions()\n"
        "print(json.dumps(sorted({n.split('.')[0] for n in list(sys.modules)})))\n"
        "print(json.dumps({k: v for k, v in owners.items()}))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=True)
    *_, loaded_line, owners_line = done.stdout.splitlines()
    loaded, owners = json.loads(loaded_line), json.loads(owners_line)
    runtime_lock = {
        normal(match)
        for match in re.findall(r"^([A-Za-z0-9_.-]+)==", (ROOT / "requirements.lock").read_text(), re.M)
    }
    project = {"app", "infra", "shardline", "__main__", "__mp_main__"}
    outside = {
        name: owners.get(name)
        for name in loaded
        if name not in sys.stdlib_module_names
        and name not in project
        and not name.startswith("_")
        and not {normal(owner) for owner in owners.get(name, ["?"])} <= runtime_lock
    }
    assert outside == {}, f"the synthesis loads packages outside requirements.lock: {outside}"


def normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


# --- function assets ---------------------------------------------------------------------------------


def asset_files(outdir: Path, stack: str, template: dict[str, Any]) -> dict[str, set[str]]:
    """Each Lambda function's handler (logical id) -> the files of its code asset in the cloud assembly."""
    manifest = json.loads((outdir / f"{stack}.assets.json").read_text())
    by_key = {
        destination["objectKey"]: entry["source"]["path"]
        for entry in manifest["files"].values()
        for destination in entry["destinations"].values()
    }
    shipped = {}
    for logical_id, resource in template["Resources"].items():
        if resource["Type"] != "AWS::Lambda::Function" or "S3Key" not in resource["Properties"]["Code"]:
            continue
        folder = outdir / by_key[resource["Properties"]["Code"]["S3Key"]]
        shipped[logical_id] = {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()}
    return shipped


def allow_listed(name: str) -> bool:
    """A handler's Python module outside tests and caches, or the folder's declared data file."""
    parts = name.split("/")
    return (
        name.endswith(".py")
        and not any(part.startswith(".") or part in ("tests", "test", "__pycache__") for part in parts)
        and not parts[-1].startswith("test_")
        and parts[-1] != "conftest.py"
    )


def group_with(stack: Stack, code: Path) -> ConsumerGroup:
    stream = Stream.from_stream_arn(stack, "Orders", ORDERS_ARN)
    layers = Layers(stack, "Layers")
    return ConsumerGroup(
        stack, "Writer", name="order-writer", stream=stream, layers=layers, code=code, handler="app.handler"
    )


def test_function_assets_ship_an_allow_list(tmp_path: Path):
    """Every function of the default app ships only allow-listed files; a copy of a function folder
    holding strays (`.env`, `secrets.json`, caches, tests, editor files) ships its modules and the
    data file its `shardline-assets.txt` declares, nothing else."""
    outdir = tmp_path / "app.out"
    probe = f"import app; app.build(outdir={str(outdir)!r})[0].synth()"
    subprocess.run([sys.executable, "-c", probe], cwd=ROOT, check=True, capture_output=True)
    [template_file] = outdir.glob("*.template.json")
    stack = template_file.name.removesuffix(".template.json")
    shipped = asset_files(outdir, stack, json.loads(template_file.read_text()))
    assert len(shipped) >= 3, shipped  # the producer and the two consumer groups
    for logical_id, files in shipped.items():
        assert files and all(allow_listed(name) for name in files), (logical_id, files)

    folder = tmp_path / "event_sink"
    shutil.copytree(FUNCTIONS / "event_sink", folder, ignore=shutil.ignore_patterns("__pycache__"))
    strays = {
        ".env": "AWS_SECRET_ACCESS_KEY=not-for-lambda\n",
        "secrets.json": '{"password": "hunter2"}\n',
        "__pycache__/app.cpython-312.pyc": "",
        "tests/test_app.py": "def test_app(): ...\n",
        "conftest.py": "",
        "app.py~": "",
        ".app.py.swp": "",
        "notes.md": "",
        "app.pyc": "",
    }
    wanted = {"app.py", "helpers/__init__.py", "helpers/format.py", "schema/record.json"}
    for name, text in {**strays, **dict.fromkeys(wanted - {"app.py"}, "{}\n")}.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)
    (folder / "shardline-assets.txt").write_text(
        "# the record schema the handler validates against\nschema/*.json\n"
    )
    group_outdir = tmp_path / "group.out"
    alone(lambda stack: group_with(stack, folder), outdir=group_outdir)
    [template_file] = group_outdir.glob("*.template.json")
    shipped = asset_files(group_outdir, "Alone", json.loads(template_file.read_text()))
    [files] = [files for files in shipped.values() if "schema/record.json" in files or ".env" in files]
    assert files == wanted, sorted(files)


# --- Node ----------------------------------------------------------------------------------------------


def test_node_toolchain_still_maintained(kinesis_mock: str):
    """The Node the toolchain runs is a release line whose end of life is after today, and it is the
    one every Node use of the project runs: the cdk CLI (Makefile), jsii's kernel under Python,
    kinesis-mock (tests/conftest.py), playwright-core's driver (the browser tests)."""
    # The pinned Node, else (no pin: the old toolchain) the `node` on the PATH every tool ran on.
    node = NODE if NODE.exists() else Path(shutil.which("node") or "node")
    done = subprocess.run([str(node), "--version"], capture_output=True, text=True, check=True)
    version = done.stdout.strip()
    major = node_major(version)
    assert major in NODE_END_OF_LIFE, f"Node {version}: not in the end-of-life table (tests/support/node.py)"
    assert NODE_END_OF_LIFE[major] > datetime.now(UTC).date(), (
        f"Node {version} reached its end of life on {NODE_END_OF_LIFE[major]}"
    )
    assert node == NODE, f"{node}: not the Node package-lock.json pins"

    pinned = NODE.resolve()
    # jsii's kernel under this process (started when aws_cdk was imported).
    assert os.environ.get("JSII_NODE") == str(NODE)
    kernels = [p for p in processes_of(os.getpid()) if "jsii-runtime" in " ".join(p["cmdline"])]
    assert kernels and all(p["exe"] == pinned for p in kernels), kernels
    # kinesis-mock, started by tests/conftest.py.
    mocks = [p for p in processes_of(os.getpid()) if any("kinesis-local" in part for part in p["cmdline"])]
    assert mocks and all(p["exe"] == pinned for p in mocks), mocks
    # The Makefile: every cdk command runs on the pinned Node, and the end-of-life silencer is gone.
    makefile = (ROOT / "Makefile").read_text()
    assert "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION" not in makefile
    dry = subprocess.run(
        ["make", "-n", "synth", "deploy"], cwd=ROOT, capture_output=True, text=True, check=True
    )
    cdk_lines = [line for line in dry.stdout.splitlines() if re.search(r"\bcdk (synth|deploy)\b", line)]
    assert len(cdk_lines) == 2, dry.stdout
    assert all("node_modules/.bin/node node_modules/aws-cdk/bin/cdk" in line for line in cdk_lines), (
        dry.stdout
    )
    jsii_node = subprocess.run(
        ["make", "-s", "--eval", "jsii-node: ; @echo $$JSII_NODE", "jsii-node"],
        cwd=ROOT, capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    assert Path(jsii_node) == NODE, jsii_node
    # playwright-core's driver: the browser tests run their script with the pinned Node.
    browser_tests = (ROOT / "tests" / "support" / "dashboard_browser.py").read_text()
    assert "command = [str(NODE), str(SCRIPT)" in browser_tests
