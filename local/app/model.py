"""What the local runtime runs: the app as read from the synthesized template, nothing declared twice.

`local.app.template.load()` builds a `LocalApp` from `cdk.out/<stack>.template.json`; every other module
of the runtime (endpoint, workers, API, event-source mappings, CLI) works from these records, so
a test can also build one by hand around a purpose-built function.

Names follow the usual local conventions: account `000000000000`, region `us-east-1`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

ACCOUNT = "000000000000"
REGION = "us-east-1"
ACCESS_KEY = "test"
SECRET_KEY = "test"
#: A second local principal (the IAM user `peer`): a caller of its own, whose ids are not the
#: account root's — the e2e chaos run and the soak post the same ids as both to show it.
PEER_ACCESS_KEY = "peer"
PEER_SECRET_KEY = "peer"
#: Access key -> secret key the local API accepts: `test` stands for the account's root, any
#: other key for the IAM user of its name.
LOCAL_CREDENTIALS = {ACCESS_KEY: SECRET_KEY, PEER_ACCESS_KEY: PEER_SECRET_KEY}


def stream_arn(name: str) -> str:
    return f"arn:aws:kinesis:{REGION}:{ACCOUNT}:stream/{name}"


def consumer_arn(stream: str, name: str, created: int) -> str:
    """A registered stream consumer's ARN, as Kinesis shapes it (its creation time last, epoch s)."""
    return f"{stream_arn(stream)}/consumer/{name}:{created}"


def consumer_created(stream: str, name: str) -> int:
    """The creation time (epoch s) the local endpoint gives a consumer it registers: fixed per stream
    and name, so the app's `Fn::GetAtt [Consumer, ConsumerARN]`, resolved before the endpoint
    registers it, is the ARN it registers (Kinesis's is the registration's time)."""
    digest = hashlib.sha256(f"{stream}/{name}".encode()).digest()
    return 1_700_000_000 + int.from_bytes(digest[:4]) % 10_000_000


def function_arn(name: str) -> str:
    return f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:{name}"


def queue_arn(name: str) -> str:
    return f"arn:aws:sqs:{REGION}:{ACCOUNT}:{name}"


def queue_url(endpoint_url: str, name: str) -> str:
    return f"{endpoint_url}/{ACCOUNT}/{name}"


@dataclass(frozen=True)
class Stream:
    """An `AWS::Kinesis::Stream`."""

    logical_id: str
    name: str
    shard_count: int
    retention_hours: int = 24
    max_record_size_kib: int = 1024  # MaxRecordSizeInKiB: the largest record it takes (up to 10 MiB)
    #: False for a stream the app names by ARN but does not define (an existing one): created locally.
    defined: bool = True

    @property
    def arn(self) -> str:
        return stream_arn(self.name)


@dataclass(frozen=True)
class StreamConsumer:
    """An `AWS::Kinesis::StreamConsumer`: a registered (enhanced fan-out) consumer of a stream."""

    logical_id: str
    name: str
    stream_name: str
    arn: str


@dataclass(frozen=True)
class Resource:
    """A table, queue or bucket: created on the endpoint from its template properties."""

    logical_id: str
    type: str  # "AWS::DynamoDB::Table", "AWS::SQS::Queue", "AWS::S3::Bucket"
    name: str
    properties: dict[str, Any] = field(default_factory=dict)  # resolved to local names


@dataclass(frozen=True)
class Function:
    """An `AWS::Lambda::Function`, as a worker process runs it."""

    logical_id: str
    name: str
    handler: str  # "module.attribute", imported from code_dir
    code_dir: Path
    layer_dirs: tuple[Path, ...] = ()  # each holds `python/`, put on sys.path before code_dir's deps
    timeout_seconds: int = 3
    memory_mb: int = 128
    environment: dict[str, str] = field(default_factory=dict)  # resolved; no endpoint settings yet
    role_arn: str = f"arn:aws:iam::{ACCOUNT}:role/local"
    reserved_concurrency: int | None = None
    log_group: str = ""
    log_format: str = "Text"  # LoggingConfig.LogFormat: "Text" or "JSON" (Lambda's advanced logging)
    runtime: str = "python3.12"  # the Lambda runtime: its Python, and the packages it ships
    public_layers: tuple[str, ...] = ()  # layers by ARN or SSM parameter (Powertools), in template order
    ephemeral_storage_mb: int = 512  # EphemeralStorage: the size of the function's private /tmp

    @property
    def arn(self) -> str:
        return function_arn(self.name)


