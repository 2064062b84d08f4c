"""The image a `WorkerGroup`'s tasks run: shardline's Dockerfile with the team's handler folder,
staged at synth as a build context of its own (built by `cdk deploy`: the first stage of a
pipeline), or an image built once elsewhere and promoted to this stage by its digest (`image_uri`,
or `image_repository` with `image_digest`). A tag never promotes: a tag moves, so the image a later
stage runs would not be the one the first stage tested.

The staged context is the same wherever shardline is installed (a team's venv, this repository):
the Dockerfile and the worker's lock, package data of `shardline.cdk` (`worker_image/`), a wheel of
the shardline package the app imports with the lock pinning it by its sha256
(`shardline.cdk._worker_wheel`), and a copy of the handler's folder — which may be anywhere in the
team's app. It is written under the app's asset output folder (`<cdk.out>/shardline-worker-image.
<group>`), kept there for `cdk deploy` to build (and for the assembly that points at it when asset
staging is off). Same inputs, same bytes, same asset hash: an unchanged app does not roll its
workers. `build_context` (with `dockerfile`) is the escape hatch: a folder of the team's own, its
Dockerfile, `code` inside it, built as it is (less `NEVER_IN_CONTEXT` and its `.dockerignore`)."""

from __future__ import annotations

import re
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from aws_cdk import Aws, IgnoreMode, Names, Stage
from aws_cdk import aws_ecr as ecr
from aws_cdk import aws_ecr_assets as ecr_assets
from aws_cdk import aws_ecs as ecs
from constructs import Construct

from shardline.cdk._config_reader import ConfigError
from shardline.cdk._group_rules import Where, check_digest, check_image_uri
from shardline.cdk._worker_wheel import build_wheel, lock_text

__all__ = [
    "DOCKERFILE",
    "HANDLER_FOLDER",
    "IMAGE_FILES",
    "NEVER_IN_CONTEXT",
    "PLATFORMS",
    "SHARDLINE_LOCK",
    "WORKER_LOCK",
    "Architecture",
    "asset_image",
    "check_image_source",
    "promoted_image",
    "stage_context",
]

#: shardline's image, package data of `shardline.cdk`: its Dockerfile and the lock of the worker's
#: packages (cut from the project's locks by `make lock`), which its `pip install --require-hashes`
#: reads. The one copy: the staged context takes them from here, wherever shardline is installed.
IMAGE_FILES = Path(__file__).resolve().parent / "worker_image"
DOCKERFILE = "Dockerfile"
WORKER_LOCK = "requirements.lock"
#: The staged context's lock of shardline's own wheel (`_worker_wheel.lock_text`).
SHARDLINE_LOCK = "shardline.lock"
#: Where the handler's folder is copied in the staged context (the Dockerfile's HANDLER build arg).
HANDLER_FOLDER = "handler"
#: Never copied with the handler's folder (nor sent from a team's own context), at any depth:
#: version control, environments, tool output, tests, bytecode.
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


def stage_context(folder: Path, code: Path) -> Path:
    """The worker image's build context written into `folder` (emptied first: a file the handler no
    longer has must not linger): the Dockerfile, the locks, shardline's wheel and the handler's
    folder (`HANDLER_FOLDER`, less `NEVER_IN_CONTEXT`). The same inputs give the same bytes."""
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    for name in (DOCKERFILE, WORKER_LOCK):
        shutil.copyfile(IMAGE_FILES / name, folder / name)
    wheel = build_wheel(folder)
    (folder / SHARDLINE_LOCK).write_text(lock_text(wheel))
    shutil.copytree(code, folder / HANDLER_FOLDER, ignore=shutil.ignore_patterns(*NEVER_IN_CONTEXT))
    return folder


def asset_image(
    scope: Construct,
    owner: str,
    code: str | Path,
    build_context: str | Path | None,
    dockerfile: str | None,
    architecture: Architecture,
    image_props: Mapping[str, Any] | None,
) -> ecs.ContainerImage:
    """The worker image of `code` (the handler's folder): shardline's Dockerfile in a context staged
    for `scope` (see the module docstring), or, with `build_context`, the team's own folder and
    `dockerfile`; built at deploy."""
    if build_context is None:
        if dockerfile is not None:
            raise ValueError(
                f"{owner}: dockerfile: a Dockerfile of your own goes with build_context (the folder it "
                "builds in); without build_context the image is shardline's, staged with your handler"
            )
        context, props = _staged(scope, owner, code)
    else:
        context, props = _teams_own(owner, code, Path(build_context).resolve(), dockerfile or DOCKERFILE)
    props |= {"platform": PLATFORMS[architecture], "ignore_mode": IgnoreMode.DOCKER}
    return ecs.ContainerImage.from_asset(str(context), **{**props, **(image_props or {})})


def _staged(scope: Construct, owner: str, code: str | Path) -> tuple[Path, dict[str, Any]]:
    """shardline's image: its context staged under the app's output folder, for this group."""
    folder = Path(code).resolve()  # a relative folder is the working folder's (the app's)
    if not folder.is_dir():
        raise ValueError(
            f"{owner}: code: {code} is not a folder (the handler's folder: absolute, or relative to "
            f"the working folder {Path.cwd()})"
        )
    outdir = Path(Stage.of(scope).asset_outdir).resolve()  # type: ignore[union-attr]  # in one
    if folder == Path.cwd().resolve() or outdir.is_relative_to(folder) or folder.is_relative_to(outdir):
        raise ValueError(
            f"{owner}: code: {code} is the app's folder, or holds or is in its output folder "
            f"{outdir}: give the handler's own folder (all the image adds of your app)"
        )
    context = stage_context(outdir / f"shardline-worker-image.{Names.unique_id(scope)}", folder)
    return context, {"file": DOCKERFILE, "build_args": {"HANDLER": HANDLER_FOLDER}}


def _teams_own(owner: str, code: str | Path, context: Path, file: str) -> tuple[Path, dict[str, Any]]:
    """The escape hatch: a team's own folder and Dockerfile, the handler's folder inside it."""
    folder = (context / code).resolve()  # an absolute `code` stays itself
    if not folder.is_dir() or folder == context or not folder.is_relative_to(context):
        raise ValueError(
            f"{owner}: code: {code} must be a folder inside the build context {context} (its own "
            "folder, not the context itself)"
        )
    if not (context / file).is_file():
        raise ValueError(f"{owner}: dockerfile: no {file} in the build context {context}")
    return context, {
        "file": file,
        "build_args": {"HANDLER": folder.relative_to(context).as_posix()},
        "exclude": [f"**/{path}" for path in NEVER_IN_CONTEXT],
    }
