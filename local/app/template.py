"""Read the synthesized CDK template into a `LocalApp`: the app declared once, run locally.

    app = load(Path("cdk.out"), endpoint_url="http://127.0.0.1:4566")

`Ref`, `Fn::GetAtt`, `Fn::Join`, `Fn::Sub`, `Fn::Select`, `Fn::Split` and the pseudo parameters are
resolved to local names: a resource without an explicit name gets CloudFormation's shape,
`<stack>-<LogicalId>-<SUFFIX>` (the suffix derived from the logical id, so names are stable
across runs); ARNs carry the local account and region; a queue's URL is on the local endpoint.
A resource type the runtime does not run is listed in `LocalApp.unsupported` with the reason
(`UNSUPPORTED`), never silently dropped. An intrinsic it cannot resolve raises `TemplateError`
naming the resource and the property.
"""

from __future__ import annotations

import hashlib
import json
import re
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from . import environments, model
from .properties import not_emulated
from .template_api import ApiReader, TemplateError
from .template_iam import IamReader
from .template_streams import StreamReader, parse_source, undefined_streams
from .template_workers import WORKER_NOT_RUN, WorkerReader

# Types the runtime reads but has nothing to run for: why each is left out.
__all__ = ["NOT_RUN", "PARTS", "TemplateError", "find_template", "load", "unsupported_reason"]

#: The variables the Lambda runtime sets and a function's configuration may not (AWS docs, "Defined
#: runtime environment variables"): a deploy naming one fails, so loading such a template fails.
RESERVED_VARIABLES = frozenset(
    {
        "_HANDLER", "_X_AMZN_TRACE_ID", "AWS_DEFAULT_REGION", "AWS_REGION", "AWS_EXECUTION_ENV",
        "AWS_LAMBDA_FUNCTION_NAME", "AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "AWS_LAMBDA_FUNCTION_VERSION",
        "AWS_LAMBDA_INITIALIZATION_TYPE", "AWS_LAMBDA_LOG_GROUP_NAME", "AWS_LAMBDA_LOG_STREAM_NAME",
        "AWS_ACCESS_KEY", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
        "AWS_LAMBDA_RUNTIME_API", "LAMBDA_TASK_ROOT", "LAMBDA_RUNTIME_DIR", "TZ",
    }
)  # fmt: skip

NOT_RUN = {
    "AWS::Lambda::Permission": "who may invoke a function is not checked locally (API Gateway and the "
    "event-source mappings invoke it as the template wires them)",
    "AWS::SNS::TopicPolicy": "alarm notifications are not sent locally",
    "AWS::KMS::Key": "encryption at rest is not emulated (data is in memory); its key policy is enforced "
    "on the services' use of the key",
    "AWS::KMS::Alias": "encryption at rest is not emulated (data is in memory)",
    "AWS::ApiGateway::Account": "the account's logging role: logs are files locally",
    "AWS::Logs::LogGroup": "function output goes to files under the run's log folder",
    "AWS::CDK::Metadata": "CDK's own bookkeeping",
    "AWS::SNS::Topic": "alarm notifications: an alarm's state and history are on the dashboard instead",
    **WORKER_NOT_RUN,
}
# Read as part of the REST API or a function, not run on their own.
PARTS = {
    "AWS::ApiGateway::Resource",
    "AWS::ApiGateway::Method",
    "AWS::ApiGateway::Deployment",
    "AWS::ApiGateway::Stage",
    "AWS::ApiGateway::Model",
    "AWS::ApiGateway::RequestValidator",
    "AWS::ApiGateway::ApiKey",
    "AWS::ApiGateway::UsagePlan",
    "AWS::ApiGateway::UsagePlanKey",
    "AWS::Lambda::LayerVersion",
    "AWS::ECS::TaskDefinition",  # read with its service (local.app.template_workers)
}
#: Read into `LocalApp.iam`: the endpoint authorizes every request with them (`local.iam`).
IAM_RESOURCES = {
    "AWS::IAM::Role", "AWS::IAM::Policy", "AWS::IAM::ManagedPolicy", "AWS::SQS::QueuePolicy",
    "AWS::S3::BucketPolicy",
}  # fmt: skip
ENDPOINT_RESOURCES = ("AWS::DynamoDB::Table", "AWS::SQS::Queue", "AWS::S3::Bucket")
MONITORING_RESOURCES = ("AWS::CloudWatch::Alarm", "AWS::CloudWatch::Dashboard")  # local.cloudwatch
NAME_PROPERTY = {
    "AWS::Kinesis::Stream": "Name",
    "AWS::DynamoDB::Table": "TableName",
    "AWS::SQS::Queue": "QueueName",
    "AWS::S3::Bucket": "BucketName",
    "AWS::Lambda::Function": "FunctionName",
    "AWS::ApiGateway::RestApi": "Name",
    "AWS::Logs::LogGroup": "LogGroupName",
    "AWS::SNS::Topic": "TopicName",
    "AWS::IAM::Role": "RoleName",
}
# The longest name each service takes: a generated name is cut to fit, as CloudFormation does.
NAME_LIMIT = {"AWS::S3::Bucket": 63, "AWS::SQS::Queue": 80, "AWS::Lambda::Function": 64, "AWS::IAM::Role": 64}


