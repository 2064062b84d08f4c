"""A consumer group's settings, frozen and checked once, and the shapes of the handlers it runs."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from shardline.consumer._deaggregation import ConsumedRecord
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

    def __post_init__(self) -> None:
        if not self.group:
            raise ConfigurationError("group must be a non-empty string")
        if self.max_attempts < 1:
            raise ConfigurationError(f"max_attempts must be at least 1, got {self.max_attempts}")
        if self.checkpoint_every is not None and self.checkpoint_every < 1:
            raise ConfigurationError(
                f"checkpoint_every must be at least 1 or None, got {self.checkpoint_every}"
            )
        if self.checkpoint_interval < 0 or self.time_margin < 0:
            raise ConfigurationError("checkpoint_interval and time_margin must not be negative")
        if self.sink_conflicts not in SINK_CONFLICT_CHOICES:
            raise ConfigurationError(f"sink_conflicts must be 'fail' or 'skip', got {self.sink_conflicts!r}")

    def lease_key(self, stream: str, shard_id: str) -> str:
        """The lease table key of a shard: its id, or `<stream>:<shard id>` for a multi-stream group."""
        return f"{stream}:{shard_id}" if self.multi_stream else shard_id
