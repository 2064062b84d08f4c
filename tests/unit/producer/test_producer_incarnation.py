"""Issue 39, property 1: a producer id is never live in two processes — in real forked children.

A `Producer` created and used in one process, then forked: each child draws a new producer id and
new lanes before its first send, whatever thread sends, and never sends what its parent buffered.
A snapshot restore is simulated with real processes: a forked child is the process the snapshot
is taken of; its children, forked with libc's fork() (no Python at-fork callback runs, as none
runs on a restore) and seeing the snapshot's pid (a restore keeps it), are the restores, each
calling the after-restore callbacks registered with the runtime's hook, as Lambda's runtime does.

The stream is `shardline.testing.InMemoryKinesis`: each process writes to its own copy of it, and
returns what its copy holds; the test compares the aggregates the processes sent.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from functools import partial
from typing import Any

import pytest

from shardline.kinesis import UserRecord
from shardline.kpl._decode import decode_aggregate
from shardline.kpl._identity import AggregateId
from shardline.producer import Producer, ProducerConfig
from shardline.testing import InMemoryKinesis
from tests.support.fakes import FakeClock
from tests.support.forks import fork_without_hooks, in_child

Sent = list[tuple[str, str, str, list[bytes]]]  # (shard, sequence number, aggregate id, user data)


def build(kinesis: Any = None) -> tuple[Producer, InMemoryKinesis]:
    clock = FakeClock()
    stream = kinesis or InMemoryKinesis("events", 2, clock=clock)
    producer = Producer(stream, "events", config=ProducerConfig(), clock=clock, sleep=clock.sleep)
    return producer, stream


def records(prefix: str, count: int) -> list[UserRecord]:
    return [UserRecord(f"key-{i % 5}", f"{prefix}-{i}".encode()) for i in range(count)]


def sent(kinesis: InMemoryKinesis) -> Sent:
    """Every Kinesis record the stream copy holds, with its aggregate id and user records."""
    found: Sent = []
    for shard in kinesis.shard_ids():
        for stored in kinesis.records(shard):
            users, aggregate = decode_aggregate(stored.data)
            assert aggregate is not None
            found.append((shard, stored.sequence_number, aggregate, [u.data for u in users]))
    return found


def since(before: Sent, after: Sent) -> list[AggregateId]:
    """The aggregate ids sent after `before` was taken."""
    known = {(shard, sequence) for shard, sequence, _, _ in before}
    return [AggregateId.parse(a) for shard, sequence, a, _ in after if (shard, sequence) not in known]


def send_and_report(producer: Producer, kinesis: InMemoryKinesis, prefix: str, count: int) -> Sent:
    results = producer.put_many(records(prefix, count))
    assert all(result.success for result in results), results
    return sent(kinesis)


def assert_one_id_each(*incarnations: list[AggregateId]) -> list[str]:
    """Each incarnation sent under one producer id of its own, and no aggregate id twice."""
    ids = []
    for aggregates in incarnations:
        assert aggregates, "every process sent something"
        producers = {aggregate.producer for aggregate in aggregates}
        assert len(producers) == 1, producers
        ids.append(producers.pop())
    assert len(set(ids)) == len(ids), f"a producer id is live in two processes: {ids}"
    every = [(a.producer, a.lane, a.counter) for aggregates in incarnations for a in aggregates]
    assert len(every) == len(set(every))
    return ids


def test_property_1_producer_id_never_live_in_two_processes_after_a_fork() -> None:
    """Created and used, then forked twice; the parent and both children keep sending (one child
    from a thread of its own): three producer ids, each child's lanes counting from 1 again."""
    producer, kinesis = build()
    send_and_report(producer, kinesis, "before", 30)
    before = sent(kinesis)
    [first_id] = {AggregateId.parse(a).producer for _, _, a, _ in before}

    def from_a_thread() -> Sent:
        out: list[Sent] = []
        worker = threading.Thread(target=lambda: out.append(send_and_report(producer, kinesis, "c2", 40)))
        worker.start()
        worker.join()
        return out[0]

    children = [
        in_child(lambda: send_and_report(producer, kinesis, "c1", 40)),
        in_child(from_a_thread),
    ]
    parent_after = send_and_report(producer, kinesis, "parent", 40)
    child_after = [child.result(timeout=60) for child in children]

    incarnations = [since(before, parent_after)] + [since(before, after) for after in child_after]
    parent_id = assert_one_id_each(*incarnations)[0]
    assert parent_id == first_id, "the parent keeps its id"
    for aggregates in incarnations[1:]:
        lanes: dict[str, list[int]] = {}
        for aggregate in aggregates:
            lanes.setdefault(aggregate.lane, []).append(aggregate.counter)
        assert all(counters[0] == 1 for counters in lanes.values()), lanes  # new lanes


