"""The stream's open shards and their hash ranges, to predict where a hash key lands.

`ShardMap` lists the open shards (ListShards with ShardFilter AT_LATEST, paginated; closed
shards are also dropped client-side because some servers ignore the filter) and answers
`predict(hash_key)` by bisecting the shards' ending hash keys.

It is built for Lambda: no thread runs between calls. Refreshes happen inline — on the first
`refresh_if_due()`, on `invalidate()` when a prediction proved wrong, and after a failed
refresh once its backoff (1 s, ×1.5, up to 30 s) has passed. Until a refresh succeeds the map
predicts nothing (`None`) and the producer sends records one by one with their own keys, so a
missing `kinesis:ListShards` permission or a throttled ListShards never stalls a put.
"""

from __future__ import annotations

import bisect
import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

logger = logging.getLogger(__name__)

ListShards = Callable[..., Mapping[str, Any]]


class HashRange:
    """The closed interval of hash keys a shard owns; `hash_key in hash_range` tests membership."""

    __slots__ = ("end", "start")

    def __init__(self, start: int, end: int) -> None:
        self.start = start
        self.end = end

    def __contains__(self, hash_key: object) -> bool:
        return isinstance(hash_key, int) and self.start <= hash_key <= self.end

    def __eq__(self, other: object) -> bool:
        return isinstance(other, HashRange) and (self.start, self.end) == (other.start, other.end)

    def __hash__(self) -> int:
        return hash((self.start, self.end))

    def __repr__(self) -> str:
        return f"HashRange({self.start}, {self.end})"


class _Snapshot(NamedTuple):
    endings: tuple[int, ...]  # sorted ending hash keys of the open shards
    shard_ids: tuple[str, ...]  # shard_ids[i] ends at endings[i]
    ranges: Mapping[str, HashRange]


