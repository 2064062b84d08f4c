"""The shardline a worker image installs: a wheel of the package this app imports, built at synth.

Wherever shardline is installed (a wheel in a team's venv, `pip install .`, this repository's
source), its folder holds the code a worker runs; synth packs it into a wheel the image installs
with `pip install --require-hashes --no-deps --no-index`, pinned by its sha256 (`lock_text`). No
package source, build backend or repository layout is needed, and the image runs the very code the
app was synthesized with.

The wheel is deterministic, so an unchanged app stages a byte-identical build context, the same
asset hash, and its workers do not roll on every synth: the files sorted, every entry dated
1980-01-01 with mode 0644, stored uncompressed (deflate's output depends on the zlib of the machine;
the Docker context is compressed in transit anyway). Only the package's `*.py` files and `py.typed`
are packed — the same files from a source tree and from an install — less what never runs in a
worker: the constructs (`shardline.cdk`: an edit to them does not roll the workers) and the local
runtime (`shardline.local`).

Its dist-info is what pip needs to install and later uninstall it: METADATA (name, version),
WHEEL (pure Python, any platform), entry_points.txt (the `shardline` command, as pyproject.toml
declares it) and RECORD (each file's hash and size). Dependencies are not declared: the image
installs them from its own lock, hash-checked (`--no-deps`).
"""

from __future__ import annotations

import base64
import hashlib
import re
import zipfile
from pathlib import Path

__all__ = ["LEFT_OUT", "PACKAGE", "build_wheel", "lock_text", "package_files", "wheel_name"]

#: The shardline package this process imports (this file is `shardline/cdk/_worker_wheel.py`).
PACKAGE = Path(__file__).resolve().parents[1]
#: Its subpackages a worker never runs.
LEFT_OUT = ("cdk", "local")
#: The files packed: the sources and the typing marker (never bytecode, caches or stray files).
PACKED = ("*.py", "py.typed")
#: Every entry's date: the earliest a zip can hold (as reproducible wheel builds use).
EPOCH = (1980, 1, 1, 0, 0, 0)
FILE_MODE = 0o100644 << 16
#: The console script pyproject.toml declares (`[project.scripts]`).
ENTRY_POINTS = "[console_scripts]\nshardline = shardline._cli:main\n"
WHEEL = "Wheel-Version: 1.0\nGenerator: shardline.cdk\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
SUMMARY = "The Kinesis Producer Library and Kinesis Client Library, for Python and AWS Lambda."
VERSION = re.compile(r"""^__version__\s*=\s*["']([^"']+)["']""", re.MULTILINE)


def package_files(package: Path = PACKAGE) -> list[tuple[str, bytes]]:
    """The packed files of `package`, sorted: (path inside the wheel, content)."""
    found = []
    for path in package.rglob("*"):
        relative = path.relative_to(package)
        if (
            path.is_file()
            and relative.parts[0] not in LEFT_OUT
            and "__pycache__" not in relative.parts
            and any(path.match(pattern) for pattern in PACKED)
        ):
            found.append((f"shardline/{relative.as_posix()}", path.read_bytes()))
    return sorted(found)


def version_of(package: Path = PACKAGE) -> str:
    """`__version__` of the package's `__init__.py` (read, not imported: any folder may be packed)."""
    match = VERSION.search((package / "__init__.py").read_text())
    if match is None:
        raise ValueError(f"{package / '__init__.py'}: no __version__ = '...' line")
    return match.group(1)


def wheel_name(version: str) -> str:
    """The wheel's file name (PEP 427: `-` in a component is escaped as `_`)."""
    return f"shardline-{version.replace('-', '_')}-py3-none-any.whl"


def _digest(content: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(content).digest()).rstrip(b"=").decode()


def build_wheel(folder: Path, package: Path = PACKAGE) -> Path:
    """The wheel of `package` written into `folder` (created if missing); its path."""
    version = version_of(package)
    dist_info = f"shardline-{version.replace('-', '_')}.dist-info"
    metadata = f"Metadata-Version: 2.1\nName: shardline\nVersion: {version}\nSummary: {SUMMARY}\n"
    entries = [
        *package_files(package),
        (f"{dist_info}/METADATA", metadata.encode()),
        (f"{dist_info}/WHEEL", WHEEL.encode()),
        (f"{dist_info}/entry_points.txt", ENTRY_POINTS.encode()),
        (f"{dist_info}/top_level.txt", b"shardline\n"),
    ]
    record = "".join(f"{name},sha256={_digest(content)},{len(content)}\n" for name, content in entries)
    entries.append((f"{dist_info}/RECORD", (record + f"{dist_info}/RECORD,,\n").encode()))
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / wheel_name(version)
    with zipfile.ZipFile(target, "w", compression=zipfile.ZIP_STORED) as archive:
        for name, content in sorted(entries):
            info = zipfile.ZipInfo(name, date_time=EPOCH)
            info.external_attr = FILE_MODE
            info.create_system = 3  # unix: the mode above is read as one
            archive.writestr(info, content)
    return target


def lock_text(wheel: Path) -> str:
    """The requirements file pinning `wheel` (beside it) by its sha256: what `pip install
    --require-hashes --no-deps --no-index -r` reads, from the folder holding both."""
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    return (
        "# Staged by shardline.cdk at synth: the wheel of the shardline package the app imported,\n"
        "# beside this file, pinned by its sha256; `pip install --require-hashes --no-deps --no-index -r`\n"
        "# reads it.\n"
        f"./{wheel.name} \\\n    --hash=sha256:{digest}\n"
    )
