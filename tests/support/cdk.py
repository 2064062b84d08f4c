"""The CDK app as the infra tests read it: the default context and resource lookups in a template."""

from __future__ import annotations

import json
from typing import Any

from aws_cdk.assertions import Template

from app import CDK_JSON


def default_context() -> dict[str, Any]:
    """cdk.json's context, fresh (a test may change its copy)."""
    context: dict[str, Any] = json.loads(CDK_JSON.read_text())["context"]
    return context


def resources(template: Template, kind: str) -> dict[str, Any]:
    """The template's resources of type `kind`, by logical id."""
    found: dict[str, Any] = template.find_resources(kind)
    return found


def placeholders(value: Any) -> str:
    """A template value as its string, with every CDK token in it (Ref, Fn::GetAtt, ...) a placeholder;
    an Fn::Join keeps its literal parts (SHARDLINE_SINKS is JSON around its tables' names)."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and "Fn::Join" in value:
        separator, parts = value["Fn::Join"]
        return str(separator).join(placeholders(part) for part in parts)
    return "token-resolved-at-deploy-time"
