"""`shardline.cdk.WorkerGroup`: a consumer group driven by `shardline worker` tasks on ECS Fargate.

The service and its task definition (shardline's Dockerfile as an image asset, staged at synth
and never built; the worker's environment contract; not root; time to hand its leases back), least
privilege on its task role, the dead-letter bucket for letters over SQS's 1 MiB, enhanced fan-out
through a stream consumer of the group's own, the team's own VPC, cluster and lease table taken,
its alarms and dashboard, cdk-nag clean with a reason for every acknowledgement; the
configuration's `"driver": "workers"` groups and the refusals that keep a group driven one way; and
the Dockerfile's pins, which are the lock files'."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest
from aws_cdk import Acknowledgment, Duration, Stack, Validations
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_ecs as ecs
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sqs as sqs
from aws_cdk.assertions import Template

from app import build
from shardline.cdk import (
    ConfigError,
    ConsumerGroup,
    Layers,
    Monitoring,
    Sink,
    Stream,
    WorkerGroup,
    load_config,
)
from shardline.cdk._config_groups import LAMBDA_ONLY_KEYS
from shardline.cdk._consumer_group import CONSUMER_ACTIONS
from shardline.cdk._group_rules import MAX_STREAM_CONSUMERS
from shardline.cdk._layers import RUNTIME
from shardline.cdk._worker_group import (
    HANDLER_VARIABLES,
    LEASE_ACTIONS,
    NEVER_IN_CONTEXT,
    STREAM_ACTIONS,
    WORKER_USER,
    WORKER_VARIABLES,
)
from shardline.consumer._sink_writes import ALL_SINK_WRITES, sink_actions
from tests.support.cdk import ORDERS_ARN, actions_on, alone, default_context, resources, statements

ROOT = Path(__file__).resolve().parents[2]
IMAGE_FILES = ROOT / "layers" / "shardline" / "python" / "shardline" / "cdk" / "worker_image"
DOCKERFILE = IMAGE_FILES / "Dockerfile"
HANDLER = "functions/event_sink"
#: A sink declared with no `writes`: every kind the consumer's API can produce.
SINK_ACTIONS = sink_actions(ALL_SINK_WRITES)
STRING = dynamodb.AttributeType.STRING


def worker_in(stack: Stack, **props: Any) -> WorkerGroup:
    stream = props.pop("stream", None) or Stream.from_stream_arn(stack, "Orders", ORDERS_ARN)
    defaults: dict[str, Any] = {"code": HANDLER}
    return WorkerGroup(stack, "Workers", name="order-workers", stream=stream, **{**defaults, **props})


def events_sink() -> Sink:
    return Sink.create(
        dynamodb.Attribute(name="pk", type=STRING),
        dynamodb.Attribute(name="sk", type=STRING),
        holds="records",
        time_to_live_attribute="expiresAt",
    )


@pytest.fixture(scope="module")
def synthesized(tmp_path_factory) -> tuple[Template, Path]:
    """One group with everything made for it and a sink, synthesized with cdk-nag; its assembly."""
    outdir = tmp_path_factory.mktemp("cdk.out")
    template = alone(lambda stack: worker_in(stack, sinks=[events_sink()], sink_ttl_days=30), outdir=outdir)
    return template, outdir


@pytest.fixture(scope="module")
def template(synthesized) -> Template:
    return synthesized[0]


def only(template: Template, kind: str) -> tuple[str, dict[str, Any]]:
    [(logical_id, resource)] = resources(template, kind).items()
    return logical_id, resource["Properties"]


def container(template: Template) -> dict[str, Any]:
    [definition] = only(template, "AWS::ECS::TaskDefinition")[1]["ContainerDefinitions"]
    found: dict[str, Any] = definition
    return found


def environment(template: Template) -> dict[str, Any]:
    return {variable["Name"]: variable["Value"] for variable in container(template)["Environment"]}


def dead_letter_bucket_id(template: Template) -> str:
    [lid] = [
        lid for lid in resources(template, "AWS::S3::Bucket") if lid.startswith("WorkersDeadLetterBucket")
    ]
    return lid


def table_id(template: Template, first_key: str) -> str:
    [lid] = [
        lid
        for lid, table in resources(template, "AWS::DynamoDB::Table").items()
        if table["Properties"]["KeySchema"][0]["AttributeName"] == first_key
    ]
    return lid


# -- the service and its tasks ------------------------------------------------------------------


def test_the_service_runs_the_workers_on_fargate_rolled_back_when_they_do_not_start(template):
    _, service = only(template, "AWS::ECS::Service")
    assert service["DesiredCount"] == 2 and service["LaunchType"] == "FARGATE"
    deployment = service["DeploymentConfiguration"]
    assert deployment["DeploymentCircuitBreaker"] == {"Enable": True, "Rollback": True}
    assert (deployment["MinimumHealthyPercent"], deployment["MaximumPercent"]) == (100, 200)
    assert service["EnableExecuteCommand"] is False
    assert not service.get("LoadBalancers"), "nothing calls a worker"
    assert not resources(template, "AWS::ElasticLoadBalancingV2::LoadBalancer")
    _, cluster = only(template, "AWS::ECS::Cluster")
    assert {"Name": "containerInsights", "Value": "enabled"} in cluster["ClusterSettings"]


def test_a_vpc_of_its_own_has_public_subnets_only_no_nat_gateway_and_tasks_with_a_public_ip(template):
    assert not resources(template, "AWS::EC2::NatGateway")
    subnets = resources(template, "AWS::EC2::Subnet").values()
    assert len(subnets) == 2 and all(s["Properties"]["MapPublicIpOnLaunch"] for s in subnets)
    network = only(template, "AWS::ECS::Service")[1]["NetworkConfiguration"]["AwsvpcConfiguration"]
    assert network["AssignPublicIp"] == "ENABLED"
    _, group = only(template, "AWS::EC2::SecurityGroup")
    assert "SecurityGroupIngress" not in group
    assert group["SecurityGroupEgress"] == [
        {"CidrIp": "0.0.0.0/0", "Description": "AWS APIs over HTTPS", "FromPort": 443, "IpProtocol": "tcp",
         "ToPort": 443}
    ]  # fmt: skip
    endpoints = [e["Properties"] for e in resources(template, "AWS::EC2::VPCEndpoint").values()]
    assert {e["VpcEndpointType"] for e in endpoints} == {"Gateway"}, "free ones only"
    names = json.dumps([e["ServiceName"] for e in endpoints])
    assert len(endpoints) == 2 and ".dynamodb" in names and ".s3" in names
    assert only(template, "AWS::EC2::FlowLog")[1]["TrafficType"] == "ALL"


def test_the_task_runs_shardline_worker_as_non_root_with_time_to_release_its_leases(template):
    _, task = only(template, "AWS::ECS::TaskDefinition")
    assert (task["Cpu"], task["Memory"]) == ("512", "1024")
    assert task["RuntimePlatform"] == {"CpuArchitecture": "ARM64", "OperatingSystemFamily": "LINUX"}
    worker = container(template)
    assert worker["User"] == WORKER_USER and not worker["User"].startswith("0")
    assert worker["StopTimeout"] == 60
    assert worker["ReadonlyRootFilesystem"] is True
    assert worker["MountPoints"] == [{"ContainerPath": "/tmp", "ReadOnly": False, "SourceVolume": "tmp"}]
    logging = worker["LogConfiguration"]
    assert logging["LogDriver"] == "awslogs" and logging["Options"]["mode"] == "non-blocking"
    [(logs_id, log_group)] = [
        (lid, lg)
        for lid, lg in resources(template, "AWS::Logs::LogGroup").items()
        if lid.startswith("WorkersLogs")
    ]
    assert logging["Options"]["awslogs-group"] == {"Ref": logs_id}
    assert log_group["Properties"]["RetentionInDays"] == 30 and "KmsKeyId" in log_group["Properties"]


def test_the_image_is_shardline_s_dockerfile_staged_at_synth_with_the_handler_s_folder(synthesized):
    _, outdir = synthesized
    assets = json.loads((outdir / "Alone.assets.json").read_text())
    [image] = assets["dockerImages"].values()
    source = image["source"]
    assert source["dockerFile"] == "Dockerfile"
    assert source["dockerBuildArgs"] == {"HANDLER": "handler"}
    assert source["platform"] == "linux/arm64"
    staged = outdir / source["directory"]
    files = {path.relative_to(staged).as_posix() for path in staged.rglob("*") if path.is_file()}
    # Its own context: shardline's Dockerfile and lock, its wheel pinned by shardline.lock, and the
    # handler's folder alone of the app (no tests, caches, environments: NEVER_IN_CONTEXT).
    [wheel] = [f for f in files if f.endswith(".whl")]
    handler = {f"handler/{p.relative_to(ROOT / HANDLER).as_posix()}" for p in (ROOT / HANDLER).rglob("*")
               if p.is_file() and "__pycache__" not in p.parts}  # fmt: skip
    assert files == {"Dockerfile", "requirements.lock", "shardline.lock", wheel, *handler}
    assert "handler/app.py" in files
    assert (staged / "Dockerfile").read_bytes() == DOCKERFILE.read_bytes()
    with zipfile.ZipFile(staged / wheel) as archive:
        packed = archive.namelist()
    assert "shardline/_cli.py" in packed and "shardline/consumer/_worker.py" in packed
    # Neither the constructs nor the local runtime (which never run in a worker).
    assert not [f for f in packed if f.startswith(("shardline/cdk/", "shardline/local/"))]
    for name in NEVER_IN_CONTEXT:
        pattern = re.compile(name.replace(".", r"\.").replace("*", ".*"))
        assert not [f for f in files if any(pattern.fullmatch(part) for part in f.split("/"))], name
    template = Template.from_json(json.loads((outdir / "Alone.template.json").read_text()))
    assert next(iter(assets["dockerImages"])) in json.dumps(container(template)["Image"])


def test_the_environment_is_the_worker_s_contract(template):
    env = environment(template)
    unset = {"MAX_LEASES_PER_WORKER", "STREAM_CONSUMER_ARN"}  # no limit given, no enhanced fan-out
    assert set(env) == (set(WORKER_VARIABLES) - unset) | set(HANDLER_VARIABLES)
    assert env["SHARDLINE_GROUP"] == "order-workers"
    assert env["SHARDLINE_STREAM"] == "orders"
    assert env["SHARDLINE_HANDLER"] == "app:function"
    assert env["LEASE_TABLE"] == {"Ref": table_id(template, "leaseKey")}
    assert env["SINK_TABLE"] == {"Ref": table_id(template, "pk")}
    assert env["DLQ_URL"] == {"Ref": only(template, "AWS::SQS::Queue")[0]}
    assert env["DLQ_BUCKET"] == {"Ref": dead_letter_bucket_id(template)}
    assert (env["MAX_ATTEMPTS"], env["CHECKPOINT_INTERVAL"], env["LEASE_DURATION_SECONDS"]) == (
        "3",
        "5",
        "10",
    )
    assert env["INITIAL_POSITION"] == "TRIM_HORIZON"
    assert env["AWS_REGION"] == {"Ref": "AWS::Region"}
    assert env["POWERTOOLS_SERVICE_NAME"] == "shardline-order-workers"
    assert env["POWERTOOLS_METRICS_NAMESPACE"] == "shardline"
    assert env["SINK_TTL_DAYS"] == "30"  # the handler's (functions/event_sink reads it)


def test_the_worker_settings_reach_the_environment_and_the_task():
    template = alone(
        lambda stack: worker_in(
            stack, worker_count=5, cpu=1024, memory_mb=4096, lease_duration_seconds=20,
            max_leases_per_worker=3, handler_object="app:consumer", starting_position="LATEST",
            stop_timeout_seconds=90, cpu_architecture="X86_64",
        )
    )  # fmt: skip
    env = environment(template)
    assert env["LEASE_DURATION_SECONDS"] == "20" and env["MAX_LEASES_PER_WORKER"] == "3"
    assert env["SHARDLINE_HANDLER"] == "app:consumer" and env["INITIAL_POSITION"] == "LATEST"
    assert "SINK_TABLE" not in env and "SHARDLINE_SINKS" not in env, "no sink: none named"
    _, task = only(template, "AWS::ECS::TaskDefinition")
    assert (task["Cpu"], task["Memory"], task["RuntimePlatform"]["CpuArchitecture"]) == (
        "1024",
        "4096",
        "X86_64",
    )
    assert container(template)["StopTimeout"] == 90
    assert only(template, "AWS::ECS::Service")[1]["DesiredCount"] == 5


# -- least privilege ------------------------------------------------------------------------------


def listed(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def test_no_policy_allows_a_wildcard_action(template):
    actions = [action for statement in statements(template) for action in listed(statement["Action"])]
    assert actions and not [action for action in actions if "*" in action]


def test_the_task_role_may_do_what_the_worker_calls_on_the_group_s_own_and_nothing_more(template):
    leases, sink = table_id(template, "leaseKey"), table_id(template, "pk")
    assert "dynamodb:Scan" in LEASE_ACTIONS
    assert actions_on(template, {"Fn::GetAtt": [leases, "Arn"]}) == set(LEASE_ACTIONS)
    assert actions_on(template, {"Fn::GetAtt": [sink, "Arn"]}) == set(SINK_ACTIONS)
    assert actions_on(template, ORDERS_ARN) == set(STREAM_ACTIONS)
    queue = only(template, "AWS::SQS::Queue")[0]
    assert actions_on(template, {"Fn::GetAtt": [queue, "Arn"]}) == {"sqs:SendMessage"}
    task_statements = task_role_statements(template)
    for statement in task_statements:
        assert "*" not in listed(statement["Resource"]), statement
        if any(action.startswith("kms:") for action in listed(statement["Action"])):
            assert "kms:ViaService" in json.dumps(statement["Condition"]), statement
    granted = json.dumps(task_statements)
    for absent in ("kinesis:SubscribeToShard", "kinesis:DescribeStreamConsumer", "kinesis:ListStreams",
                   "kms:Encrypt", "s3:GetObject", "s3:DeleteObject", "logs:"):  # fmt: skip
        assert absent not in granted, absent
    s3_actions = {a for st in task_statements for a in listed(st["Action"]) if a.startswith("s3:")}
    assert s3_actions == {"s3:PutObject"}, "what DeadLetterQueue calls with the bucket, and nothing more"
    role = task_role_id(template)
    trust = resources(template, "AWS::IAM::Role")[role]["Properties"]["AssumeRolePolicyDocument"]
    [assume] = trust["Statement"]
    assert assume["Principal"] == {"Service": "ecs-tasks.amazonaws.com"}
    assert "aws:SourceAccount" in json.dumps(assume["Condition"])


def task_role_id(template: Template) -> str:
    return next(lid for lid in resources(template, "AWS::IAM::Role") if lid.startswith("WorkersTaskRole"))


def task_role_statements(template: Template) -> list[dict[str, Any]]:
    role = task_role_id(template)
    return [
        statement
        for policy in resources(template, "AWS::IAM::Policy").values()
        if {"Ref": role} in policy["Properties"]["Roles"]
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]
    ]


def test_only_the_worker_may_write_its_dead_letters_and_no_other_account_touch_them(template):
    _, policy = only(template, "AWS::SQS::QueuePolicy")
    sids = {statement.get("Sid") for statement in policy["PolicyDocument"]["Statement"]}
    assert {"OnlyTheGroupWrites", "OnlyThisAccount"} <= sids
    bucket = dead_letter_bucket_id(template)
    [bucket_policy] = [
        p["Properties"]
        for p in resources(template, "AWS::S3::BucketPolicy").values()
        if p["Properties"]["Bucket"] == {"Ref": bucket}
    ]
    by_sid = {s.get("Sid"): s for s in bucket_policy["PolicyDocument"]["Statement"]}
    writers = by_sid["OnlyTheGroupWrites"]
    assert writers["Effect"] == "Deny" and writers["Action"] == "s3:PutObject"
    assert writers["Condition"]["ArnNotEquals"]["aws:PrincipalArn"] == [
        {"Fn::GetAtt": [task_role_id(template), "Arn"]}
    ]
    assert by_sid["OnlyThisAccount"]["Action"] == "s3:*"
    assert any(
        s.get("Condition") == {"Bool": {"aws:SecureTransport": "false"}} and s["Effect"] == "Deny"
        for s in bucket_policy["PolicyDocument"]["Statement"]
    ), "TLS only"


def test_a_dead_letter_over_sqs_s_limit_goes_whole_to_a_bucket_as_a_lambda_group_s(template):
    bucket = resources(template, "AWS::S3::Bucket")[dead_letter_bucket_id(template)]["Properties"]
    [rule] = bucket["BucketEncryption"]["ServerSideEncryptionConfiguration"]
    assert rule["ServerSideEncryptionByDefault"]["SSEAlgorithm"] == "aws:kms"
    key = rule["ServerSideEncryptionByDefault"]["KMSMasterKeyID"]["Fn::GetAtt"][0]
    assert key.startswith("WorkersKey"), "the group's own key, as its tables and queue"
    assert rule["BucketKeyEnabled"] is True
    assert all(bucket["PublicAccessBlockConfiguration"].values())
    assert bucket["OwnershipControls"] == {"Rules": [{"ObjectOwnership": "BucketOwnerEnforced"}]}
    [expiry] = bucket["LifecycleConfiguration"]["Rules"]
    assert expiry["ExpirationInDays"] == 14, "the queue's retention"
    queue = only(template, "AWS::SQS::Queue")[1]
    assert queue["MessageRetentionPeriod"] == 14 * 24 * 3600
    logging = bucket["LoggingConfiguration"]
    assert logging["LogFilePrefix"] == "order-workers/"
    assert logging["DestinationBucketName"]["Ref"].startswith("WorkersAccessLogs")
    bucket_arn = {"Fn::GetAtt": [dead_letter_bucket_id(template), "Arn"]}
    objects = {"Fn::Join": ["", [bucket_arn, "/*"]]}
    assert actions_on(template, objects) == {"s3:PutObject"}
    via_s3 = [s for s in task_role_statements(template) if '"s3."' in json.dumps(s.get("Condition"))]
    assert [listed(s["Action"]) for s in via_s3] == [["kms:GenerateDataKey"]], "PutObject under SSE-KMS"


def test_every_acknowledged_finding_carries_its_reason(tmp_path):
    alone(lambda stack: worker_in(stack, sinks=[events_sink()]), outdir=tmp_path)
    report = json.loads((tmp_path / "validation-report.json").read_text())
    suppressed = [
        violation
        for plugin in report["pluginReports"]
        for violation in plugin.get("suppressedViolations", [])
        if any("/Workers/" in c["constructPath"] for c in violation["violatingConstructs"])
    ]
    bucket_objects = "AwsSolutions-IAM5[Resource::<WorkersDeadLetterBucketA4EE99A7.Arn>/*]"
    assert {v["ruleName"] for v in suppressed} == {
        "AwsSolutions-ECS2",
        "AwsSolutions-SQS3",
        "AwsSolutions-IAM5[Resource::*]",
        bucket_objects,  # PutObject on the dead letters' keys
    }
    assert all(len(v["reason"]) > 40 for v in suppressed), suppressed


# -- enhanced fan-out ------------------------------------------------------------------------------


def test_enhanced_fan_out_registers_the_group_s_consumer_and_grants_its_actions_on_it_alone():
    def build_(stack: Stack) -> None:
        worker_in(
            stack, stream=Stream(stack, "Events", stream_name="events", shards=2), enhanced_fan_out=True
        )

    template = alone(build_)
    [(consumer_id, consumer)] = resources(template, "AWS::Kinesis::StreamConsumer").items()
    [stream_id] = resources(template, "AWS::Kinesis::Stream")
    stream_arn = {"Fn::GetAtt": [stream_id, "Arn"]}
    assert consumer["Properties"] == {"ConsumerName": "order-workers", "StreamARN": stream_arn}
    consumer_arn = {"Fn::GetAtt": [consumer_id, "ConsumerARN"]}
    assert environment(template)["STREAM_CONSUMER_ARN"] == consumer_arn
    assert actions_on(template, consumer_arn) == set(CONSUMER_ACTIONS)
    assert actions_on(template, stream_arn) == set(STREAM_ACTIONS), "the stream's grants as without"
    task_statements = task_role_statements(template)
    for statement in task_statements:
        if set(listed(statement["Action"])) & set(CONSUMER_ACTIONS):
            assert listed(statement["Resource"]) == [consumer_arn], statement
    # The stream's key, through Kinesis: SubscribeToShard's events are decrypted as GetRecords' are.
    [key_id] = [lid for lid in resources(template, "AWS::KMS::Key") if lid.startswith("Events")]
    assert any(
        listed(s["Resource"]) == [{"Fn::GetAtt": [key_id, "Arn"]}]
        and listed(s["Action"]) == ["kms:Decrypt"]
        and "kinesis." in json.dumps(s["Condition"])
        for s in task_statements
    )


def test_a_consumer_name_names_the_group_s_consumer():
    template = alone(lambda stack: worker_in(stack, enhanced_fan_out=True, consumer_name="orders-efo"))
    [consumer] = resources(template, "AWS::Kinesis::StreamConsumer").values()
    assert consumer["Properties"] == {"ConsumerName": "orders-efo", "StreamARN": ORDERS_ARN}


def test_without_enhanced_fan_out_no_consumer_is_registered_and_none_is_named(template):
    assert resources(template, "AWS::Kinesis::StreamConsumer") == {}
    assert "STREAM_CONSUMER_ARN" not in environment(template)
    assert "kinesis:SubscribeToShard" not in json.dumps(task_role_statements(template))


def test_worker_and_lambda_groups_share_a_stream_s_consumer_limit_and_wait_for_each_other():
    inline = lambda_.Code.from_inline("def handler(event, context):\n    return {}\n")

    def lambda_groups(stack: Stack, stream: Stream, count: int) -> None:
        layers = Layers(stack, "Layers")
        for index in range(count):
            ConsumerGroup(
                stack, f"G{index}", name=f"group-{index}", stream=stream, layers=layers, code=inline,
                handler="index.handler", enhanced_fan_out=True,
            )  # fmt: skip

    def two(stack: Stack) -> None:
        stream = Stream.from_stream_arn(stack, "Orders", ORDERS_ARN)
        lambda_groups(stack, stream, 1)
        worker_in(stack, stream=stream, enhanced_fan_out=True)

    consumers = resources(alone(two), "AWS::Kinesis::StreamConsumer")
    [worker_consumer] = [lid for lid in consumers if lid.startswith("Workers")]
    [lambda_consumer] = [lid for lid in consumers if lid.startswith("G0")]
    assert consumers[worker_consumer]["DependsOn"] == [lambda_consumer], "Kinesis creates 5 at a time"

    def too_many(stack: Stack) -> None:
        stream = Stream.from_stream_arn(stack, "Orders", ORDERS_ARN)
        lambda_groups(stack, stream, MAX_STREAM_CONSUMERS)
        worker_in(stack, stream=stream, enhanced_fan_out=True)

    with pytest.raises(
        ValueError, match=r"^WorkerGroup 'order-workers': enhanced_fan_out: the stream already has 20"
    ):
        alone(too_many, nag=False)

    def same_name(stack: Stack) -> None:
        stream = Stream.from_stream_arn(stack, "Orders", ORDERS_ARN)
        lambda_groups(stack, stream, 1)
        worker_in(stack, stream=stream, enhanced_fan_out=True, consumer_name="group-0")

    with pytest.raises(ValueError, match=r"^WorkerGroup 'order-workers': consumer_name: the stream already"):
        alone(same_name, nag=False)


# -- the team's own resources ---------------------------------------------------------------------


def test_the_team_s_vpc_puts_the_tasks_in_its_private_subnets_without_a_public_ip():
    def build_(stack: Stack) -> None:
        vpc = ec2.Vpc(stack, "TeamVpc", max_azs=2, nat_gateways=1, restrict_default_security_group=False)
        ec2.FlowLog(stack, "TeamFlowLog", resource_type=ec2.FlowLogResourceType.from_vpc(vpc))
        worker_in(stack, vpc=vpc)

    template = alone(build_)
    assert len(resources(template, "AWS::EC2::VPC")) == 1, "the team's; none made"
    network = only(template, "AWS::ECS::Service")[1]["NetworkConfiguration"]["AwsvpcConfiguration"]
    assert network["AssignPublicIp"] == "DISABLED"
    private = {
        lid
        for lid, subnet in resources(template, "AWS::EC2::Subnet").items()
        if not subnet["Properties"]["MapPublicIpOnLaunch"]
    }
    assert {s["Ref"] for s in network["Subnets"]} == private and private


def test_two_groups_share_the_cluster_one_of_them_made_in_its_public_subnets():
    """A team gives its second group the first one's cluster: that VPC has public subnets only (no NAT),
    so the second group's tasks run there with a public IP too, as the first's, not in private
    subnets the VPC does not have."""

    def build_(stack: Stack) -> None:
        first = worker_in(stack)
        stream = Stream.from_stream_arn(stack, "Others", ORDERS_ARN.replace("/orders", "/others"))
        WorkerGroup(stack, "Second", name="second", stream=stream, code=HANDLER, cluster=first.cluster)

    template = alone(build_, nag=False)
    assert len(resources(template, "AWS::EC2::VPC")) == len(resources(template, "AWS::ECS::Cluster")) == 1
    public = {lid for lid, subnet in resources(template, "AWS::EC2::Subnet").items()
              if subnet["Properties"]["MapPublicIpOnLaunch"]}  # fmt: skip
    for service in resources(template, "AWS::ECS::Service").values():
        network = service["Properties"]["NetworkConfiguration"]["AwsvpcConfiguration"]
        assert network["AssignPublicIp"] == "ENABLED"
        assert {s["Ref"] for s in network["Subnets"]} == public and public


def test_the_team_s_cluster_lease_table_and_dead_letter_queue_are_taken_and_granted():
    def build_(stack: Stack) -> None:
        vpc = ec2.Vpc(stack, "TeamVpc", max_azs=2, nat_gateways=1, restrict_default_security_group=False)
        ec2.FlowLog(stack, "TeamFlowLog", resource_type=ec2.FlowLogResourceType.from_vpc(vpc))
        cluster = ecs.Cluster(
            stack, "TeamCluster", vpc=vpc, container_insights_v2=ecs.ContainerInsights.ENABLED
        )
        leases = dynamodb.Table(
            stack, "TeamLeases", partition_key=dynamodb.Attribute(name="leaseKey", type=STRING),
            point_in_time_recovery_specification=dynamodb.PointInTimeRecoverySpecification(
                point_in_time_recovery_enabled=True
            ),
        )  # fmt: skip
        dead_letters = sqs.Queue(
            stack, "TeamDeadLetters", encryption=sqs.QueueEncryption.KMS_MANAGED, enforce_ssl=True,
            retention_period=Duration.days(14),
        )  # fmt: skip
        Validations.of(dead_letters).acknowledge(
            Acknowledgment(id="AwsSolutions::AwsSolutions-SQS3", reason="The team's DLQ: a DLQ itself.")
        )
        worker_in(stack, cluster=cluster, lease_table=leases, dead_letters=dead_letters)

    template = alone(build_)
    [queue] = resources(template, "AWS::SQS::Queue")
    assert queue.startswith("TeamDeadLetters") and environment(template)["DLQ_URL"] == {"Ref": queue}
    assert actions_on(template, {"Fn::GetAtt": [queue, "Arn"]}) == {"sqs:SendMessage"}
    [(cluster_id, _)] = resources(template, "AWS::ECS::Cluster").items()
    assert cluster_id.startswith("TeamCluster")
    assert only(template, "AWS::ECS::Service")[1]["Cluster"] == {"Ref": cluster_id}
    [leases] = resources(template, "AWS::DynamoDB::Table")
    assert leases.startswith("TeamLeases")
    assert environment(template)["LEASE_TABLE"] == {"Ref": leases}
    assert actions_on(template, {"Fn::GetAtt": [leases, "Arn"]}) == set(LEASE_ACTIONS)


def test_overrides_reach_the_service_the_task_and_the_container():
    template = alone(
        lambda stack: worker_in(
            stack,
            service_props={"service_name": "order-workers", "min_healthy_percent": 50},
            task_definition_props={"family": "order-workers"},
            container_props={"environment": {"TEAM_SETTING": "on"}, "readonly_root_filesystem": False},
            tags={"cost-centre": "orders"},
        )
    )
    _, service = only(template, "AWS::ECS::Service")
    assert service["ServiceName"] == "order-workers"
    assert service["DeploymentConfiguration"]["MinimumHealthyPercent"] == 50
    assert only(template, "AWS::ECS::TaskDefinition")[1]["Family"] == "order-workers"
    assert environment(template)["TEAM_SETTING"] == "on"
    assert container(template)["ReadonlyRootFilesystem"] is False
    assert {"Key": "cost-centre", "Value": "orders"} in service["Tags"]


@pytest.mark.parametrize(
    ("props", "message"),
    [
        ({"code": None}, r"give either code .* or image"),
        ({"image": ecs.ContainerImage.from_registry("team/worker:1")}, r"give either code .* or image"),
        ({"code": "/tmp", "build_context": ROOT}, r"code: /tmp must be a folder inside the build context"),
        (
            {"code": ".", "build_context": ROOT},
            r"code: \. must be a folder inside the build context .* not the",
        ),
        (
            {"code": "."},
            r"code: \. is the app's folder, or holds or is in its output folder .*the handler's own",
        ),
        ({"code": "/"}, r"code: / is the app's folder, or holds or is in its output folder"),
        ({"cpu": 300}, r"WorkerGroup 'order-workers': cpu: must be one of 256, 512"),
        ({"cpu": 256, "memory_mb": 4096}, r"memory_mb: with 256 CPU units Fargate takes 512, 1024, 2048 MiB"),
        ({"starting_position": "AT_TIMESTAMP"}, r"starting_position: .* TRIM_HORIZON or LATEST"),
        ({"handler_object": "app.function"}, r"handler_object: must be module:attribute"),
        ({"worker_count": 0}, r"worker_count: must be within 1\.\.1000"),
        ({"stop_timeout_seconds": 300}, r"stop_timeout_seconds: must be within 2\.\.120"),
        ({"max_attempts": 1}, r"max_attempts: must be at least 2"),
        (
            {"enhanced_fan_out": True, "consumer_name": "no spaces"},
            r"consumer_name: 'no spaces' is no Kinesis consumer name",
        ),
        (
            {"container_props": {"environment": {"LEASE_TABLE": "x"}}},
            r"container_props\.environment: LEASE_TABLE \(set from what the construct makes or derives\)",
        ),
        ({"failure_detail": "all"}, r"failure_detail: must be one of fingerprint, message"),
        (
            {"container_props": {"environment": {"FAILURE_DETAIL": "message"}}},
            r"container_props\.environment: FAILURE_DETAIL \(set by failure_detail=\)",
        ),
    ],
)
def test_the_construct_refuses_what_would_not_run(props, message):
    with pytest.raises(ValueError, match=message):
        alone(lambda stack: worker_in(stack, **props), nag=False)


def test_6_failure_detail_is_a_prop_that_reaches_the_worker():
    assert (
        environment(alone(lambda stack: worker_in(stack, failure_detail="message")))["FAILURE_DETAIL"]
        == "message"
    )
    assert environment(alone(lambda stack: worker_in(stack)))["FAILURE_DETAIL"] == "fingerprint"


def test_a_team_image_is_taken_as_it_is():
    template = alone(
        lambda stack: worker_in(stack, code=None, image=ecs.ContainerImage.from_registry("team/w:1"))
    )
    assert container(template)["Image"] == "team/w:1"
    assert set(environment(template)) >= {"SHARDLINE_GROUP", "SHARDLINE_HANDLER", "LEASE_TABLE"}


# -- monitoring -------------------------------------------------------------------------------


def test_monitoring_alarms_on_a_worker_group_s_stalls_dead_letters_lease_losses_lag_and_missing_workers():
    def build_(stack: Stack) -> None:
        group = worker_in(stack, stream=Stream(stack, "Events", stream_name="events", shards=2))
        Monitoring(stack, "Monitoring", streams=[group.stream], groups=[group], dashboard_name="orders")

    template = alone(build_)
    alarms = {
        lid: alarm["Properties"]
        for lid, alarm in resources(template, "AWS::CloudWatch::Alarm").items()
        if lid.startswith("Monitoringorderworkers")
    }
    kinds = {re.sub(r"^Monitoringorderworkers|[0-9A-F]{8}$", "", lid) for lid in alarms}
    assert kinds == {
        "MillisBehindLatest", "RecordsFailed", "DeadLetters", "ShardStalled", "LeaseLosses", "WorkersMissing",
        "DedupLanesEvicted",
    }  # fmt: skip
    by_kind = {
        re.sub(r"^Monitoringorderworkers|[0-9A-F]{8}$", "", lid): alarm for lid, alarm in alarms.items()
    }
    assert by_kind["MillisBehindLatest"]["MetricName"] == "MillisBehindLatest"
    assert by_kind["MillisBehindLatest"]["Threshold"] == 24 * 3600 * 1000 / 2
    assert {"Name": "ConsumerGroup", "Value": "order-workers"} in by_kind["ShardStalled"]["Dimensions"]
    missing = json.dumps(by_kind["WorkersMissing"]["Metrics"])
    assert (
        "ECS/ContainerInsights" in missing and "RunningTaskCount" in missing and "DesiredTaskCount" in missing
    )
    assert by_kind["LeaseLosses"]["DatapointsToAlarm"] > 1, "a rebalance pages nobody"
    for alarm in alarms.values():
        assert alarm["AlarmActions"] and alarm["OKActions"] and "Runbook" in alarm["AlarmDescription"]
    [dashboard] = resources(template, "AWS::CloudWatch::Dashboard").values()
    body = json.dumps(dashboard["Properties"]["DashboardBody"])
    for title in ("order-workers: lag", "order-workers: workers, leases held", "order-workers ShardStalls"):
        assert title in body, title
    assert "order-workers BatchesSkippedByMapping" not in body, "no mapping to skip batches"


# -- the configuration ----------------------------------------------------------------------------


def workers_group(**overrides: Any) -> dict[str, Any]:
    return {
        "name": "slow-sink",
        "stream": "events",
        "handler": HANDLER,
        "sink": "events",
        "driver": "workers",
        "workers": {"count": 3, "cpu": 1024, "memoryMb": 2048, "maxLeasesPerWorker": 2},
        **overrides,
    }


def context_with(*groups: dict[str, Any]) -> dict[str, Any]:
    context = default_context()
    context["shardline"]["consumerGroups"] += list(groups)
    return context


def test_a_workers_group_is_read_with_its_defaults():
    config = load_config(context_with(workers_group(workers={}))["shardline"])
    group = config.consumer_groups[-1]
    assert group.driver == "workers" and group.workers is not None
    w = group.workers
    assert (w.count, w.cpu, w.memory_mb, w.lease_duration_seconds) == (2, 512, 1024, 10)
    assert (w.max_leases_per_worker, w.handler_object) == (None, "app:function")
    assert config.consumer_groups[0].driver == "lambda" and config.consumer_groups[0].workers is None


#: The function's and the mapping's keys: what a workers group refuses (not `enhancedFanOut`: a
#: worker subscribes through the group's consumer too).
REFUSED = (
    "batchSize", "batchingWindowSeconds", "parallelization", "retryAttempts", "maxRecordAgeSeconds",
    "memoryMb", "timeoutSeconds", "reservedConcurrency", "startingPositionTimestamp",
)  # fmt: skip


def test_the_lambda_only_keys_are_the_function_s_and_the_mapping_s():
    assert set(LAMBDA_ONLY_KEYS) == set(REFUSED)


@pytest.mark.parametrize(("key", "value"), [(key, 1) for key in REFUSED])
def test_a_workers_group_refuses_each_lambda_only_key(key, value):
    with pytest.raises(ConfigError) as refused:
        load_config(context_with(workers_group(**{key: value}))["shardline"])
    message = str(refused.value)
    assert message.startswith(f"shardline.consumerGroups[2].{key}: group 'slow-sink' is driven by workers")


def test_a_workers_group_takes_enhanced_fan_out():
    config = load_config(context_with(workers_group(enhancedFanOut=True))["shardline"])
    assert config.consumer_groups[-1].enhanced_fan_out is True
    assert (
        load_config(context_with(workers_group())["shardline"]).consumer_groups[-1].enhanced_fan_out is False
    )


def test_a_stream_s_consumer_limit_counts_workers_groups_too():
    groups = [
        workers_group(name=f"w{index}", enhancedFanOut=True) for index in range(MAX_STREAM_CONSUMERS + 1)
    ]
    with pytest.raises(
        ConfigError, match=r"^shardline\.consumerGroups\[22\]\.enhancedFanOut: stream 'events' would have"
    ):
        load_config(context_with(*groups)["shardline"])


def test_a_lambda_group_refuses_a_workers_object():
    with pytest.raises(ConfigError) as refused:
        load_config(context_with(workers_group(driver="lambda"))["shardline"])
    assert str(refused.value).startswith(
        "shardline.consumerGroups[2].workers: group 'slow-sink' is driven by Lambda"
    )


def test_a_group_without_a_driver_is_lambda_and_refuses_a_workers_object():
    group = workers_group()
    del group["driver"]
    with pytest.raises(ConfigError, match=r"^shardline\.consumerGroups\[2\]\.workers: group 'slow-sink'"):
        load_config(context_with(group)["shardline"])


def test_two_groups_of_one_name_driven_two_ways_are_refused():
    with pytest.raises(ConfigError) as refused:
        load_config(context_with(workers_group(name="event-sink"))["shardline"])
    message = str(refused.value)
    assert message.startswith("shardline.consumerGroups[2].name: duplicate group 'event-sink'")
    assert "shardline.consumerGroups[0], driven by lambda; this one by workers" in message


@pytest.mark.parametrize(
    ("workers", "message"),
    [
        ({"cpu": 384}, r"\.workers\.cpu: must be one of 256, 512, 1024, 2048, 4096"),
        (
            {"cpu": 512, "memoryMb": 512},
            r"\.workers\.memoryMb: with 512 CPU units Fargate takes 1024\.\.4096",
        ),
        ({"count": 0}, r"\.workers\.count: must be within 1\.\.1000"),
        ({"handlerObject": "app"}, r"\.workers\.handlerObject: must be module:attribute"),
        ({"threads": 4}, r"\.workers: unknown keys \['threads'\]"),
    ],
)
def test_a_workers_object_is_checked_key_by_key(workers, message):
    with pytest.raises(ConfigError, match=r"^shardline\.consumerGroups\[2\]" + message):
        load_config(context_with(workers_group(workers=workers))["shardline"])


def test_a_workers_group_starts_at_trim_horizon_or_latest_only():
    with pytest.raises(ConfigError, match=r"^shardline\.consumerGroups\[2\]\.startingPosition: a worker"):
        load_config(context_with(workers_group(startingPosition="AT_TIMESTAMP"))["shardline"])


def test_a_workers_group_reserves_no_lambda_concurrency():
    config = load_config(context_with(workers_group())["shardline"])
    assert config.consumer_groups[-1].reserved_concurrency == 0


def test_the_repository_s_own_configuration_has_no_workers_group():
    groups = default_context()["shardline"]["consumerGroups"]
    assert all(group.get("driver", "lambda") == "lambda" for group in groups)


def test_the_pipeline_stack_builds_a_worker_group_beside_the_lambda_groups(tmp_path):
    app, stack = build(context_with(workers_group()), outdir=str(tmp_path))
    app.synth()  # cdk-nag: raises on an unacknowledged finding
    template = Template.from_stack(stack)
    [service] = resources(template, "AWS::ECS::Service").values()
    assert service["Properties"]["DesiredCount"] == 3
    [task] = resources(template, "AWS::ECS::TaskDefinition").values()
    assert (task["Properties"]["Cpu"], task["Properties"]["Memory"]) == ("1024", "2048")
    env = environment(template)
    assert env["SHARDLINE_GROUP"] == "slow-sink" and env["MAX_LEASES_PER_WORKER"] == "2"
    assert env["POWERTOOLS_METRICS_NAMESPACE"] == "shardline/dev"
    assert env["SINK_TTL_DAYS"] == "30"
    functions = resources(template, "AWS::Lambda::Function").values()
    services = {
        f["Properties"].get("Environment", {}).get("Variables", {}).get("POWERTOOLS_SERVICE_NAME")
        for f in functions
    }
    assert "shardline-slow-sink" not in services, "no function for a workers group"
    outputs = template.to_json()["Outputs"]
    assert {"SlowSinkLeaseTable", "SlowSinkSinkTable", "SlowSinkDeadLetters", "SlowSinkWorkerService"} <= set(
        outputs
    )
    assert "SlowSinkMappingFailures" not in outputs
    alarms = [lid for lid in resources(template, "AWS::CloudWatch::Alarm") if "slowsink" in lid]
    assert any("WorkersMissing" in lid for lid in alarms) and any(
        "MillisBehindLatest" in lid for lid in alarms
    )
    assets = json.loads((tmp_path / f"{stack.stack_name}.assets.json").read_text())
    [image] = assets["dockerImages"].values()
    assert image["source"]["dockerBuildArgs"] == {"HANDLER": "handler"}


def test_the_pipeline_stack_gives_a_fan_out_worker_group_its_consumer_and_dead_letter_bucket(tmp_path):
    app, stack = build(context_with(workers_group(enhancedFanOut=True)), outdir=str(tmp_path))
    app.synth()  # cdk-nag: raises on an unacknowledged finding
    template = Template.from_stack(stack)
    [(consumer_id, consumer)] = resources(template, "AWS::Kinesis::StreamConsumer").items()
    assert consumer["Properties"]["ConsumerName"] == "slow-sink"
    env = environment(template)
    assert env["STREAM_CONSUMER_ARN"] == {"Fn::GetAtt": [consumer_id, "ConsumerARN"]}
    assert actions_on(template, env["STREAM_CONSUMER_ARN"]) == set(CONSUMER_ACTIONS)
    [bucket_id] = [
        lid for lid in resources(template, "AWS::S3::Bucket") if lid.startswith("GroupslowsinkDead")
    ]
    assert env["DLQ_BUCKET"] == {"Ref": bucket_id}
    logging = resources(template, "AWS::S3::Bucket")[bucket_id]["Properties"]["LoggingConfiguration"]
    assert logging["DestinationBucketName"]["Ref"].startswith("AccessLogs"), "the stack's shared one"
    assert logging["LogFilePrefix"] == "slow-sink/"


def test_cfn_lint_finds_no_errors_in_a_stack_with_a_worker_group(tmp_path):
    app, stack = build(context_with(workers_group(enhancedFanOut=True)), outdir=str(tmp_path))
    app.synth()
    template_file = tmp_path / f"{stack.stack_name}.template.json"
    result = subprocess.run(
        [str(Path(sys.executable).parent / "cfn-lint"), "--format", "parseable", str(template_file)],
        capture_output=True,
        text=True,
    )
    assert result.stderr == "" and not result.returncode & 2, result.stdout + result.stderr
    # W3005 only, as the stack's own test explains (CDK's DependsOn on a role a GetAtt implies).
    assert {line.split(":")[5] for line in result.stdout.splitlines()} <= {"W3005"}, result.stdout


# -- the Dockerfile -------------------------------------------------------------------------------


def lock_pins() -> dict[str, str]:
    """Every `name==version` the lock files pin (requirements.lock, then requirements-dev.lock)."""
    pins: dict[str, str] = {}
    for lock in ("requirements-dev.lock", "requirements.lock"):
        for match in re.finditer(r"^([A-Za-z0-9_.-]+)==(\S+)", (ROOT / lock).read_text(), re.MULTILINE):
            pins[match.group(1).lower()] = match.group(2)
    return pins


def test_the_dockerfile_pins_what_the_lock_files_pin():
    """No pin in the Dockerfile itself: its installs read the image's locks, which are the project's
    (their hashes too: tests/infra/test_worker_image.py)."""
    text = DOCKERFILE.read_text()
    assert not re.findall(r"\b([A-Za-z0-9_.-]+)==([0-9][^\s\\]*)", text)
    lock = (IMAGE_FILES / "requirements.lock").read_text()
    named = dict(re.findall(r"^([A-Za-z0-9_.-]+)==(\S+)", lock, re.MULTILINE))
    pins = lock_pins()
    assert {"boto3", "botocore", "aws-lambda-powertools"} <= set(named)
    assert named == {name: pins[name.lower()] for name in named}


def test_the_dockerfile_runs_shardline_worker_as_non_root_on_the_functions_python():
    text = DOCKERFILE.read_text()
    assert re.search(r'^ENTRYPOINT \["shardline", "worker"\]$', text, re.MULTILINE)
    [user] = re.findall(r"^USER (\S+)$", text, re.MULTILINE)
    assert user == WORKER_USER and not user.startswith(("0", "root"))
    [version] = re.findall(r"^ARG PYTHON_VERSION=(\S+)$", text, re.MULTILINE)
    assert f"python{version}" == RUNTIME.name
    assert "ARG HANDLER" in text and "COPY ${HANDLER} /app" in text