class GatedKinesis(InMemoryKinesis):
    """The next PutRecords, once `hold_next()` is called, waits for `gate` before writing."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__("events", 2, clock=clock)
        self.entered = threading.Event()
        self.gate = threading.Event()
        self._hold = False

    def hold_next(self) -> None:
        self._hold = True

    def put_records(self, **kwargs: Any) -> dict[str, Any]:
        if self._hold:
            self._hold = False
            self.entered.set()
            self.gate.wait()
        return super().put_records(**kwargs)


@pytest.mark.parametrize("fork", [os.fork, fork_without_hooks], ids=["os.fork", "fork-without-hooks"])
def test_property_1_producer_id_never_live_in_two_processes_no_deadlock_in_the_child(
    fork: Callable[[], int],
) -> None:
    """At the fork a request is in flight on the request pool (its thread does not survive the
    fork) and another thread holds the producer's lock: the child sends at once, under a new id,
    and never sends the parent's in-flight records; the parent finishes its own."""
    clock = FakeClock()
    producer, kinesis = build(GatedKinesis(clock))
    send_and_report(producer, kinesis, "before", 10)
    before = sent(kinesis)
    assert isinstance(kinesis, GatedKinesis)
    kinesis.hold_next()
    flushing: list[Any] = []
    flusher = threading.Thread(target=lambda: flushing.append(producer.put_many(records("inflight", 10))))
    flusher.start()
    assert kinesis.entered.wait(30), "the request is in flight"
    holding, release = threading.Event(), threading.Event()

    def hold_the_lock() -> None:
        with producer._lock:
            holding.set()
            release.wait()

    holder = threading.Thread(target=hold_the_lock)
    holder.start()
    assert holding.wait(30)

    child = in_child(lambda: send_and_report(producer, kinesis, "child", 20), fork=fork)
    child_after = child.result(timeout=30)

    release.set()
    kinesis.gate.set()
    holder.join()
    flusher.join()
    assert all(result.success for result in flushing[0])
    parent_after = sent(kinesis)
    data = [d for _, _, _, batch in child_after for d in batch]
    assert not [d for d in data if d.startswith(b"inflight")], "the child sent the parent's records"
    assert sorted(d for d in data if d.startswith(b"child")) == sorted(r.data for r in records("child", 20))
    assert_one_id_each(since(before, parent_after), since(before, child_after))


