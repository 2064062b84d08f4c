"""The image a `WorkerGroup`'s tasks run: the repository's Dockerfile staged as an asset (built by
`cdk deploy`: the first stage of a pipeline), or an image built once elsewhere and promoted to this
stage by its digest (`image_uri`, or `image_repository` with `image_digest`). A tag never promotes:
a tag moves, so the image a later stage runs would not be the one the first stage tested."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from aws_cdk import Aws, IgnoreMode
from aws_cdk import aws_ecr as ecr
from aws_cdk import aws_ecr_assets as ecr_assets
from aws_cdk import aws_ecs as ecs
from constructs import Construct

from shardline.cdk._config_reader import ConfigError
from shardline.cdk._group_rules import Where, check_digest, check_image_uri

__all__ = [
    "CONTEXT_FILES",
    "DOCKERFILE",
    "LEFT_OUT",
    "NEVER_IN_CONTEXT",
    "PLATFORMS",
    "REPOSITORY",
    "Architecture",
    "asset_image",
    "check_image_source",
    "promoted_image",
]

#: This repository, when shardline runs from its source (`layers/shardline/python/shardline/cdk/`):
#: the default build context, which holds `workers/Dockerfile`.
REPOSITORY = Path(__file__).resolve().parents[5]
DOCKERFILE = "workers/Dockerfile"
#: What the image copies from the build context beside the Dockerfile and the handler's folder:
#: what `pip install .` builds the shardline package from (pyproject.toml, setup.py, LICENSE, the
#: library's folder and the local runtime's package marker: setup.py maps `shardline.local`), and
#: the image's locks (cut from the project's by `make lock`), which its `pip install
#: --require-hashes` reads. As in the Lambda layer, the constructs and the local runtime stay out
#: (`LEFT_OUT`): they never run in a worker, and an edit to them (or to the README) does not roll
#: the workers.
CONTEXT_FILES = (
    "pyproject.toml", "setup.py", "LICENSE", "layers/shardline/python", "local/__init__.py",
    "workers/requirements.lock", "workers/build.lock",
)  # fmt: skip
LEFT_OUT = ("layers/shardline/python/shardline/cdk",)
#: Never in the build context, at any depth: version control, environments, tool output, tests.
NEVER_IN_CONTEXT = (
    ".git", ".venv", "node_modules", "cdk.out", "build", ".local", "tests", "__pycache__", "*.pyc",
    ".mypy_cache", ".ruff_cache", ".pytest_cache", ".hypothesis", "*.egg-info",
)  # fmt: skip
#: The tasks' CPU architecture -> the platform the image is built for.
Architecture = Literal["ARM64", "X86_64"]
PLATFORMS: dict[str, ecr_assets.Platform] = {
    "ARM64": ecr_assets.Platform.LINUX_ARM64,
    "X86_64": ecr_assets.Platform.LINUX_AMD64,
}
ECR_REPOSITORY = re.compile(
    r"(?P<account>\d{12})\.dkr\.ecr\.(?P<region>[a-z0-9-]+)\.amazonaws\.com(?P<china>\.cn)?/(?P<name>.+)"
)


def check_image_source(
    owner: str,
    code: str | Path | None,
    image: ecs.ContainerImage | None,
    image_uri: str | None,
    repository: ecr.IRepository | None,
    digest: str | None,
) -> None:
    """One source of the image: the handler's folder (built here), a team's image, or a previous
    stage's by digest."""
    if len([given for given in (code, image, image_uri, repository) if given is not None]) != 1:
        raise ValueError(
            f"{owner}: give either code (the handler's folder) or image (one of your own), or the "
            "digest a previous stage built (image_uri, or image_repository with image_digest)"
        )
    if digest is not None and repository is None:
        raise ValueError(f"{owner}: image_digest: the digest of an image in image_repository; give both")


def promoted_image(
    scope: Construct,
    where: Where,
    *,
    image_uri: str | None,
    repository: ecr.IRepository | None,
    digest: str | None,
    egress: str = "internet",
) -> ecs.ContainerImage:
    """The image a previous stage built, by digest: from an ECR repository (its reference's, or the
    one given), which the task's execution role is granted to pull from (ecr:GetAuthorizationToken,
    and BatchCheckLayerAvailability, GetDownloadUrlForLayer, BatchGetImage on that repository), or
    from another registry by its reference (a public one: nothing to grant)."""
    if image_uri is not None:
        name, digest = check_image_uri(where, "image", "image_uri", image_uri)
        ecr_match = ECR_REPOSITORY.fullmatch(name)
        if ecr_match is None:
            if egress == "vpc-endpoints":
                raise ConfigError(
                    f"{where('image', 'image_uri')}: {name} is outside ECR: with egress vpc-endpoints the "
                    "tasks reach ECR alone (copy the image to an ECR repository, by its digest)"
                )
            return ecs.ContainerImage.from_registry(f"{name}@{digest}")
        partition = "aws-cn" if ecr_match.group("china") else Aws.PARTITION
        repository = ecr.Repository.from_repository_attributes(
            scope,
            "ImageRepository",
            repository_arn=f"arn:{partition}:ecr:{ecr_match.group('region')}:{ecr_match.group('account')}"
            f":repository/{ecr_match.group('name')}",
            repository_name=ecr_match.group("name"),
        )
    if repository is None or digest is None:
        raise ConfigError(f"{where('image', 'image_repository')}: give it with image_digest (sha256:...)")
    digest = check_digest(where, "image", "image_digest", digest)
    return ecs.ContainerImage.from_ecr_repository(repository, digest)


def asset_image(
    owner: str,
    code: str | Path,
    build_context: str | Path | None,
    dockerfile: str,
    architecture: Architecture,
    image_props: Mapping[str, Any] | None,
) -> ecs.ContainerImage:
    """The worker image of the repository's Dockerfile with the handler's folder: staged at synth
    (an allow-list of the build context), built at deploy."""
    if build_context is None:
        if not (REPOSITORY / DOCKERFILE).is_file():
            raise ValueError(
                f"{owner}: build_context: shardline is not running from its repository here; give the "
                f"folder holding {dockerfile}, the package source and the handler (or an image)"
            )
        build_context = REPOSITORY
    context = Path(build_context).resolve()
    if not (context / dockerfile).is_file():
        raise ValueError(f"{owner}: dockerfile: no {dockerfile} in the build context {context}")
    folder = (context / code).resolve()  # an absolute `code` stays itself
    if not folder.is_dir() or folder == context or not folder.is_relative_to(context):
        raise ValueError(
            f"{owner}: code: {code} must be a folder inside the build context {context} (its own "
            "folder, not the context itself)"
        )
    handler = folder.relative_to(context).as_posix()
    props: dict[str, Any] = {
        "file": dockerfile,
        "build_args": {"HANDLER": handler},
        "platform": PLATFORMS[architecture],
        "ignore_mode": IgnoreMode.DOCKER,
        "exclude": [
            "*",
            f"!{dockerfile}",
            *(f"!{path}" for path in CONTEXT_FILES),
            f"!{handler}",
            *LEFT_OUT,
            *(f"**/{path}" for path in NEVER_IN_CONTEXT),
        ],
        **(image_props or {}),
    }
    return ecs.ContainerImage.from_asset(str(context), **props)
