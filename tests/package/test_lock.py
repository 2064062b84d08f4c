"""The Python dependencies are locked: every package pinned, every file of each pinned version hashed.

`requirements.txt` (runtime and CDK: what is deployed and synthesized) and `requirements-dev.txt`
(that plus the test tools) are the human-edited inputs, top-level pins only. `make lock` generates
`requirements.lock` and `requirements-dev.lock` from them: every transitive package `name==version`,
with the sha256 of each of that version's files, so one lock serves every platform and Python the
project supports. `make setup` installs the dev lock with `--require-hashes --no-deps`: a file whose
hash is not listed, or a package that is not listed, is refused.

Each check is a function returning its problems, run on the real files and on broken copies, so a
check that could not fail would be seen to.
"""

from __future__ import annotations

import importlib.metadata as metadata
import re
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest
from packaging.markers import Marker
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
RUNTIME_TXT = ROOT / "requirements.txt"
DEV_TXT = ROOT / "requirements-dev.txt"
RUNTIME_LOCK = ROOT / "requirements.lock"
DEV_LOCK = ROOT / "requirements-dev.lock"
MAKEFILE = ROOT / "Makefile"
PYPROJECT = ROOT / "pyproject.toml"

#: The installer itself comes with the venv (ensurepip of the interpreter), not from the lock.
_INSTALLER = {"pip"}

_PIN = re.compile(
    r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>[^\s;\\]+)"
    r"(?:\s*;\s*(?P<marker>[^\\]+?))?"
    r"(?P<hashes>(?:\s+--hash=\S+)*)\s*$"
)
_HASH = re.compile(r"^--hash=sha256:[0-9a-f]{64}$")


@dataclass(frozen=True)
class Pin:
    version: str
    marker: str | None
    hashes: frozenset[str]


def _logical_lines(text: str) -> list[tuple[int, str]]:
    """(first line number, line) with backslash continuations joined and comments dropped."""
    lines: list[tuple[int, str]] = []
    pending: list[str] = []
    start = 0
    for number, raw in enumerate(text.splitlines(), 1):
        stripped = raw.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if not pending:
            start = number
        continued = stripped.endswith("\\")
        pending.append(stripped.removesuffix("\\").strip())
        if not continued:
            lines.append((start, " ".join(part for part in pending if part)))
            pending = []
    if pending:
        lines.append((start, " ".join(pending)))
    return lines


def lock_problems(text: str) -> list[str]:
    """What makes `text` not a lock: a header that does not say how to regenerate it, or any line
    that is not `name==version [; marker]` with one or more `--hash=sha256:<64 hex>`."""
    problems: list[str] = []
    header = "\n".join(text.splitlines()[:5])
    if "make lock" not in header:
        problems.append("the header does not say how to regenerate the lock (make lock)")
    seen: set[str] = set()
    for number, line in _logical_lines(text):
        match = _PIN.match(line)
        if match is None:
            problems.append(f"line {number}: not a `name==version --hash=sha256:...` pin: {line[:80]!r}")
            continue
        name = canonicalize_name(match["name"])
        if name in seen:
            problems.append(f"line {number}: {name} is locked twice")
        seen.add(name)
        hashes = match["hashes"].split()
        if not hashes:
            problems.append(f"line {number}: {name}=={match['version']} has no hash")
        problems += [f"line {number}: {name}: not a sha256 hash: {h!r}" for h in hashes if not _HASH.match(h)]
    if not seen:
        problems.append("no package is locked")
    return problems


def parse_lock(text: str) -> dict[str, Pin]:
    """{canonical name: Pin} of a lock that `lock_problems` accepts."""
    pins: dict[str, Pin] = {}
    for _, line in _logical_lines(text):
        match = _PIN.match(line)
        assert match is not None, line
        pins[canonicalize_name(match["name"])] = Pin(
            match["version"], match["marker"], frozenset(match["hashes"].split())
        )
    return pins


def top_level(path: Path) -> list[Requirement]:
    """The requirements of a human-edited requirements file, following `-r` includes."""
    requirements: list[Requirement] = []
    for _, line in _logical_lines(path.read_text()):
        line = line.split(" #", 1)[0].strip()
        if line.startswith(("-r ", "--requirement ")):
            requirements += top_level(path.parent / line.split(None, 1)[1])
        else:
            requirements.append(Requirement(line))
    return requirements


