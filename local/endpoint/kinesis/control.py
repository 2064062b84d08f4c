"""Kinesis's control plane as the service answers it, where moto answers at once and accepts anything.

- A reshard (SplitShard, MergeShards, UpdateShardCount) is checked when asked, then takes effect
  after `State.reshard_seconds`; meanwhile the stream is UPDATING (its old shards still take
  writes) and another reshard is refused `ResourceInUseException`, as in Kinesis.
- UpdateShardCount keeps to the service's bounds: at most double and at least half the open
  shards, at most 10 scalings in a rolling 24 hours (`InvalidArgumentException` /
  `LimitExceededException`).
- A stream's `MaxRecordSizeInKiB` (1024 to 10240, CreateStream and UpdateMaxRecordSize) is kept and
  shown by DescribeStreamSummary; `max_record_size` is what PutRecord(s) enforce (`fixes`).
- A registered consumer is CREATING for `State.consumer_creating_seconds` (0 by default: ACTIVE at
  once, as moto answers; Kinesis takes some seconds), which SubscribeToShard refuses
  (`consumer_status`). DeregisterStreamConsumer by StreamARN and ConsumerName removes that consumer
  (moto 5.2.5 keeps it and removes every other one).

`install(response_class)` patches moto's responses and backend in the endpoint's process, after
`fixes.apply`.
"""

from __future__ import annotations

import datetime
import threading
import time
from collections.abc import Callable
from typing import Any

from moto.core.exceptions import JsonRESTError
from moto.core.responses import ActionResult, EmptyResult
from moto.kinesis import exceptions as kinesis_errors
from moto.kinesis import models, responses

from ...app.model import consumer_created
from .fixes import (
    DEFAULT_MAX_RECORD_KIB,
    STATE,
    check_merge,
    check_split,
    max_record_size,
)

__all__ = ["MAX_RECORD_KIB", "consumer_status", "install"]

MAX_RECORD_KIB = 10240
#: UpdateShardCount calls a stream may make in a rolling 24 hours.
SCALINGS_PER_DAY = 10


class LimitExceeded(JsonRESTError):
    def __init__(self, message: str) -> None:
        super().__init__("LimitExceededException", message)


class RecordSizeValidation(JsonRESTError):
    def __init__(self, message: str) -> None:
        super().__init__("ValidationException", message)


def _record_size_kib(value: Any) -> int:
    kib = DEFAULT_MAX_RECORD_KIB if value is None else int(value)
    if not DEFAULT_MAX_RECORD_KIB <= kib <= MAX_RECORD_KIB:
        raise RecordSizeValidation(
            f"1 validation error detected: Value '{kib}' at 'maxRecordSizeInKiB' failed to satisfy "
            f"constraint: Member must have value between {DEFAULT_MAX_RECORD_KIB} and {MAX_RECORD_KIB}"
        )
    return kib


# --- reshards --------------------------------------------------------------------------------------


def _not_active(stream: models.Stream) -> JsonRESTError:
    return kinesis_errors.ResourceInUseError(
        f"Stream {stream.stream_name} under account {stream.account_id} not ACTIVE, instead in state "
        f"{stream.status}"
    )


def _reshard(stream: models.Stream, check: Callable[[], None], change: Callable[[], None]) -> None:
    """`check` now (its error is the caller's); `change` after the stream has been UPDATING a while."""
    with STATE.lock:
        if stream.status != "ACTIVE":
            raise _not_active(stream)
        check()
        stream.status = "UPDATING"

    def finish() -> None:
        with STATE.lock:
            try:
                change()
            finally:
                stream.status = "ACTIVE"

    if STATE.reshard_seconds <= 0:
        finish()
    else:
        timer = threading.Timer(STATE.reshard_seconds, finish)
        timer.daemon = True
        timer.start()


def _split_shard(self: models.KinesisBackend, stream_arn: str, stream_name: str, shard_to_split: str,
                 new_starting_hash_key: str) -> None:  # fmt: skip
    stream = self.describe_stream(stream_arn=stream_arn, stream_name=stream_name)

    def check() -> None:
        if shard_to_split not in stream.shards:
            raise kinesis_errors.ShardNotFoundError(shard_to_split, stream.stream_name, self.account_id)
        check_split(stream, shard_to_split, new_starting_hash_key)

    _reshard(stream, check, lambda: stream.split_shard(shard_to_split, new_starting_hash_key))


def _merge_shards(self: models.KinesisBackend, stream_arn: str, stream_name: str, shard_to_merge: str,
                  adjacent_shard_to_merge: str) -> None:  # fmt: skip
    stream = self.describe_stream(stream_arn=stream_arn, stream_name=stream_name)

    def check() -> None:
        for shard_id in (shard_to_merge, adjacent_shard_to_merge):
            if shard_id not in stream.shards:
                raise kinesis_errors.ShardNotFoundError(shard_id, stream.stream_name, self.account_id)
        check_merge(stream, shard_to_merge, adjacent_shard_to_merge)

    _reshard(stream, check, lambda: stream.merge_shards(shard_to_merge, adjacent_shard_to_merge))


