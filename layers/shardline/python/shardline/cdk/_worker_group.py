"""A consumer group driven by workers: `shardline worker` tasks of an ECS Fargate service, sharing the
stream's shards through the group's lease table (leases that expire, renew and rebalance), on the
consumer core the Lambda-driven `ConsumerGroup` runs."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from aws_cdk import Aws, Duration, RemovalPolicy, Size
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_ecr as ecr
from aws_cdk import aws_ecs as ecs
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from shardline.aws_lambda import ConsumerEnvironment, SinkDeclaration
from shardline.cdk import _group_rules as rules
from shardline.cdk._consumer_group import CONSUMER_ACTIONS, register_consumer
from shardline.cdk._consumer_group import LEASE_ACTIONS as LAMBDA_LEASE_ACTIONS
from shardline.cdk._dead_letters import (
    access_log_bucket,
    acknowledge_dead_letter_objects,
    dead_letter_bucket,
    dead_letter_queue,
    dead_letter_retention_seconds,
    guard_dead_letters,
)
from shardline.cdk._feature_flags import pin_feature_flags
from shardline.cdk._function import add_tags, log_retention
from shardline.cdk._group_rules import Egress, check_egress
from shardline.cdk._keys import grant_via, logs_key, retained_key
from shardline.cdk._nag import DEAD_LETTER_QUEUE, acknowledge_rules
from shardline.cdk._signatures import shows_its_props
from shardline.cdk._sink import Sink
from shardline.cdk._stream import Stream
from shardline.cdk._tables import lease_table as new_lease_table
from shardline.cdk._tables import table
from shardline.cdk._worker_image import (
    NEVER_IN_CONTEXT as NEVER_IN_CONTEXT,
)
from shardline.cdk._worker_image import (
    PLATFORMS,
    Architecture,
    asset_image,
    check_image_source,
    promoted_image,
)
from shardline.cdk._worker_network import (
    add_endpoints,
    own_vpc,
    task_security_group,
    task_subnets,
)
from shardline.consumer._once import guard_ttl_seconds

#: The worker's environment contract (`shardline worker`); the handler's own variables (a Lambda
#: group's function has them too: SINK_TTL_DAYS, SHARDLINE_SINKS when set, and the client-id guards'
#: SHARDLINE_GUARD_TTL_SECONDS), rendered by `ConsumerEnvironment` as for a Lambda group, beside them.
WORKER_VARIABLES = (
    "SHARDLINE_GROUP",
    "SHARDLINE_STREAM",
    "SHARDLINE_HANDLER",
    "LEASE_TABLE",
    "SINK_TABLE",
    "DLQ_URL",
    "DLQ_BUCKET",
    "MAX_ATTEMPTS",
    "CHECKPOINT_INTERVAL",
    "FAILURE_DETAIL",
    "LEASE_DURATION_SECONDS",
    "MAX_LEASES_PER_WORKER",
    "INITIAL_POSITION",
    "STREAM_CONSUMER_ARN",
    "AWS_REGION",
    "POWERTOOLS_SERVICE_NAME",
    "POWERTOOLS_METRICS_NAMESPACE",
)
HANDLER_VARIABLES = ("SHARDLINE_SINKS", "SINK_TTL_DAYS", "SHARDLINE_GUARD_TTL_SECONDS")
#: The lease table: the Lambda consumer's item actions, and Scan (a worker reads every lease to
#: find expired ones and to balance).
LEASE_ACTIONS = (*LAMBDA_LEASE_ACTIONS, "dynamodb:Scan")
#: What a worker calls on its stream: the shard map, iterators and records. With enhanced fan-out,
#: `CONSUMER_ACTIONS` (SubscribeToShard, DescribeStreamConsumer) on the group's own consumer besides.
STREAM_ACTIONS = (
    "kinesis:DescribeStreamSummary",
    "kinesis:GetRecords",
    "kinesis:GetShardIterator",
    "kinesis:ListShards",
)
#: The group's key, through the service holding the data: its DLQ (SQS), its dead-letter bucket
#: (S3's PutObject with SSE-KMS) and its tables (DynamoDB).
KEY_ACTIONS_VIA = {
    "sqs": ("kms:Decrypt", "kms:GenerateDataKey"),
    "s3": ("kms:GenerateDataKey",),
    "dynamodb": ("kms:Decrypt",),
}
#: The user the worker runs as (no such user in the image: a number is enough, and it is not root).
WORKER_USER = "10001:10001"
STOP_TIMEOUT_S = 60
#: The awslogs driver's buffer (non-blocking mode): a slow CloudWatch Logs never stalls the worker's
#: stdout (and with it a lease renewal); lines beyond it are dropped, and counted by ECS.
LOG_BUFFER = Size.mebibytes(25)


@shows_its_props
class WorkerGroup(Construct):
    """A consumer group whose records `shardline worker` processes: `worker_count` long-running tasks
    of one ECS Fargate service, each taking leases on the stream's shards from the group's lease
    table, renewing them, and balancing them with its peers; for handlers that do not fit Lambda
    (long-lived connections, warm state, work longer than 15 minutes). A group is either this or a
    `ConsumerGroup`, never both: Lambda's mapping and the workers would each take its shards.

    What it makes, each replaceable by the team's own: the group's KMS key (`key`), its lease table
    (`lease_table`: same schema as a Lambda group's, point-in-time recovery, under the key), its DLQ
    (`dead_letters`), sinks (`sinks`, as `ConsumerGroup` takes them), the log group (`log_key`), the
    VPC and cluster (`vpc`, `cluster`), the image (`image`), the bucket its dead-letter bucket's
    requests are logged to (`access_logs`). The dead-letter bucket (`dead_letter_bucket`: a dead
    letter over SQS's 1 MiB, whole; as a Lambda group's) is always its own. `enhanced_fan_out`
    registers a stream consumer for the group alone (`consumer`, named `consumer_name` or the group's
    name), which each worker subscribes to its shards through (SubscribeToShard). Everything
    underlying is overridable: `vpc_props`, `task_definition_props`, `container_props`,
    `service_props`, `image_props` are merged over the defaults (the worker's environment contract
    is not).

    **Network** (`egress`). "internet" (the default): in the team's `vpc` (or `cluster`'s), the
    tasks run in its private subnets with egress (`vpc_subnets`), without a public IP (a VPC with only
    public subnets, such as another group's given as `cluster`: in those, with one). Without one, a
    VPC of public subnets only, tasks with a public IP, a security group with no inbound rule and
    HTTPS out only: a worker calls AWS APIs and nothing calls it, and a NAT gateway (about 33 USD a
    month in us-east-1, plus 0.045 USD a GB) would only carry those calls; the gateway endpoints
    (free) keep DynamoDB and S3 (ECR's layers) traffic in the VPC. "vpc-endpoints": isolated subnets
    (a VPC made here has no internet gateway), no public IP, no NAT, and an endpoint for every
    service the task and execution roles are granted, derived from their policies (`endpoints`:
    interface ones with private DNS behind a security group admitting HTTPS from the tasks only;
    a grant added later for a service with no endpoint fails the synth). `vpc_props`, `vpc_subnets`
    and `assign_public_ip` change any of it.

    **Image.** `code` is the handler's folder (absolute, or relative to the working folder: the
    app's), anywhere in the team's app: it is all a team adds. Synth stages a build context of its
    own under the app's output folder (`cdk.out/shardline-worker-image.<group>`): shardline's
    Dockerfile and the worker's lock (package data of `shardline.cdk`), a wheel of the shardline
    package the app imports (its constructs and local runtime left out) with a lock pinning it by
    its sha256, and a copy of the handler's folder (less `NEVER_IN_CONTEXT`); `cdk deploy` builds
    and pushes it. It is the same whether shardline is installed from a wheel or run from its
    repository, and the same bytes for the same inputs: an unchanged app does not roll its workers;
    an edit to the handler or to the library the worker runs does, an edit to the constructs does
    not. The Dockerfile's base is pinned by digest and every install is hash-checked (`pip install
    --require-hashes --no-deps`), shardline's own with `--no-index`. The tasks run on
    `cpu_architecture` (arm64, as the functions: cheaper per vCPU; the Dockerfile builds it on any
    machine without emulation). The escape hatch, for a team that builds its own image from its own
    folder: `build_context` (that folder, sent as it is less `NEVER_IN_CONTEXT` and its
    `.dockerignore`), `dockerfile` (in it; default `Dockerfile`) and `code` inside it, passed as the
    HANDLER build argument; or `image` (any `ecs.ContainerImage`).

    **Built once, promoted by digest.** A pipeline's first stage builds the image (`code`); the
    next stages run that very image by its digest, building nothing: `image_uri`
    (`<account>.dkr.ecr.<region>.amazonaws.com/<repository>@sha256:<digest>`, or another registry's
    `<repository>@sha256:<digest>`) or `image_repository` with `image_digest`. The execution role may
    pull from that repository alone. A tag is refused at synth: it moves; the digest is what the
    first stage tested. `image` takes a team's `ecs.ContainerImage` as it is.

    **Deployments.** The circuit breaker rolls a deployment back when its tasks do not start; new
    tasks start before old ones stop (100..200 %); a stopping worker gets SIGTERM and
    `stop_timeout_seconds` to finish its batch, checkpoint and release its leases.

    **Monitoring.** Pass the group to `Monitoring`: stalls, dead letters, failed records, lease losses
    that go on, lanes evicted from a shard's dedup state, `MillisBehindLatest` as its lag, and running
    tasks below the desired count (Container
    Insights metrics: `container_insights`, on for a cluster made here; a team's cluster needs it on)."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        name: str,
        stream: Stream,
        code: str | Path | None = None,
        image: ecs.ContainerImage | None = None,
        image_uri: str | None = None,
        image_repository: ecr.IRepository | None = None,
        image_digest: str | None = None,
        egress: Egress = "internet",
        handler_object: str = "app:function",
        build_context: str | Path | None = None,
        dockerfile: str | None = None,
        sinks: Sequence[Sink] = (),
        enhanced_fan_out: bool = False,
        consumer_name: str | None = None,
        worker_count: int = 2,
        cpu: int = 512,
        memory_mb: int = 1024,
        cpu_architecture: Architecture = "ARM64",
        lease_duration_seconds: int = 10,
        max_leases_per_worker: int | None = None,
        starting_position: str = "TRIM_HORIZON",
        max_attempts: int = 3,
        checkpoint_interval_seconds: float = 5.0,
        failure_detail: str = "fingerprint",
        stop_timeout_seconds: int = STOP_TIMEOUT_S,
        sink_ttl_days: int | None = None,
        dead_letter_readers: Sequence[str] = (),
        lease_table: dynamodb.ITable | None = None,
        dead_letters: sqs.IQueue | None = None,
        key: kms.IKey | None = None,
        vpc: ec2.IVpc | None = None,
        vpc_subnets: ec2.SubnetSelection | None = None,
        assign_public_ip: bool | None = None,
        security_groups: Sequence[ec2.ISecurityGroup] | None = None,
        cluster: ecs.ICluster | None = None,
        container_insights: bool = True,
        log_retention_days: int = 30,
        log_key: kms.IKey | None = None,
        access_logs: s3.IBucket | None = None,
        removal_policy: RemovalPolicy = RemovalPolicy.RETAIN,
        dead_letters_removal_policy: RemovalPolicy = RemovalPolicy.RETAIN,
        key_alias: str | None = None,
        metrics_namespace: str = "shardline",
        tags: Mapping[str, str] | None = None,
        vpc_props: Mapping[str, Any] | None = None,
        task_definition_props: Mapping[str, Any] | None = None,
        container_props: Mapping[str, Any] | None = None,
        service_props: Mapping[str, Any] | None = None,
        image_props: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        pin_feature_flags(self)
        where = rules.construct_prop("WorkerGroup", name)
        owner = f"WorkerGroup {name!r}"
        if not rules.CONSUMER_NAME.match(name) or len(name) > 64:
            raise ValueError(f"{owner}: name: must be 1-64 letters, digits, '_', '.' or '-'")
        for key_, prop, value, low, high in (
            ("count", "worker_count", worker_count, 1, 1000),
            ("leaseDurationSeconds", "lease_duration_seconds", lease_duration_seconds, 3, 300),
            ("maxAttempts", "max_attempts", max_attempts, rules.MIN_MAX_ATTEMPTS, 100),
            ("checkpointIntervalSeconds", "checkpoint_interval_seconds", checkpoint_interval_seconds,
             0.1, 900),
            ("stopTimeoutSeconds", "stop_timeout_seconds", stop_timeout_seconds, 2, 120),  # Fargate's most
        ):  # fmt: skip
            if key_ == "maxAttempts":
                rules.check_max_attempts(where, max_attempts)
            rules.within(where, key_, prop, value, low, high)
        if max_leases_per_worker is not None:
            rules.within(
                where, "maxLeasesPerWorker", "max_leases_per_worker", max_leases_per_worker, 1, 10000
            )
        rules.check_fargate_size(where, cpu, memory_mb)
        rules.check_handler_object(where, handler_object)
        rules.check_failure_detail(where, failure_detail)
        rules.check_worker_starting_position(where, starting_position)
        if cpu_architecture not in PLATFORMS:
            raise ValueError(f"{owner}: cpu_architecture: ARM64 or X86_64, got {cpu_architecture!r}")
        check_image_source(owner, code, image, image_uri, image_repository, image_digest)
        egress = check_egress(where, egress)
        if cluster is not None and vpc is not None:
            raise ValueError(f"{owner}: vpc: the tasks run in the cluster's VPC; give cluster or vpc")
        if dead_letters is not None and dead_letter_readers:
            raise ValueError(
                f"{owner}: dead_letter_readers: they guard the group's own DLQ; your dead_letters queue "
                "keeps its own policy"
            )
        self.name = name
        self.stream = stream
        self.metrics_namespace = metrics_namespace
        self.worker_count = worker_count
        self.max_attempts = max_attempts
        self.key = key or retained_key(
            self,
            "Key",
            description=f"shardline worker group {name}: tables, queue, dead letters",
            alias=key_alias,
        )
        self.leases = lease_table or new_lease_table(
            self, "Leases", removal_policy=removal_policy, key=self.key
        )
        self.sinks: tuple[dynamodb.ITable, ...] = tuple(
            self._sink_table(sink, index, removal_policy) for index, sink in enumerate(sinks)
        )
        self.sink: dynamodb.ITable | None = self.sinks[0] if self.sinks else None
        self._sink_specs = tuple(sinks)  # what each table's handler writes: its grants
        self._own_dead_letters = dead_letters is None
        self.dead_letters: sqs.IQueue = dead_letters or dead_letter_queue(
            self, "DeadLetters", key=self.key, removal_policy=dead_letters_removal_policy
        )
        #: Where its dead-letter bucket's access is logged: given, or made here.
        self.access_logs = access_logs if access_logs is not None else access_log_bucket(self, "AccessLogs")
        self.dead_letter_bucket = dead_letter_bucket(
            self, "DeadLetterBucket", key=self.key, prefix=f"{name}/",
            removal_policy=dead_letters_removal_policy, access_logs=self.access_logs,
        )  # fmt: skip
        #: How long a client-id guard must live (as a Lambda group's: `ConsumerGroup.guard_ttl_seconds`);
        #: a team's queue imported by ARN counts as SQS's longest retention.
        self.guard_ttl_seconds = guard_ttl_seconds(
            stream.retention_seconds, dead_letter_retention_seconds(self.dead_letters)
        )
        self.consumer = (
            register_consumer(self, stream, where, consumer_name or name) if enhanced_fan_out else None
        )
        self.log_key = log_key or logs_key(
            self, "LogsKey", description=f"shardline worker group {name}: logs", alias=None
        )
        try:
            retention = log_retention(log_retention_days)
        except ValueError as error:
            raise ValueError(f"{owner}: {error}") from None
        self.log_group = logs.LogGroup(
            self, "Logs", retention=retention, removal_policy=removal_policy, encryption_key=self.log_key
        )
        self.egress = egress
        self.vpc: ec2.IVpc = (
            cluster.vpc
            if cluster is not None
            else vpc
            or own_vpc(self, egress=egress, retention=retention, log_key=self.log_key, vpc_props=vpc_props)
        )
        made_here = cluster is None and vpc is None
        self.cluster: ecs.ICluster = cluster or ecs.Cluster(
            self,
            "Cluster",
            vpc=self.vpc,
            container_insights_v2=ecs.ContainerInsights.ENABLED
            if container_insights
            else ecs.ContainerInsights.DISABLED,
        )
        self.role = _task_role(self, "TaskRole")
        #: What ECS pulls the image and writes the logs with (CDK grants it exactly those).
        # No aws:SourceAccount on its trust: ECS documents the confused-deputy conditions for the task
        # role (`_task_role`, which has them), not for the execution role the agent pulls and logs with.
        self.execution_role = iam.Role(
            self, "ExecutionRole", assumed_by=iam.ServicePrincipal("ecs-tasks.amazonaws.com")
        )
        environment = self._environment(
            handler_object, starting_position, checkpoint_interval_seconds, failure_detail,
            lease_duration_seconds, max_leases_per_worker, sinks, sink_ttl_days,
        )  # fmt: skip
        self.task_definition = ecs.FargateTaskDefinition(
            self,
            "TaskDefinition",
            **{
                "cpu": cpu,
                "memory_limit_mib": memory_mb,
                "runtime_platform": ecs.RuntimePlatform(
                    cpu_architecture=ecs.CpuArchitecture.of(cpu_architecture),
                    operating_system_family=ecs.OperatingSystemFamily.LINUX,
                ),
                "task_role": self.role,
                "execution_role": self.execution_role,
                **(task_definition_props or {}),
            },
        )
        image = image or (
            asset_image(self, owner, code, build_context, dockerfile, cpu_architecture, image_props)
            if code is not None  # built by `cdk deploy`: the first stage
            else promoted_image(
                self,
                where,
                image_uri=image_uri,
                repository=image_repository,
                digest=image_digest,
                egress=egress,
            )
        )
        self.container = self._container(owner, image, environment, stop_timeout_seconds, container_props)
        self.security_groups = (
            list(security_groups)
            if security_groups is not None
            else [task_security_group(self, self.vpc, self.name)]
        )
        # A VPC of public subnets only (made here, or by another group whose cluster this one shares):
        # the tasks run in them with a public IP, as that VPC's own tasks do.
        public = made_here or not self.vpc.private_subnets
        subnets = vpc_subnets or task_subnets(egress, public)
        self.service = ecs.FargateService(
            self,
            "Service",
            **{
                "cluster": self.cluster,
                "task_definition": self.task_definition,
                "desired_count": worker_count,
                "min_healthy_percent": 100,
                "max_healthy_percent": 200,
                "circuit_breaker": ecs.DeploymentCircuitBreaker(enable=True, rollback=True),
                "assign_public_ip": (public and egress == "internet")
                if assign_public_ip is None
                else assign_public_ip,
                "vpc_subnets": subnets,
                "security_groups": self.security_groups,
                "enable_execute_command": False,
                "propagate_tags": ecs.PropagatedTagSource.SERVICE,
                "enable_ecs_managed_tags": True,
                "platform_version": ecs.FargatePlatformVersion.LATEST,
                **(service_props or {}),
            },
        )
        self._grant()
        if egress == "vpc-endpoints":
            #: The endpoints the tasks reach AWS through, one for each service their roles are granted.
            self.endpoints = add_endpoints(
                self, self.vpc, subnets, self.security_groups, [self.role, self.execution_role], owner
            )
        # The group's own queue (a team's keeps its policy) and its bucket.
        queues = (
            (self.dead_letters,)
            if isinstance(self.dead_letters, sqs.Queue) and self._own_dead_letters
            else ()
        )
        guard_dead_letters(self.role.role_arn, list(dead_letter_readers), queues, self.dead_letter_bucket)
        self._acknowledge()
        add_tags(self, tags)

    # -- what it is made of ---------------------------------------------------------------------

    def _sink_table(self, sink: Sink, index: int, removal_policy: RemovalPolicy) -> dynamodb.ITable:
        if sink.table is not None:
            return sink.table
        assert sink.partition_key is not None
        return table(
            self, "Sink" if index == 0 else f"Sink{index + 1}", sink.partition_key, sink.sort_key,
            removal_policy=removal_policy, key=self.key, ttl=sink.time_to_live_attribute,
            table_props=sink.table_props,
        )  # fmt: skip

    def _environment(
        self,
        handler_object: str,
        starting_position: str,
        checkpoint_interval_seconds: float,
        failure_detail: str,
        lease_duration_seconds: int,
        max_leases_per_worker: int | None,
        sinks: Sequence[Sink],
        sink_ttl_days: int | None,
    ) -> dict[str, str]:
        """The worker's environment contract, and the handler's variables a Lambda group sets too."""
        environment = {
            "SHARDLINE_GROUP": self.name,
            "SHARDLINE_STREAM": self.stream.stream_name,
            "SHARDLINE_HANDLER": handler_object,
            "LEASE_TABLE": self.leases.table_name,
            "DLQ_URL": self.dead_letters.queue_url,
            "DLQ_BUCKET": self.dead_letter_bucket.bucket_name,
            "MAX_ATTEMPTS": str(self.max_attempts),
            "CHECKPOINT_INTERVAL": f"{checkpoint_interval_seconds:g}",
            "FAILURE_DETAIL": failure_detail,
            "LEASE_DURATION_SECONDS": str(lease_duration_seconds),
            "INITIAL_POSITION": starting_position,
            "AWS_REGION": Aws.REGION,
            "POWERTOOLS_SERVICE_NAME": f"shardline-{self.name}",
            "POWERTOOLS_METRICS_NAMESPACE": self.metrics_namespace,
        }
        if self.sink is not None:
            environment["SINK_TABLE"] = self.sink.table_name
        if self.consumer is not None:
            environment["STREAM_CONSUMER_ARN"] = self.consumer.attr_consumer_arn
        if max_leases_per_worker is not None:
            environment["MAX_LEASES_PER_WORKER"] = str(max_leases_per_worker)
        declarations: tuple[SinkDeclaration, ...] = tuple(
            declaration
            for sink, table_ in zip(sinks, self.sinks, strict=True)
            if (declaration := sink.declaration(table_.table_name)) is not None
        )
        # The handler's variables as a Lambda group's function has them: one contract, one renderer.
        handler = ConsumerEnvironment(
            group=self.name,
            lease_table=self.leases.table_name,
            sinks=declarations,
            sink_ttl_days=sink_ttl_days,
            guard_ttl_seconds=self.guard_ttl_seconds,
        ).to_environ()
        environment.update({name: handler[name] for name in HANDLER_VARIABLES if name in handler})
        return environment

    def _container(
        self,
        owner: str,
        image: ecs.ContainerImage,
        environment: dict[str, str],
        stop_timeout_seconds: int,
        container_props: Mapping[str, Any] | None,
    ) -> ecs.ContainerDefinition:
        """The worker: not root, a read-only root filesystem (a writable /tmp), JSON logs and EMF
        metrics to the log group, and time to hand its leases back when stopped."""
        props = dict(container_props or {})
        extra = dict(props.pop("environment", None) or {})
        rules.refuse_own_variables(
            owner, "container_props.environment", sorted(set(extra) & {*WORKER_VARIABLES, *HANDLER_VARIABLES})
        )
        container = self.task_definition.add_container(
            "Worker",
            **{
                "container_name": "worker",
                "image": image,
                "essential": True,
                "user": WORKER_USER,
                "readonly_root_filesystem": True,
                "stop_timeout": Duration.seconds(stop_timeout_seconds),
                "logging": ecs.LogDrivers.aws_logs(
                    stream_prefix="worker",
                    log_group=self.log_group,
                    mode=ecs.AwsLogDriverMode.NON_BLOCKING,
                    max_buffer_size=LOG_BUFFER,
                ),
                **props,
            },
            environment={**extra, **environment},
        )
        self.task_definition.add_volume(name="tmp")
        container.add_mount_points(
            ecs.MountPoint(container_path="/tmp", source_volume="tmp", read_only=False)
        )
        return container

    def _grant(self) -> None:
        """What the worker calls, on the group's own resources and its stream, and nothing else."""
        role = self.role
        self.leases.grant(role, *LEASE_ACTIONS)
        for spec, sink in zip(self._sink_specs, self.sinks, strict=True):
            spec.grant(sink, role)  # what its declared writes call (`Sink.writes`), nothing more
        for table_ in (self.leases, *self.sinks):
            if table_.encryption_key is not None and table_.encryption_key is not self.key:
                grant_via(role, "dynamodb", ["kms:Decrypt"], table_.encryption_key)
        role.add_to_principal_policy(
            iam.PolicyStatement(actions=["sqs:SendMessage"], resources=[self.dead_letters.queue_arn])
        )
        # Dead letters over SQS's 1 MiB: PutObject only (no read, delete or tagging).
        role.add_to_principal_policy(
            iam.PolicyStatement(
                actions=["s3:PutObject"], resources=[self.dead_letter_bucket.arn_for_objects("*")]
            )
        )
        queue_key = self.dead_letters.encryption_master_key
        if queue_key is not None and queue_key is not self.key:
            grant_via(role, "sqs", list(KEY_ACTIONS_VIA["sqs"]), queue_key)
        for service, actions in KEY_ACTIONS_VIA.items():
            grant_via(role, service, list(actions), self.key)
        role.add_to_principal_policy(
            iam.PolicyStatement(actions=list(STREAM_ACTIONS), resources=[self.stream.stream_arn])
        )
        if self.consumer is not None:  # each shard through the group's own consumer, and only it
            role.add_to_principal_policy(
                iam.PolicyStatement(
                    actions=list(CONSUMER_ACTIONS), resources=[self.consumer.attr_consumer_arn]
                )
            )
        if self.stream.key is not None:  # GetRecords, and SubscribeToShard's events
            grant_via(role, "kinesis", ["kms:Decrypt"], self.stream.key)

    def _acknowledge(self) -> None:
        """The findings this group's own choices raise, on its own resources."""
        if self._own_dead_letters:
            acknowledge_rules(self.dead_letters, DEAD_LETTER_QUEUE)
        acknowledge_rules(self.task_definition, WORKER_TASK)
        acknowledge_rules(self.execution_role, EXECUTION_ROLE)
        acknowledge_dead_letter_objects(self, self.dead_letter_bucket)


#: The task definition's container: its environment.
WORKER_TASK = {
    "AwsSolutions::AwsSolutions-ECS2": "The variables are the worker's settings and the names of its "
    "stream, stream consumer, tables, queue and bucket (shardline's environment contract, as its "
    "functions have); no secret.",
}
#: The execution role ECS pulls the image and writes the logs with.
EXECUTION_ROLE = {
    "AwsSolutions::AwsSolutions-IAM5[Resource::*]": "ecr:GetAuthorizationToken, which has no "
    "resource-level permission; the image's pull actions are on its repository only.",
}


def _task_role(scope: Construct, construct_id: str) -> iam.Role:
    """The worker's role, which ECS tasks of this account and region alone may assume (no confused
    deputy, as ECS's task role documentation advises)."""
    return iam.Role(
        scope,
        construct_id,
        assumed_by=iam.ServicePrincipal(
            "ecs-tasks.amazonaws.com",
            conditions={
                "StringEquals": {"aws:SourceAccount": Aws.ACCOUNT_ID},
                "ArnLike": {"aws:SourceArn": f"arn:{Aws.PARTITION}:ecs:{Aws.REGION}:{Aws.ACCOUNT_ID}:*"},
            },
        ),
    )
