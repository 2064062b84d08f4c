"""Issue 42, 3: the dashboard's chart and markdown libraries are in the source tree, byte for byte the
versions package-lock.json pins (npm installs them into node_modules for `make setup`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from local.cloudwatch.monitor import ASSETS, VENDOR

ROOT = Path(__file__).resolve().parents[3]
#: Each vendored file -> (the npm package, its file in that package).
FROM_NPM = {
    "uPlot.iife.min.js": ("uplot", "dist/uPlot.iife.min.js"),
    "uPlot.min.css": ("uplot", "dist/uPlot.min.css"),
    "uPlot.LICENSE": ("uplot", "LICENSE"),
    "marked.umd.js": ("marked", "lib/marked.umd.js"),
    "marked.LICENSE": ("marked", "LICENSE"),
}


def test_the_vendor_folder_holds_exactly_the_libraries_and_their_licenses():
    assert {path.name for path in VENDOR.iterdir()} == set(FROM_NPM)


def test_the_page_is_served_its_libraries_from_the_vendor_folder():
    for name in ("uPlot.iife.min.js", "uPlot.min.css", "marked.umd.js"):
        assert ASSETS[name] == VENDOR / name and ASSETS[name].is_file()


@pytest.mark.parametrize("name", sorted(FROM_NPM))
def test_3_each_vendored_file_is_the_locked_versions(name):
    package, inside = FROM_NPM[name]
    installed = ROOT / "node_modules" / package
    assert installed.is_dir(), "node_modules is missing: `make setup` runs npm ci"
    locked = json.loads((ROOT / "package-lock.json").read_text())["packages"][f"node_modules/{package}"][
        "version"
    ]
    assert json.loads((installed / "package.json").read_text())["version"] == locked
    assert (VENDOR / name).read_bytes() == (installed / inside).read_bytes(), (
        f"{name} differs from {package} {locked}: copy it again from node_modules/{package}/{inside}"
    )
