"""DynamoDB tables a consumer group creates: its lease/checkpoint table and the sinks it is asked to
create (the repository's examples' key schemas, or any other)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from aws_cdk import RemovalPolicy
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_kms as kms
from constructs import Construct

_Key = tuple[str, dynamodb.AttributeType]  # an attribute's name and type

#: The repository's example sinks (`sink: "events"` / `"counter"` in cdk.json).
EXAMPLE_SINK_KEYS: dict[str, tuple[_Key, _Key | None]] = {
    "events": (("pk", dynamodb.AttributeType.STRING), ("sk", dynamodb.AttributeType.STRING)),
    "counter": (("partitionKey", dynamodb.AttributeType.STRING), None),
}

TYPES = {
    "S": dynamodb.AttributeType.STRING,
    "N": dynamodb.AttributeType.NUMBER,
    "B": dynamodb.AttributeType.BINARY,
}


def attribute(key: _Key | tuple[str, str]) -> dynamodb.Attribute:
    """A key attribute from (name, type), the type a `dynamodb.AttributeType` or S, N, B."""
    kind = key[1]
    return dynamodb.Attribute(name=key[0], type=TYPES[kind] if isinstance(kind, str) else kind)


def table(
    scope: Construct,
    construct_id: str,
    partition: dynamodb.Attribute,
    sort: dynamodb.Attribute | None = None,
    *,
    removal_policy: RemovalPolicy,
    key: kms.IKey,
    ttl: str | None = None,
    table_props: Mapping[str, Any] | None = None,
) -> dynamodb.Table:
    """On demand, point-in-time recovery, encrypted with the consumer group's own key (not
    aws/dynamodb: its key policy, not the account's, says who may read the payloads, and revoking it
    revokes them). A table that is kept when its stack goes (RETAIN: prod by default) is guarded
    against deletion too; `table_props` are merged over all of it."""
    defaults: dict[str, Any] = {
        "partition_key": partition,
        "sort_key": sort,
        "billing_mode": dynamodb.BillingMode.PAY_PER_REQUEST,
        "point_in_time_recovery_specification": dynamodb.PointInTimeRecoverySpecification(
            point_in_time_recovery_enabled=True
        ),
        "encryption": dynamodb.TableEncryption.CUSTOMER_MANAGED,
        "encryption_key": key,
        "removal_policy": removal_policy,
        "deletion_protection": removal_policy == RemovalPolicy.RETAIN,
        "time_to_live_attribute": ttl,
    }
    return dynamodb.Table(scope, construct_id, **{**defaults, **(table_props or {})})


def lease_table(
    scope: Construct, construct_id: str, *, removal_policy: RemovalPolicy, key: kms.IKey
) -> dynamodb.Table:
    """Hash key `leaseKey`, as the KCL's lease table (shardline.consumer._leases.LeaseTable)."""
    return table(
        scope,
        construct_id,
        attribute(("leaseKey", dynamodb.AttributeType.STRING)),
        removal_policy=removal_policy,
        key=key,
    )
