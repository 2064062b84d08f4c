"""The CDK app as the infra tests read it: the default context and resource lookups in a template."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aws_cdk as cdk
from aws_cdk import Stack
from aws_cdk.assertions import Template
from cdk_nag import AwsSolutionsChecks

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


#: An existing stream of another account's team, by ARN (no stream resource may appear for it).
ORDERS_ARN = "arn:aws:kinesis:us-east-1:111122223333:stream/orders"


def alone(build: Callable[[Stack], object], *, nag: bool = True, outdir: Path | None = None) -> Template:
    """`build` run in a stack of its own in an app of its own, synthesized with cdk-nag's AwsSolutions
    checks: an unacknowledged error fails the synth, and any finding left in the validation report
    (a nag warning, CloudFormation's validation) fails here. The stack's template; the cloud assembly
    is kept in `outdir` when given (its staged assets), else thrown away."""
    with tempfile.TemporaryDirectory() as scratch:
        outdir = outdir or Path(scratch)
        app = cdk.App(outdir=str(outdir))
        stack = cdk.Stack(app, "Alone")
        build(stack)
        if nag:
            cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
        app.synth()
        report = Path(outdir) / "validation-report.json"
        findings = []
        if report.exists():
            for plugin in json.loads(report.read_text()).get("pluginReports", []):
                findings += [
                    f"{plugin.get('pluginName')}: {violation.get('ruleName')} {violation.get('description')} "
                    f"at {[c.get('constructPath') for c in violation.get('violatingConstructs', [])]}"
                    for violation in plugin.get("violations", [])
                ]
        assert findings == [], "\n".join(findings)
        return Template.from_stack(stack)


def statements(template: Template) -> list[dict[str, Any]]:
    """Every statement of every IAM policy of the template."""
    return [
        statement
        for policy in resources(template, "AWS::IAM::Policy").values()
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]
    ]


def actions_on(template: Template, resource: Any) -> set[str]:
    """The actions IAM policies allow on `resource` (a template value, e.g. {"Ref": ...} or an ARN),
    alone or beside others, directly or as `<resource>/index/*`-style joins that contain it."""
    found: set[str] = set()
    for statement in statements(template):
        if statement.get("Effect") != "Allow":
            continue
        targets = (
            statement["Resource"] if isinstance(statement["Resource"], list) else [statement["Resource"]]
        )
        if any(target == resource for target in targets):
            action = statement["Action"]
            found |= set(action if isinstance(action, list) else [action])
    return found