def test_property_1_producer_id_never_live_in_two_processes_buffered_records_stay_the_parents() -> None:
    """Records put (not yet flushed) before the fork are the parent's: the parent sends them; in
    the child their futures fail `Inherited` (unconfirmed: the parent may send them), and the child
    never sends them."""
    from shardline.errors import INHERITED

    producer, kinesis = build()
    send_and_report(producer, kinesis, "before", 10)
    before = sent(kinesis)
    futures = [producer.put(record) for record in records("buffered", 12)]

    def child_flushes() -> tuple[list[Any], Sent]:
        producer.flush()
        results = [future.result(timeout=0) for future in futures]
        return results, send_and_report(producer, kinesis, "child", 5)

    child = in_child(child_flushes)
    producer.flush()
    assert all(future.result(timeout=0).success for future in futures)
    parent_after = sent(kinesis)
    child_results, child_after = child.result(timeout=60)

    assert {(r.success, r.error_code, r.unconfirmed) for r in child_results} == {(False, INHERITED, True)}
    child_data = [d for _, _, _, batch in child_after for d in batch]
    assert not [d for d in child_data if d.startswith(b"buffered")]
    parent_data = [d for _, _, _, batch in parent_after for d in batch]
    assert sorted(d for d in parent_data if d.startswith(b"buffered")) == sorted(
        r.data for r in records("buffered", 12)
    )
    assert_one_id_each(since(before, parent_after), since(before, child_after))


def _snapshot_process(call_restore_hook: bool) -> tuple[list[str], list[list[AggregateId]]]:
    """The process a snapshot is taken of: it registers the runtime hooks (with a stand-in for
    `snapshot_restore_py`'s registration functions), creates and uses a producer, puts records it
    does not flush, lets the runtime take the snapshot (its before-snapshot callbacks run), then is
    restored twice: two children forked with no Python at-fork callback, seeing the same pid."""
    from shardline.producer import _incarnation

    before_snapshot: list[tuple[Any, tuple[Any, ...], dict[str, Any]]] = []
    after_restore: list[tuple[Any, tuple[Any, ...], dict[str, Any]]] = []
    _incarnation.install_snapshot_hooks(
        register_before_snapshot=lambda f, *a, **k: before_snapshot.append((f, a, k)),
        register_after_restore=lambda f, *a, **k: after_restore.append((f, a, k)),
    )
    snapshot_pid = os.getpid()
    _incarnation.getpid = lambda: snapshot_pid  # a restore keeps the snapshot's pid

    producer, kinesis = build()
    send_and_report(producer, kinesis, "init", 10)
    unflushed = [producer.put(record) for record in records("unflushed", 6)]
    for callback, args, kwargs in reversed(before_snapshot):  # the runtime: reverse order
        callback(*args, **kwargs)
    assert all(future.result(timeout=0).success for future in unflushed), "flushed before the snapshot"
    snapshot = sent(kinesis)

    def restored(prefix: str) -> Sent:
        if call_restore_hook:
            for callback, args, kwargs in after_restore:  # the runtime: registration order
                callback(*args, **kwargs)
        return send_and_report(producer, kinesis, prefix, 30)

    restores = [in_child(partial(restored, p), fork=fork_without_hooks) for p in ("r1", "r2")]
    after = [since(snapshot, child.result(timeout=60)) for child in restores]
    ids = {AggregateId.parse(a).producer for _, _, a, _ in snapshot}
    return sorted(ids), after


def test_property_1_producer_id_never_live_in_two_processes_after_a_snapshot_restore() -> None:
    """Two restores of one memory image, each calling the after-restore hook: two new ids."""
    snapshot_ids, (first, second) = in_child(lambda: _snapshot_process(True)).result(timeout=120)
    restore_ids = assert_one_id_each(first, second)
    assert not set(restore_ids) & set(snapshot_ids), "a restore kept the snapshot's id"


def test_property_1_producer_id_never_live_in_two_processes_the_pid_guard_alone() -> None:
    """No at-fork callback runs (libc's fork) and no restore hook is called: the guard at send
    time sees the changed pid, and each child sends under an id of its own."""
    producer, kinesis = build()
    send_and_report(producer, kinesis, "before", 30)
    before = sent(kinesis)
    children = [
        in_child(partial(send_and_report, producer, kinesis, p, 40), fork=fork_without_hooks)
        for p in ("c1", "c2")
    ]
    parent_after = send_and_report(producer, kinesis, "parent", 40)
    incarnations = [since(before, parent_after)] + [since(before, c.result(timeout=60)) for c in children]
    assert_one_id_each(*incarnations)
