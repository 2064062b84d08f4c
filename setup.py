"""What pyproject.toml cannot say by itself: the local runtime, which lives at the repository's top level
(`local/`, where `python -m local` and the tests import it), ships inside the library as
`shardline.local` (never a top-level `local` in site-packages, a name too common to own).

Every subpackage is found here, so a new one cannot be left out of the wheel (tests/package checks
the wheel against the source folders). The dashboard's chart and markdown libraries (uPlot, marked:
MIT, pinned by package-lock.json) are copied from `node_modules` into the package as
`shardline/local/cloudwatch/web/vendor/`, for the sdist and the wheel: an installed runtime has no
`node_modules`. Everything else (metadata, extras, package data) is in pyproject.toml.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import find_packages, setup
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist

LIBRARY = "layers/shardline/python"
HERE = Path(__file__).resolve().parent
#: The dashboard's libraries: where npm puts them -> their name in `web/vendor/`.
VENDORED = {
    "node_modules/uplot/dist/uPlot.iife.min.js": "uPlot.iife.min.js",
    "node_modules/uplot/dist/uPlot.min.css": "uPlot.min.css",
    "node_modules/uplot/LICENSE": "uPlot.LICENSE",
    "node_modules/marked/lib/marked.umd.js": "marked.umd.js",
    "node_modules/marked/LICENSE": "marked.LICENSE",
}
VENDOR = Path("local") / "cloudwatch" / "web" / "vendor"  # in the source tree (an sdist's) ...
VENDOR_IN_PACKAGE = Path("shardline") / "local" / "cloudwatch" / "web" / "vendor"  # ... and in the wheel


def _copy_vendored(target: Path) -> None:
    """The dashboard's libraries into `target`: from node_modules, or from an sdist's vendor folder."""
    target.mkdir(parents=True, exist_ok=True)
    for source, name in VENDORED.items():
        found = HERE / source if (HERE / source).is_file() else HERE / VENDOR / name
        if found.is_file():
            shutil.copyfile(found, target / name)


class BuildPy(build_py):
    def run(self) -> None:
        super().run()
        _copy_vendored(Path(self.build_lib) / VENDOR_IN_PACKAGE)


class Sdist(sdist):
    def make_release_tree(self, base_dir: str, files: list[str]) -> None:
        super().make_release_tree(base_dir, files)
        _copy_vendored(Path(base_dir) / VENDOR)


setup(
    packages=[
        *find_packages(LIBRARY, include=["shardline", "shardline.*"]),
        "shardline.local",
        *(f"shardline.local.{name}" for name in find_packages("local")),
    ],
    package_dir={"": LIBRARY, "shardline.local": "local"},
    cmdclass={"build_py": BuildPy, "sdist": Sdist},
)