def pin_problems(requirements: Iterable[Requirement], lock: Mapping[str, Pin]) -> list[str]:
    """Each top-level requirement must be an exact `==` pin, locked at that version."""
    problems = []
    for requirement in requirements:
        name = canonicalize_name(requirement.name)
        specs = list(requirement.specifier)
        if len(specs) != 1 or specs[0].operator != "==":
            problems.append(f"{requirement}: not pinned with ==")
        elif name not in lock:
            problems.append(f"{requirement}: not in the lock")
        elif Version(lock[name].version) != Version(specs[0].version):
            problems.append(f"{requirement}: the lock has {name}=={lock[name].version}")
    return problems


def subset_problems(runtime: Mapping[str, Pin], dev: Mapping[str, Pin]) -> list[str]:
    """Every runtime pin is in the dev lock at the same version, with the same files."""
    problems = []
    for name, pin in sorted(runtime.items()):
        if name not in dev:
            problems.append(f"{name}=={pin.version}: not in the dev lock")
        elif dev[name].version != pin.version:
            problems.append(f"{name}=={pin.version}: the dev lock has {dev[name].version}")
        elif dev[name].hashes != pin.hashes:
            problems.append(f"{name}=={pin.version}: other hashes in the dev lock")
    return problems


def dependency_closure(
    requirements: Iterable[Requirement], installed: Mapping[str, metadata.Distribution]
) -> set[str]:
    """Canonical names of the installed distributions the requirements pull in, extras followed."""
    wanted = [(canonicalize_name(r.name), frozenset(r.extras)) for r in requirements if _applies(r, "")]
    done: set[tuple[str, frozenset[str]]] = set()
    while wanted:
        name, extras = wanted.pop()
        if (name, extras) in done or name not in installed:
            continue
        done.add((name, extras))
        for spec in installed[name].requires or []:
            requirement = Requirement(spec)
            if any(_applies(requirement, extra) for extra in ("", *extras)):
                wanted.append((canonicalize_name(requirement.name), frozenset(requirement.extras)))
    return {name for name, _ in done}


def _applies(requirement: Requirement, extra: str) -> bool:
    return requirement.marker is None or requirement.marker.evaluate({"extra": extra})


def environment_problems(
    installed: Mapping[str, str], needed: Iterable[str], lock: Mapping[str, Pin]
) -> list[str]:
    """The project's installed dependencies (`needed`) are each locked at their installed version,
    and every lock entry for this platform is installed at its version (`installed`: name -> version)."""
    problems = []
    for name in sorted(set(needed)):
        if name not in lock:
            problems.append(f"{name}=={installed.get(name)} is installed but not locked")
        elif installed.get(name) is not None and Version(installed[name]) != Version(lock[name].version):
            problems.append(f"{name}=={installed[name]} is installed, the lock has {lock[name].version}")
    for name, pin in sorted(lock.items()):
        if pin.marker is not None and not Marker(pin.marker).evaluate():
            continue
        if name not in installed:
            problems.append(f"{name}=={pin.version} is locked but not installed")
        elif Version(installed[name]) != Version(pin.version):
            problems.append(f"{name}: the lock has {pin.version}, {installed[name]} is installed")
    return problems


def _recipe(makefile: str, target_prefix: str) -> tuple[str, list[str]]:
    """(prerequisites, recipe lines) of the first rule whose target starts with `target_prefix`."""
    lines = makefile.splitlines()
    for index, line in enumerate(lines):
        if line.startswith(target_prefix) and ":" in line and not line.startswith("\t"):
            recipe = []
            for body in lines[index + 1 :]:
                if not body.startswith("\t"):
                    break
                recipe.append(body.strip())
            return line.split(":", 1)[1], recipe
    return "", []


def makefile_problems(makefile: str) -> list[str]:
    """setup installs the dev lock with hashes required and nothing else; `make lock` makes the locks."""
    problems = []
    prerequisites, recipe = _recipe(makefile, "$(VENV)/.stamp:")
    if not recipe:
        problems.append("no $(VENV)/.stamp rule")
    for lock in ("requirements.lock", "requirements-dev.lock"):
        if lock not in prerequisites.split():
            problems.append(f"$(VENV)/.stamp does not depend on {lock}")
    installs = [line for line in recipe if "pip install" in line]
    if not installs:
        problems.append("$(VENV)/.stamp installs nothing with pip")
    for line in installs:
        words = line.split()
        if not ("--require-hashes" in words and "--no-deps" in words and "requirements-dev.lock" in words):
            problems.append(
                f"setup installs without --require-hashes --no-deps -r requirements-dev.lock: {line}"
            )
    _, lock_recipe = _recipe(makefile, "lock:")
    compile_lines = " ".join(lock_recipe)
    if "requirements-dev.lock" not in compile_lines or "requirements.lock" not in compile_lines:
        problems.append("make lock does not write both locks")
    if "--generate-hashes" not in makefile:
        problems.append("make lock does not generate hashes")
    if not re.search(r'@echo "make lock ', makefile):
        problems.append("make help does not describe make lock")
    return problems


