"""The feature flags `shardline.cdk` pins on its stack are this repository's cdk.json's: what a team's
app synthesizes is what this app proves, whatever flags the team's cdk.json holds."""

from __future__ import annotations

import json
from pathlib import Path

from shardline.cdk._feature_flags import FEATURE_FLAGS

ROOT = Path(__file__).resolve().parents[2]


def test_the_pinned_flags_are_cdk_jsons():
    context = json.loads((ROOT / "cdk.json").read_text())["context"]
    assert {key: value for key, value in context.items() if key != "shardline"} == FEATURE_FLAGS
