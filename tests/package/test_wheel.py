"""shardline as users install it: `python -m build` and `pip install .` from the repository root.

Both tests build from a copy of the repository (tool output and local environments left out), so
nothing is written into the checkout: setuptools puts `build/` at the root and
`shardline.egg-info/` next to the package, which is also the Lambda layer. The result is
installed into a fresh virtualenv (no system site-packages) and exercised there by a smoke script
run in isolated mode (`-I`, PYTHONPATH and friends removed) from an empty folder, so the source
tree cannot be imported by accident.

- The built artifacts: `python -m build --no-isolation` (the pinned setuptools of .venv, nothing
  downloaded for the build) makes the sdist, then the wheel from the sdist. The sdist holds the
  package and the project files only; the wheel holds every file of the source package (a file
  the build drops fails the test), `py.typed`, and LICENSE in its dist-info. The wheel installs
  without the `lambda` extra: Powertools is absent, every public name of the core resolves, and
  a name that needs Powertools (the Lambda adapters only) raises ModuleNotFoundError naming
  `aws_lambda_powertools`.
- `pip install ".[lambda]"` from the repository root, with build isolation (pip fetches
  setuptools per `[build-system]`): every public name resolves, the adapters included.

pip resolves boto3/botocore (and Powertools for the extra) from the configured index.
"""

from __future__ import annotations

import ast
import email.parser
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LIBRARY = ROOT / "layers" / "shardline" / "python" / "shardline"
#: The local runtime's folder, shipped as `shardline.local` (setup.py maps it).
LOCAL = ROOT / "local"
#: Files of the source tree that are never part of the package (bytecode caches).
_CACHES = ("__pycache__",)
#: Left out of the copy the tests build from: VCS, local environments, tool output and caches.
_NOT_COPIED = shutil.ignore_patterns(
    ".git",
    ".venv",
    ".locktool",
    ".deploy-venv",
    "node_modules",
    "cdk.out",
    "build",
    "dist",
    "*.egg-info",
    "__pycache__",
    "*.pyc",
    ".pytest_cache",
    ".ruff_cache",
    ".mypy_cache",
    ".hypothesis",
)
#: What an sdist may hold besides the package (paths inside `shardline-<version>/`).
_SDIST_PROJECT_FILES = {
    "PKG-INFO", "setup.cfg", "setup.py", "pyproject.toml", "README.md", "LICENSE", "MANIFEST.in"
}  # fmt: skip
_SDIST_PACKAGE_DIRS = (
    "layers/shardline/python/shardline/", "layers/shardline/python/shardline.egg-info/", "local/"
)  # fmt: skip
_SUBPROCESS_TIMEOUT = 240  # seconds; pytest's own timeout (pyproject) is the outer bound

