"""shardline's Lambda layer is built from the installed package, without its CDK constructs, and the
Powertools layer it deploys is the version the repository pins and tests with."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from shardline.cdk import POWERTOOLS_VERSION
from shardline.cdk._layers import build_layer

ROOT = Path(__file__).resolve().parents[2]


def test_the_layer_holds_the_library_and_not_its_constructs():
    folder, _ = build_layer()
    try:
        shipped = {path.relative_to(folder).as_posix() for path in folder.rglob("*.py")}
    finally:
        shutil.rmtree(folder)  # the build folder is the caller's to remove (`Layers` does once staged)
    assert "python/shardline/producer/_producer.py" in shipped
    assert "python/shardline/__init__.py" in shipped
    assert not any(name.startswith("python/shardline/cdk/") for name in shipped), (
        "constructs in a Lambda layer"
    )


def test_the_powertools_layer_is_the_pinned_version():
    pin = re.search(r"^aws-lambda-powertools==(\S+)$", (ROOT / "requirements-dev.txt").read_text(), re.M)
    assert pin is not None and pin.group(1) == POWERTOOLS_VERSION
