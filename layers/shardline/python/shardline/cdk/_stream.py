"""A Kinesis data stream for shardline's constructs: a new one (encrypted, its retention, capacity
and record size), or a team's existing one (by ARN or `kinesis.IStream`), which gets only the grants
of who writes and reads it and no resource of its own."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Literal

from aws_cdk import Acknowledgment, Duration, RemovalPolicy, Token, Validations
from aws_cdk import aws_kinesis as kinesis
from aws_cdk import aws_kms as kms
from constructs import Construct

from shardline.cdk._feature_flags import pin_feature_flags
from shardline.cdk._function import add_tags
from shardline.cdk._keys import retained_key
from shardline.cdk._signatures import shows_its_props

Encryption = Literal["customer-managed", "aws-managed"]
#: cdk-nag's KDS3 asks for the aws/kinesis key; a stream under a key of ours is stricter.
CUSTOMER_KEY_STREAM = {
    "AwsSolutions::AwsSolutions-KDS3": "The stream uses a customer-managed KMS key with rotation, which "
    "this rule (asking for the aws/kinesis key) does not recognise.",
}


def _within(owner: str, prop: str, value: int, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ValueError(f"{owner}: {prop}: must be an integer within {low}..{high}, got {value!r}")
    return value


@shows_its_props
class Stream(Construct):
    """A stream shardline's producer writes and its consumer groups read.

    New: `Stream(self, "Orders", stream_name="orders", shards=2)`, encrypted with a key of its own
    (`encryption="customer-managed"`, the default) or AWS's (`"aws-managed"`); `shards=None` is
    on-demand. Existing: `Stream.from_stream_arn(...)`, `Stream.from_stream(...)`.

    `route` is the name the producer API and the alarms know it by (default: its stream name, or the
    construct id when the name is a token). `retention_hours`, `max_record_size_kib` and `shards` are
    what the stream has (for an existing one, what it was given: defaults 24 h, 1024 KiB, on-demand),
    which the consumer groups' record age and reservations and the alarms are derived from."""

    stream: kinesis.IStream
    key: kms.IKey | None

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        stream_name: str | None = None,
        shards: int | None = None,
        retention_hours: int = 24,
        encryption: Encryption = "customer-managed",
        max_record_size_kib: int = 1024,
        removal_policy: RemovalPolicy = RemovalPolicy.RETAIN,
        route: str | None = None,
        explicit_hash_keys: bool = False,
        key_alias: str | None = None,
        tags: Mapping[str, str] | None = None,
        stream_props: Mapping[str, Any] | None = None,
        _existing: Callable[[Stream], tuple[kinesis.IStream, kms.IKey | None]] | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        pin_feature_flags(self)
        owner = f"Stream {construct_id!r}"
        self.shards = None if shards is None else _within(owner, "shards", shards, 1, 500)
        self.retention_hours = _within(owner, "retention_hours", retention_hours, 24, 8760)
        self.max_record_size_kib = _within(owner, "max_record_size_kib", max_record_size_kib, 1024, 10240)
        self.explicit_hash_keys = explicit_hash_keys
        self.existing = _existing is not None
        #: Enhanced fan-out consumers registered on this stream by consumer groups (`ConsumerGroup`).
        self.consumers: list[kinesis.CfnStreamConsumer] = []
        if _existing is not None:
            self.stream, self.key = _existing(self)  # imported under this construct, as a new one's
        else:
            label = route or stream_name or construct_id
            self.key, self.stream = self._new(
                owner, label, stream_name, encryption, removal_policy, key_alias, stream_props or {}
            )
        # The name as given when there is one (a literal in the producer's environment and the
        # metrics' dimensions, which a reader of the template sees), else the stream's (a token).
        self.stream_name = stream_name if stream_name and _existing is None else self.stream.stream_name
        self.stream_arn = self.stream.stream_arn
        self.route = route or (construct_id if Token.is_unresolved(self.stream_name) else self.stream_name)
        add_tags(self, tags)

    @property
    def retention_seconds(self) -> int:
        """How long the stream keeps a record after its arrival: what its consumer groups' record
        age, alarms and client-id guards (`SHARDLINE_GUARD_TTL_SECONDS`) are derived from."""
        return self.retention_hours * 3600

    def _new(
        self,
        owner: str,
        label: str,
        stream_name: str | None,
        encryption: Encryption,
        removal_policy: RemovalPolicy,
        key_alias: str | None,
        stream_props: Mapping[str, Any],
    ) -> tuple[kms.IKey | None, kinesis.Stream]:
        if encryption not in ("customer-managed", "aws-managed"):
            raise ValueError(
                f"{owner}: encryption: must be customer-managed or aws-managed, got {encryption!r}"
            )
        key = None
        if encryption == "customer-managed":
            alias = key_alias or (f"alias/{stream_name}" if stream_name else None)
            key = retained_key(self, "Key", description=f"shardline stream {label}", alias=alias)
        defaults: dict[str, Any] = {
            "stream_name": stream_name,
            "removal_policy": removal_policy,
            "shard_count": self.shards,
            "stream_mode": kinesis.StreamMode.ON_DEMAND
            if self.shards is None
            else kinesis.StreamMode.PROVISIONED,
            "retention_period": Duration.hours(self.retention_hours),
            "encryption": kinesis.StreamEncryption.KMS if key else kinesis.StreamEncryption.MANAGED,
            "encryption_key": key,
        }
        props = {**defaults, **stream_props}
        # Secure by default stays secure: a stream_props override may change the key, not drop it.
        if props.get("encryption") == kinesis.StreamEncryption.UNENCRYPTED:
            raise ValueError(f"{owner}: stream_props.encryption: an unencrypted stream is refused")
        stream = kinesis.Stream(self, "Stream", **props)
        # The L2 construct has no property for it yet: the producer's limits and the stream's agree.
        cfn = stream.node.default_child
        assert isinstance(cfn, kinesis.CfnStream)
        cfn.max_record_size_in_kib = self.max_record_size_kib
        encryption_key: kms.IKey | None = props.get("encryption_key")
        if encryption_key is not None:
            for rule, reason in CUSTOMER_KEY_STREAM.items():
                Validations.of(self).acknowledge(Acknowledgment(id=rule, reason=reason))
        return encryption_key, stream

    @classmethod
    def from_stream_arn(
        cls,
        scope: Construct,
        construct_id: str,
        stream_arn: str,
        *,
        key: kms.IKey | str | None = None,
        route: str | None = None,
        shards: int | None = None,
        retention_hours: int = 24,
        max_record_size_kib: int = 1024,
        explicit_hash_keys: bool = False,
    ) -> Stream:
        """An existing stream by its ARN (a token too; its name is taken from it); `key`: its
        customer-managed KMS key (an `IKey` or its ARN), which writers and readers are granted
        through Kinesis; none for AWS's."""

        def existing(self: Stream) -> tuple[kinesis.IStream, kms.IKey | None]:
            return kinesis.Stream.from_stream_arn(self, "Stream", stream_arn), _imported_key(self, key)

        return cls(
            scope, construct_id, _existing=existing, route=route, shards=shards,
            retention_hours=retention_hours, max_record_size_kib=max_record_size_kib,
            explicit_hash_keys=explicit_hash_keys,
        )  # fmt: skip

    @classmethod
    def from_stream(
        cls,
        scope: Construct,
        construct_id: str,
        stream: kinesis.IStream,
        *,
        key: kms.IKey | str | None = None,
        route: str | None = None,
        shards: int | None = None,
        retention_hours: int = 24,
        max_record_size_kib: int = 1024,
        explicit_hash_keys: bool = False,
    ) -> Stream:
        """An existing `kinesis.IStream`; `key` (default: the stream's `encryption_key`) as above."""

        def existing(self: Stream) -> tuple[kinesis.IStream, kms.IKey | None]:
            return stream, _imported_key(self, key if key is not None else stream.encryption_key)

        return cls(
            scope, construct_id, _existing=existing, route=route, shards=shards,
            retention_hours=retention_hours, max_record_size_kib=max_record_size_kib,
            explicit_hash_keys=explicit_hash_keys,
        )  # fmt: skip


def _imported_key(scope: Construct, key: kms.IKey | str | None) -> kms.IKey | None:
    return kms.Key.from_key_arn(scope, "Key", key) if isinstance(key, str) else key