def find_template(cdk_out: Path, stack: str | None = None) -> Path:
    """The template of `stack` (or of the only stack) in a cloud assembly."""
    manifest = json.loads((cdk_out / "manifest.json").read_text())
    stacks: dict[str, str] = {
        name: artifact["properties"]["templateFile"]
        for name, artifact in manifest["artifacts"].items()
        if artifact.get("type") == "aws:cloudformation:stack"
    }
    if stack is None and len(stacks) == 1:
        stack = next(iter(stacks))
    if stack not in stacks:
        raise TemplateError(f"{cdk_out}: no stack {stack!r}; stacks: {', '.join(sorted(stacks))}")
    return cdk_out / stacks[stack]


def load(
    cdk_out: Path, *, endpoint_url: str, stack: str | None = None, shards: Mapping[str, int] | None = None
) -> model.LocalApp:
    """The app of the synthesized template in `cdk_out`, resolved to local names; `shards` gives the
    shard count of streams the app names but does not define (`local.app.template_streams`)."""
    path = find_template(cdk_out, stack)
    return _Reader(
        json.loads(path.read_text()), path.stem.removesuffix(".template"), cdk_out, endpoint_url
    ).app(shards or {})


class _Reader(ApiReader, StreamReader, WorkerReader, IamReader):
    def __init__(self, template: dict[str, Any], stack: str, cdk_out: Path, endpoint_url: str) -> None:
        self.resources: dict[str, dict[str, Any]] = template.get("Resources", {})
        self.parameters: dict[str, Any] = template.get("Parameters", {})
        self.stack = stack
        self.cdk_out = cdk_out
        self.endpoint_url = endpoint_url.rstrip("/")
        self._where = ""

    # -- names and intrinsics ---------------------------------------------------------------

    def name(self, logical_id: str) -> str:
        resource = self.resources[logical_id]
        explicit = resource.get("Properties", {}).get(NAME_PROPERTY.get(resource["Type"], ""))
        if explicit is not None:
            return str(self.resolve(explicit))
        suffix = hashlib.sha256(f"{self.stack}/{logical_id}".encode()).hexdigest()[:12].upper()
        # CloudFormation names a FIFO queue it names itself with the `.fifo` SQS requires.
        fifo = (
            resource["Type"] == "AWS::SQS::Queue"
            and str(self.resolve(resource.get("Properties", {}).get("FifoQueue", False))).lower() == "true"
        )
        if fifo:
            suffix += ".fifo"
        room = NAME_LIMIT.get(resource["Type"], 128) - len(self.stack) - len(suffix) - 2
        prefix = f"{self.stack}-{logical_id[: max(room, 1)]}"
        limit = NAME_LIMIT.get(resource["Type"], 128) - len(suffix) - 1  # a long stack name is cut too
        name = f"{prefix[:limit]}-{suffix}"
        return name.lower() if resource["Type"] == "AWS::S3::Bucket" else name

    def ref(self, logical_id: str) -> str:
        pseudo = {
            "AWS::AccountId": model.ACCOUNT,
            "AWS::Region": model.REGION,
            "AWS::Partition": "aws",
            "AWS::URLSuffix": "amazonaws.com",
            "AWS::StackName": self.stack,
            "AWS::StackId": f"arn:aws:cloudformation:{model.REGION}:{model.ACCOUNT}:stack/{self.stack}/local",
            "AWS::NoValue": "",
        }
        if logical_id in pseudo:
            return pseudo[logical_id]
        if logical_id in self.parameters:
            return str(self.parameters[logical_id].get("Default", ""))
        if logical_id not in self.resources:
            raise TemplateError(f"{self._where}: Ref to {logical_id!r}, which the template does not define")
        kind = self.resources[logical_id]["Type"]
        name = self.name(logical_id)
        if kind == "AWS::SQS::Queue":
            return model.queue_url(self.endpoint_url, name)
        if kind in ("AWS::SNS::Topic", "AWS::Lambda::LayerVersion", "AWS::KMS::Key"):
            return self.get_att(logical_id, "Arn")
        if kind == "AWS::Kinesis::StreamConsumer":  # its Ref is its ARN
            return self.get_att(logical_id, "ConsumerARN")
        if kind == "AWS::ApiGateway::Stage":  # a stage's Ref is its name
            return str(self.resolve(self.resources[logical_id].get("Properties", {}).get("StageName")))
        if kind.startswith("AWS::ApiGateway::"):
            return _short_id(self.stack, logical_id)
        return name

    def get_att(self, logical_id: str, attribute: str) -> str:
        if logical_id not in self.resources:
            raise TemplateError(
                f"{self._where}: Fn::GetAtt of {logical_id!r}, which the template does not define"
            )
        kind = self.resources[logical_id]["Type"]
        if kind == "AWS::Kinesis::StreamConsumer":
            value = self.consumer_att(logical_id, attribute)
            if value is None:
                raise TemplateError(
                    f"{self._where}: Fn::GetAtt {logical_id}.{attribute} is not known locally"
                )
            return value
        name = self.name(logical_id)
        arns = {
            "AWS::Kinesis::Stream": model.stream_arn(name),
            "AWS::DynamoDB::Table": f"arn:aws:dynamodb:{model.REGION}:{model.ACCOUNT}:table/{name}",
            "AWS::SQS::Queue": model.queue_arn(name),
            "AWS::S3::Bucket": f"arn:aws:s3:::{name}",
            "AWS::Lambda::Function": model.function_arn(name),
            "AWS::Lambda::LayerVersion": f"arn:aws:lambda:{model.REGION}:{model.ACCOUNT}:layer:{name}:1",
            "AWS::IAM::Role": f"arn:aws:iam::{model.ACCOUNT}:role/{name}",
            "AWS::KMS::Key": f"arn:aws:kms:{model.REGION}:{model.ACCOUNT}:key/{_stable_uuid(name)}",
            "AWS::SNS::Topic": f"arn:aws:sns:{model.REGION}:{model.ACCOUNT}:{name}",
            "AWS::Logs::LogGroup": f"arn:aws:logs:{model.REGION}:{model.ACCOUNT}:log-group:{name}:*",
        }
        if attribute == "Arn" and kind in arns:
            return arns[kind]
        others = {
            ("AWS::SQS::Queue", "QueueUrl"): model.queue_url(self.endpoint_url, name),
            ("AWS::SQS::Queue", "QueueName"): name,
            ("AWS::SNS::Topic", "TopicName"): name,
            ("AWS::DynamoDB::Table", "StreamArn"): f"{arns.get(kind)}/stream/local",
            ("AWS::ApiGateway::RestApi", "RootResourceId"): _short_id(self.stack, logical_id + "/"),
            ("AWS::ECS::Service", "Name"): name,
        }
        if (kind, attribute) in others:
            return others[(kind, attribute)]
        raise TemplateError(
            f"{self._where}: Fn::GetAtt {logical_id}.{attribute} is not known locally ({kind})"
        )

    def resolve(self, value: Any) -> Any:
        if isinstance(value, list):
            return [self.resolve(item) for item in value]
        if not isinstance(value, dict):
            return value
        if len(value) == 1:
            ((key, argument),) = value.items()
            if key == "Ref":
                return self.ref(argument)
            if key == "Fn::GetAtt":
                logical_id, attribute = argument.split(".", 1) if isinstance(argument, str) else argument
                return self.get_att(logical_id, attribute)
            if key == "Fn::Join":
                separator, items = argument
                return separator.join(str(item) for item in self.resolve(items))
            if key == "Fn::Select":
                index, items = argument
                return self.resolve(items)[int(self.resolve(index))]
            if key == "Fn::Split":
                separator, text = argument
                return str(self.resolve(text)).split(separator)
            if key == "Fn::Sub":
                return self._sub(argument)
            if key.startswith("Fn::"):
                raise TemplateError(f"{self._where}: {key} is not supported by the local runtime")
        return {key: self.resolve(item) for key, item in value.items()}

    def _sub(self, argument: Any) -> str:
        text, variables = (argument, {}) if isinstance(argument, str) else argument
        variables = {key: self.resolve(item) for key, item in variables.items()}

        def replace(match: re.Match[str]) -> str:
            token = match.group(1)
            if token.startswith("!"):
                return "${" + token[1:] + "}"
            if token in variables:
                return str(variables[token])
            if "." in token:
                return self.get_att(*token.split(".", 1))
            return self.ref(token)

        return re.sub(r"\$\{([^}]+)\}", replace, text)

    def properties(self, logical_id: str) -> dict[str, Any]:
        properties = self.resources[logical_id].get("Properties", {})
        resolved: dict[str, Any] = self.resolve_part(logical_id, properties)
        return resolved

    def resolve_part(self, logical_id: str, value: Any) -> Any:
        """`value`, a part of `logical_id`'s properties, resolved (errors name `logical_id`)."""
        self._where = logical_id
        return self.resolve(value)

    # -- the app ----------------------------------------------------------------------------

    def of_type(self, kind: str) -> list[str]:
        return [logical_id for logical_id, resource in self.resources.items() if resource["Type"] == kind]

    def app(self, shards: Mapping[str, int]) -> model.LocalApp:
        known = {"AWS::Kinesis::Stream", "AWS::Lambda::Function", "AWS::Lambda::EventSourceMapping"}
        known |= {"AWS::Kinesis::StreamConsumer", "AWS::ECS::Service"}
        known |= {"AWS::ApiGateway::RestApi", *ENDPOINT_RESOURCES, *MONITORING_RESOURCES, *PARTS}
        known |= IAM_RESOURCES
        providers = self.providers_not_run()
        unsupported = tuple(
            (logical_id, resource["Type"])
            for logical_id, resource in self.resources.items()
            if resource["Type"] not in known or logical_id in providers
        )
        streams = tuple(self.stream(logical_id) for logical_id in self.of_type("AWS::Kinesis::Stream"))
        consumers = self.stream_consumers(self.of_type("AWS::Kinesis::StreamConsumer"))
        functions = tuple(
            self.function(logical_id)
            for logical_id in self.of_type("AWS::Lambda::Function")
            if logical_id not in providers
        )
        workers = tuple(self.worker_service(logical_id) for logical_id in self.of_type("AWS::ECS::Service"))
        mappings = tuple(
            self.mapping(logical_id) for logical_id in self.of_type("AWS::Lambda::EventSourceMapping")
        )
        named = [m.stream_name for m in mappings] + [c.stream_name for c in consumers]
        named += [worker.stream_name for worker in workers]
        named += [route.stream_name for f in functions for route in environments.routes(f).values()]
        return model.LocalApp(
            stack_name=self.stack,
            streams=streams + undefined_streams(streams, named, shards),
            stream_consumers=consumers,
            resources=tuple(
                model.Resource(logical_id, kind, self.name(logical_id), self.properties(logical_id))
                for kind in ENDPOINT_RESOURCES
                for logical_id in self.of_type(kind)
            ),
            functions=functions,
            mappings=mappings,
            apis=tuple(self.rest_api(logical_id) for logical_id in self.of_type("AWS::ApiGateway::RestApi")),
            monitoring=tuple(
                model.Resource(logical_id, kind, self.name(logical_id), self.properties(logical_id))
                for kind in MONITORING_RESOURCES
                for logical_id in self.of_type(kind)
            ),
            unsupported=unsupported,
            workers=workers,
            iam=self.iam(),
            not_emulated=tuple(
                entry
                for logical_id, resource in self.resources.items()
                for entry in not_emulated(logical_id, resource["Type"], resource.get("Properties", {}))
            ),
        )

    def asset_dir(self, logical_id: str) -> Path:
        """The folder a function's or layer's code was packaged from: the asset's metadata (cdk
        CLI), else the asset manifest entry of its S3 key (an in-process synth)."""
        asset: str | None = self.resources[logical_id].get("Metadata", {}).get("aws:asset:path")
        if asset is None:
            properties = self.resources[logical_id]["Properties"]
            key = (properties.get("Code") or properties.get("Content") or {}).get("S3Key", "")
            asset = self.asset_paths().get(key)
        if asset is None:
            raise TemplateError(
                f"{logical_id}: its code is not an asset of {self.cdk_out} (only asset code runs)"
            )
        return (self.cdk_out / asset).resolve()

    def asset_paths(self) -> dict[str, str]:
        """S3 object key -> asset folder, from `<stack>.assets.json`."""
        manifest = self.cdk_out / f"{self.stack}.assets.json"
        if not manifest.exists():
            return {}
        paths = {}
        for entry in json.loads(manifest.read_text()).get("files", {}).values():
            for destination in entry.get("destinations", {}).values():
                paths[destination["objectKey"]] = entry["source"]["path"]
        return paths

    def function(self, logical_id: str) -> model.Function:
        properties = self.properties(logical_id)
        runtime = properties.get("Runtime", "")
        if not runtime.startswith("python"):
            raise TemplateError(f"{logical_id}: Runtime {runtime!r}: only Python functions run locally")
        layers, public_layers = [], []
        for layer in self.resources[logical_id]["Properties"].get("Layers", []):
            target = layer.get("Ref") if isinstance(layer, dict) else None
            if target in self.resources:
                layers.append(self.asset_dir(target))
            else:  # a public layer, by ARN or by the SSM parameter naming one (Powertools)
                public_layers.append(str(self.resolve(layer)))
        variables = properties.get("Environment", {}).get("Variables", {})
        reserved = sorted(set(variables) & RESERVED_VARIABLES)
        if reserved:
            raise TemplateError(
                f"{logical_id}: InvalidParameterValueException: Lambda was unable to configure your "
                "environment variables because the environment variables you have provided contains "
                "reserved keys that are currently not supported for modification. Reserved keys used "
                f"in this request: {', '.join(reserved)}"
            )
        log_group = (
            properties.get("LoggingConfig", {}).get("LogGroup") or f"/aws/lambda/{self.name(logical_id)}"
        )
        return model.Function(
            logical_id=logical_id,
            name=self.name(logical_id),
            handler=properties["Handler"],
            code_dir=self.asset_dir(logical_id),
            layer_dirs=tuple(layers),
            timeout_seconds=int(properties.get("Timeout", 3)),
            memory_mb=int(properties.get("MemorySize", 128)),
            environment={key: str(value) for key, value in variables.items()},
            role_arn=properties.get("Role", model.Function.role_arn),
            reserved_concurrency=properties.get("ReservedConcurrentExecutions"),
            log_group=log_group,
            log_format=properties.get("LoggingConfig", {}).get("LogFormat", "Text"),
            runtime=runtime,
            public_layers=tuple(public_layers),
            ephemeral_storage_mb=int(properties.get("EphemeralStorage", {}).get("Size", 512)),
        )

    def mapping(self, logical_id: str) -> model.EventSourceMapping:
        properties = self.properties(logical_id)
        source = properties["EventSourceArn"]
        if ":kinesis:" not in source:
            raise TemplateError(
                f"{logical_id}: event source {source}: only Kinesis streams are mapped locally"
            )
        stream_name, consumer_name = parse_source(source)
        timestamp = properties.get("StartingPositionTimestamp")
        return model.EventSourceMapping(
            logical_id=logical_id,
            uuid=str(_stable_uuid(f"{self.stack}/{logical_id}")),
            function_name=properties["FunctionName"].rsplit(":", 1)[-1],
            stream_name=stream_name,
            consumer_name=consumer_name,
            batch_size=int(properties.get("BatchSize", 100)),
            batching_window_seconds=float(properties.get("MaximumBatchingWindowInSeconds", 0)),
            starting_position=properties.get("StartingPosition", "LATEST"),
            starting_position_timestamp=float(timestamp) if timestamp is not None else None,
            report_batch_item_failures="ReportBatchItemFailures"
            in properties.get("FunctionResponseTypes", []),
            bisect_on_error=bool(properties.get("BisectBatchOnFunctionError", False)),
            maximum_retry_attempts=int(properties.get("MaximumRetryAttempts", -1)),
            maximum_record_age_seconds=int(properties.get("MaximumRecordAgeInSeconds", -1)),
            parallelization_factor=int(properties.get("ParallelizationFactor", 1)),
            on_failure_arn=properties.get("DestinationConfig", {}).get("OnFailure", {}).get("Destination"),
            enabled=bool(properties.get("Enabled", True)),
            filter_criteria=json.dumps(properties["FilterCriteria"])
            if "FilterCriteria" in properties
            else None,
        )


def _stable_uuid(name: str) -> uuid.UUID:
    return uuid.uuid5(uuid.NAMESPACE_URL, name)


def _short_id(stack: str, logical_id: str) -> str:
    """API Gateway's ten lower-case characters, stable for a logical id."""
    digest = hashlib.sha256(f"{stack}/{logical_id}".encode()).digest()
    alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
    return "".join(alphabet[byte % len(alphabet)] for byte in digest[:10])


def unsupported_reason(kind: str) -> str:
    """Why a resource type is listed, not run, at start-up."""
    if kind == "AWS::Lambda::Function":  # listed only as the provider of a custom resource not run
        return "the provider of a custom resource that is not run (see that resource)"
    return NOT_RUN.get(kind, "this resource type is not supported by the local runtime")