# Run by the clean virtualenv's interpreter: argv[1] is JSON {"extras": bool, "modules": [...]}.
SMOKE = r'''
import importlib
import importlib.metadata as metadata
import importlib.util
import json
import re
import sys
import sysconfig
from pathlib import Path

options = json.loads(sys.argv[1])
with_lambda = options["extras"]
assert sys.flags.isolated and sys.prefix != sys.base_prefix, "run isolated, in a virtualenv"

import shardline

# Installed, not borrowed from the source tree.
package = Path(shardline.__file__).resolve().parent
site_packages = Path(sysconfig.get_paths()["purelib"]).resolve()
assert package.parent == site_packages, f"shardline imported from {package}, not {site_packages}"
installed_version = metadata.version("shardline")
assert shardline.__version__ == installed_version, (shardline.__version__, installed_version)
assert (package / "py.typed").is_file(), "py.typed is missing"
recorded = {str(file) for file in metadata.files("shardline")}
assert "shardline/py.typed" in recorded, "py.typed is not in the installed RECORD"

# Dependencies: boto3 and botocore; Powertools only through the `lambda` extra.
def name(requirement):
    return re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", requirement).group().lower().replace("_", "-")

requirements = metadata.requires("shardline") or []
base = sorted(name(r) for r in requirements if ";" not in r)
extra = [r for r in requirements if ";" in r]
assert base == ["boto3", "botocore"], requirements
extras = {name(r): r.split('extra == "', 1)[1].rstrip('"') for r in extra}
expected = {"aws-lambda-powertools": "lambda", "aws-cdk-lib": "cdk", "constructs": "cdk", "cdk-nag": "cdk",
            "moto": "local", "rich": "local", "jsonschema": "local", "werkzeug": "local"}
assert extras == expected, requirements
assert metadata.metadata("shardline").get_all("Provides-Extra") == ["lambda", "cdk", "local"]
powertools = importlib.util.find_spec("aws_lambda_powertools")
assert (powertools is not None) == with_lambda, f"aws_lambda_powertools installed: {powertools}"

# Every public module imports and every name of its __all__ resolves (lazily, via __getattr__).
installed = sorted(
    f"shardline.{path.stem if path.suffix else path.name}"
    for path in package.iterdir()
    if not path.name.startswith("_")
    and ((path.suffix == ".py") or (path / "__init__.py").is_file())
)
assert installed == sorted(options["modules"]), (installed, options["modules"])
needs_powertools = {}
cdk_installed = importlib.util.find_spec("aws_cdk") is not None
for module_name in installed:
    module = importlib.import_module(module_name)
    if module_name == "shardline.local":
        continue  # the local runtime: its public surface is its command line (`shardline local`)
    assert module.__all__, f"{module_name}: empty __all__"
    for public in module.__all__:
        try:
            getattr(module, public)
        except ModuleNotFoundError as error:
            missing = (error.name or "").split(".")[0]
            cdk_module = missing in {"aws_cdk", "constructs", "cdk_nag", "jsii"}
            if module_name == "shardline.cdk" and not cdk_installed and cdk_module:
                continue  # the constructs need the `cdk` extra, and only they do
            if with_lambda or missing != "aws_lambda_powertools":
                raise
            needs_powertools.setdefault(module_name, []).append(public)
# The core never imports Powertools; only the Lambda adapters may (DESIGN.md).
assert set(needs_powertools) <= {"shardline.aws_lambda"}, needs_powertools

# A real round trip: the KPL codec, then a producer against an in-memory Kinesis.
from shardline.kinesis import UserRecord
from shardline.kpl import decode, encode, is_aggregated
from shardline.producer import Producer

records = [UserRecord("user-1", b"hello"), UserRecord("user-2", b"\x00world\xff")]
payload = encode(records)
assert is_aggregated(payload) and decode(payload) == records, decode(payload)


class FakeKinesis:
    """One open shard over the whole hash-key range; every entry succeeds."""

    shard_id = "shardId-000000000000"

    def __init__(self):
        self.requests = []

    def list_shards(self, **kwargs):
        return {
            "Shards": [
                {
                    "ShardId": self.shard_id,
                    "HashKeyRange": {"StartingHashKey": "0", "EndingHashKey": str(2**128 - 1)},
                    "SequenceNumberRange": {"StartingSequenceNumber": "49000000000000000000"},
                }
            ]
        }

    def put_records(self, **kwargs):
        self.requests.append(kwargs)
        entries = kwargs["Records"]
        return {
            "FailedRecordCount": 0,
            "Records": [
                {"ShardId": self.shard_id, "SequenceNumber": str(49000000000000000001 + index)}
                for index in range(len(entries))
            ],
        }


kinesis = FakeKinesis()
results = Producer(kinesis, "events").put_many(records, deadline=10.0)
assert [result.success for result in results] == [True, True], results
assert {result.shard_id for result in results} == {FakeKinesis.shard_id}, results
assert all(result.sequence_number for result in results), results
assert {request["StreamName"] for request in kinesis.requests} == {"events"}, kinesis.requests
received = []
for request in kinesis.requests:
    for entry in request["Records"]:
        data = entry["Data"]
        received.extend(decode(data) if is_aggregated(data) else [UserRecord(entry["PartitionKey"], data)])
assert sorted(received) == sorted(records), received

print(json.dumps({"version": shardline.__version__, "needs_powertools": needs_powertools}))
'''


def _files(folder: Path) -> set[str]:
    """The files of a source folder, relative to it (caches left out)."""
    return {
        path.relative_to(folder).as_posix()
        for path in folder.rglob("*")
        if path.is_file() and not any(part in _CACHES for part in path.parts) and path.suffix != ".pyc"
    }


def _library_files() -> set[str]:
    """The source package's files and the local runtime's (its dashboard's libraries included), as
    paths inside the wheel (`shardline/...`, `shardline/local/...`)."""
    local = {f"shardline/local/{name}" for name in _files(LOCAL)}
    return {f"shardline/{name}" for name in _files(LIBRARY)} | local


def _public_modules() -> list[str]:
    """shardline's public modules in the source tree: subpackages and top-level modules, no `_`."""
    modules = [
        f"shardline.{path.stem if path.suffix else path.name}"
        for path in LIBRARY.iterdir()
        if not path.name.startswith("_") and (path.suffix == ".py" or (path / "__init__.py").is_file())
    ]
    return sorted([*modules, "shardline.local"])  # the local runtime, from local/


