"""The test tree itself: pytest imports a test module outside a package by its basename, so two
`test_x.py` in such folders stop the whole run at collection (CI saw it twice)."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def test_test_modules_outside_packages_have_unique_basenames():
    where: dict[str, list[str]] = defaultdict(list)
    for module in TESTS.rglob("test_*.py"):
        if not (module.parent / "__init__.py").exists():
            where[module.name].append(str(module.relative_to(TESTS)))
    assert where, "no test module found outside a package: the check looks in the wrong place"
    clashes = {name: paths for name, paths in where.items() if len(paths) > 1}
    assert not clashes, f"rename one of each: {clashes}"