def _update_shard_count(self: models.KinesisBackend, stream_arn: str, stream_name: str,
                        target_shard_count: int) -> int:  # fmt: skip
    stream = self.describe_stream(stream_arn=stream_arn, stream_name=stream_name)
    current = sum(1 for shard in stream.shards.values() if shard.is_open)
    scalings: list[float] = STATE.scalings.setdefault((self.account_id, stream.stream_name), [])

    def check() -> None:
        target = int(target_shard_count)
        if target > 2 * current or target * 2 < current:
            raise kinesis_errors.InvalidArgumentError(
                f"UpdateShardCount to {target} shards for stream {stream.stream_name} under account "
                f"{self.account_id}: a stream of {current} open shards may go from {-(-current // 2)} "
                f"to {2 * current} shards in one scaling"
            )
        now = time.time()
        scalings[:] = [at for at in scalings if now - at < 24 * 3600]
        if len(scalings) >= SCALINGS_PER_DAY:
            raise LimitExceeded(
                f"Stream {stream.stream_name} under account {self.account_id} has already been scaled "
                f"{SCALINGS_PER_DAY} times in the last 24 hours"
            )
        scalings.append(now)

    _reshard(stream, check, lambda: stream.update_shard_count(int(target_shard_count)))
    return current


# --- responses -------------------------------------------------------------------------------------


def _create_stream(self: responses.KinesisResponse) -> ActionResult:
    kib = _record_size_kib(self._get_param("MaxRecordSizeInKiB"))
    self.kinesis_backend.create_stream(
        self._get_param("StreamName"),
        self._get_param("ShardCount"),
        stream_mode=self._get_param("StreamModeDetails"),
    )
    stream = self.kinesis_backend.describe_stream(stream_arn=None, stream_name=self._get_param("StreamName"))
    stream.max_record_size_kib = kib  # type: ignore[attr-defined]
    return EmptyResult()


def _update_max_record_size(self: responses.KinesisResponse) -> ActionResult:
    kib = _record_size_kib(self._get_param("MaxRecordSizeInKiB"))
    stream = self.kinesis_backend.describe_stream(stream_arn=self._get_param("StreamARN"), stream_name=None)
    with STATE.lock:
        if stream.status != "ACTIVE":
            raise _not_active(stream)
        stream.max_record_size_kib = kib  # type: ignore[attr-defined]
    return EmptyResult()


def _summary(self: models.Stream) -> dict[str, Any]:
    answer: dict[str, Any] = _original_summary(self)
    answer["StreamDescriptionSummary"]["MaxRecordSizeInKiB"] = max_record_size(self) // 1024
    return answer


_original_summary = models.Stream.to_json_summary


# --- consumers -------------------------------------------------------------------------------------


def consumer_status(consumer: models.Consumer) -> str:
    """CREATING until the consumer's activation time, then ACTIVE (moto's consumers are ACTIVE at once)."""
    return "CREATING" if time.time() < getattr(consumer, "active_at", 0.0) else "ACTIVE"


def _register_stream_consumer(self: models.KinesisBackend, stream_arn: str, consumer_name: str) -> Any:
    """moto's consumer, with Kinesis's ARN (moto leaves out its `:<creation time>`) and the creation
    time the app's template resolves it with (`model.consumer_created`)."""
    consumer = _original_register(self, stream_arn, consumer_name)
    created = consumer_created(stream_arn.rsplit("/", 1)[-1], consumer_name)
    consumer.created = datetime.datetime.fromtimestamp(created, datetime.UTC).replace(tzinfo=None)
    consumer.consumer_arn = f"{consumer.consumer_arn}:{created}"
    consumer.active_at = time.time() + STATE.consumer_creating_seconds  # type: ignore[attr-defined]
    return consumer


def _consumer_json(self: models.Consumer, include_stream_arn: bool = False) -> dict[str, Any]:
    answer: dict[str, Any] = _original_consumer_json(self, include_stream_arn)
    answer["ConsumerStatus"] = consumer_status(self)
    return answer


def _deregister_stream_consumer(self: models.KinesisBackend, stream_arn: str, consumer_name: str,
                                consumer_arn: str) -> None:  # fmt: skip
    with STATE.lock:
        if stream_arn and consumer_name:
            stream = self.describe_stream(stream_arn=stream_arn, stream_name=None)
            stream.consumers = [c for c in stream.consumers if c.consumer_name != consumer_name]
        if consumer_arn:
            for stream in self.streams.values():
                stream.delete_consumer(consumer_arn)
    STATE.changed()  # its subscriptions end


_original_register = models.KinesisBackend.register_stream_consumer
_original_consumer_json = models.Consumer.to_json


def install(response_class: type) -> None:
    """Patch the control plane in this process (idempotent), after `fixes.apply`."""
    if getattr(models.KinesisBackend, "_shardline_control", False):
        return
    models.KinesisBackend.split_shard = _split_shard  # type: ignore[method-assign]
    models.KinesisBackend.merge_shards = _merge_shards  # type: ignore[method-assign]
    models.KinesisBackend.update_shard_count = _update_shard_count  # type: ignore[method-assign]
    models.KinesisBackend._shardline_control = True  # type: ignore[attr-defined]
    models.Stream.to_json_summary = _summary  # type: ignore[method-assign]
    models.KinesisBackend.register_stream_consumer = _register_stream_consumer  # type: ignore[method-assign]
    models.KinesisBackend.deregister_stream_consumer = _deregister_stream_consumer  # type: ignore[method-assign]
    models.Consumer.to_json = _consumer_json  # type: ignore[method-assign]
    response_class.create_stream = _create_stream  # type: ignore[attr-defined]
    response_class.update_max_record_size = _update_max_record_size  # type: ignore[attr-defined]
