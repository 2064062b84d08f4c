"""Issue 40's security review of the worker image and its network (`shardline.cdk.WorkerGroup`): both
`FROM` lines pinned by digest, every pip install hash-checked from the project's locks, an image
built once and promoted by digest, and an egress of VPC endpoints only with no public IP. Each item
a test named after it, on the Dockerfile's text and the synthesized template (Docker is not run)."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from aws_cdk import Stack
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_ecr as ecr
from aws_cdk import aws_iam as iam
from aws_cdk.assertions import Template

from app import build
from shardline.cdk import ConfigError, Sink, Stream, WorkerGroup, load_config
from shardline.cdk._layers import POWERTOOLS_VERSION
from tests.support.cdk import ORDERS_ARN, alone, default_context, resources, statements

ROOT = Path(__file__).resolve().parents[2]
IMAGE_FILES = ROOT / "layers" / "shardline" / "python" / "shardline" / "cdk" / "worker_image"
DOCKERFILE = IMAGE_FILES / "Dockerfile"
HANDLER = "functions/event_sink"
DIGEST = "sha256:" + "ab" * 32
REPOSITORY_URI = "111122223333.dkr.ecr.us-east-1.amazonaws.com/order-workers"
#: The worker's packages, package data beside the Dockerfile (cut from the project's by `make lock`).
WORKER_LOCK = IMAGE_FILES / "requirements.lock"


def worker_in(stack: Stack, **props: Any) -> WorkerGroup:
    stream = Stream.from_stream_arn(stack, "Orders", ORDERS_ARN)
    sink = Sink.create(dynamodb.Attribute(name="pk", type=dynamodb.AttributeType.STRING))
    defaults: dict[str, Any] = {"code": HANDLER, "sinks": [sink]}
    return WorkerGroup(stack, "Workers", name="order-workers", stream=stream, **{**defaults, **props})


def instructions(text: str) -> list[tuple[str, str]]:
    """The Dockerfile's instructions, continuation lines joined and comments dropped."""
    joined = re.sub(
        r"\\\n", " ", "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
    )
    return [
        (line.split(maxsplit=1)[0].upper(), line.split(maxsplit=1)[1] if " " in line.strip() else "")
        for line in joined.splitlines()
        if line.strip()
    ]


def lock(text: str) -> dict[str, tuple[str, set[str]]]:
    """A requirements lock's pins: name -> (version, hashes), read independently of workers/lock.py."""
    found: dict[str, tuple[str, set[str]]] = {}
    for block in re.split(r"\n(?=[A-Za-z0-9])", text):
        head = re.match(r"([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)(\s*;[^\\\n]*)?", block)
        if head and not head.group(3):
            name = re.sub(r"[-_.]+", "-", head.group(1)).lower()
            found[name] = (head.group(2), set(re.findall(r"--hash=(sha256:[0-9a-f]{64})", block)))
    return found


# -- 1. FROM by digest ----------------------------------------------------------------------------


def test_worker_image_from_lines_pinned_by_digest():
    text = DOCKERFILE.read_text()
    # No `# syntax=` directive: BuildKit would pull that frontend image by its tag before any FROM.
    assert not re.match(r"#\s*syntax\s*=", text, re.IGNORECASE)
    steps = instructions(text)
    froms = [argument for kind, argument in steps if kind == "FROM"]
    assert len(froms) == 2
    for argument in froms:
        image = next(word for word in argument.split() if not word.startswith("--"))
        assert image == "python:${PYTHON_VERSION}-slim@${PYTHON_DIGEST}", argument
    first_from = next(i for i, (kind, _) in enumerate(steps) if kind == "FROM")
    arguments = dict(
        argument.split("=", 1) for kind, argument in steps[:first_from] if kind == "ARG" and "=" in argument
    )
    assert arguments["PYTHON_VERSION"] == "3.12"
    assert re.fullmatch(r"sha256:[0-9a-f]{64}", arguments["PYTHON_DIGEST"]), (
        "the index's digest, in one place"
    )
    # A version without its digest is refused: the build stage compares the pinned image's Python
    # with PYTHON_VERSION (a digest pulls its image whatever the tag says). Run that check here.
    [check] = [a for k, a in steps if k == "RUN" and "PYTHON_VERSION" in a and "sys.version_info" in a]
    command = re.search(r"python -c (\"[^\"]*\"|'[^']*')", check)
    assert command, check
    script = shlex.split(command.group(1))[0]
    ours = "{}.{}".format(*sys.version_info[:2])
    other = "3.10" if ours != "3.10" else "3.13"
    ran = {
        version: subprocess.run(
            [sys.executable, "-c", script],
            env={**os.environ, "PYTHON_VERSION": version},
            capture_output=True,
            text=True,
            check=False,
        )
        for version in (ours, other)
    }
    assert ran[ours].returncode == 0, ran[ours].stderr
    assert ran[other].returncode != 0 and "PYTHON_DIGEST" in ran[other].stderr, ran[other].stderr