@dataclass(frozen=True)
class WorkerService:
    """An `AWS::ECS::Service` running `shardline worker` (a `shardline.cdk.WorkerGroup`), as
    `desired_count` local processes of the image's code: its handler folder and the shardline
    its image installs, on the runtime's Python and packages (`local.ecs`)."""

    logical_id: str
    name: str  # the consumer group's name (SHARDLINE_GROUP)
    desired_count: int
    code_dir: Path  # the handler's folder in the image's build context (its working folder)
    library_dir: Path  # the image's shardline: the staged wheel (a zip on sys.path) or a source folder
    command: tuple[str, ...] = ("shardline", "worker")  # the container's entry point and command
    environment: dict[str, str] = field(default_factory=dict)  # resolved; no endpoint settings yet
    stop_timeout_seconds: int = 30  # the container's StopTimeout: SIGTERM, then SIGKILL after it
    log_group: str = ""
    service_name: str = ""  # ECS's names, the dimensions of its metrics (RunningTaskCount)
    task_role_arn: str = ""  # the task definition's TaskRoleArn: what the worker's calls run as
    cluster_name: str = ""

    @property
    def stream_name(self) -> str:
        return self.environment.get("SHARDLINE_STREAM", "")

    @property
    def lease_table(self) -> str:
        return self.environment.get("LEASE_TABLE", "")

    def log_files(self, log_dir: Path) -> list[Path]:
        """The log file of each of its task slots (`local.ecs` writes them, `local.cloudwatch` reads)."""
        return [log_dir / f"{self.name}-{slot}.log" for slot in range(self.desired_count)]


@dataclass(frozen=True)
class EventSourceMapping:
    """An `AWS::Lambda::EventSourceMapping` from a Kinesis stream, with Lambda's defaults."""

    logical_id: str
    uuid: str
    function_name: str
    stream_name: str
    batch_size: int = 100
    batching_window_seconds: float = 0
    starting_position: str = "LATEST"  # LATEST | TRIM_HORIZON | AT_TIMESTAMP
    starting_position_timestamp: float | None = None
    report_batch_item_failures: bool = False
    bisect_on_error: bool = False
    maximum_retry_attempts: int = -1  # -1: until the record expires
    maximum_record_age_seconds: int = -1  # -1: the stream's retention
    parallelization_factor: int = 1
    on_failure_arn: str | None = None  # an SQS queue ARN
    enabled: bool = True
    filter_criteria: str | None = None  # FilterCriteria as JSON (local.lambda_.esm.filters reads it)
    #: The registered consumer it reads through (enhanced fan-out), or None: shared throughput.
    consumer_name: str | None = None


@dataclass(frozen=True)
class Method:
    """One method of the REST API, with what API Gateway checks before invoking."""

    path: str  # the resource path, e.g. "/streams/{stream}/records"
    http_method: str  # "POST", or "ANY"
    function_name: str | None  # AWS_PROXY target; None for another integration (not supported)
    authorization: str = "NONE"  # NONE | AWS_IAM | ...
    api_key_required: bool = False
    validate_body: bool = False
    validate_parameters: bool = False
    request_models: dict[str, dict[str, Any]] = field(default_factory=dict)  # content type -> JSON schema
    required_parameters: dict[str, bool] = field(default_factory=dict)  # "method.request.path.stream": True


@dataclass(frozen=True)
class KeyPlan:
    """An API key (`AWS::ApiGateway::ApiKey`) and the limits of its usage plan on the API's stage."""

    name: str
    value: str  # the key's `Value`, or one the local runtime made (API Gateway makes one in AWS)
    throttle_rate: float | None = None
    throttle_burst: int | None = None
    quota_limit: int | None = None
    quota_period: str = "DAY"


