"""Kinesis's per-shard throughput limits as token buckets: one accounting for every enforcer.

Writes: each shard admits 1,000 records and 1 MiB (data + UTF-8 partition key) a second, as
one-second token buckets (a whole second of budget at most, refilled continuously); a record
larger than 1 MiB (a stream's MaxRecordSizeInKiB allows up to 10 MiB) is admitted when the byte
budget is whole and leaves the shard in debt for the rest. Reads (shared throughput): 5 GetRecords
calls a second (a one-second bucket too; GetShardIterator has 5 of its own) and 2 MiB a second,
metered as a debt: a
call that returns `n` bytes holds the shard's reads back for `n / 2 MiB` seconds, so a 10 MiB answer
refuses the calls of the next 5 seconds, as the service documents. A registered consumer (enhanced
fan-out) reads with 2 MiB a second of its own per shard, outside the 5 calls (`admit_subscribed_read`).

`local.chaos.faults.ShardLimitedKinesis` (client side) and the local endpoint (server side, for every
client) both count with `ShardLimits`; keys are whatever identifies a shard to the caller,
e.g. `(stream, shard_id)`. Thread-safe.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass

KiB = 1024
MiB = 1024 * KiB

THROTTLED = "ProvisionedThroughputExceededException"
#: Set by the local event-source mapping of a registered consumer (enhanced fan-out) on its reads: Lambda
#: reads such a mapping with SubscribeToShard, which pushes records over HTTP/2; locally the mapping
#: keeps reading with GetRecords, named as the consumer's, and the endpoint charges those reads to
#: the consumer's own budget (`admit_subscribed_read`), the budget its SubscribeToShard subscriptions
#: spend too (`local.endpoint.kinesis.subscribe`). A consumer that is not registered on the stream
#: is refused ResourceNotFoundException, as SubscribeToShard refuses it.
CONSUMER_HEADER = "X-Shardline-Consumer"
#: How often such a mapping reads when idle: records reach a subscriber as they arrive (AWS says
#: about 70 ms), where a shared-throughput mapping polls once a second.
SUBSCRIBED_POLL_INTERVAL = 0.1


def rate_exceeded_message(shard_id: str | None, stream: str, account: str) -> str:
    """Kinesis's message for an entry or call over a shard's budget."""
    return f"Rate exceeded for shard {shard_id} in stream {stream} under account {account}."


@dataclass(frozen=True)
class Rates:
    """The per-shard limits; the defaults are the service's."""

    write_records_per_second: int = 1000
    write_bytes_per_second: int = 1 * MiB
    read_calls_per_second: int = 5
    read_bytes_per_second: int = 2 * MiB
    iterator_calls_per_second: int = 5  # GetShardIterator, per open shard


class _Bucket:
    """Tokens refilled at `rate` a second up to `rate` (one second's worth)."""

    __slots__ = ("stamp", "tokens")

    def __init__(self, rate: float, now: float) -> None:
        self.tokens = float(rate)
        self.stamp = now

    def refill(self, rate: float, now: float) -> None:
        if now > self.stamp:
            self.tokens = min(float(rate), self.tokens + (now - self.stamp) * rate)
            self.stamp = now


class _ShardState:
    __slots__ = ("bytes", "calls", "iterators", "read_free_at", "records")

    def __init__(self, rates: Rates, now: float) -> None:
        self.records = _Bucket(rates.write_records_per_second, now)
        self.bytes = _Bucket(rates.write_bytes_per_second, now)
        self.calls = _Bucket(rates.read_calls_per_second, now)
        self.iterators = _Bucket(rates.iterator_calls_per_second, now)
        self.read_free_at = now  # reads are held back until then (the byte debt)


