"""The Lambda layers: shardline's own (a plain folder, no Docker) and the public Powertools one.

shardline's layer ships bytecode for the runtime's Python: /opt is read-only in Lambda, so a layer
without `.pyc` files compiles every module on every cold start. The package's own files (`*.py`
and `py.typed`, nothing else the folder may hold; `shardline.cdk` and the worker driver left out)
are copied to a private build folder (`shardline.cdk._staging`: `mkdtemp`'s, 0700, removed once
staged) and compiled there by
an interpreter of the runtime's version (`SHARDLINE_LAYER_PYTHON`, `python3.12` on the
PATH, or a pyenv install), as unchecked-hash `.pyc` files, which Python uses without comparing
timestamps that the zip does not keep, naming their source where Lambda unpacks it
(`/opt/python/...`, also what a traceback shows) rather than the build folder: the same commit
builds the same bytes, so the same asset hash. Without such an interpreter the layer ships sources
only, and synth says so.

The Powertools layer is the version the tests ran against (`POWERTOOLS_VERSION`, checked against
the repository's pin), and its ARN the SSM parameter AWS publishes for that version, runtime
and architecture (`/aws/service/powertools/python/<arch>/<runtime>/<version>`), resolved by
CloudFormation at deploy time — synth stays offline and no region or partition is spelled here.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from aws_cdk import Annotations
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_ssm as ssm
from constructs import Construct

from shardline.cdk._feature_flags import pin_feature_flags
from shardline.cdk._interpreters import find_python
from shardline.cdk._signatures import shows_its_props
from shardline.cdk._staging import private_build_folder, release_build_folder

RUNTIME = lambda_.Runtime.PYTHON_3_12
ARCHITECTURE = lambda_.Architecture.ARM_64
#: The worker driver's modules (`shardline worker`, `shardline.consumer.Worker`): not in the layer.
WORKER_DRIVER = frozenset(
    {
        "_worker_command.py",
        "consumer/_worker.py",
        "consumer/_worker_leases.py",
        "consumer/_lease_balance.py",
        "consumer/_shard_reader.py",
        "consumer/_shard_subscriber.py",
    }
)
#: The shardline package the layer ships: this one, wherever it is installed (its `cdk` subpackage
#: stays out: it is for synthesizing, never for a function).
PACKAGE = Path(__file__).resolve().parents[1]
#: The aws-lambda-powertools version shardline is tested with, whose public layer its functions get
#: (tests/package checks it against the repository's pin).
POWERTOOLS_VERSION = "3.37.0"
#: Where Lambda unpacks a layer's `python/` folder: the path compiled into the layer's bytecode.
LAYER_MOUNT = "/opt/python"
#: The files of the package the layer ships (sources and its typing marker).
LAYER_FILES = ("*.py", "py.typed")


def runtime_python() -> str | None:
    """An interpreter of the runtime's Python version on this machine (`SHARDLINE_LAYER_PYTHON`
    first), or None."""
    return find_python(RUNTIME.name.removeprefix("python"), "SHARDLINE_LAYER_PYTHON")


def build_layer() -> tuple[Path, bool]:
    """The layer folder to upload, compiled for the runtime if possible; and whether it was.

    Each call builds in a new private folder (`shardline.cdk._staging`): two synths at once (a test
    session beside `make local`) never share one, and no other local user can create, read or swap it.
    The caller removes it once the layer is staged (`release_build_folder`).
    """
    folder = private_build_folder("layer")
    try:
        return folder, _build_into(folder)
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)  # a failed build leaves nothing behind
        raise


def _build_into(folder: Path) -> bool:
    """The package's files copied into `folder`, compiled if an interpreter of the runtime is here;
    whether they were."""
    for source in sorted(PACKAGE.rglob("*")):
        relative = source.relative_to(PACKAGE)
        if (
            source.is_file()
            # The constructs and the local runtime (installed as shardline.local) never run in Lambda,
            # nor does the worker driver (its image installs the whole package).
            and relative.parts[0] not in ("cdk", "local")
            and relative.as_posix() not in WORKER_DRIVER
            and "__pycache__" not in relative.parts
            and any(source.match(pattern) for pattern in LAYER_FILES)
        ):
            target = folder / "python" / "shardline" / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, target)
    python = runtime_python()
    if python is None:
        return False
    compile_all = [python, "-m", "compileall", "-q", "--invalidation-mode", "unchecked-hash"]
    subprocess.run(
        [*compile_all, "-d", LAYER_MOUNT, str(folder / "python")],
        check=True,
        env={**os.environ, "PYTHONHASHSEED": "0"},  # no set or frozenset constant in hash order
    )
    return True


def powertools_parameter(version: str) -> str:
    """The public SSM parameter holding the layer ARN of Powertools `version` for our runtime."""
    return f"/aws/service/powertools/python/{ARCHITECTURE.name}/{RUNTIME.name}/{version}"


@shows_its_props
class Layers(Construct):
    """`shardline` (layers/shardline) and `powertools` (the pinned version, by its SSM parameter)."""

    def __init__(self, scope: Construct, construct_id: str) -> None:
        super().__init__(scope, construct_id)
        pin_feature_flags(self)
        folder, compiled = build_layer()
        if not compiled:
            Annotations.of(self).add_warning_v2(
                "shardline:layer-without-bytecode",
                f"no {RUNTIME.name} interpreter found (set SHARDLINE_LAYER_PYTHON): the layer ships sources "
                "only and compiles them on every cold start",
            )
        self.shardline = lambda_.LayerVersion(
            self,
            "Shardline",
            code=lambda_.Code.from_asset(str(folder)),
            compatible_runtimes=[RUNTIME],
            compatible_architectures=[ARCHITECTURE],
            description="shardline: KPL aggregation, producer and consumer groups",
        )
        release_build_folder(self, folder)  # staged into the cloud assembly when the layer bound it
        self.powertools_version = POWERTOOLS_VERSION
        self._powertools: lambda_.ILayerVersion | None = None

    @property
    def powertools(self) -> lambda_.ILayerVersion:
        """The Powertools layer, resolved from its SSM parameter when a function first takes it (a
        template parameter no function uses is a finding of CloudFormation's validation)."""
        if self._powertools is None:
            arn = ssm.StringParameter.value_for_string_parameter(
                self, powertools_parameter(self.powertools_version)
            )
            self._powertools = lambda_.LayerVersion.from_layer_version_arn(self, "Powertools", arn)
        return self._powertools