def _source_version() -> str:
    tree = ast.parse((LIBRARY / "__init__.py").read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["__version__"]:
            assert isinstance(node.value, ast.Constant)
            return str(node.value.value)
    raise AssertionError("shardline/__init__.py sets no __version__")


def _clean_env() -> dict[str, str]:
    """The environment without anything that points Python at other code (PYTHONPATH, VIRTUAL_ENV)."""
    return {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("PYTHON") and key != "VIRTUAL_ENV"
    }


def _run(command: list[str], cwd: Path) -> str:
    started = time.monotonic()
    completed = subprocess.run(
        command,
        cwd=cwd,
        env=_clean_env(),
        capture_output=True,
        text=True,
        timeout=_SUBPROCESS_TIMEOUT,
        check=False,
    )
    print(f"{time.monotonic() - started:6.1f}s  {' '.join(command)}")
    if completed.returncode != 0:
        pytest.fail(
            f"{' '.join(command)} exited {completed.returncode}\n"
            f"--- stdout\n{completed.stdout}\n--- stderr\n{completed.stderr}"
        )
    return completed.stdout


def _copy_of_the_repository(tmp_path: Path) -> Path:
    copy = tmp_path / "repository"
    shutil.copytree(ROOT, copy, ignore=_NOT_COPIED, symlinks=True)
    return copy


def _clean_venv(tmp_path: Path) -> Path:
    """A fresh virtualenv (its own site-packages only); returns its python."""
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", str(venv)], cwd=tmp_path)
    return venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def _pip_install(python: Path, target: str, cwd: Path) -> None:
    # --no-compile: byte-compiling botocore and Powertools is most of an install's time, and no check
    # here depends on it (the interpreter compiles what the smoke script imports)
    pip = [str(python), "-m", "pip", "install", "--quiet", "--no-input", "--disable-pip-version-check"]
    pip.append("--no-compile")
    _run([*pip, target], cwd)


def _smoke(python: Path, tmp_path: Path, *, extras: bool) -> dict[str, object]:
    """Run SMOKE in the clean virtualenv from an empty folder; returns what it printed."""
    folder = tmp_path / "smoke"
    folder.mkdir()
    script = folder / "smoke.py"
    script.write_text(SMOKE, encoding="utf-8")
    options = json.dumps({"extras": extras, "modules": _public_modules()})
    output = _run([str(python), "-I", str(script), options], cwd=folder)
    return json.loads(output.strip().splitlines()[-1])


@pytest.mark.slow
def test_the_built_sdist_and_wheel_install_the_library_into_a_clean_virtualenv(tmp_path: Path) -> None:
    started = time.monotonic()
    repository = _copy_of_the_repository(tmp_path)
    dist = tmp_path / "dist"
    # sdist first, then the wheel built from the unpacked sdist (what `python -m build` does).
    _run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(dist), str(repository)], tmp_path)
    version = _source_version()
    sdists, wheels = sorted(dist.glob("*.tar.gz")), sorted(dist.glob("*.whl"))
    assert [p.name for p in sdists] == [f"shardline-{version}.tar.gz"], sdists
    assert [p.name for p in wheels] == [f"shardline-{version}-py3-none-any.whl"], wheels
    library = _library_files()
    assert "shardline/py.typed" in library, "layers/shardline/python/shardline/py.typed is missing"

    # The sdist: the package and the project files, nothing else (no node_modules, .venv, cdk.out).
    prefix = f"shardline-{version}/"
    with tarfile.open(sdists[0]) as sdist:
        members = {m.name.removeprefix(prefix) for m in sdist.getmembers() if m.isfile()}
    strays = {
        member
        for member in members
        if member not in _SDIST_PROJECT_FILES and not member.startswith(_SDIST_PACKAGE_DIRS)
    }
    assert not strays, f"the sdist holds files outside the package: {sorted(strays)}"
    in_source = {
        f"layers/shardline/python/{file}"
        if not file.startswith("shardline/local/")
        else file.removeprefix("shardline/")
        for file in library
    }
    missing = in_source - members
    assert not missing, f"the sdist lacks: {sorted(missing)}"
    assert {"pyproject.toml", "README.md", "LICENSE"} <= members

    # The wheel: exactly the source package's files, and the license in its dist-info.
    dist_info = f"shardline-{version}.dist-info/"
    with zipfile.ZipFile(wheels[0]) as wheel:
        names = set(wheel.namelist())
        packaged = {name for name in names if not name.startswith(dist_info)}
        assert packaged == library, (
            f"missing from the wheel: {sorted(library - packaged)}; "
            f"not in the source tree: {sorted(packaged - library)}"
        )
        assert wheel.read(f"{dist_info}licenses/LICENSE") == (ROOT / "LICENSE").read_bytes()
        metadata = email.parser.Parser().parsestr(wheel.read(f"{dist_info}METADATA").decode("utf-8"))
    assert metadata["Name"] == "shardline" and metadata["Version"] == version
    assert metadata["License-Expression"] == "Apache-2.0"
    assert metadata["Requires-Python"] == ">=3.11"
    assert "Typing :: Typed" in metadata.get_all("Classifier", [])

    python = _clean_venv(tmp_path)
    _pip_install(python, str(wheels[0]), cwd=tmp_path)
    report = _smoke(python, tmp_path, extras=False)
    assert report["version"] == version
    print(f"names that need the `lambda` extra: {report['needs_powertools']}")
    print(f"{time.monotonic() - started:6.1f}s  in all")


@pytest.mark.slow
def test_pip_install_from_the_repository_root_with_the_lambda_extra(tmp_path: Path) -> None:
    started = time.monotonic()
    repository = _copy_of_the_repository(tmp_path)
    python = _clean_venv(tmp_path)
    # Build isolation as users get it: pip installs the [build-system] requirements itself.
    _pip_install(python, ".[lambda]", cwd=repository)
    report = _smoke(python, tmp_path, extras=True)
    assert report == {"version": _source_version(), "needs_powertools": {}}
    print(f"{time.monotonic() - started:6.1f}s  in all")
