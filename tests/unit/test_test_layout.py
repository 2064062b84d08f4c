"""The test tree itself: every suite a package, what the suites share in tests/support, fixtures
from plugins (never imported to be shadowed), and no test importing another test or a conftest."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def test_every_folder_of_test_modules_is_a_package():
    """Test modules are imported by their dotted names (`tests.local.test_x`), so two suites may
    each have a `test_x.py` (outside packages, pytest imports by basename and stops on a clash)."""
    folders = {module.parent for module in TESTS.rglob("test_*.py")}
    assert TESTS / "unit" in folders, "the check looks in the wrong place"
    loose = sorted(str(folder.relative_to(TESTS.parent)) for folder in folders
                   if not (folder / "__init__.py").exists())  # fmt: skip
    assert not loose, f"add an __init__.py to: {loose}"


def _imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


def test_no_test_imports_a_test_module_or_a_conftest():
    """What tests share lives in tests/support (helpers, and the fixtures' plugins)."""
    offenders = {
        str(path.relative_to(TESTS)): sorted(
            name for name in _imported_modules(path)
            if name.startswith("tests.") and name.rsplit(".", 1)[-1].startswith(("test_", "conftest"))
        )
        for path in TESTS.rglob("*.py")
    }  # fmt: skip
    offenders = {path: names for path, names in offenders.items() if names}
    assert not offenders, offenders


def test_no_fixture_is_imported_to_be_shadowed():
    """Fixtures come from plugins named once in tests/conftest.py, never imported (F811)."""
    marked = [str(path.relative_to(TESTS)) for path in TESTS.rglob("*.py") if "F811" in path.read_text()
              and path.name != "test_test_layout.py"]  # fmt: skip
    assert not marked, marked


def _code_folder(test_folder: Path) -> Path | None:
    """The code folder a folder of tests mirrors: tests/<kind>/<path> -> the package at <path>, where
    tests/local/... mirrors local/..., and tests/unit/... mirrors the library, local/ or bench/."""
    kind, *path = test_folder.relative_to(TESTS).parts
    repo = TESTS.parent
    if not path or kind not in {"unit", "local"}:
        return None
    if kind == "local":
        return repo / "local" / Path(*path)
    if path[0] in {"local", "bench"}:
        return repo / Path(*path)
    return repo / "layers" / "shardline" / "python" / "shardline" / Path(*path)


def test_test_folders_mirror_the_code_folders():
    """Beneath a suite kind, a folder of tests is named after the package it tests (tests/local/lambda_/esm
    tests local/lambda_/esm), so a newcomer finds a module's tests by its path."""
    folders = {module.parent for module in TESTS.rglob("test_*.py")}
    assert TESTS / "local" / "lambda_" / "esm" in folders, "the check looks in the wrong place"
    unmatched = sorted(
        str(folder.relative_to(TESTS))
        for folder in folders
        if (code := _code_folder(folder)) is not None and not (code / "__init__.py").exists()
    )
    assert not unmatched, f"no package of that name to mirror: {unmatched}"
