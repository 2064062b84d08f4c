"""The KMS keys shardline's constructs make, all one way: rotating yearly, kept when the stack goes;
and the two with a service in their key policy (CloudWatch Logs for log groups, CloudWatch for the
alarm topic), so a construct given none makes its own the same way the pipeline's stack does."""

from __future__ import annotations

from aws_cdk import Aws, RemovalPolicy, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from constructs import Construct


def retained_key(scope: Construct, construct_id: str, *, description: str, alias: str | None) -> kms.Key:
    """A customer-managed key with rotation, retained on stack deletion (data encrypted under it may
    outlive the stack: retained tables, buckets, log groups), named by `alias` (`alias/...`) if given
    (an alias is unique per account and region: a construct a team may build twice has none by default)."""
    return kms.Key(
        scope,
        construct_id,
        description=description,
        enable_key_rotation=True,
        removal_policy=RemovalPolicy.RETAIN,
        alias=alias,
    )


def logs_key(scope: Construct, construct_id: str, *, description: str, alias: str | None) -> kms.Key:
    """A key for log groups: CloudWatch Logs of this account and region may use it, for this account's
    log groups only."""
    key = retained_key(scope, construct_id, description=description, alias=alias)
    key.add_to_resource_policy(
        iam.PolicyStatement(
            sid="CloudWatchLogsOfThisAccountAndRegion",
            principals=[iam.ServicePrincipal(f"logs.{Aws.REGION}.amazonaws.com")],
            actions=[
                "kms:Encrypt*",
                "kms:Decrypt*",
                "kms:ReEncrypt*",
                "kms:GenerateDataKey*",
                "kms:Describe*",
            ],
            resources=["*"],  # in a key policy, "*" is this key
            conditions={
                "ArnLike": {
                    "kms:EncryptionContext:aws:logs:arn": (
                        f"arn:{Aws.PARTITION}:logs:{Aws.REGION}:{Aws.ACCOUNT_ID}:log-group:*"
                    )
                }
            },
        )
    )
    return key


def alarm_topic_key(scope: Construct, construct_id: str, *, alias: str | None) -> kms.Key:
    """The alarm topic's key, and only its: CloudWatch encrypts what it publishes to the topic, for
    this account's alarms only."""
    key = retained_key(scope, construct_id, description="shardline alarm topic", alias=alias)
    key.add_to_resource_policy(
        iam.PolicyStatement(
            sid="CloudWatchAlarmsOfThisAccount",
            principals=[iam.ServicePrincipal("cloudwatch.amazonaws.com")],
            actions=["kms:Decrypt", "kms:GenerateDataKey*"],
            resources=["*"],  # in a key policy, "*" is this key
            conditions={"StringEquals": {"aws:SourceAccount": Aws.ACCOUNT_ID}},
        )
    )
    return key


def grant_via(grantee: iam.IGrantable, service: str, actions: list[str], key: kms.IKey) -> None:
    """`actions` on `key` to `grantee`'s role, only through `service` (kms:ViaService): in the role's
    policy, and — for a key this stack makes — in the key's own policy too, naming the role as a key
    user with the same actions and condition (the root's statement stays for administration; the
    usage is the role's, by name, not only whatever the account's IAM allows)."""
    via = {"StringEquals": {"kms:ViaService": f"{service}.{Aws.REGION}.amazonaws.com"}}
    grantee.grant_principal.add_to_principal_policy(
        iam.PolicyStatement(actions=actions, resources=[key.key_arn], conditions=via)
    )
    principal = grantee.grant_principal
    if isinstance(key, kms.Key) and isinstance(principal, iam.Role) and Stack.of(key) is Stack.of(principal):
        key.add_to_resource_policy(
            iam.PolicyStatement(
                principals=[principal],
                actions=actions,
                resources=["*"],  # in a key policy, "*" is this key
                conditions=via,
            )
        )