def pyproject_problems(pyproject: Mapping[str, object], lock: Mapping[str, Pin]) -> list[str]:
    """The library's declared dependencies (and extras) admit the versions the lock installs."""
    project = pyproject["project"]
    assert isinstance(project, dict)
    declared = list(project.get("dependencies", []))
    for extra in project.get("optional-dependencies", {}).values():
        declared += extra
    problems = []
    for spec in declared:
        requirement = Requirement(spec)
        pin = lock.get(canonicalize_name(requirement.name))
        if pin is None:
            problems.append(f"pyproject's {spec}: not in the dev lock")
        elif not requirement.specifier.contains(pin.version, prereleases=True):
            problems.append(f"pyproject's {spec}: the lock has {pin.version}")
    return problems


# ---- on the real files ------------------------------------------------------------------------------

RUNTIME = parse_lock(RUNTIME_LOCK.read_text())
DEV = parse_lock(DEV_LOCK.read_text())


@pytest.mark.parametrize("lock", [RUNTIME_LOCK, DEV_LOCK], ids=lambda path: path.name)
def test_7_every_line_of_each_lock_is_a_pin_with_sha256_hashes(lock: Path) -> None:
    assert lock_problems(lock.read_text()) == []


def test_7_the_locks_hold_every_transitive_package() -> None:
    # The inputs name 5 and 17 packages; the locks hold what they pull in too.
    assert len(RUNTIME) > len(top_level(RUNTIME_TXT)) and len(DEV) > len(top_level(DEV_TXT)) + 50
    assert {"jsii", "s3transfer", "jmespath", "publication"} <= set(RUNTIME)
    assert {"setuptools", "wheel"} <= set(DEV)


@pytest.mark.parametrize(("inputs", "lock"), [(RUNTIME_TXT, RUNTIME), (DEV_TXT, DEV)], ids=["runtime", "dev"])
def test_7_every_top_level_pin_is_locked_at_its_version(inputs: Path, lock: dict[str, Pin]) -> None:
    assert pin_problems(top_level(inputs), lock) == []


def test_7_the_runtime_lock_is_within_the_dev_lock_at_the_same_versions() -> None:
    assert subset_problems(RUNTIME, DEV) == []


def test_7_the_running_environment_is_the_dev_lock() -> None:
    distributions = {canonicalize_name(d.metadata["Name"]): d for d in metadata.distributions()}
    installed = {name: d.version for name, d in distributions.items()}
    needed = dependency_closure(top_level(DEV_TXT), distributions)
    needed |= {name for name in installed if name in DEV}  # pip, setuptools, wheel: locked if in the lock
    needed -= {name for name in _INSTALLER if name not in DEV}
    assert len(needed) > 50
    assert environment_problems(installed, needed, DEV) == []


def test_7_setup_installs_the_dev_lock_with_hashes_required() -> None:
    assert makefile_problems(MAKEFILE.read_text()) == []


def test_7_the_locks_satisfy_the_dependencies_pyproject_declares() -> None:
    assert pyproject_problems(tomllib.loads(PYPROJECT.read_text()), DEV) == []


# ---- the checks fail on broken copies ---------------------------------------------------------------


def _first_entry(text: str) -> str:
    """The first pin of a lock with its hash lines, up to its `# via` comment."""
    match = re.search(r"^[A-Za-z0-9].*?(?=^\s*#|\Z)", text, re.MULTILINE | re.DOTALL)
    assert match is not None
    return match.group(0)


