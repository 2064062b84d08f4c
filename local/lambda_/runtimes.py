"""What a Lambda Python runtime gives a function, on this machine: its interpreter, the packages the
runtime ships, and the public layers a template names.

    packaging = packaging_for(function)        # its interpreter, runtime packages and layers, or why not
    public_layer_dir("/aws/service/powertools/python/arm64/python3.12/3.37.0")  # a Powertools layer
    python -m local.lambda_.runtimes install   # what `make setup` runs: the sites and layers, pinned
    python -m local.lambda_.runtimes pins      # rewrite pins.txt from requirements-dev.lock

Deployed, a function imports from its code, its layers (`/opt/python`) and the runtime's own
packages — boto3 and its dependencies — never from a developer's virtualenv. Locally each runtime
gets a site folder holding exactly those packages (`<cache>/<runtime>/site`), and each public
Powertools layer a folder of its own (`<cache>/layers/powertools-<version>/python`), both installed
with every file's hash checked: in this repository from requirements-dev.lock (the versions the
tests run) into `.local/lambda`; installed, from `pins.txt` (the same entries of the lock, shipped
with the package; `python -m local.lambda_.runtimes pins` rewrites it, a test keeps it equal) into
the user's cache (`local.home.cache_dir`), on the first `up`.
AWS updates the runtime's boto3 over time and per Region (the Lambda guide, "Runtime-included SDK
versions", says to print it from a function); the local one is the lock's.

The interpreter is the runtime's minor version (`python3.12` on the PATH, a pyenv install, or
`SHARDLINE_PYTHON_3_12`). Without one, functions run on this interpreter and `packaging_for` says
so in `note`, which `up` prints and `status` shows.
"""

from __future__ import annotations

import functools
import hashlib
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from shardline.cdk._interpreters import find_python

from .. import home
from ..app.model import Function

__all__ = [
    "RUNTIMES",
    "Packaging",
    "find_interpreter",
    "install",
    "packaging_for",
    "powertools_layer_dir",
    "public_layer_dir",
    "site_dir",
]

ROOT = home.cache_dir()
#: How the runtime's packages get installed, for the notes that say they are not.
INSTALL_HINT = "make setup" if home.IN_REPOSITORY else "`shardline local up` installs them"
#: The pins the installed runtime installs from: the lock's entries for the packages below.
PINS = Path(__file__).with_name("pins.txt")
LOCK = home.REPOSITORY / "requirements-dev.lock" if home.REPOSITORY is not None else PINS
#: The runtimes the local runtime runs (the app's functions declare one of them).
RUNTIMES = ("python3.12",)
#: What the Lambda Python runtime ships besides the standard library.
RUNTIME_PACKAGES = ("boto3", "botocore", "s3transfer", "jmespath", "python-dateutil", "six", "urllib3")
#: What the public Powertools layer holds besides the runtime's packages: the core, its dependencies,
#: and the extras the layer ships (the tracer's X-Ray SDK, the parser's pydantic).
POWERTOOLS_PACKAGES = (
    "aws-lambda-powertools", "jmespath", "typing-extensions", "aws-xray-sdk", "wrapt",
    "pydantic", "pydantic-core", "annotated-types", "typing-inspection",
)  # fmt: skip
_POWERTOOLS_PARAMETER = re.compile(
    r"^/aws/service/powertools/python/[^/]+/(?P<runtime>[^/]+)/(?P<version>[^/]+)$"
)
_POWERTOOLS_ARN = re.compile(r":layer:AWSLambdaPowertoolsPythonV\d+[^:]*:\d+$")


@dataclass(frozen=True)
class Packaging:
    """How one function runs here: the interpreter, the runtime's packages, its public layers, and
    what differs from its deployed package."""

    runtime: str
    interpreter: str
    version: str  # the interpreter's, e.g. "3.12.1"
    site: Path | None  # the runtime's packages; None: not installed (`make setup`)
    public_layers: tuple[Path, ...] = ()  # local folders (holding `python/`) for the public layers
    note: str | None = None  # why this is not as deployed, for `up`, the function's log and `status`

    @property
    def as_deployed(self) -> bool:
        return self.note is None


def find_interpreter(runtime: str) -> str | None:
    """An interpreter of `runtime`'s Python version (`python3.12`) on this machine, or None."""
    version = runtime.removeprefix("python")
    return find_python(version, f"SHARDLINE_PYTHON_{version.replace('.', '_')}")


def site_dir(runtime: str) -> Path:
    return ROOT / runtime / "site"


def packaging_for(function: Function) -> Packaging:
    """How `function` runs here, from its runtime and public layers."""
    runtime = function.runtime
    interpreter = _interpreter(runtime)
    site = site_dir(runtime) if _installed(site_dir(runtime)) else None
    notes = []
    if interpreter is None:
        interpreter = sys.executable
        notes.append(
            f"no {runtime} interpreter on this machine (PATH, pyenv, SHARDLINE_PYTHON_"
            f"{runtime.removeprefix('python').replace('.', '_')}): it runs on Python "
            f"{sys.version_info[0]}.{sys.version_info[1]}, where code for {runtime} may behave differently"
        )
    if site is None:
        notes.append(
            f"the {runtime} runtime's packages are not installed ({INSTALL_HINT}): its imports are unchecked"
        )
    layers = []
    for layer in function.public_layers:
        folder = public_layer_dir(layer)
        if folder is None:
            notes.append(f"layer {layer} has no local copy: what the function imports from it is missing")
        else:
            layers.append(folder)
    return Packaging(
        runtime, interpreter, _version(interpreter), site, tuple(layers), "; ".join(notes) or None
    )


