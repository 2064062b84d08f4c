"""What pyproject.toml cannot say by itself: the local runtime, which lives at the repository's top level
(`local/`, where `python -m local` and the tests import it), ships inside the library as
`shardline.local` (never a top-level `local` in site-packages, a name too common to own).

Every subpackage is found here, so a new one cannot be left out of the wheel (tests/package checks
the wheel against the source folders). The dashboard's chart and markdown libraries (uPlot, marked:
MIT) are in the source tree, `local/cloudwatch/web/vendor/`, so every way of installing ships them
(a wheel, `pip install .`, `pip install git+...`); tests/local check them against package-lock.json's.
Everything else (metadata, extras, package data) is in pyproject.toml.
"""

from __future__ import annotations

from setuptools import find_packages, setup

LIBRARY = "layers/shardline/python"

setup(
    packages=[
        *find_packages(LIBRARY, include=["shardline", "shardline.*"]),
        "shardline.local",
        *(f"shardline.local.{name}" for name in find_packages("local")),
    ],
    package_dir={"": LIBRARY, "shardline.local": "local"},
)
