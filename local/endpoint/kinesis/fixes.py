"""Moto 5.2.5's Kinesis, made to behave like Kinesis where shardline can tell, plus the shard limits.

`apply(state)` patches moto's Kinesis models in the endpoint's process (only there: nothing else
imports this). What it corrects, each covered by tests/local/endpoint/test_endpoint_kinesis.py:

- resharding: moto copies a split or merged parent's records into its children and keeps routing
  writes to the closed parent (it looks hash keys up in every shard, with an exclusive end); here
  records stay where they were written and writes go to the open shard holding the hash key;
- a closed shard read to its end answers without NextShardIterator and with `ChildShards`;
- sequence numbers are 56-digit decimals, increasing per shard (moto counts 1, 2, 3 ...), and
  even: an odd number lies between two records and is no record's, which SubscribeToShard's
  ContinuationSequenceNumber needs (`local.endpoint.kinesis.subscribe`);
- ListShards honours `ShardFilter` and `ExclusiveStartShardId` (moto ignores both), and refuses a
  StreamName beside a NextToken, as Kinesis does;
- MergeShards accepts the adjacent shard on either side and refuses closed shards; the open-shard
  count of DescribeStreamSummary follows resharding; GetRecords honours `Limit` (1..10,000) and
  its 10 MiB cap, and reads by bisection (moto scans the shard from its start on every call).

The per-shard limits (`local.limits`) are enforced here too, per record and per call, and
counted in `State.counters` for `GET /_shardline/kinesis`. ListShards, PutRecords and GetRecords
are answered by `local.endpoint.kinesis.responses` (which reads this module's state; the endpoint installs
it after `apply`).
"""

from __future__ import annotations

import base64
import bisect
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from moto.core.exceptions import JsonRESTError
from moto.kinesis import exceptions as kinesis_errors
from moto.kinesis import models, utils
from moto.utilities.utils import md5_hash

from ...limits import THROTTLED, MiB, ShardLimits, rate_exceeded_message

#: Sequence numbers look like Kinesis's: 56 digits, "49" first, then the shard, then twice the
#: microseconds (every record's number is even: an odd one is a position between two records).
_SEQUENCE_BASE = 49 * 10**54
_SHARD_SPAN = 10**36
MAX_GET_RECORDS = 10_000
MAX_GET_RECORDS_BYTES = 10 * MiB

NAMESPACE = "AWS/Kinesis"

#: Counter slots per shard, in this order in `State.counters` values.
COUNTER_NAMES = ("records_written", "bytes_written", "write_throttles", "read_throttles", "get_records_calls")


@dataclass
class State:
    """What the endpoint controls and reads: the limits (None when off) and per-shard counters."""

    limits: ShardLimits | None = None
    writes_limited: bool = True
    reads_limited: bool = True
    #: (account, stream name, shard id) -> counts in COUNTER_NAMES order.
    counters: dict[tuple[str, str, str], list[int]] = field(default_factory=dict)
    #: One lock for every Kinesis model change or read: moto's models are not thread-safe.
    lock: threading.RLock = field(default_factory=threading.RLock)
    #: A chaos profile's per-entry faults (`local.endpoint.chaos`): a code to refuse an entry with, or None.
    entry_fault: Callable[[], str | None] | None = None
    #: How long a reshard keeps its stream UPDATING before it takes effect (`control`).
    reshard_seconds: float = 1.0
    #: (account, stream name) -> when each UpdateShardCount of the last day was made (`control`).
    scalings: dict[tuple[str, str], list[float]] = field(default_factory=dict)
    #: A shard iterator's life: GetRecords refuses an older one ExpiredIteratorException.
    iterator_ttl_seconds: float = 300.0
    #: How long a SubscribeToShard subscription pushes events before its stream ends (`subscribe`).
    subscription_seconds: float = 300.0
    #: How long a registered consumer stays CREATING before it is ACTIVE (`control`; 0: at once).
    consumer_creating_seconds: float = 0.0
    #: Notified whenever records land or a shard closes or a stream goes: subscriptions wait on it.
    arrivals: threading.Condition = field(default_factory=threading.Condition)
    #: How many such changes so far (a subscription waits for it to move, so no wake-up is missed).
    changes: int = 0

    def count(self, account: str, stream: str, shard: str, slot: int, amount: int = 1) -> None:
        key = (account, stream, shard)
        counts = self.counters.get(key)
        if counts is None:
            counts = self.counters[key] = [0] * len(COUNTER_NAMES)
        counts[slot] += amount

    def changed(self) -> None:
        """Wake the subscriptions: records landed, a shard closed or a stream went."""
        with self.arrivals:
            self.changes += 1
            self.arrivals.notify_all()