@functools.cache
def _interpreter(runtime: str) -> str | None:
    return find_interpreter(runtime)


@functools.cache
def _version(interpreter: str) -> str:
    return subprocess.run(
        [interpreter, "-I", "-S", "-c", "import platform; print(platform.python_version())"],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    ).stdout.strip()


def powertools_layer_dir() -> Path | None:
    """The installed Powertools layer of the lock's version (holding its packages), or None."""
    folder = ROOT / "layers" / f"powertools-{_pinned_version('aws-lambda-powertools')}" / "python"
    return folder if _installed(folder) else None


def public_layer_dir(layer: str) -> Path | None:
    """The local folder standing for a public layer the template names (by SSM parameter or ARN),
    holding `python/`; None for a layer the runtime does not know or has not installed."""
    match = _POWERTOOLS_PARAMETER.match(layer)
    if match:
        version = match["version"]
    elif _POWERTOOLS_ARN.search(layer):
        version = _pinned_version("aws-lambda-powertools")  # an ARN names no version we can read
    else:
        return None
    folder = ROOT / "layers" / f"powertools-{version}"
    return folder if _installed(folder / "python") else None


def install(runtimes: tuple[str, ...] = RUNTIMES) -> list[Path]:
    """Install each runtime's packages and the pinned Powertools layer (skipped when the lock has not
    changed since); the folders installed."""
    powertools = ROOT / "layers" / f"powertools-{_pinned_version('aws-lambda-powertools')}" / "python"
    targets: list[tuple[Path, str, tuple[str, ...]]] = [
        (site_dir(runtime), runtime, RUNTIME_PACKAGES) for runtime in runtimes
    ]
    targets.append((powertools, RUNTIMES[0], POWERTOOLS_PACKAGES))
    done = []
    for folder, runtime, packages in targets:
        requirements = _pinned(packages)
        stamp = hashlib.sha256(requirements.encode()).hexdigest()
        if (folder / ".stamp").exists() and (folder / ".stamp").read_text() == stamp:
            continue
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        with tempfile.NamedTemporaryFile("w", suffix=".txt") as pins:
            pins.write(requirements)
            pins.flush()
            # Pure-Python wheels for the runtime's version, whatever this interpreter is; every
            # file's hash checked against the lock, nothing unlisted fetched.
            subprocess.run(
                [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                 "--target", str(folder), "--python-version", runtime.removeprefix("python"),
                 "--only-binary=:all:", "--implementation", "cp", "--no-deps", "--require-hashes",
                 "--no-compile", "-r", pins.name],
                check=True,
            )  # fmt: skip
        # Bytecode for the runtime's own Python: the folders are read-only to a function, so
        # without it every cold start would compile botocore again.
        interpreter = find_interpreter(runtime)
        if interpreter is not None:
            subprocess.run([interpreter, "-I", "-S", "-m", "compileall", "-q", str(folder)], check=True)
        (folder / ".stamp").write_text(stamp)
        done.append(folder)
    return done


def _installed(folder: Path) -> bool:
    return (folder / ".stamp").exists()


@functools.cache  # the lock does not change while a process runs: read it once
def _lock_entries() -> dict[str, str]:
    """Package name -> its entry in the lock: `name==version` and its `--hash` lines."""
    entries: dict[str, list[str]] = {}
    name = None
    for line in LOCK.read_text().splitlines():
        if re.match(r"^[A-Za-z0-9]", line):
            name = re.split(r"[=<>;\[ ]", line, maxsplit=1)[0].lower()
            entries[name] = [line]
        elif name is not None and line.strip().startswith("--hash"):
            entries[name].append(line)
    return {key: "\n".join(lines) for key, lines in entries.items()}


def _pinned(packages: tuple[str, ...]) -> str:
    entries = _lock_entries()
    missing = [name for name in packages if name not in entries]
    if missing:
        raise SystemExit(
            f"{LOCK.name} pins no {', '.join(missing)}: add them to requirements-dev.txt, make lock"
        )
    return "\n".join(entries[name] for name in packages) + "\n"


def _pinned_version(package: str) -> str:
    return _lock_entries()[package].split("==", 1)[1].split()[0].rstrip("\\").strip()


def pins_text() -> str:
    """What `pins.txt` holds: the lock's entries (hashes included) for every package installed here."""
    packages = tuple(dict.fromkeys(RUNTIME_PACKAGES + POWERTOOLS_PACKAGES))
    return "# Written by `python -m local.lambda_.runtimes pins` from requirements-dev.lock: the pins an\n" \
        "# installed runtime installs the Lambda runtime's packages and the Powertools layer from.\n" \
        + _pinned(packages)  # fmt: skip


def missing(runtimes: tuple[str, ...] = RUNTIMES) -> list[Path]:
    """The folders `install()` would write (the runtime sites and the pinned Powertools layer)."""
    powertools = ROOT / "layers" / f"powertools-{_pinned_version('aws-lambda-powertools')}" / "python"
    return [folder for folder in [*map(site_dir, runtimes), powertools] if not _installed(folder)]


if __name__ == "__main__":
    if sys.argv[1:] == ["pins"]:
        PINS.write_text(pins_text())
        print(f"wrote {PINS}")
    elif sys.argv[1:] == ["install"]:
        for folder in install():
            print(f"installed {folder}")
    else:
        raise SystemExit("usage: python -m local.lambda_.runtimes install | pins")
