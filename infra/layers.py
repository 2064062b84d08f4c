"""The Lambda layers: shardline's own (a plain folder, no Docker) and the public Powertools one.

The Powertools layer is the version the tests ran against: its version is read from the pin in
requirements-dev.txt, and its ARN from the SSM parameter AWS publishes for that version, runtime
and architecture (`/aws/service/powertools/python/<arch>/<runtime>/<version>`), resolved by
CloudFormation at deploy time — synth stays offline and no region or partition is spelled here.
"""

from __future__ import annotations

import re
from pathlib import Path

from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_ssm as ssm
from constructs import Construct

RUNTIME = lambda_.Runtime.PYTHON_3_13
ARCHITECTURE = lambda_.Architecture.ARM_64
ROOT = Path(__file__).resolve().parent.parent
PINS = ROOT / "requirements-dev.txt"


def pinned_powertools_version(pins: Path = PINS) -> str:
    """The aws-lambda-powertools version the tests run (`==` in requirements-dev.txt)."""
    found = re.search(
        r"^aws-lambda-powertools(?:\[[^\]]*\])?==([0-9][0-9A-Za-z.]*)\s*$", pins.read_text(), re.M
    )
    if found is None:
        raise ValueError(f"{pins.name}: no 'aws-lambda-powertools==<version>' pin to deploy the same layer")
    return found.group(1)


def powertools_parameter(version: str) -> str:
    """The public SSM parameter holding the layer ARN of Powertools `version` for our runtime."""
    return f"/aws/service/powertools/python/{ARCHITECTURE.name}/{RUNTIME.name}/{version}"


class Layers(Construct):
    """`shardline` (layers/shardline) and `powertools` (the pinned version, by its SSM parameter)."""

    def __init__(self, scope: Construct, construct_id: str) -> None:
        super().__init__(scope, construct_id)
        self.shardline = lambda_.LayerVersion(
            self,
            "Shardline",
            code=lambda_.Code.from_asset(str(ROOT / "layers" / "shardline"), exclude=["**/__pycache__"]),
            compatible_runtimes=[RUNTIME],
            compatible_architectures=[ARCHITECTURE],
            description="shardline: KPL aggregation, producer and consumer groups",
        )
        self.powertools_version = pinned_powertools_version()
        arn = ssm.StringParameter.value_for_string_parameter(
            self, powertools_parameter(self.powertools_version)
        )
        self.powertools = lambda_.LayerVersion.from_layer_version_arn(self, "Powertools", arn)
