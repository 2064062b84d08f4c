"""The Lambda layers: shardline's own (a plain folder, no Docker) and the public Powertools one."""

from __future__ import annotations

from pathlib import Path

from aws_cdk import Aws
from aws_cdk import aws_lambda as lambda_
from constructs import Construct

RUNTIME = lambda_.Runtime.PYTHON_3_13
ARCHITECTURE = lambda_.Architecture.ARM_64
ROOT = Path(__file__).resolve().parent.parent
POWERTOOLS_ACCOUNT = "017000801446"  # where AWS publishes the Powertools layers


class Layers(Construct):
    """`shardline` (layers/shardline) and `powertools` (by ARN, matching runtime and architecture)."""

    def __init__(self, scope: Construct, construct_id: str, *, powertools_version: int) -> None:
        super().__init__(scope, construct_id)
        self.shardline = lambda_.LayerVersion(
            self,
            "Shardline",
            code=lambda_.Code.from_asset(str(ROOT / "layers" / "shardline"), exclude=["**/__pycache__"]),
            compatible_runtimes=[RUNTIME],
            compatible_architectures=[ARCHITECTURE],
            description="shardline: KPL aggregation, producer and consumer groups",
        )
        python = RUNTIME.name.replace(".", "")  # python3.13 -> python313
        arn = (
            f"arn:aws:lambda:{Aws.REGION}:{POWERTOOLS_ACCOUNT}:layer:"
            f"AWSLambdaPowertoolsPythonV3-{python}-arm64:{powertools_version}"
        )
        self.powertools = lambda_.LayerVersion.from_layer_version_arn(self, "Powertools", arn)
