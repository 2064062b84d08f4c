"""A worker's leases: taken, renewed as a heartbeat, handed back; and the store its shard runs write through.

    held = HeldLeases(LeaseTable(dynamodb, "orders-leases"), owner="worker-7f3a")
    held.acquire(row)          # a lease read by a Scan, claimed if its counter is still the one seen
    held.renew()               # every renewal interval: the keys lost since
    held.hand_back_all()       # at shutdown: owned by no one, others take them at once

Every write to a lease row increments its counter, and every write is conditional on the counter
its writer last saw: that is the fencing. A worker writes a row from two threads — its renewals
(a heartbeat on an interval) and the shard run processing the shard's records (checkpoints,
failures, in-flight marks) — so `HeldLeases` keeps one current lease per key and serialises the
two: a shard run's write whose lease is older than the current one only by this worker's own
renewals is sent under the current counter; anything older is sent as it is, and fails. A write
that fails its condition (`LeaseLost`: another worker took the lease) drops the key, and the worker
stops that shard. `HeldLeases` is a `LeaseStore`, so the consumer core runs unchanged on it: its
`begin` and `hold` never take a row from another owner (that is the balancing's decision, made
with `acquire`), they raise `LeaseLost` for a key this worker does not hold.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any, TypeVar

from shardline.consumer._lease_store import Claim, Lease, LeaseStore
from shardline.errors import LeaseLost
from shardline.kinesis._positions import Position

__all__ = ["HeldLeases"]

_T = TypeVar("_T")


class HeldLeases:
    """One worker's leases over a `LeaseStore` (see the module docstring); itself a `LeaseStore`."""

    def __init__(self, store: LeaseStore, owner: str) -> None:
        if not owner:
            raise ValueError("a worker's owner name must not be empty (empty means owned by no one)")
        self.store = store
        self.owner = owner
        self._lock = threading.RLock()
        self._held: dict[str, Lease] = {}
        self._given: dict[str, int] = {}  # the counter of the lease last handed to the shard run

    # -- the worker's own operations ------------------------------------------------------------

    def holding(self) -> frozenset[str]:
        """The keys of the leases held."""
        with self._lock:
            return frozenset(self._held)

    def current(self, key: str) -> Lease | None:
        with self._lock:
            return self._held.get(key)

    def acquire(self, seen: Lease) -> Lease:
        """Claim `seen` (a row as read) for this worker, if no one wrote it since. `LeaseLost` if
        someone did (another worker was faster, or its owner renewed it after all)."""
        with self._lock:
            lease = self.store.claim(seen, self.owner)
            self._keep(lease)
            return lease

    def renew(self) -> list[str]:
        """Renew every lease held (one conditional write each); the keys lost since (dropped)."""
        lost = []
        for key in sorted(self.holding()):
            with self._lock:
                lease = self._held.get(key)
                if lease is None:
                    continue
                try:  # the shard run's lease is now behind by this renewal only: `_given` stays
                    self._held[key] = self.store.claim(lease, self.owner)
                except LeaseLost:
                    self.forget(key)
                    lost.append(key)
        return lost

    def hand_back(self, key: str) -> None:
        """Release `key` (owned by no one, its checkpoint kept) so another worker takes it at once."""
        with self._lock:
            lease = self._held.pop(key, None)
            self._given.pop(key, None)
            if lease is not None:
                with contextlib.suppress(LeaseLost):  # already someone else's: nothing to hand back
                    self.store.claim(lease, "")

    def hand_back_all(self) -> None:
        for key in sorted(self.holding()):
            self.hand_back(key)

    def forget(self, key: str) -> None:
        """Stop holding `key` without writing (the lease was lost)."""
        with self._lock:
            self._held.pop(key, None)
            self._given.pop(key, None)

    def _keep(self, lease: Lease) -> Lease:
        self._held[lease.key] = lease
        self._given[lease.key] = lease.counter
        return lease

    def _fenced(self, lease: Lease, write: Callable[[Lease], _T], lease_of: Callable[[_T], Lease]) -> _T:
        """`write` under the current counter when `lease` is behind only by renewals."""
        with self._lock:
            current = self._held.get(lease.key)
            if current is None:
                raise LeaseLost(f"lease {lease.key} is not held by worker {self.owner}")
            if lease.counter == self._given.get(lease.key) and lease.owner == current.owner:
                lease = replace(lease, counter=current.counter)
            try:
                result = write(lease)
            except LeaseLost:
                self.forget(lease.key)
                raise
            self._keep(lease_of(result))
            return result

    def _held_lease(self, key: str) -> Lease:
        with self._lock:
            current = self._held.get(key)
            if current is None:
                raise LeaseLost(f"lease {key} is not held by worker {self.owner}")
            self._given[key] = current.counter
            return current

    # -- LeaseStore: what the consumer core's shard run calls --------------------------------------

    def now(self) -> float:
        return self.store.now()

    def sleep(self, seconds: float) -> None:
        self.store.sleep(seconds)

    def get(self, key: str) -> Lease | None:
        return self.store.get(key)

    def take(self, key: str, owner: str, *, parent_shard_ids: Iterable[str] = ()) -> Lease:
        return self._held_lease(key)

    def hold(self, key: str, owner: str, *, parent_shard_ids: Iterable[str] = ()) -> Lease:
        return self._held_lease(key)

    def begin(
        self,
        key: str,
        owner: str,
        delivery: str,
        *,
        parent_shard_ids: Iterable[str] = (),
        held: Lease | None = None,
    ) -> tuple[Lease, bool]:
        with self._lock:
            current = self._held_lease(key)
            return self._fenced(
                current,
                lambda lease: self.store.begin(key, owner, delivery, held=lease),
                lambda result: result[0],
            )

    def release(self, lease: Lease, *, careful_done: bool = False) -> Lease:
        return self._fenced(lease, lambda held: self.store.release(held, careful_done=careful_done), _same)

    def checkpoint(
        self,
        lease: Lease,
        position: Position,
        *,
        release: bool = False,
        applied: str | None = None,
        careful_span: int | None = None,
        claims: Sequence[Claim] = (),
    ) -> Lease:
        return self._fenced(
            lease,
            lambda held: self.store.checkpoint(
                held, position, release=release, applied=applied, careful_span=careful_span, claims=claims
            ),
            _same,
        )

    def checkpoint_with(
        self,
        lease: Lease,
        position: Position,
        writes: Sequence[Mapping[str, Any]],
        *,
        release: bool = False,
        applied: str | None = None,
        careful_span: int | None = None,
        claims: Sequence[Claim] = (),
    ) -> Lease:
        return self._fenced(
            lease,
            lambda held: self.store.checkpoint_with(
                held,
                position,
                writes,
                release=release,
                applied=applied,
                careful_span=careful_span,
                claims=claims,
            ),
            _same,
        )

    def put_idempotent(self, puts: Sequence[Mapping[str, Any]]) -> int:
        return self.store.put_idempotent(puts)

    def record_failure(
        self,
        lease: Lease,
        position: Position,
        error: str,
        *,
        release: bool = False,
        details: str | None = None,
    ) -> Lease:
        return self._fenced(
            lease,
            lambda held: self.store.record_failure(held, position, error, release=release, details=details),
            _same,
        )

    def mark_careful(
        self,
        lease: Lease,
        span: int,
        *,
        started: bool = False,
        returned: bool = False,
        release: bool = False,
    ) -> Lease:
        return self._fenced(
            lease,
            lambda held: self.store.mark_careful(
                held, span, started=started, returned=returned, release=release
            ),
            _same,
        )

    def stall(self, lease: Lease, cause: str, sequence: str, *, release: bool = False) -> Lease:
        return self._fenced(
            lease, lambda held: self.store.stall(held, cause, sequence, release=release), _same
        )

    def note_skipped(self, lease: Lease, skipped: str) -> Lease:
        return self._fenced(lease, lambda held: self.store.note_skipped(held, skipped), _same)

    def start_at(
        self,
        key: str,
        checkpoint: Position,
        *,
        parent_shard_ids: Iterable[str] = (),
        applied: str | None = None,
    ) -> bool:
        return self.store.start_at(key, checkpoint, parent_shard_ids=parent_shard_ids, applied=applied)

    def leases(self) -> list[Lease]:
        return self.store.leases()

    def claim(self, seen: Lease, owner: str) -> Lease:
        return self.store.claim(seen, owner)

    def mark_shard_end(self, seen: Lease) -> bool:
        return self.store.mark_shard_end(seen)

    def sink_key(self, table_name: str) -> tuple[str, ...] | None:
        return self.store.sink_key(table_name)


def _same(lease: Lease) -> Lease:
    return lease
