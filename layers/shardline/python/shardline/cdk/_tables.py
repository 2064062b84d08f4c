"""DynamoDB tables: a consumer group's lease/checkpoint table and its sink table."""

from __future__ import annotations

from aws_cdk import RemovalPolicy
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_kms as kms
from constructs import Construct

from shardline.consumer._once import EXPIRES_AT_ATTRIBUTE

_Key = tuple[str, dynamodb.AttributeType]  # an attribute's name and type

_SINK_KEYS: dict[str, tuple[_Key, _Key | None]] = {
    "events": (("pk", dynamodb.AttributeType.STRING), ("sk", dynamodb.AttributeType.STRING)),
    "counter": (("partitionKey", dynamodb.AttributeType.STRING), None),
}


_TYPES = {
    "S": dynamodb.AttributeType.STRING,
    "N": dynamodb.AttributeType.NUMBER,
    "B": dynamodb.AttributeType.BINARY,
}


def _table(
    scope: Construct,
    construct_id: str,
    partition: _Key,
    sort: _Key | None = None,
    *,
    retain: bool,
    key: kms.IKey,
    ttl: str | None = None,
) -> dynamodb.Table:
    # A stage that keeps its data (prod by default) keeps its tables, and guards them against deletion;
    # the others go with their stack.
    return dynamodb.Table(
        scope,
        construct_id,
        partition_key=dynamodb.Attribute(name=partition[0], type=partition[1]),
        sort_key=dynamodb.Attribute(name=sort[0], type=sort[1]) if sort else None,
        billing_mode=dynamodb.BillingMode.PAY_PER_REQUEST,
        point_in_time_recovery_specification=dynamodb.PointInTimeRecoverySpecification(
            point_in_time_recovery_enabled=True
        ),
        # The consumer group's own key (not aws/dynamodb): its key policy, not the account's, says who
        # may read the payloads, and revoking it revokes them.
        encryption=dynamodb.TableEncryption.CUSTOMER_MANAGED,
        encryption_key=key,
        removal_policy=RemovalPolicy.RETAIN if retain else RemovalPolicy.DESTROY,
        deletion_protection=retain,
        time_to_live_attribute=ttl,
    )


def lease_table(scope: Construct, construct_id: str, *, retain: bool, key: kms.IKey) -> dynamodb.Table:
    """Hash key `leaseKey`, as the KCL's lease table (shardline.consumer._leases.LeaseTable)."""
    return _table(scope, construct_id, ("leaseKey", dynamodb.AttributeType.STRING), retain=retain, key=key)


def sink_table(
    scope: Construct,
    construct_id: str,
    sink: str,
    *,
    retain: bool,
    key: kms.IKey,
    keys: tuple[tuple[str, str], tuple[str, str] | None] | None = None,
) -> dynamodb.Table:
    """`events`: one item per user record (pk, sk); `counter`: one item per partition key; or the
    group's own key schema (`keys`: partition (name, type), sort (name, type) or None). Each also
    holds a guard item per client id (`shardline.consumer.once`), which expires with its `expiresAt`."""
    if keys is None:
        partition, sort = _SINK_KEYS[sink]
    else:
        partition = (keys[0][0], _TYPES[keys[0][1]])
        sort = (keys[1][0], _TYPES[keys[1][1]]) if keys[1] else None
    return _table(scope, construct_id, partition, sort, retain=retain, key=key, ttl=EXPIRES_AT_ATTRIBUTE)