class ShardLimits:
    """Per-shard write and read budgets; `clock` gives seconds (monotonic)."""

    def __init__(self, rates: Rates | None = None, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.rates = rates or Rates()
        self._clock = clock
        self._lock = threading.Lock()
        self._shards: dict[Hashable, _ShardState] = {}

    def _state(self, key: Hashable, now: float) -> _ShardState:
        state = self._shards.get(key)
        if state is None:
            state = self._shards[key] = _ShardState(self.rates, now)
        return state

    def admit_writes(self, charges: list[tuple[Hashable | None, int]]) -> list[bool]:
        """Whether each (shard key, bytes) entry fits its shard's budget now; admitted ones spend it.

        A key of None (no shard holds the entry) is admitted without charge: the server answers for it.
        """
        rates = self.rates
        with self._lock:
            now = self._clock()
            verdicts: list[bool] = []
            for key, size in charges:
                if key is None:
                    verdicts.append(True)
                    continue
                state = self._state(key, now)
                state.records.refill(rates.write_records_per_second, now)
                state.bytes.refill(rates.write_bytes_per_second, now)
                # A record larger than a second's budget (a stream of records up to 10 MiB) goes
                # when the budget is whole, and the shard owes the rest: never throttled forever.
                whole = float(rates.write_bytes_per_second)
                fits = state.records.tokens >= 1 and state.bytes.tokens >= min(size, whole)
                if fits:
                    state.records.tokens -= 1
                    state.bytes.tokens -= size
                verdicts.append(fits)
            return verdicts

    def release_writes(self, charges: list[tuple[Hashable | None, int]]) -> None:
        """Give back the budget of admitted entries that were not written after all."""
        rates = self.rates
        with self._lock:
            now = self._clock()
            for key, size in charges:
                if key is None:
                    continue
                state = self._state(key, now)
                state.records.refill(rates.write_records_per_second, now)
                state.bytes.refill(rates.write_bytes_per_second, now)
                state.records.tokens = min(float(rates.write_records_per_second), state.records.tokens + 1)
                state.bytes.tokens = min(float(rates.write_bytes_per_second), state.bytes.tokens + size)

    def admit_read(self, key: Hashable) -> bool:
        """Whether a GetRecords call on the shard may go ahead now (and spend one call if so)."""
        with self._lock:
            now = self._clock()
            state = self._state(key, now)
            if now < state.read_free_at:
                return False
            state.calls.refill(self.rates.read_calls_per_second, now)
            if state.calls.tokens < 1:
                return False
            state.calls.tokens -= 1
            return True

    def admit_subscribed_read(self, key: Hashable) -> bool:
        """Whether a registered consumer's read (enhanced fan-out) may go ahead: such a consumer has
        its own 2 MiB a second per shard (the byte debt under `key`, the shard and the consumer) and
        no share of the shard's 5 calls a second, which are the shared-throughput readers'."""
        with self._lock:
            now = self._clock()
            return now >= self._state(key, now).read_free_at

    def read_free_in(self, key: Hashable) -> float:
        """Seconds until reads under `key` are free of their byte debt (0: now); a SubscribeToShard
        subscription waits that long before it pushes more."""
        with self._lock:
            now = self._clock()
            return max(0.0, self._state(key, now).read_free_at - now)

    def admit_iterator(self, key: Hashable) -> bool:
        """Whether a GetShardIterator call on the shard may go ahead now (and spend one if so)."""
        with self._lock:
            now = self._clock()
            state = self._state(key, now)
            state.iterators.refill(self.rates.iterator_calls_per_second, now)
            if state.iterators.tokens < 1:
                return False
            state.iterators.tokens -= 1
            return True

    def charge_read(self, key: Hashable, size: int) -> None:
        """Meter the bytes a GetRecords call returned: the shard's reads wait `size / rate` seconds."""
        with self._lock:
            now = self._clock()
            state = self._state(key, now)
            state.read_free_at = max(state.read_free_at, now) + size / self.rates.read_bytes_per_second

    def forget(self, key: Hashable) -> None:
        """Drop a shard's state (its stream was deleted)."""
        with self._lock:
            self._shards.pop(key, None)
