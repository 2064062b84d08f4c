"""The worker lease protocol as a property: random schedules of workers joining, ticking (renew,
balance, take), starting shard runs, committing, pausing and waking with what they held, dying and
shutting down, while time passes — on one `InMemoryLeaseTable`, each worker through its own
`HeldLeases`, `LeaseObserver` and `plan`, as `Worker` composes them.

Invariants after every step: no two workers ever commit for one shard under the same lease
counter; a commit only lands on a row that names its worker as the owner (a worker that woke after
its lease was taken cannot commit), and one that holds its lease is never refused (its own
renewals do not fence its shard runs); no checkpoint goes back. And when
the schedule lets the live workers tick long enough, every shard is held by a live worker and their
shares differ by at most one."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from shardline.consumer._lease_balance import LeaseObserver, plan
from shardline.consumer._lease_store import Lease
from shardline.consumer._worker_leases import HeldLeases
from shardline.errors import LeaseLost
from shardline.kinesis import TRIM_HORIZON, Position
from shardline.testing import InMemoryLeaseTable

LEASE_S = 10.0
MAX_WORKERS = 4


@dataclass
class SimulatedWorker:
    name: str
    held: HeldLeases
    observer: LeaseObserver
    paused: bool = False
    dead: bool = False
    runs: dict[str, Lease] = field(default_factory=dict)  # the lease each shard run holds

    @property
    def acting(self) -> bool:
        return not self.paused and not self.dead


class LeaseProtocol(RuleBasedStateMachine):
    @initialize(shards=st.integers(min_value=1, max_value=5))
    def create(self, shards: int) -> None:
        self.now = 0.0
        self.store = InMemoryLeaseTable(start=1000.0)
        self.keys = [f"shard-{n}" for n in range(shards)]
        for key in self.keys:
            self.store.start_at(key, Position(TRIM_HORIZON))
        self.workers: list[SimulatedWorker] = []
        self.commits: dict[tuple[str, int], str] = {}  # (shard, counter committed under) -> worker
        self.checkpoints = {key: 0 for key in self.keys}

    def _clock(self) -> float:
        return self.now

    # -- the schedule ---------------------------------------------------------------------------

    @precondition(lambda self: len(self.workers) < MAX_WORKERS)
    @rule()
    def join(self) -> None:
        name = f"w{len(self.workers)}"
        self.workers.append(
            SimulatedWorker(name, HeldLeases(self.store, name), LeaseObserver(LEASE_S, self._clock))
        )

    @rule(which=st.integers(min_value=0, max_value=MAX_WORKERS - 1))
    def tick(self, which: int) -> None:
        worker = self._worker(which)
        if worker is not None and worker.acting:
            self._tick(worker)

    @rule(
        which=st.integers(min_value=0, max_value=MAX_WORKERS - 1), shard=st.integers(min_value=0, max_value=4)
    )
    def start_run(self, which: int, shard: int) -> None:
        worker = self._worker(which)
        if worker is None or not worker.acting or shard >= len(self.keys):
            return
        key = self.keys[shard]
        try:
            lease, _ = worker.held.begin(key, worker.name, "delivery")
        except LeaseLost:
            return
        worker.runs[key] = lease

    @rule(
        which=st.integers(min_value=0, max_value=MAX_WORKERS - 1), shard=st.integers(min_value=0, max_value=4)
    )
    def commit(self, which: int, shard: int) -> None:
        """A shard run commits one more record: what a paused worker does when it wakes, too."""
        worker = self._worker(which)
        if worker is None or worker.dead or worker.paused or shard >= len(self.keys):
            return
        key = self.keys[shard]
        run = worker.runs.get(key)
        if run is None:
            return
        stored = self.store.row(key)
        assert stored is not None
        position = int(run.checkpoint.sequence) + 1 if run.checkpoint.sequence.isdigit() else 1
        mine = stored.owner == worker.name and key in worker.held.holding()
        try:
            lease = worker.held.checkpoint(run, Position(str(position)))
        except LeaseLost:
            assert not mine, f"{worker.name} lost {key}, which it held and no one took"
            worker.runs.pop(key, None)
            return
        under = lease.counter - 1  # the counter the write was conditional on
        assert (key, under) not in self.commits, f"{key}: a second commit under counter {under}"
        assert stored.counter == under, "a commit landed under a counter the row did not hold"
        assert stored.owner == worker.name, f"{worker.name} committed on a lease {stored.owner!r} held"
        self.commits[key, under] = worker.name
        worker.runs[key] = lease

    @rule(which=st.integers(min_value=0, max_value=MAX_WORKERS - 1))
    def pause(self, which: int) -> None:
        worker = self._worker(which)
        if worker is not None and not worker.dead:
            worker.paused = True

    @rule(which=st.integers(min_value=0, max_value=MAX_WORKERS - 1))
    def wake(self, which: int) -> None:
        """It wakes with the runs and leases it held when it stopped, and commits at once."""
        worker = self._worker(which)
        if worker is None or worker.dead:
            return
        worker.paused = False
        for key in list(worker.runs):
            self.commit(which, self.keys.index(key))

    @rule(which=st.integers(min_value=0, max_value=MAX_WORKERS - 1), graceful=st.booleans())
    def leave(self, which: int, graceful: bool) -> None:
        worker = self._worker(which)
        if worker is None or worker.dead:
            return
        if graceful and not worker.paused:
            worker.held.hand_back_all()  # SIGTERM: owned by no one, taken at once
        worker.dead = True

    @rule(seconds=st.floats(min_value=0.5, max_value=2 * LEASE_S))
    def wait(self, seconds: float) -> None:
        self.now += seconds

    # -- the invariants -------------------------------------------------------------------------

    @invariant()
    def no_checkpoint_goes_back(self) -> None:
        for key in getattr(self, "keys", []):
            row = self.store.row(key)
            assert row is not None
            at = int(row.checkpoint.sequence) if row.checkpoint.sequence.isdigit() else 0
            assert at >= self.checkpoints[key], f"{key} went back from {self.checkpoints[key]} to {at}"
            self.checkpoints[key] = at

    @precondition(lambda self: any(w.acting for w in self.workers))
    @rule()
    def settle(self) -> None:
        """Long enough without failures: every shard held by an acting worker, shares within one."""
        acting = [w for w in self.workers if w.acting]
        # A lease stopped being renewed is seen expired a lease duration after it was first seen at
        # its last counter (up to an interval after that renewal), and taken at the next interval:
        # 3 + 2 intervals; then one steal per interval moves the shares.
        for _ in range(3 + 2 + 2 * len(self.keys)):
            self.now += LEASE_S / 3
            for worker in acting:
                self._tick(worker)
        owners = {key: self.store.row(key).owner for key in self.keys}  # type: ignore[union-attr]
        names = {w.name for w in acting}
        assert set(owners.values()) <= names, f"shards held by workers that do not act: {owners}"
        loads = [sum(1 for owner in owners.values() if owner == name) for name in names]
        assert max(loads) - min(loads) <= 1, f"unbalanced: {owners}"

    # -- a worker's interval, as `Worker.tick` does it ------------------------------------------------

    def _tick(self, worker: SimulatedWorker) -> None:
        for key in worker.held.renew():
            worker.runs.pop(key, None)
        rows = self.store.leases()
        worker.observer.observe(rows)
        held = worker.held.holding()
        choice = plan(rows, worker.name, worker.observer, open_keys=set(self.keys), held=held)
        for row in (*choice.take, *([choice.steal] if choice.steal else [])):
            with contextlib.suppress(LeaseLost):  # another worker was faster
                worker.held.acquire(row)
        for key in list(worker.runs):
            if key not in worker.held.holding():
                worker.runs.pop(key)

    def _worker(self, which: int) -> SimulatedWorker | None:
        return self.workers[which] if which < len(self.workers) else None


LeaseProtocol.TestCase.settings = settings(max_examples=300, stateful_step_count=40, deadline=None)
test_the_lease_protocol_never_lets_two_workers_commit_under_one_counter = LeaseProtocol.TestCase
