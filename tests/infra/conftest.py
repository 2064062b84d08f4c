"""Shared by the infra tests: the default context, the synthesized template, resource lookups."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from aws_cdk.assertions import Template

from app import CDK_JSON, build

os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")


def default_context() -> dict:
    return json.loads(CDK_JSON.read_text())["context"]


@pytest.fixture(scope="session")
def synthesized(tmp_path_factory) -> tuple[Template, Path]:
    outdir = tmp_path_factory.mktemp("cdk.out")
    app, stack = build(default_context(), outdir=str(outdir))
    app.synth()  # raises if cdk-nag reports an unacknowledged finding
    return Template.from_stack(stack), outdir / f"{stack.stack_name}.template.json"


@pytest.fixture(scope="session")
def template(synthesized) -> Template:
    return synthesized[0]


def resources(template: Template, kind: str) -> dict:
    return template.find_resources(kind)