STATE = State()

DEFAULT_MAX_RECORD_KIB = 1024


def max_record_size(stream: models.Stream) -> int:
    """The largest record (data plus partition key, bytes) the stream takes: its MaxRecordSizeInKiB."""
    return int(getattr(stream, "max_record_size_kib", DEFAULT_MAX_RECORD_KIB)) * 1024


class ThroughputExceeded(JsonRESTError):
    code = 400

    def __init__(self, message: str) -> None:
        super().__init__(THROTTLED, message)


class InternalFailure(JsonRESTError):
    code = 500

    def __init__(self, message: str) -> None:
        super().__init__("InternalFailure", message)


# --- shards -----------------------------------------------------------------------------------------

if TYPE_CHECKING:

    class FixedShard(models.Shard):
        """A moto Shard once `apply` ran: the attributes `_shard_init` gives every shard (moto's
        class declares none of them). Never instantiated: `fixed(shard)` is how code reads them."""

        created_at: float
        closed_at: float | None
        _base: int
        _start: int
        _last: int
        _sequences: list[int]


def fixed(shard: models.Shard) -> FixedShard:
    """`shard` with the attributes `_shard_init` added (every shard has them once `apply` ran)."""
    return cast("FixedShard", shard)


def _shard_init(self: models.Shard, shard_id: int, starting_hash: int, ending_hash: int,
                parent: str | None = None, adjacent_parent: str | None = None) -> None:  # fmt: skip
    _original_shard_init(
        self, shard_id, starting_hash, ending_hash, parent=parent, adjacent_parent=adjacent_parent
    )
    shard = fixed(self)
    shard.created_at = time.time()
    shard.closed_at = None
    shard._base = _SEQUENCE_BASE + shard_id * _SHARD_SPAN
    shard._start = shard._base + 2 * (time.time_ns() // 1000)
    shard._last = shard._start
    shard._sequences = []


def _shard_put_record(self: models.Shard, partition_key: str, data: str, explicit_hash_key: str) -> str:
    shard = fixed(self)
    shard._last = max(shard._last + 2, shard._base + 2 * (time.time_ns() // 1000))
    shard.records[shard._last] = models.Record(partition_key, data, shard._last, explicit_hash_key)
    shard._sequences.append(shard._last)
    return str(shard._last)


def _shard_min(self: models.Shard) -> int:
    return fixed(self)._start


def _shard_max(self: models.Shard) -> int:
    return fixed(self)._last


def read_after(
    shard: models.Shard, last: int, limit: int, max_bytes: int = MAX_GET_RECORDS_BYTES
) -> tuple[list[models.Record], int, bool]:
    """Records after sequence `last`, at most `limit` and `max_bytes` (one at least); their bytes; more?"""
    sequences = fixed(shard)._sequences
    start = bisect.bisect_right(sequences, last)
    stop = min(len(sequences), start + limit)
    records: list[models.Record] = []
    total = 0
    for sequence in sequences[start:stop]:
        record = shard.records[sequence]
        size = data_size(record.data) + len(record.partition_key.encode())
        if records and total + size > max_bytes:
            break
        records.append(record)
        total += size
    return records, total, start + len(records) < len(sequences)


def shard_index_of(sequence_number: int) -> int | None:
    """The index of the shard a sequence number (or a position between records) belongs to, or None."""
    offset = sequence_number - _SEQUENCE_BASE
    return offset // _SHARD_SPAN if offset >= 0 else None


def data_size(data_b64: str) -> int:
    return len(data_b64) * 3 // 4 - data_b64.count("=", -2)


# --- streams ----------------------------------------------------------------------------------------


def _next_index(stream: models.Stream) -> int:
    return max(shard._shard_id for shard in stream.shards.values()) + 1


def _close(stream: models.Stream, *shards: models.Shard) -> None:
    for shard in shards:
        shard.is_open = False
        fixed(shard).closed_at = time.time()
    stream.shard_count = sum(1 for shard in stream.shards.values() if shard.is_open)
    STATE.changed()  # a subscription to a closed shard ends with its children


def check_split(stream: models.Stream, shard_id: str, new_starting_hash_key: str) -> None:
    """Kinesis's refusals of a SplitShard: a shard already split or merged, a key outside it."""
    shard = stream.shards[shard_id]
    key = int(new_starting_hash_key)
    if not shard.is_open:
        raise kinesis_errors.InvalidArgumentError(
            f"Shard {shard.shard_id} in stream {stream.stream_name} under account {stream.account_id} has "
            "already been merged or split, and thus is not eligible for merging or splitting."
        )
    if not shard.starting_hash < key < shard.ending_hash:
        raise kinesis_errors.InvalidArgumentError(
            f"NewStartingHashKey {key} used in SplitShard() on shard {shard.shard_id} in stream "
            f"{stream.stream_name} under account {stream.account_id} is not both greater than one plus the "
            f"shard's StartingHashKey {shard.starting_hash} and less than the shard's EndingHashKey "
            f"{shard.ending_hash - 1}."
        )


def _split_shard(self: models.Stream, shard_to_split: str, new_starting_hash_key: str) -> None:
    check_split(self, shard_to_split, new_starting_hash_key)
    shard = self.shards[shard_to_split]
    key = int(new_starting_hash_key)
    index = _next_index(self)
    for offset, (low, high) in enumerate([(shard.starting_hash, key - 1), (key, shard.ending_hash)]):
        child = models.Shard(index + offset, low, high, parent=shard.shard_id)
        self.shards[child.shard_id] = child
    _close(self, shard)


def check_merge(stream: models.Stream, shard_to_merge: str, adjacent_shard_to_merge: str) -> None:
    """Kinesis's refusals of a MergeShards: a shard already split or merged, shards not adjacent."""
    first, second = stream.shards[shard_to_merge], stream.shards[adjacent_shard_to_merge]
    if not (first.is_open and second.is_open):
        closed = first if not first.is_open else second
        raise kinesis_errors.InvalidArgumentError(
            f"Shard {closed.shard_id} in stream {stream.stream_name} under account {stream.account_id} has "
            "already been merged or split, and thus is not eligible for merging or splitting."
        )
    if first.ending_hash + 1 != second.starting_hash and second.ending_hash + 1 != first.starting_hash:
        raise kinesis_errors.InvalidArgumentError(
            f"Shards {first.shard_id} and {second.shard_id} in stream {stream.stream_name} under account "
            f"{stream.account_id} are not an adjacent pair of shards eligible for merging"
        )


def _merge_shards(self: models.Stream, shard_to_merge: str, adjacent_shard_to_merge: str) -> None:
    check_merge(self, shard_to_merge, adjacent_shard_to_merge)
    first, second = self.shards[shard_to_merge], self.shards[adjacent_shard_to_merge]
    low, high = min(first.starting_hash, second.starting_hash), max(first.ending_hash, second.ending_hash)
    child = models.Shard(_next_index(self), low, high, parent=first.shard_id, adjacent_parent=second.shard_id)
    self.shards[child.shard_id] = child
    _close(self, first, second)


def record_hash_key(partition_key: object, explicit_hash_key: str | None) -> int:
    # Kinesis (a JVM) counts UTF-16 code units: an emoji counts 2; moto counts characters.
    if not isinstance(partition_key, str) or not 1 <= len(partition_key.encode("utf-16-le")) // 2 <= 256:
        raise kinesis_errors.InvalidArgumentError(
            "Partition key must be 1 to 256 UTF-16 code units long; the whole request is refused."
        )
    if explicit_hash_key:
        key = int(explicit_hash_key)
        if not 0 <= key < 2**128:
            raise kinesis_errors.InvalidArgumentError("explicit_hash_key")
        return key
    return int(md5_hash(partition_key.encode("utf-8")).hexdigest(), 16)


def open_shard_for(stream: models.Stream, key: int) -> models.Shard | None:
    for shard in stream.shards.values():
        if shard.is_open and shard.starting_hash <= key <= shard.ending_hash:
            return shard
    return None


def _stream_put_record(
    self: models.Stream, partition_key: str, explicit_hash_key: str, data: str
) -> tuple[str, str]:
    # moto also feeds its own Lambda here; the local runtime polls with its own mappings instead.
    shard = open_shard_for(self, record_hash_key(partition_key, explicit_hash_key))
    if shard is None:  # cannot happen while the open shards cover the key space
        raise kinesis_errors.InvalidArgumentError("no open shard holds the hash key")
    return shard.put_record(partition_key, data, explicit_hash_key), shard.shard_id


def _backend_get_shard_iterator(self: models.KinesisBackend, stream_arn: str | None, stream_name: str | None,
                                shard_id: str, shard_iterator_type: str, starting_sequence_number: Any,
                                at_timestamp: Any) -> str:  # fmt: skip
    with STATE.lock:
        stream = self.describe_stream(stream_arn=stream_arn, stream_name=stream_name)
        if shard_id not in stream.shards:
            raise kinesis_errors.ResourceNotFoundError(
                f"Shard {shard_id} in stream {stream.stream_name} under account {self.account_id} "
                "does not exist"
            )
        limits = STATE.limits if STATE.reads_limited else None
        if limits is not None and not limits.admit_iterator((stream.arn, shard_id)):
            raise ThroughputExceeded(rate_exceeded_message(shard_id, stream.stream_name, self.account_id))
        # moto writes "None" for the stream when it was named by ARN, and GetRecords cannot find it then.
        return utils.compose_new_shard_iterator(
            stream.stream_name, stream.shards[shard_id], shard_iterator_type, starting_sequence_number,
            at_timestamp,
        )  # fmt: skip


def _delete_stream(self: models.KinesisBackend, stream_arn: str | None, stream_name: str | None) -> Any:
    with STATE.lock:
        stream = _original_delete_stream(self, stream_arn, stream_name)
        for key in [key for key in STATE.counters if key[:2] == (self.account_id, stream.stream_name)]:
            del STATE.counters[key]
            if STATE.limits is not None:
                STATE.limits.forget((stream.arn, key[2]))
        STATE.changed()
        return stream


_original_shard_init = models.Shard.__init__
_original_delete_stream = models.KinesisBackend.delete_stream


def _compose_shard_iterator(stream_name: str | None, shard: Any, last_sequence_id: int) -> str:
    """moto's iterator, with the time it was issued: GetRecords refuses it once it has expired."""
    issued_ms = int(time.time() * 1000)
    return base64.b64encode(
        f"{stream_name}:{shard.shard_id}:{last_sequence_id}:{issued_ms}".encode()
    ).decode()


def apply(state: State = STATE) -> State:
    """Patch moto's Kinesis models in this process (idempotent); `state` decides the limits. The
    actions answered by us rather than moto's responses are `responses.install`'s."""
    if getattr(models.Shard, "_shardline_fixed", False):
        return state
    models.Shard.__init__ = _shard_init  # type: ignore[method-assign]
    models.Shard.put_record = _shard_put_record  # type: ignore[method-assign]
    models.Shard.get_min_sequence_number = _shard_min  # type: ignore[method-assign]
    models.Shard.get_max_sequence_number = _shard_max  # type: ignore[method-assign]
    models.Shard._shardline_fixed = True  # type: ignore[attr-defined]
    models.Stream.split_shard = _split_shard  # type: ignore[method-assign]
    models.Stream.merge_shards = _merge_shards  # type: ignore[method-assign]
    models.Stream.put_record = _stream_put_record  # type: ignore[method-assign]
    models.KinesisBackend.get_shard_iterator = _backend_get_shard_iterator  # type: ignore[method-assign]
    models.KinesisBackend.delete_stream = _delete_stream  # type: ignore[method-assign]
    utils.compose_shard_iterator = _compose_shard_iterator
    return state