@dataclass(frozen=True)
class RestApi:
    """An `AWS::ApiGateway::RestApi` with its stage, resource policy and keys."""

    logical_id: str
    name: str
    api_id: str
    stage: str
    methods: tuple[Method, ...]
    throttle_rate: float | None = None  # requests/s, from the stage's MethodSettings
    throttle_burst: int | None = None
    policy: Mapping[str, Any] | None = None  # the resource policy, resolved
    keys: tuple[KeyPlan, ...] = ()  # the keys of usage plans on this API's stage
    binary_media_types: tuple[str, ...] = ()  # BinaryMediaTypes: when a base64 answer is decoded


@dataclass(frozen=True)
class Role:
    """An `AWS::IAM::Role` with every identity policy attached to it in the template, resolved."""

    logical_id: str
    name: str
    arn: str
    policies: tuple[tuple[str, Mapping[str, Any]], ...] = ()  # (where it comes from, its document)
    trust: Mapping[str, Any] | None = None  # AssumeRolePolicyDocument
    #: AWS-managed (or other accounts') policies attached by ARN: documents the runtime ships, else
    #: listed as not evaluated (their Allows grant nothing locally).
    managed_arns: tuple[str, ...] = ()


@dataclass(frozen=True)
class Iam:
    """The template's IAM, for the endpoint to authorize every request as AWS would (`local.iam`)."""

    roles: tuple[Role, ...] = ()
    #: Resource ARN -> (where it comes from, its resource policy): queue, bucket, key policies.
    resource_policies: Mapping[str, tuple[str, Mapping[str, Any]]] = field(default_factory=dict)
    #: Resource ARN -> the ARN of the customer-managed KMS key that encrypts it.
    keys: Mapping[str, str] = field(default_factory=dict)
    #: Policies it could not read, by name, and why (their Allows grant nothing locally).
    unreadable: tuple[tuple[str, str], ...] = ()

    def role(self, arn: str) -> Role | None:
        return next((role for role in self.roles if role.arn == arn), None)


@dataclass(frozen=True)
class NotEmulated:
    """A property of the template the local runtime does not act on, and what differs because of it."""

    logical_id: str
    resource_type: str
    property: str
    difference: str


@dataclass(frozen=True)
class LocalApp:
    """Everything the runtime starts, and what it cannot."""

    stack_name: str
    streams: tuple[Stream, ...] = ()
    stream_consumers: tuple[StreamConsumer, ...] = ()
    resources: tuple[Resource, ...] = ()
    functions: tuple[Function, ...] = ()
    mappings: tuple[EventSourceMapping, ...] = ()
    apis: tuple[RestApi, ...] = ()
    monitoring: tuple[Resource, ...] = ()  # the CloudWatch alarms and dashboards, resolved (local.cloudwatch)
    unsupported: tuple[tuple[str, str], ...] = ()  # (logical id, type), listed at start-up
    not_emulated: tuple[NotEmulated, ...] = ()  # properties of what runs, listed at start-up and in status
    workers: tuple[WorkerService, ...] = ()  # worker consumer groups (`local.ecs`)
    iam: Iam = field(default_factory=Iam)  # roles and resource policies (`local.iam`)

    def function(self, name: str) -> Function:
        for function in self.functions:
            if function.name == name:
                return function
        raise KeyError(f"no function named {name!r}")


@dataclass(frozen=True)
class InvokeResult:
    """One synchronous invocation, as Lambda's Invoke answers it."""

    request_id: str
    payload: Any  # the handler's return value (JSON round-tripped), or Lambda's error object
    function_error: str | None = None  # None on success, else "Unhandled" (as X-Amz-Function-Error)
    duration_ms: float = 0.0


class Invoker(Protocol):
    """Invokes a function by name and waits for its result (`local.lambda_.workers.Functions` is one).

    A handler's exception, a timeout and a crashed worker are results with `function_error`
    set, never exceptions; `KeyError` for a function that does not exist.
    """

    def invoke(self, function_name: str, event: Any, *, wait: bool = True) -> InvokeResult:
        """`wait=False`: a synchronous caller's invocation (API Gateway), throttled rather than queued
        when every execution the function reserved is busy."""
        ...
