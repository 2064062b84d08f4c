"""Where a `WorkerGroup`'s tasks run and how they reach AWS's APIs (`egress`): "internet" (the
default: a VPC of public subnets with a public IP per task, or the team's private subnets with
egress), or "vpc-endpoints" (isolated subnets: no public IP, no internet or NAT gateway, no route
out of the VPC; an endpoint for every service the task's roles are granted, derived from their
policies, each interface endpoint admitting HTTPS from the tasks alone)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import jsii
from aws_cdk import Aws
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs
from constructs import Construct, IValidation

from shardline.cdk._config_reader import ConfigError
from shardline.cdk._group_rules import Egress

__all__ = [
    "GATEWAY_ENDPOINTS",
    "INTERFACE_ENDPOINTS",
    "add_endpoints",
    "granted_services",
    "own_vpc",
    "task_security_group",
    "task_subnets",
]

#: The free gateway endpoints (a route in the subnets' tables): DynamoDB, and S3 (ECR keeps an
#: image's layers there, so a pull needs it too).
GATEWAY_ENDPOINTS = {
    "dynamodb": ec2.GatewayVpcEndpointAwsService.DYNAMODB,
    "s3": ec2.GatewayVpcEndpointAwsService.S3,
}
#: The interface endpoint(s) of each service prefix an IAM action of a task's role may carry. ECR's
#: API (the execution role's GetAuthorizationToken, BatchGetImage) goes with its registry (dkr).
INTERFACE_ENDPOINTS: dict[str, tuple[ec2.InterfaceVpcEndpointAwsService, ...]] = {
    "kinesis": (ec2.InterfaceVpcEndpointAwsService.KINESIS_STREAMS,),
    "sqs": (ec2.InterfaceVpcEndpointAwsService.SQS,),
    "kms": (ec2.InterfaceVpcEndpointAwsService.KMS,),
    "logs": (ec2.InterfaceVpcEndpointAwsService.CLOUDWATCH_LOGS,),
    "cloudwatch": (ec2.InterfaceVpcEndpointAwsService.CLOUDWATCH_MONITORING,),
    "xray": (ec2.InterfaceVpcEndpointAwsService.XRAY,),
    "sts": (ec2.InterfaceVpcEndpointAwsService.STS,),
    "ecr": (ec2.InterfaceVpcEndpointAwsService.ECR, ec2.InterfaceVpcEndpointAwsService.ECR_DOCKER),
}


def own_vpc(
    scope: Construct,
    *,
    egress: Egress,
    retention: logs.RetentionDays,
    log_key: kms.IKey,
    vpc_props: Mapping[str, Any] | None,
) -> ec2.Vpc:
    """Two zones, no NAT gateway, subnets public ("internet") or isolated ("vpc-endpoints": no
    internet gateway at all); gateway endpoints for DynamoDB and S3 (free); every flow logged
    (rejected ones tell a security group's refusal), under the logs key; no custom resource (the
    default security group is left as EC2 makes it, and unused)."""
    flow_logs = logs.LogGroup(scope, "FlowLogs", retention=retention, encryption_key=log_key)
    kind = ec2.SubnetType.PUBLIC if egress == "internet" else ec2.SubnetType.PRIVATE_ISOLATED
    defaults: dict[str, Any] = {
        "max_azs": 2,
        "nat_gateways": 0,
        # Off: restricting the VPC's default security group takes a custom resource whose
        # function's role carries AWS's managed AWSLambdaBasicExecutionRole. shardline puts
        # nothing in the default group (its tasks use `task_security_group`).
        "restrict_default_security_group": False,
        "subnet_configuration": [
            ec2.SubnetConfiguration(
                name="Public" if egress == "internet" else "Isolated", subnet_type=kind, cidr_mask=24
            )
        ],
        "gateway_endpoints": {
            "DynamoDb": ec2.GatewayVpcEndpointOptions(service=GATEWAY_ENDPOINTS["dynamodb"]),
            "S3": ec2.GatewayVpcEndpointOptions(service=GATEWAY_ENDPOINTS["s3"]),
        },
        "flow_logs": {
            "FlowLog": ec2.FlowLogOptions(
                destination=ec2.FlowLogDestination.to_cloud_watch_logs(flow_logs, _flow_log_role(scope)),
                traffic_type=ec2.FlowLogTrafficType.ALL,
            )
        },
    }
    return ec2.Vpc(scope, "Vpc", **{**defaults, **(vpc_props or {})})


def _flow_log_role(scope: Construct) -> iam.Role:
    """The role VPC Flow Logs writes the flow log with, assumable by the service acting for this
    account's flow logs only (the confused-deputy guard of VPC Flow Logs' IAM role page; CDK
    grants it the log group's writes)."""
    return iam.Role(
        scope,
        "FlowLogRole",
        assumed_by=iam.ServicePrincipal(
            "vpc-flow-logs.amazonaws.com",
            conditions={
                "StringEquals": {"aws:SourceAccount": Aws.ACCOUNT_ID},
                "ArnLike": {"aws:SourceArn": f"arn:{Aws.PARTITION}:ec2:{Aws.REGION}:{Aws.ACCOUNT_ID}:*"},
            },
        ),
    )