@pytest.mark.parametrize(
    ("breakage", "expected"),
    [
        (lambda text: re.sub(r" \\\n\s+--hash=sha256:[0-9a-f]{64}", "", text), "has no hash"),
        (lambda text: text.replace("==", ">=", 1), "not a `name==version"),
        (lambda text: text + "-e .\n", "not a `name==version"),
        (lambda text: text + "unpinned-package\n", "not a `name==version"),
        (lambda text: re.sub(r"(sha256:[0-9a-f]{63})[0-9a-f]", r"\1", text, count=1), "not a sha256"),
        (lambda text: text.replace("sha256:", "md5:", 1), "not a sha256"),
        (lambda text: text + _first_entry(text), "locked twice"),
        (lambda text: text.replace("make lock", "pip-compile"), "the header"),
        (lambda text: "# make lock\n", "no package is locked"),
    ],
    ids=["no-hashes", "not-pinned", "editable", "unpinned", "short-hash", "md5", "twice", "header", "empty"],
)
def test_7_the_lock_check_fails_on_a_broken_lock(breakage, expected: str) -> None:
    broken = breakage(RUNTIME_LOCK.read_text())
    problems = lock_problems(broken)
    assert any(expected in problem for problem in problems), problems


def test_7_the_checks_fail_on_a_broken_copy_of_the_inputs_and_locks(tmp_path: Path) -> None:
    # A top-level pin moved in requirements.txt but not in the lock, and one that is not a pin.
    (tmp_path / "requirements.txt").write_text(
        RUNTIME_TXT.read_text().replace("boto3==1.", "boto3==0.") + "ruff>=0.1\n"
    )
    (tmp_path / "requirements-dev.txt").write_text("-r requirements.txt\nnot-locked==1.0\n")
    problems = pin_problems(top_level(tmp_path / "requirements-dev.txt"), DEV)
    assert any(p.startswith("boto3==0.") and "the lock has boto3==1." in p for p in problems), problems
    assert any(p.startswith("ruff>=0.1: not pinned") for p in problems), problems
    assert any(p.startswith("not-locked==1.0: not in the lock") for p in problems), problems

    # The runtime lock with a package the dev lock lacks, one at another version, one with other files.
    broken_runtime = dict(RUNTIME)
    broken_runtime["only-runtime"] = Pin("1.0", None, frozenset({"--hash=sha256:" + "0" * 64}))
    broken_runtime["boto3"] = Pin("0.0.1", None, RUNTIME["boto3"].hashes)
    broken_runtime["jsii"] = Pin(RUNTIME["jsii"].version, None, frozenset({"--hash=sha256:" + "1" * 64}))
    problems = subset_problems(broken_runtime, DEV)
    assert len(problems) == 3 and {p.split("=")[0] for p in problems} == {"only-runtime", "boto3", "jsii"}


def test_7_the_environment_check_fails_on_an_environment_that_is_not_the_lock() -> None:
    installed = {
        name: pin.version for name, pin in DEV.items() if pin.marker is None or Marker(pin.marker).evaluate()
    }
    assert environment_problems(installed, installed, DEV) == []
    drifted = dict(installed, boto3="0.0.1", extra_dep="1.0")
    del drifted["jsii"]
    problems = environment_problems(drifted, drifted, DEV)
    assert "boto3==0.0.1 is installed, the lock has " + DEV["boto3"].version in problems, problems
    assert "extra_dep==1.0 is installed but not locked" in problems, problems
    assert f"jsii=={DEV['jsii'].version} is locked but not installed" in problems, problems


def test_7_the_makefile_check_fails_on_a_setup_that_installs_without_hashes() -> None:
    makefile = MAKEFILE.read_text()
    old = makefile.replace(
        "--require-hashes --no-deps -r requirements-dev.lock", "-r requirements-dev.txt"
    ).replace(
        "$(VENV)/.stamp: requirements.lock requirements-dev.lock", "$(VENV)/.stamp: requirements-dev.txt"
    )
    assert old != makefile
    problems = makefile_problems(old)
    assert any("installs without --require-hashes" in p for p in problems), problems
    assert any("does not depend on requirements.lock" in p for p in problems), problems
    assert makefile_problems("") != []


def test_7_the_pyproject_check_fails_on_a_range_the_lock_is_outside_of() -> None:
    pyproject = {"project": {"dependencies": ["boto3<1", "not-locked"], "optional-dependencies": {}}}
    problems = pyproject_problems(pyproject, DEV)
    assert problems == [
        f"pyproject's boto3<1: the lock has {DEV['boto3'].version}",
        "pyproject's not-locked: not in the dev lock",
    ]
