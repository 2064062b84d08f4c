"""The stack's KMS keys, all made one way: rotating yearly, kept when the stack goes, with an alias."""

from __future__ import annotations

from aws_cdk import RemovalPolicy
from aws_cdk import aws_kms as kms
from constructs import Construct


def retained_key(scope: Construct, construct_id: str, *, description: str, alias: str) -> kms.Key:
    """A customer-managed key with rotation, retained on stack deletion (data encrypted under it may
    outlive the stack: retained tables, buckets, log groups) and named by `alias` (`alias/...`)."""
    return kms.Key(
        scope,
        construct_id,
        description=description,
        enable_key_rotation=True,
        removal_policy=RemovalPolicy.RETAIN,
        alias=alias,
    )