def task_subnets(egress: Egress, public: bool) -> ec2.SubnetSelection:
    """The tasks' subnets: public ones of a VPC that has no others (made here or by another group),
    the team's private ones with egress, or isolated ones (made here or the team's) when the
    endpoints are the only way out."""
    if egress == "vpc-endpoints":
        return ec2.SubnetSelection(subnet_type=ec2.SubnetType.PRIVATE_ISOLATED)
    return ec2.SubnetSelection(
        subnet_type=ec2.SubnetType.PUBLIC if public else ec2.SubnetType.PRIVATE_WITH_EGRESS
    )


def task_security_group(scope: Construct, vpc: ec2.IVpc, name: str) -> ec2.SecurityGroup:
    """No inbound rule (nothing calls a worker); HTTPS out only (AWS's APIs: with "vpc-endpoints" the
    subnets route nowhere but to the endpoints, so this reaches them alone)."""
    group = ec2.SecurityGroup(
        scope,
        "SecurityGroup",
        vpc=vpc,
        description=f"shardline worker group {name}: no inbound, HTTPS out",
        allow_all_outbound=False,
    )
    group.add_egress_rule(ec2.Peer.any_ipv4(), ec2.Port.tcp(443), "AWS APIs over HTTPS")
    return group


def granted_services(roles: Sequence[iam.IRole]) -> set[str]:
    """The services (IAM action prefixes) the roles' default policies grant: what the task calls."""
    services: set[str] = set()
    for role in roles:
        policy = role.node.try_find_child("DefaultPolicy")
        if not isinstance(policy, iam.Policy):
            continue
        for statement in policy.document.to_json().get("Statement", []):
            actions = statement.get("Action", [])
            services |= {a.split(":")[0] for a in (actions if isinstance(actions, list) else [actions])}
    return services


def add_endpoints(
    scope: Construct,
    vpc: ec2.IVpc,
    subnets: ec2.SubnetSelection,
    task_groups: Sequence[ec2.ISecurityGroup],
    roles: Sequence[iam.IRole],
    owner: str,
) -> dict[str, ec2.IVpcEndpoint]:
    """An endpoint for every service the roles are granted, in the tasks' subnets: DynamoDB's and
    S3's gateways (made with a VPC made here), and interface endpoints with private DNS behind one
    security group that admits HTTPS from the tasks' groups only. A grant added after this (to the
    task role, say) fails the synth, naming the service with no endpoint (`EndpointsCover`)."""
    services = granted_services(roles) | set(GATEWAY_ENDPOINTS)  # S3: ECR's layers; both free
    unknown = sorted(services - set(GATEWAY_ENDPOINTS) - set(INTERFACE_ENDPOINTS))
    if unknown:
        raise ConfigError(f"{owner}: egress: no VPC endpoint known for {unknown}, granted to the tasks")
    made: dict[str, ec2.IVpcEndpoint] = {}
    for name, gateway in GATEWAY_ENDPOINTS.items():
        if vpc.node.try_find_child("DynamoDb" if name == "dynamodb" else "S3") is None:  # not own_vpc's
            made[name] = vpc.add_gateway_endpoint(
                f"{name.title()}Endpoint", service=gateway, subnets=[subnets]
            )
    group = ec2.SecurityGroup(
        scope,
        "EndpointSecurityGroup",
        vpc=vpc,
        description="shardline worker group endpoints: HTTPS from its tasks only",
        allow_all_outbound=False,
    )
    for task_group in task_groups:
        group.add_ingress_rule(task_group, ec2.Port.tcp(443), "HTTPS from the worker tasks")
    for service in sorted(services & set(INTERFACE_ENDPOINTS)):
        for index, endpoint_service in enumerate(INTERFACE_ENDPOINTS[service]):
            made[f"{service}{index or ''}"] = ec2.InterfaceVpcEndpoint(
                scope, f"{service.title()}{'Registry' if index else ''}Endpoint", vpc=vpc,
                service=endpoint_service, subnets=subnets, security_groups=[group], open=False,
                private_dns_enabled=True,
            )  # fmt: skip
    scope.node.add_validation(EndpointsCover(roles, services, owner))
    return made


@jsii.implements(IValidation)
class EndpointsCover:
    """At synth: every service the roles are granted by then has its endpoint (a grant made after
    the group was built, with no route to its service, would fail only when deployed)."""

    def __init__(self, roles: Sequence[iam.IRole], covered: set[str], owner: str) -> None:
        self._roles, self._covered, self._owner = tuple(roles), frozenset(covered), owner

    def validate(self) -> list[str]:
        missing = sorted(granted_services(self._roles) - self._covered)
        return [
            f"{self._owner}: egress vpc-endpoints: the tasks are granted {missing} after the group "
            "was built, and have no VPC endpoint for them; grant before, or add the endpoints"
        ] if missing else []  # fmt: skip
