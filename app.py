"""CDK entry point: the shardline stack from the `shardline` context of cdk.json, checked by cdk-nag.

Synthesizes offline: no lookups, no credentials (the environment stays account/region-agnostic).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

# The constructs are shardline's own (`shardline.cdk`); in this repository the library's source is
# the layer folder (no install needed to synthesize).
sys.path.insert(0, str(Path(__file__).resolve().parent / "layers" / "shardline" / "python"))
# jsii's kernel runs on the Node package-lock.json pins (a maintained LTS line, as the cdk CLI does
# under make), also when the app is run directly: jsii reads JSII_NODE when `aws_cdk` first loads.
_NODE = Path(__file__).resolve().parent / "node_modules" / ".bin" / "node"
if _NODE.exists():
    os.environ.setdefault("JSII_NODE", str(_NODE))

import aws_cdk as cdk  # noqa: E402 (after JSII_NODE: jsii starts its kernel on this import)
from cdk_nag import AwsSolutionsChecks  # noqa: E402

from shardline.cdk import PipelineStack, acknowledge, load_config  # noqa: E402

CDK_JSON = Path(__file__).resolve().parent / "cdk.json"


def build(context: dict[str, Any] | None = None, outdir: str | None = None) -> tuple[cdk.App, PipelineStack]:
    """The app and its stack. `context` replaces cdk.json's context (tests pass their own); run as
    `python app.py` (no CLI to pass the context), cdk.json is read directly."""
    app = cdk.App(context=context, outdir=outdir)
    if context is None and app.node.try_get_context("shardline") is None:
        app = cdk.App(context=json.loads(CDK_JSON.read_text())["context"], outdir=outdir)
    config = load_config(
        app.node.try_get_context("shardline"),
        stage=app.node.try_get_context("stage"),
        code_root=Path(__file__).resolve().parent,
    )
    stack = PipelineStack(
        app,
        config.prefix,
        config=config,
        # A stage that keeps its data (prod) cannot be deleted by a stray `cdk destroy`.
        termination_protection=config.retain_data,
        # Account and region of the credentials `cdk deploy` runs with; synth needs none.
        env=cdk.Environment(
            account=os.environ.get("CDK_DEFAULT_ACCOUNT"), region=os.environ.get("CDK_DEFAULT_REGION")
        ),
    )
    acknowledge(stack)
    cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    return app, stack


if __name__ == "__main__":
    build()[0].synth()