# -- 2. hash-checked installs from the locks ------------------------------------------------------


def test_worker_image_pip_installs_hash_checked_from_the_locks(tmp_path):
    steps = instructions(DOCKERFILE.read_text())
    copied = " ".join(argument for kind, argument in steps if kind == "COPY")
    installs = [
        segment
        for kind, argument in steps
        if kind == "RUN"
        for segment in re.split(r"&&|;", argument)
        if re.search(r"\bpip\b.*\binstall\b", segment)
    ]
    assert installs
    from_locks = set()
    for install in installs:
        words = shlex.split(install)
        assert "--require-hashes" in words and "--no-deps" in words, install
        [requirement] = [words[i + 1] for i, word in enumerate(words) if word in ("-r", "--requirement")]
        assert not [w for w in words if re.match(r"^[A-Za-z][\w.-]*(==|>=)", w)], "no pin outside a lock"
        if Path(requirement).name == "shardline.lock":  # shardline's own wheel, staged beside it
            assert "--no-index" in words, install
        from_locks.add(Path(requirement).name)
    # Nothing is built in the image (no setuptools, no package source): the worker's packages and
    # shardline's wheel, each from its lock.
    assert from_locks == {"requirements.lock", "shardline.lock"}
    assert "requirements.lock" in copied and "shardline.lock" in copied
    # The lock is the project's: same versions, same hashes, generated (never hand-kept).
    project = lock((ROOT / "requirements-dev.lock").read_text()) | lock(
        (ROOT / "requirements.lock").read_text()
    )
    worker = lock(WORKER_LOCK.read_text())
    assert worker and worker == {name: project[name] for name in worker}
    assert {"boto3", "botocore", "aws-lambda-powertools", "aws-xray-sdk", "wrapt"} <= set(worker)
    assert worker["aws-lambda-powertools"][0] == POWERTOOLS_VERSION, "the Powertools layer's version"
    checked = subprocess.run(
        [sys.executable, "workers/lock.py", "--check"], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert checked.returncode == 0, checked.stderr
    assert "workers/lock.py" in (ROOT / "Makefile").read_text(), "`make lock` regenerates it"
    # The staged context carries the package's own copies, and shardline's wheel pinned by its hash.
    alone(lambda stack: worker_in(stack), nag=False, outdir=tmp_path)
    [image] = json.loads((tmp_path / "Alone.assets.json").read_text())["dockerImages"].values()
    staged = tmp_path / image["source"]["directory"]
    assert (staged / "requirements.lock").read_bytes() == WORKER_LOCK.read_bytes()
    [wheel] = staged.glob("shardline-*.whl")
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    assert re.search(rf"^\./{re.escape(wheel.name)} \\\n\s+--hash=sha256:{digest}$",
                     (staged / "shardline.lock").read_text(), re.MULTILINE)  # fmt: skip


def test_worker_image_the_escape_hatch_a_team_s_own_context_and_dockerfile(tmp_path):
    """`build_context` and `dockerfile`: a team's own folder built as it is (its handler inside it, the
    HANDLER build argument), less NEVER_IN_CONTEXT; a `dockerfile` alone, or a `code` that is no
    folder, is refused naming the prop."""
    context = tmp_path / "team"
    (context / "docker").mkdir(parents=True)
    (context / "docker" / "Worker.Dockerfile").write_text("FROM scratch\nARG HANDLER\nCOPY ${HANDLER} /app\n")
    (context / "src" / "tally").mkdir(parents=True)
    (context / "src" / "tally" / "app.py").write_text("def handle(record):\n    return []\n")
    (context / "src" / "tally" / "__pycache__").mkdir()
    (context / "src" / "tally" / "__pycache__" / "app.cpython-312.pyc").write_bytes(b"\0")
    outdir = tmp_path / "out"
    alone(
        lambda stack: worker_in(stack, code="src/tally", build_context=context,
                                dockerfile="docker/Worker.Dockerfile"),
        nag=False, outdir=outdir,
    )  # fmt: skip
    [image] = json.loads((outdir / "Alone.assets.json").read_text())["dockerImages"].values()
    assert image["source"]["dockerFile"] == "docker/Worker.Dockerfile"
    assert image["source"]["dockerBuildArgs"] == {"HANDLER": "src/tally"}
    staged = outdir / image["source"]["directory"]
    files = {p.relative_to(staged).as_posix() for p in staged.rglob("*") if p.is_file()}
    assert files == {"docker/Worker.Dockerfile", "src/tally/app.py"}
    owner = r"^WorkerGroup 'order-workers': "
    with pytest.raises(
        ValueError, match=owner + r"dockerfile: a Dockerfile of your own goes with build_context"
    ):
        alone(lambda stack: worker_in(stack, dockerfile="Dockerfile"), nag=False)
    with pytest.raises(ValueError, match=owner + r"code: nowhere is not a folder .*relative to the working"):
        alone(lambda stack: worker_in(stack, code="nowhere"), nag=False)
    with pytest.raises(ValueError, match=owner + r"dockerfile: no Dockerfile in the build context"):
        alone(lambda stack: worker_in(stack, code="src/tally", build_context=context), nag=False)


# -- 3. built once, promoted by digest ------------------------------------------------------------


def _image_of(template: Template) -> Any:
    [definition] = next(iter(resources(template, "AWS::ECS::TaskDefinition").values()))["Properties"][
        "ContainerDefinitions"
    ]
    return definition["Image"]


def _pull_actions(template: Template) -> dict[str, set[str]]:
    """What the execution role may do, by resource (as JSON text)."""
    [role] = [lid for lid in resources(template, "AWS::IAM::Role") if lid.startswith("WorkersExecutionRole")]
    found: dict[str, set[str]] = {}
    for policy in resources(template, "AWS::IAM::Policy").values():
        if {"Ref": role} not in policy["Properties"]["Roles"]:
            continue
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
            action = statement["Action"]
            found.setdefault(json.dumps(statement["Resource"], sort_keys=True), set()).update(
                action if isinstance(action, list) else [action]
            )
    return found


@pytest.mark.parametrize("form", ["image_uri", "image_repository"])
def test_worker_image_built_once_promoted_by_digest(form, tmp_path):
    def build_(stack: Stack) -> None:
        if form == "image_uri":
            worker_in(stack, code=None, image_uri=f"{REPOSITORY_URI}@{DIGEST}")
        else:
            repository = ecr.Repository.from_repository_name(stack, "Team", "order-workers")
            worker_in(stack, code=None, image_repository=repository, image_digest=DIGEST)

    template = alone(build_, outdir=tmp_path)  # cdk-nag clean
    assets = json.loads((tmp_path / "Alone.assets.json").read_text())
    assert not assets.get("dockerImages"), "nothing is built: the promoted image is the first stage's"
    image = json.dumps(_image_of(template))
    assert f"order-workers@{DIGEST}" in image and ":latest" not in image
    pulls = _pull_actions(template)
    on_repository = {
        actions
        for resource, actions in ((r, frozenset(a)) for r, a in pulls.items())
        if "order-workers" in resource
    }
    assert on_repository and all(
        {"ecr:BatchGetImage", "ecr:GetDownloadUrlForLayer"} <= a for a in on_repository
    )
    assert "ecr:GetAuthorizationToken" in pulls['"*"']
    if form == "image_uri":
        assert "111122223333" in json.dumps(list(pulls)), "the repository of the reference's account"


@pytest.mark.parametrize(
    ("props", "message"),
    [
        ({"image_uri": f"{REPOSITORY_URI}:1.4.2"}, r"image_uri: .*:1\.4\.2.* names a tag.*sha256"),
        ({"image_uri": REPOSITORY_URI}, r"image_uri: .* names a tag.*sha256"),
        ({"image_uri": f"{REPOSITORY_URI}@sha256:abc"}, r"image_uri: .*sha256:<64 hex digits>"),
        ({"image_digest": "1.4.2"}, r"image_digest: '1\.4\.2' is no digest .*sha256:"),
        (
            {"image_uri": f"docker.io/team/w@{DIGEST}", "egress": "vpc-endpoints"},
            r"image_uri: docker\.io/team/w is outside ECR",
        ),
    ],
)
def test_worker_image_promoted_by_digest_refuses_a_tag(props, message):
    def build_(stack: Stack) -> None:
        extra = dict(props)
        if "image_digest" in extra:
            extra["image_repository"] = ecr.Repository.from_repository_name(stack, "Team", "order-workers")
        worker_in(stack, code=None, **extra)

    with pytest.raises(ValueError, match=rf"^WorkerGroup 'order-workers': {message}"):
        alone(build_, nag=False)


def test_worker_image_promoted_by_digest_from_the_configuration(tmp_path):
    group = {
        "name": "slow-sink", "stream": "events", "handler": HANDLER, "sink": "events", "driver": "workers",
        "workers": {"image": f"{REPOSITORY_URI}@{DIGEST}", "egress": "vpc-endpoints"},
    }  # fmt: skip
    context = default_context()
    context["shardline"]["consumerGroups"].append(group)
    app, stack = build(context, outdir=str(tmp_path))
    app.synth()  # cdk-nag: raises on an unacknowledged finding
    assert not json.loads((tmp_path / f"{stack.stack_name}.assets.json").read_text()).get("dockerImages")
    template = Template.from_stack(stack)
    assert f"order-workers@{DIGEST}" in json.dumps(_image_of(template))
    [service] = resources(template, "AWS::ECS::Service").values()
    assert (
        service["Properties"]["NetworkConfiguration"]["AwsvpcConfiguration"]["AssignPublicIp"] == "DISABLED"
    )
    assert not resources(template, "AWS::EC2::InternetGateway")
    linted = subprocess.run(
        [str(Path(sys.executable).parent / "cfn-lint"), "--format", "parseable",
         str(tmp_path / f"{stack.stack_name}.template.json")],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    # W3005 only, as the stack's own test explains (CDK's DependsOn on a role a GetAtt implies).
    assert {line.split(":")[5] for line in linted.stdout.splitlines()} <= {"W3005"}, linted.stdout
    context["shardline"]["consumerGroups"][-1]["workers"] = {"image": f"{REPOSITORY_URI}:prod"}
    with pytest.raises(ConfigError, match=r"consumerGroups\[\d+\]\.workers\.image: .* names a tag"):
        load_config(context["shardline"])


# -- 4. egress through VPC endpoints only ---------------------------------------------------------

#: The endpoint service each IAM service prefix is reached through (gateway or interface).
ENDPOINT_OF = {
    "dynamodb": ".dynamodb", "s3": ".s3", "kinesis": ".kinesis-streams", "sqs": ".sqs", "kms": ".kms",
    "logs": ".logs", "cloudwatch": ".monitoring", "xray": ".xray", "sts": ".sts", "ecr": ".ecr.api",
}  # fmt: skip


def _service_names(template: Template) -> list[str]:
    return [
        json.dumps(endpoint["Properties"]["ServiceName"])
        for endpoint in resources(template, "AWS::EC2::VPCEndpoint").values()
    ]


def test_worker_egress_vpc_endpoints_only_no_public_ip():
    template = alone(lambda stack: worker_in(stack, egress="vpc-endpoints"))  # cdk-nag clean
    network = next(iter(resources(template, "AWS::ECS::Service").values()))["Properties"][
        "NetworkConfiguration"
    ]
    assert network["AwsvpcConfiguration"]["AssignPublicIp"] == "DISABLED"
    assert not resources(template, "AWS::EC2::InternetGateway") and not resources(
        template, "AWS::EC2::NatGateway"
    )
    assert not resources(template, "AWS::EC2::EgressOnlyInternetGateway")
    for route in resources(template, "AWS::EC2::Route").values():
        assert not {"GatewayId", "NatGatewayId", "EgressOnlyInternetGatewayId"} & set(route["Properties"]), (
            route
        )
    subnets = resources(template, "AWS::EC2::Subnet").values()
    assert subnets and not any(s["Properties"].get("MapPublicIpOnLaunch") for s in subnets)
    # Every service a role of the task is granted (the task's and the agent's) has its endpoint.
    granted = {
        action.split(":")[0]
        for statement in statements(template)
        for action in (
            statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
        )
    }
    granted.discard("iam")  # none expected; listed for the message below
    names = _service_names(template)
    assert {"dynamodb", "s3", "kinesis", "sqs", "kms", "logs", "ecr"} <= granted
    missing = {service for service in granted if not any(ENDPOINT_OF[service] in name for name in names)}
    assert not missing, f"granted with no endpoint: {missing}"
    assert any(".ecr.dkr" in name for name in names), "the image's layers' registry"
    # Interface endpoints admit HTTPS from the tasks' security group only.
    [task_group] = network["AwsvpcConfiguration"]["SecurityGroups"]
    interface = [e["Properties"] for e in resources(template, "AWS::EC2::VPCEndpoint").values()
                 if e["Properties"]["VpcEndpointType"] == "Interface"]  # fmt: skip
    assert interface and all(e["PrivateDnsEnabled"] for e in interface)
    groups = resources(template, "AWS::EC2::SecurityGroup")
    ingress = [r["Properties"] for r in resources(template, "AWS::EC2::SecurityGroupIngress").values()]
    for endpoint in interface:
        for group in endpoint["SecurityGroupIds"]:
            lid = group["Fn::GetAtt"][0]
            inline = groups[lid]["Properties"].get("SecurityGroupIngress", [])
            rules = inline + [r for r in ingress if r["GroupId"] == group]
            assert rules and all(
                (r["IpProtocol"], r["FromPort"], r["ToPort"]) == ("tcp", 443, 443)
                and r.get("SourceSecurityGroupId") == task_group
                for r in rules
            ), rules


def test_worker_egress_a_grant_made_later_without_its_endpoint_fails_the_synth():
    def build_(stack: Stack) -> None:
        group = worker_in(stack, egress="vpc-endpoints")
        group.role.add_to_principal_policy(
            iam.PolicyStatement(actions=["sts:GetCallerIdentity"], resources=["*"])
        )

    with pytest.raises(RuntimeError, match=r"granted \['sts'\] after the group was built"):
        alone(build_, nag=False)


def test_worker_egress_defaults_to_today_s_and_refuses_an_unknown_one():
    template = alone(lambda stack: worker_in(stack), nag=False)
    network = next(iter(resources(template, "AWS::ECS::Service").values()))["Properties"][
        "NetworkConfiguration"
    ]
    assert network["AwsvpcConfiguration"]["AssignPublicIp"] == "ENABLED"
    assert len(resources(template, "AWS::EC2::VPCEndpoint")) == 2, "the free gateway ones, as before"
    with pytest.raises(ValueError, match=r"^WorkerGroup 'order-workers': egress: 'nat' .*'vpc-endpoints'"):
        alone(lambda stack: worker_in(stack, egress="nat"), nag=False)
