"""Which leases a worker takes: expiry as the KCL observes it, each worker's share, one steal at a time.

    observer = LeaseObserver(lease_duration=10.0)
    observer.observe(rows)                       # every renewal interval, after a Scan
    choice = plan(rows, "worker-2", observer, open_keys={...}, held={...})
    choice.take, choice.steal, choice.target

Workers share no clock, so a lease's expiry is observed, never stamped: a lease whose counter has
not moved for `lease_duration` seconds of this worker's own monotonic clock, since it first saw
that counter, is expired — its owner stopped renewing (it died, or is paused, or lost DynamoDB).
Its owner may still be alive and write once more: taking the lease increments the counter, so
that write fails (`LeaseLost`) and the old owner stops the shard.

Each worker aims at its share of the open leases: `ceil(open / live workers)`, at most
`max_leases`. Live workers are the owners of leases that are not expired, and this one. Below
its share it takes leases owned by no one (released, new shards) and expired ones first, in a
random order so that workers starting together contend less; if none are left it steals one
lease from the most loaded worker when that one holds more than its share — or exactly its share
while this one is short by more than one (4 shards on 3 workers: 2/2/0 becomes 2/1/1, as the KCL
does) — one per interval, so the group moves by small steps and never swaps leases back and forth.
`plan` only decides; claiming (conditional on the counter seen) is `HeldLeases.acquire`'s.
"""

from __future__ import annotations

import math
import random
import time
from collections import Counter
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass

from shardline.consumer._lease_store import Lease

__all__ = ["LeaseObserver", "Plan", "plan"]


class LeaseObserver:
    """When this worker first saw each lease's current counter, by its own monotonic clock."""

    def __init__(self, lease_duration: float, clock: Callable[[], float] = time.monotonic) -> None:
        if lease_duration <= 0:
            raise ValueError("lease_duration must be positive seconds")
        self.lease_duration = lease_duration
        self._clock = clock
        self._seen: dict[str, tuple[int, float]] = {}  # lease key -> (counter, first seen at)

    def observe(self, rows: Iterable[Lease]) -> None:
        """Note the counters of a fresh read of the table (rows gone are forgotten)."""
        now = self._clock()
        seen: dict[str, tuple[int, float]] = {}
        for row in rows:
            before = self._seen.get(row.key)
            seen[row.key] = before if before is not None and before[0] == row.counter else (row.counter, now)
        self._seen = seen

    def expired(self, row: Lease) -> bool:
        """Has `row`'s counter stood still for the lease duration (as of the last `observe`)?"""
        seen = self._seen.get(row.key)
        if seen is None or seen[0] != row.counter:
            return False  # not observed at this counter: it just moved
        return self._clock() - seen[1] >= self.lease_duration


@dataclass(frozen=True, slots=True)
class Plan:
    """What a worker does this interval: the leases to take (as read), one to steal (or None)."""

    take: tuple[Lease, ...]
    steal: Lease | None
    target: int  # this worker's share of the open leases
    workers: int  # live workers, this one included


def plan(
    rows: Iterable[Lease],
    me: str,
    observer: LeaseObserver,
    *,
    open_keys: Collection[str],
    held: Collection[str],
    max_leases: int | None = None,
    rng: random.Random | None = None,
) -> Plan:
    """The leases worker `me` should take now. `open_keys`: the leases that may be processed
    (not finished, parents finished); `held`: the keys `me` holds (its own knowledge, not the
    table's: a renewal it has not seen yet does not make its lease look expired)."""
    rng = rng or random.Random()
    candidates = [row for row in rows if row.key in open_keys]
    loads: Counter[str] = Counter()
    available: list[Lease] = []
    for row in candidates:
        if row.key in held:
            continue
        if not row.owner or row.owner == me or observer.expired(row):  # me: a row it let go of
            available.append(row)
        else:
            loads[row.owner] += 1
    workers = len(set(loads) | {me})
    target = math.ceil(len(candidates) / workers) if candidates else 0
    if max_leases is not None:
        target = min(target, max_leases)
    mine = sum(1 for row in candidates if row.key in held)
    need = max(0, target - mine)
    rng.shuffle(available)
    available.sort(key=lambda row: bool(row.owner))  # owned by no one first, then expired
    take = tuple(available[:need])
    steal = None
    short = need - len(take)
    if short > 0 and loads:
        victim, load = max(sorted(loads.items()), key=lambda item: item[1])
        if load > target or (load == target and short > 1):  # 2/2/0 on 4 shards: 2/1/1
            steal = rng.choice(sorted((r for r in candidates if r.owner == victim), key=lambda r: r.key))
    return Plan(take, steal, target, workers)
