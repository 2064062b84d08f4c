"""The worker part of reading a template (`local.app.template`): ECS services running `shardline worker`.

A mix-in of `local.app.template`'s reader, leaning on its `properties`, `resources` and `cdk_out`:

- `AWS::ECS::Service` with its `AWS::ECS::TaskDefinition` (one container): a worker consumer group
  (`shardline.cdk.WorkerGroup`), run as `DesiredCount` local processes (`local.ecs`). Its image is
  an asset of the cloud assembly (`<stack>.assets.json`, `dockerImages`): the staged build context
  and its `HANDLER` build argument name the handler's folder the container runs in, and the
  context's `shardline.lock` the wheel of shardline the image installs (its sha256 checked, then
  imported from the zip) — the same files the image is built from, wherever shardline was
  installed when the app was synthesized, run on the runtime's Python instead of being built (no
  Docker). A team's own context (`build_context`) runs locally when it holds such a wheel and lock,
  or shardline's source (`layers/shardline/python`). The container's environment, entry point and
  StopTimeout are honoured; an image that is not an asset of the assembly, a task of several
  containers, or an entry point other than `shardline worker` is refused.
- What has no meaning on loopback is listed, not run: the cluster, the VPC and its parts, and the
  custom resource that locks the VPC's default security group — with the function that provides
  it (a Node.js handler, which would otherwise be refused as a function).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from . import model
from .template_api import TemplateError

#: The entry point shardline's worker image has (`shardline/cdk/worker_image/Dockerfile`): what the
#: local processes run.
WORKER_COMMAND = ("shardline", "worker")
#: The staged context's lock of shardline's wheel (`shardline.cdk._worker_wheel.lock_text`): the
#: wheel's file, beside it, and its sha256.
SHARDLINE_LOCK = "shardline.lock"
PINNED_WHEEL = re.compile(
    r"^\./(?P<name>[^/\s]+\.whl)\s*\\\s*\n\s*--hash=sha256:(?P<digest>[0-9a-f]{64})\s*$", re.MULTILINE
)
#: Where a context of shardline's repository layout holds the package's source.
SOURCE_LIBRARY = ("layers", "shardline", "python")
NETWORK = "networking is loopback locally: worker processes reach the endpoint directly"
#: Types a worker group brings that the runtime lists and does not run, with the reason.
WORKER_NOT_RUN = {
    "AWS::ECS::Cluster": "worker tasks run as local processes (local.ecs): there is no cluster",
    "AWS::EC2::VPC": NETWORK,
    "AWS::EC2::Subnet": NETWORK,
    "AWS::EC2::RouteTable": NETWORK,
    "AWS::EC2::SubnetRouteTableAssociation": NETWORK,
    "AWS::EC2::Route": NETWORK,
    "AWS::EC2::InternetGateway": NETWORK,
    "AWS::EC2::VPCGatewayAttachment": NETWORK,
    "AWS::EC2::VPCEndpoint": NETWORK,
    "AWS::EC2::SecurityGroup": NETWORK,
    "AWS::EC2::FlowLog": NETWORK,
    "Custom::VpcRestrictDefaultSG": NETWORK,
}


class WorkerReader:
    """Reads the template's ECS services as `model.WorkerService`s (see the module docstring)."""

    resources: dict[str, Any]
    cdk_out: Path
    stack: str

    def resolve_part(self, logical_id: str, value: Any) -> Any:
        raise NotImplementedError  # the reader's

    def name(self, logical_id: str) -> str:
        raise NotImplementedError  # the reader's

    def worker_service(self, logical_id: str) -> model.WorkerService:
        """The service's own network settings are not read: only its desired count and its task's
        container (the rest is IAM and networking, which do not apply locally)."""
        service = self.resources[logical_id].get("Properties", {})
        task_id = self._task_definition_id(logical_id)
        containers = self.resources[task_id].get("Properties", {}).get("ContainerDefinitions", [])
        if len(containers) != 1:
            raise TemplateError(f"{task_id}: {len(containers)} containers; a worker task runs one")
        context, handler = self._image_asset(task_id, containers[0].get("Image"))
        container = self.resolve_part(task_id, {k: v for k, v in containers[0].items() if k != "Image"})
        command = tuple(container.get("EntryPoint") or WORKER_COMMAND) + tuple(container.get("Command") or ())
        if command[:2] != WORKER_COMMAND:
            ran = " ".join(command)
            raise TemplateError(f"{task_id}: the container runs {ran!r}, not `shardline worker`")
        environment = {item["Name"]: str(item["Value"]) for item in container.get("Environment", [])}
        log_options = container.get("LogConfiguration", {}).get("Options", {})
        return model.WorkerService(
            logical_id=logical_id,
            name=environment.get("SHARDLINE_GROUP", logical_id),
            desired_count=int(self.resolve_part(logical_id, service.get("DesiredCount", 1))),
            code_dir=(context / handler).resolve(),
            library_dir=self._library(task_id, context),
            command=command,
            environment=environment,
            stop_timeout_seconds=int(container.get("StopTimeout", 30)),
            log_group=str(log_options.get("awslogs-group", "")),
            service_name=self.name(logical_id),
            cluster_name=str(self.resolve_part(logical_id, service.get("Cluster", "default"))),
            task_role_arn=str(
                self.resolve_part(task_id, self.resources[task_id]["Properties"].get("TaskRoleArn", ""))
            ),
        )

    def providers_not_run(self) -> dict[str, str]:
        """Functions that only provide custom resources the runtime does not run: logical id -> why."""
        providers: dict[str, str] = {}
        for resource in self.resources.values():
            kind = resource["Type"]
            if kind not in WORKER_NOT_RUN or not kind.startswith("Custom::"):
                continue
            token = resource.get("Properties", {}).get("ServiceToken", {})
            target = token.get("Fn::GetAtt", [None])[0] if isinstance(token, Mapping) else None
            if target in self.resources:
                providers[target] = f"the provider of {kind}, which is not run: {WORKER_NOT_RUN[kind]}"
        return providers

    def _task_definition_id(self, logical_id: str) -> str:
        reference = self.resources[logical_id].get("Properties", {}).get("TaskDefinition")
        target = reference.get("Ref") if isinstance(reference, Mapping) else None
        if target not in self.resources:
            raise TemplateError(f"{logical_id}: TaskDefinition is not a task definition of this stack")
        return str(target)

    def _image_asset(self, task_id: str, image: Any) -> tuple[Path, str]:
        """The staged build context of the container's image asset, and its HANDLER build argument."""
        text = json.dumps(image)
        manifest = self.cdk_out / f"{self.stack}.assets.json"
        entries = json.loads(manifest.read_text()).get("dockerImages", {}) if manifest.exists() else {}
        for asset_hash, entry in entries.items():
            if asset_hash in text:
                source = entry["source"]
                handler = source.get("dockerBuildArgs", {}).get("HANDLER")
                if not handler:
                    raise TemplateError(f"{task_id}: its image asset has no HANDLER build argument")
                return (self.cdk_out / source["directory"]).resolve(), str(handler)
        raise TemplateError(
            f"{task_id}: its image is not an image asset of {self.cdk_out} (only an image built from "
            "shardline's Dockerfile runs locally: a WorkerGroup's `code`, not its `image` or `image_uri`)"
        )

    def _library(self, task_id: str, context: Path) -> Path:
        """The shardline the image installs: the staged wheel its lock pins (checked against its
        sha256, imported from the zip), or the source folder of a context of the repository's layout."""
        lock = context / SHARDLINE_LOCK
        if lock.is_file():
            pinned = PINNED_WHEEL.search(lock.read_text())
            if pinned is None:
                raise TemplateError(f"{task_id}: {lock} pins no wheel (./<name>.whl --hash=sha256:...)")
            wheel = context / pinned.group("name")
            if not wheel.is_file() or hashlib.sha256(wheel.read_bytes()).hexdigest() != pinned.group(
                "digest"
            ):
                raise TemplateError(
                    f"{task_id}: {wheel} is not the wheel {lock} pins (its sha256): synthesize the app again"
                )
            return wheel.resolve()
        source = context.joinpath(*SOURCE_LIBRARY)
        if (source / "shardline").is_dir():
            return source.resolve()
        raise TemplateError(
            f"{task_id}: its image's build context {context} holds no shardline to run (no {SHARDLINE_LOCK} "
            "and wheel, as a WorkerGroup's `code` stages them): give the group `code` (shardline's image), "
            f"or put shardline's wheel and its {SHARDLINE_LOCK} in your build_context"
        )