class ShardMap:
    """Predicts the shard of a hash key from a cached list of open shards.

    `list_shards` is called like boto3's `kinesis.list_shards` (keyword arguments, returns the
    response dict). `clock` is a monotonic clock in seconds. Closed shards keep answering
    `hash_range` for `closed_shard_ttl` seconds after they leave the map, so results of records
    already in flight during a reshard can still be checked.
    """

    def __init__(
        self,
        list_shards: ListShards,
        *,
        stream_name: str,
        clock: Callable[[], float] = time.monotonic,
        closed_shard_ttl: float = 60.0,
        initial_backoff: float = 1.0,
        max_backoff: float = 30.0,
        backoff_multiplier: float = 1.5,
    ) -> None:
        self._list_shards = list_shards
        self._stream_name = stream_name
        self._clock = clock
        self._closed_shard_ttl = closed_shard_ttl
        self._initial_backoff = initial_backoff
        self._max_backoff = max_backoff
        self._backoff_multiplier = backoff_multiplier

        self._snapshot: _Snapshot | None = None  # None: predict nothing until a refresh succeeds
        self._known: _Snapshot | None = None  # last good snapshot, kept for hash_range after invalidate
        self._closed: dict[str, tuple[HashRange, float]] = {}  # shard id -> (range, forget at)
        self._updated_at = float("-inf")
        self._next_attempt = float("-inf")
        self._backoff = initial_backoff
        self._refresh_lock = threading.Lock()
        self.refresh_count = 0
        self.last_error: str | None = None

    # -- queries ---------------------------------------------------------------------------

    @property
    def ready(self) -> bool:
        """True when the map can predict."""
        return self._snapshot is not None

    @property
    def updated_at(self) -> float:
        """Clock time of the last successful refresh (-inf before the first)."""
        return self._updated_at

    def predict(self, hash_key: int) -> str | None:
        """The open shard whose range holds `hash_key`, or None when the map cannot tell."""
        snapshot = self._snapshot
        if snapshot is None:
            return None
        index = bisect.bisect_left(snapshot.endings, hash_key)
        if index == len(snapshot.endings):
            return None
        shard_id = snapshot.shard_ids[index]
        # Ranges are contiguous in a consistent listing; a gap means a listing caught mid-reshard.
        return shard_id if snapshot.ranges[shard_id].start <= hash_key else None

    def open_shards(self) -> tuple[str, ...]:
        """Ids of the open shards, in hash-key order (empty when not ready)."""
        snapshot = self._snapshot
        return snapshot.shard_ids if snapshot is not None else ()

    def hash_range(self, shard_id: str) -> HashRange | None:
        """The hash range of an open shard, or of a shard closed less than `closed_shard_ttl` ago."""
        for snapshot in (self._snapshot, self._known):
            if snapshot is not None and shard_id in snapshot.ranges:
                return snapshot.ranges[shard_id]
        closed = self._closed.get(shard_id)
        if closed is None:
            return None
        hash_range, forget_at = closed
        if self._clock() >= forget_at:
            del self._closed[shard_id]
            return None
        return hash_range

    # -- refreshing ------------------------------------------------------------------------

    @property
    def refresh_due(self) -> bool:
        """True when the map cannot predict and no backoff is pending: a refresh should run now."""
        return self._snapshot is None and self._clock() >= self._next_attempt

    def refresh_if_due(self) -> bool:
        """Refresh if the map cannot predict and no backoff is pending. Returns `ready`."""
        if self._snapshot is None and self._clock() >= self._next_attempt:
            self.refresh()
        return self.ready

    def invalidate(self, seen_at: float, predicted_shard: str | None, *, refresh: bool = True) -> None:
        """A record predicted for `predicted_shard` at time `seen_at` landed elsewhere.

        Ignored when a refresh already happened after `seen_at`, when the map is already invalid,
        or when `predicted_shard` is already known to be closed (a new listing would teach
        nothing). Otherwise the map stops predicting and, with `refresh`, refreshes now; if that
        fails (or `refresh` is False) it stays invalid until `refresh_if_due`/`refresh` succeeds.
        """
        snapshot = self._snapshot
        if seen_at <= self._updated_at or snapshot is None:
            return  # already refreshed since, or already invalid (refresh_if_due retries on backoff)
        if predicted_shard is not None and predicted_shard not in snapshot.ranges:
            return
        self._known = snapshot
        self._snapshot = None
        self._next_attempt = float("-inf")
        if refresh:
            self.refresh()

    def after_fork(self) -> None:
        """In a forked child: a refresh running in the parent at the fork held the refresh lock,
        and its thread did not survive; the map itself (the parent's listing) stays valid."""
        self._refresh_lock = threading.Lock()

    def refresh(self) -> bool:
        """List the open shards now. Returns True on success; one refresh runs at a time."""
        if not self._refresh_lock.acquire(blocking=False):
            return False
        try:
            started = self._clock()
            try:
                shards = self._list_open_shards()
            except Exception as exc:  # any failure (permission, throttle, network) must not escape
                self._on_refresh_failed(started, exc)
                return False
            self._install(shards, started)
            return True
        finally:
            self._refresh_lock.release()

    def _list_open_shards(self) -> list[tuple[str, HashRange]]:
        shards: list[tuple[str, HashRange]] = []
        request: dict[str, Any] = {"StreamName": self._stream_name, "ShardFilter": {"Type": "AT_LATEST"}}
        while True:
            response = self._list_shards(**request)
            for shard in response.get("Shards", ()):
                if shard.get("SequenceNumberRange", {}).get("EndingSequenceNumber") is not None:
                    continue  # closed: a server that ignores ShardFilter still lists it
                hash_range = shard["HashKeyRange"]
                shards.append(
                    (
                        shard["ShardId"],
                        HashRange(int(hash_range["StartingHashKey"]), int(hash_range["EndingHashKey"])),
                    )
                )
            token = response.get("NextToken")
            if not token:
                return shards
            request = {"NextToken": token}  # the API rejects StreamName and ShardFilter beside a token

    def _install(self, shards: list[tuple[str, HashRange]], started: float) -> None:
        shards.sort(key=lambda item: item[1].end)
        ranges = dict(shards)
        previous = self._snapshot or self._known
        now = self._clock()
        if previous is not None:
            for shard_id, hash_range in previous.ranges.items():
                if shard_id not in ranges:
                    self._closed[shard_id] = (hash_range, now + self._closed_shard_ttl)
        self._snapshot = _Snapshot(
            endings=tuple(r.end for _, r in shards),
            shard_ids=tuple(shard_id for shard_id, _ in shards),
            ranges=ranges,
        )
        self._known = None
        self._updated_at = started
        self._backoff = self._initial_backoff
        self._next_attempt = float("-inf")
        self.refresh_count += 1
        self.last_error = None

    def _on_refresh_failed(self, started: float, exc: Exception) -> None:
        self.last_error = f"{type(exc).__name__}: {exc}"
        self._next_attempt = started + self._backoff
        logger.warning(
            "ListShards failed (%s); records go one by one; next attempt in %.1f s",
            self.last_error,
            self._backoff,
        )
        self._backoff = min(self._backoff * self._backoff_multiplier, self._max_backoff)
