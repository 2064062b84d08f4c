"""A consumer group's settings, frozen and checked once, and the shapes of the handlers it runs."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from botocore.config import Config

from shardline.consumer._deaggregation import ConsumedRecord
from shardline.consumer._failure_text import FAILURE_DETAIL_CHOICES
from shardline.errors import ConfigurationError

#: What a handler may return: DynamoDB TransactWriteItems entries to commit with the checkpoint.
Writes = Sequence[Mapping[str, Any]] | None
#: `fn(record)`, called once per user record, in order.
RecordHandler = Callable[[ConsumedRecord], Writes]
#: What a batch handler may return: its writes by record (`{record: [entries]}`, committed with
#: the checkpoint that passes that record), or the batch's writes as one list (they must then fit
#: in one transaction with the checkpoint; a batch whose writes do not is split and run again).
BatchWrites = Mapping[ConsumedRecord, Writes] | Writes
#: `fn(records)`, called with new user records of a batch, in order (all of them, or a part).
BatchHandler = Callable[[list[ConsumedRecord]], BatchWrites]
#: What a sink write whose own condition fails means: the record's failure, or already applied.
SINK_CONFLICT_CHOICES = ("fail", "skip")


@dataclass(frozen=True, slots=True)
class ConsumerSettings:
    """How one consumer group processes a shard (see `KinesisConsumer` for each setting)."""

    group: str
    max_attempts: int = 3
    checkpoint_every: int | None = None
    checkpoint_interval: float = 5.0
    time_margin: float = 2.0
    multi_stream: bool = False
    sink_conflicts: str = "fail"
    detect_crashes: bool = True
    retry_backoff: float = 2.0
    failure_detail: str = "fingerprint"

    def __post_init__(self) -> None:
        if not self.group:
            raise ConfigurationError("group must be a non-empty string")
        if self.max_attempts < 2:
            raise ConfigurationError(
                f"max_attempts must be at least 2, got {self.max_attempts}: one failure is no evidence "
                "against a record (a crash of another, an overlapping delivery), so one is never "
                "enough to dead-letter it"
            )
        if not 0 < self.retry_backoff <= 60:
            raise ConfigurationError(
                f"retry_backoff must be above 0 and at most 60 seconds, got {self.retry_backoff}: the "
                "attempts of a failing record are spaced so that a brief outage fails none of them"
            )
        if self.checkpoint_every is not None and self.checkpoint_every < 1:
            raise ConfigurationError(
                f"checkpoint_every must be at least 1 or None, got {self.checkpoint_every}"
            )
        if self.checkpoint_interval < 0 or self.time_margin < 0:
            raise ConfigurationError("checkpoint_interval and time_margin must not be negative")
        if self.sink_conflicts not in SINK_CONFLICT_CHOICES:
            raise ConfigurationError(f"sink_conflicts must be 'fail' or 'skip', got {self.sink_conflicts!r}")
        if self.failure_detail not in FAILURE_DETAIL_CHOICES:
            raise ConfigurationError(
                f"failure_detail must be 'fingerprint' or 'message', got {self.failure_detail!r}"
            )

    def lease_key(self, stream: str, shard_id: str) -> str:
        """The lease table key of a shard: its id, or `<stream>:<shard id>` for a multi-stream group."""
        return f"{stream}:{shard_id}" if self.multi_stream else shard_id


#: Tries per call of the consumer's own clients (`client_config`).
CLIENT_TRIES = 2


def _connect_timeout(time_margin: float) -> float:
    return min(1.0, max(0.2, time_margin / 2))


def _read_timeout(time_margin: float) -> float:
    return max(0.2, time_margin)


def client_config(time_margin: float) -> Config:
    """botocore settings for the clients a consumer makes its own calls with (DynamoDB, SQS, S3,
    Kinesis): each try reads for at most `time_margin` seconds — the time the consumer keeps for
    its last writes — and connects within half of it (at most 1 s), two tries in all, instead of
    boto3's 60 s reads that outlast the function. A DynamoDB transaction of 100 items answers in
    well under a second, so a try that takes the whole margin is an outage: the call fails, the
    shard stalls (`_stalls`), and no record is blamed. Keep `time_margin` above the slowest commit
    you expect; a call that hangs through both tries (`call_bound`) may still outlive the margin,
    never a record: the one write a record could be blamed for dying in — the mark that its
    handler starts alone, after a crash — is written only with room for `call_bound` beyond it.

        dynamodb = boto3.client("dynamodb", config=client_config(2.0))
    """
    return Config(
        connect_timeout=_connect_timeout(time_margin),
        read_timeout=_read_timeout(time_margin),
        retries={"mode": "standard", "total_max_attempts": CLIENT_TRIES},
    )


def call_bound(time_margin: float) -> float:
    """The longest one call of a `client_config(time_margin)` client can take before it fails:
    every try connecting and reading for as long as it is allowed (default margin 2 s: 6 s)."""
    return CLIENT_TRIES * (_connect_timeout(time_margin) + _read_timeout(time_margin))
