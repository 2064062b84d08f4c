"""`_lease_balance`: expiry as a worker observes it, each worker's share, and one steal at a time."""

from __future__ import annotations

import random

import pytest

from shardline.consumer._lease_balance import LeaseObserver, plan
from shardline.consumer._lease_store import Lease
from shardline.kinesis import TRIM_HORIZON, Position


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def rows(owners: dict[str, str], counter: int = 1) -> list[Lease]:
    return [Lease(key, owner, counter, Position(TRIM_HORIZON)) for key, owner in sorted(owners.items())]


def test_a_lease_expires_only_after_its_counter_stood_still_for_the_whole_duration():
    clock = Clock()
    observer = LeaseObserver(10.0, clock)
    [row] = rows({"s1": "w1"})
    observer.observe([row])
    clock.now = 9.9
    observer.observe([row])
    assert not observer.expired(row)
    clock.now = 10.0
    assert observer.expired(row)
    moved = Lease("s1", "w1", 2, Position(TRIM_HORIZON))
    observer.observe([moved])  # renewed: the clock starts again from its new counter
    assert not observer.expired(moved)
    clock.now = 19.9
    assert not observer.expired(moved)


def test_three_workers_on_eight_shards_aim_at_three_and_the_third_steals_only_from_one_above_it():
    observer = LeaseObserver(10.0, Clock())
    owners = {f"s{n}": ("w1" if n < 4 else "w2" if n < 7 else "w3") for n in range(8)}  # 4 / 3 / 1
    table = rows(owners)
    observer.observe(table)
    keys = set(owners)
    choice = plan(table, "w3", observer, open_keys=keys, held={"s7"}, rng=random.Random(1))
    assert (choice.target, choice.workers, choice.take) == (3, 3, ())
    assert choice.steal is not None and choice.steal.owner == "w1"  # the most loaded, above its share
    owners["s0"] = "w3"  # 3 / 3 / 2: settled, nobody above the share of 3
    table = rows(owners)
    observer.observe(table)
    choice = plan(table, "w3", observer, open_keys=keys, held={"s0", "s7"})
    assert (choice.take, choice.steal) == ((), None)


def test_unowned_leases_are_taken_before_expired_ones_and_never_beyond_the_share():
    clock = Clock()
    observer = LeaseObserver(10.0, clock)
    table = rows({"a": "", "b": "dead", "c": "dead", "d": "live"})
    observer.observe(table)
    clock.now = 11.0
    live = Lease("d", "live", 2, Position(TRIM_HORIZON))
    table = [*table[:3], live]
    observer.observe(table)
    choice = plan(table, "me", observer, open_keys={"a", "b", "c", "d"}, held=set())
    # live workers: "live" and me ("dead" expired): a share of 2, the unowned lease first
    assert choice.target == 2 and choice.workers == 2
    assert len(choice.take) == 2 and choice.take[0].key == "a"
    assert choice.take[1].key in {"b", "c"}


def test_a_cap_and_closed_or_waiting_shards_bound_the_share():
    observer = LeaseObserver(10.0, Clock())
    table = rows({"a": "", "b": "", "c": "", "d": ""})
    observer.observe(table)
    assert plan(table, "me", observer, open_keys={"a", "b", "c", "d"}, held=set(), max_leases=3).target == 3
    choice = plan(table, "me", observer, open_keys={"a"}, held=set())
    assert [row.key for row in choice.take] == ["a"]


def test_bad_settings_are_refused():
    with pytest.raises(ValueError):
        LeaseObserver(0)


def test_a_worker_short_by_two_steals_from_one_at_its_share_and_one_short_by_one_does_not():
    observer = LeaseObserver(10.0, Clock())
    table = rows({"a": "w1", "b": "w1", "c": "w2", "d": "w2"})  # 4 shards, 3 workers: a share of 2
    observer.observe(table)
    keys = {"a", "b", "c", "d"}
    choice = plan(table, "w3", observer, open_keys=keys, held=set())
    assert choice.target == 2 and choice.steal is not None  # 2/2/0 -> 2/1/1
    table = rows({"a": "w1", "b": "w1", "c": "w2", "d": "w3"})
    observer.observe(table)
    assert plan(table, "w3", observer, open_keys=keys, held={"d"}).steal is None  # 2/1/1 is settled
