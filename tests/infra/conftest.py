"""The infra tests' fixtures: the default app synthesized once, and its template."""

from __future__ import annotations

from pathlib import Path

import pytest
from aws_cdk.assertions import Template

from app import build
from tests.support.cdk import default_context


@pytest.fixture(scope="session")
def synthesized(tmp_path_factory) -> tuple[Template, Path]:
    outdir = tmp_path_factory.mktemp("cdk.out")
    app, stack = build(default_context(), outdir=str(outdir))
    app.synth()  # raises if cdk-nag reports an unacknowledged finding
    return Template.from_stack(stack), outdir / f"{stack.stack_name}.template.json"


@pytest.fixture(scope="session")
def template(synthesized) -> Template:
    return synthesized[0]
