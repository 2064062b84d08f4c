"""Issue 39, property 8: past the applied-aggregate state's bound, the lanes retired first are the
dead producers' — by age, the lanes whose newest arrival is oldest — whatever order they were folded
in, whatever their counters, and no more lanes go than the bound needs. A lane is `[w, newest
arrival, ranges...]` (`shardline.consumer._dedup`); a live producer keeps folding aggregates into its
lane, so its newest arrival stays recent, while a dead one's stops moving.

Left out: what the lanes' keys are made of (the caller's scope, the producer's id): only their
ages and sizes matter to the bound."""

from __future__ import annotations

import json
import random

from shardline.consumer._dedup import AppliedAggregates
from shardline.kpl._identity import AggregateId

T0 = 1_700_000_000
BOUND = 20_000


def producer(n: int, prefix: str) -> str:
    return f"{prefix}{n:015x}"


def state_with(live: int, dead: int, *, seed: int) -> tuple[AppliedAggregates, set[str], set[str]]:
    """`dead` producers that wrote until T0+100 and stopped; `live` ones that started *earlier*
    (their lanes' first arrivals are the oldest, their counters the highest) and are still writing
    at T0+500. Folded in a shuffled order, so neither dict order nor counters give the answer."""
    rng = random.Random(seed)
    folds: list[tuple[AggregateId, float]] = []
    live_keys, dead_keys = set(), set()
    for n in range(live):
        key = producer(n, "a")
        live_keys.add(f"{key}.0")
        folds += [(AggregateId(key, "0", c, c), T0 + c) for c in range(1, 40)]  # from T0+1 ...
        folds.append((AggregateId(key, "0", 40, 40), T0 + 400 + rng.random() * 100))  # ... still writing
    for n in range(dead):
        key = producer(n, "b")
        dead_keys.add(f"{key}.0")
        folds += [(AggregateId(key, "0", c, c), T0 + 60 + c + rng.random()) for c in range(1, 3)]
    rng.shuffle(folds)
    state = AppliedAggregates()
    for aggregate, arrival in folds:
        state.fold(aggregate, arrival)
    return state, live_keys, dead_keys


def test_property_8_past_the_bound_dead_producers_lanes_go_first_by_their_newest_arrival() -> None:
    state, live, dead = state_with(live=300, dead=400, seed=7)
    assert len(state.serialize()) > BOUND
    newest = {key: state.lanes[key][1] for key in dead}
    text, evicted = state.bounded(BOUND)
    kept = set(json.loads(text)["k"])
    assert len(text) <= BOUND and evicted == 700 - len(kept) > 0
    assert live <= kept, "no live producer's lane goes while a dead one's is left"
    gone = dead - kept
    assert max(newest[key] for key in gone) <= min(newest[key] for key in dead & kept), "oldest first"


def test_property_8_no_more_lanes_are_evicted_than_the_bound_needs() -> None:
    for seed in range(5):
        state, _, _ = state_with(live=300, dead=400, seed=seed)
        # Partly applied aggregates (`p`) of the oldest lanes: their bytes go with the lane too.
        for key in sorted(state.lanes, key=lambda k: state.lanes[k][1])[:150]:
            state.partial[key] = [n for c in range(7, 12) for n in (c, state.lanes[key][1])]
        before = state.copy()
        text, evicted = state.bounded(BOUND)
        assert len(text) <= BOUND
        one_fewer = before.copy()
        for key in sorted(before.lanes, key=lambda k: before.lanes[k][1])[: evicted - 1]:
            del one_fewer.lanes[key]
            one_fewer.partial.pop(key, None)
        assert len(one_fewer.serialize()) > BOUND, f"seed {seed}: {evicted} evicted, one fewer fits"


def test_property_8_a_child_s_inherited_lanes_are_aged_by_their_newest_arrival_in_any_parent() -> None:
    left, live, dead = state_with(live=150, dead=200, seed=1)
    right = AppliedAggregates()
    for key in dead:  # a dead producer's lane, seen late in the other parent: it lived longer there
        producer_id, lane = key.split(".")
        right.fold(AggregateId(producer_id, lane, 3, 3), T0 + 450)
    child = AppliedAggregates.merge([left, right])
    text, _ = child.bounded(len(child.serialize()) - 2_000)
    kept = set(json.loads(text)["k"])
    assert dead <= kept and not live <= kept, "the lanes aged by their newest arrival in either parent"
