"""Per-shard token buckets, so the producer paces itself below each shard's write limits.

As in the KPL, each predicted shard gets two buckets — Kinesis records per second and bytes per
second — that hold at most one second of the shard's limit and refill at `rate_limit` percent
of it (the KPL's default is 150: a little over-subscription keeps shards busy, the retrier
absorbs the throttles). Tokens of a request that failed as a whole are given back; buckets of
shards that closed are dropped. Records whose shard is unknown bypass the limiter: Kinesis
does the pacing.
"""

from __future__ import annotations

from collections.abc import Callable, Collection

from shardline.kinesis._limits import DEFAULT_LIMITS, Limits


class TokenBucket:
    """`capacity` tokens at most, refilled at `rate` tokens per second.

    A request larger than the bucket may still pass once the bucket is full; the bucket then
    goes into debt, so an oversize record is paced instead of blocked for ever.
    """

    __slots__ = ("_tokens", "_updated", "capacity", "rate")

    def __init__(self, capacity: float, rate: float, now: float) -> None:
        self.capacity = capacity
        self.rate = rate
        self._tokens = capacity
        self._updated = now

    def _refill(self, now: float) -> None:
        if now > self._updated:
            self._tokens = min(self.capacity, self._tokens + (now - self._updated) * self.rate)
            self._updated = now

    def available(self, now: float) -> float:
        self._refill(now)
        return self._tokens

    def wait_time(self, amount: float, now: float) -> float:
        """Seconds until `amount` could be taken (0 if it can be now)."""
        needed = min(amount, self.capacity) - self.available(now)
        return max(0.0, needed / self.rate)

    def take(self, amount: float, now: float) -> None:
        self._refill(now)
        self._tokens -= amount

    def give_back(self, amount: float, now: float) -> None:
        self._refill(now)
        self._tokens = min(self.capacity, self._tokens + amount)


class ShardLimiter:
    """Records/s and bytes/s buckets for every shard the producer writes to."""

    def __init__(
        self,
        *,
        rate_limit: float = 150.0,
        limits: Limits = DEFAULT_LIMITS,
        clock: Callable[[], float],
    ) -> None:
        self._records_limit = float(limits.shard_write_records_per_second)
        self._bytes_limit = float(limits.shard_write_bytes_per_second)
        self._growth = rate_limit / 100.0
        self._clock = clock
        self._buckets: dict[str, tuple[TokenBucket, TokenBucket]] = {}

    def _buckets_of(self, shard_id: str, now: float) -> tuple[TokenBucket, TokenBucket]:
        buckets = self._buckets.get(shard_id)
        if buckets is None:
            buckets = self._buckets[shard_id] = (
                TokenBucket(self._records_limit, self._records_limit * self._growth, now),
                TokenBucket(self._bytes_limit, self._bytes_limit * self._growth, now),
            )
        return buckets

    def wait_time(self, shard_id: str | None, size: float) -> float:
        """Seconds before one Kinesis record of `size` bytes may go to `shard_id` (0: now)."""
        if shard_id is None:
            return 0.0
        now = self._clock()
        records, data = self._buckets_of(shard_id, now)
        return max(records.wait_time(1, now), data.wait_time(size, now))

    @property
    def bytes_capacity(self) -> float:
        """The most bytes a shard's bucket ever holds: one second of its limit."""
        return self._bytes_limit

    def allowance(self, shard_id: str | None) -> float:
        """Bytes one Kinesis record to `shard_id` may hold now (0 when its buckets are empty)."""
        if shard_id is None:
            return float("inf")
        now = self._clock()
        records, data = self._buckets_of(shard_id, now)
        return data.available(now) if records.available(now) >= 1 else 0.0

    def try_take(self, shard_id: str | None, size: int) -> bool:
        """Take tokens for one Kinesis record of `size` bytes if both buckets allow it now."""
        if shard_id is None:
            return True
        if self.wait_time(shard_id, size) > 0:
            return False
        now = self._clock()
        records, data = self._buckets_of(shard_id, now)
        records.take(1, now)
        data.take(size, now)
        return True

    def give_back(self, shard_id: str | None, count: int, size: int) -> None:
        """Return the tokens of `count` Kinesis records (`size` bytes) that Kinesis never took."""
        buckets = self._buckets.get(shard_id) if shard_id is not None else None
        if buckets is not None:
            now = self._clock()
            buckets[0].give_back(count, now)
            buckets[1].give_back(size, now)

    def keep_only(self, shard_ids: Collection[str]) -> None:
        """Drop the buckets of shards no longer open."""
        for shard_id in [s for s in self._buckets if s not in shard_ids]:
            del self._buckets[shard_id]
