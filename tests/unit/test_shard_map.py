"""ShardMap: listing, bisect prediction, invalidate guards, refresh backoff, closed-shard TTL.

ListShards is injected as a plain function over a list of shards, and time as a fake clock.
"""

from __future__ import annotations

import itertools
import math

from shardline.kinesis import MAX_HASH_KEY, HashRange, ShardMap
from tests.support.fakes import QUARTER, Clock, FakeListShards, four_shards, shard


def make_map(shards: list[dict] | None = None) -> tuple[ShardMap, FakeListShards, Clock]:
    clock = Clock()
    list_shards = FakeListShards(four_shards() if shards is None else shards)
    return ShardMap(list_shards, stream_name="s", clock=clock, closed_shard_ttl=60.0), list_shards, clock


def test_predicts_nothing_before_the_first_refresh():
    shard_map, list_shards, _ = make_map()
    assert shard_map.predict(0) is None and not shard_map.ready
    assert list_shards.calls == []


def test_lists_every_page_with_the_filter_then_only_the_token():
    shard_map, list_shards, _ = make_map()
    assert shard_map.refresh_if_due()
    assert list_shards.calls == [
        {"StreamName": "s", "ShardFilter": {"Type": "AT_LATEST"}},
        {"NextToken": "2"},
    ]
    assert shard_map.open_shards() == ("s0", "s1", "s2", "s3")


def test_predict_bisects_on_ending_hash_keys_with_inclusive_bounds():
    shard_map, _, _ = make_map()
    shard_map.refresh()
    assert shard_map.predict(0) == "s0"
    assert shard_map.predict(QUARTER - 1) == "s0"
    assert shard_map.predict(QUARTER) == "s1"
    assert shard_map.predict(3 * QUARTER) == "s3"
    assert shard_map.predict(MAX_HASH_KEY) == "s3"
    assert shard_map.hash_range("s1") == HashRange(QUARTER, 2 * QUARTER - 1)


def test_closed_shards_are_dropped_even_when_the_server_lists_them():
    shards = [shard("parent", 0, MAX_HASH_KEY, closed=True), shard("a", 0, QUARTER - 1)]
    shards.append(shard("b", QUARTER, MAX_HASH_KEY))
    shard_map, _, _ = make_map(shards)
    shard_map.refresh()
    assert shard_map.open_shards() == ("a", "b")
    assert shard_map.hash_range("parent") is None


def test_a_gap_in_the_listing_predicts_nothing_inside_the_gap():
    shard_map, _, _ = make_map([shard("a", 0, 9), shard("b", 20, MAX_HASH_KEY)])
    shard_map.refresh()
    assert shard_map.predict(15) is None
    assert shard_map.predict(9) == "a" and shard_map.predict(20) == "b"


def test_invalidate_refreshes_once_and_ignores_what_it_already_knows():
    shard_map, list_shards, clock = make_map()
    shard_map.refresh()
    calls = len(list_shards.calls)

    shard_map.invalidate(seen_at=clock.now - 1, predicted_shard="s0")  # seen before the last update
    assert len(list_shards.calls) == calls

    clock.now += 5
    list_shards.shards = [shard("s0a", 0, QUARTER // 2), shard("s0b", QUARTER // 2 + 1, QUARTER - 1)]
    list_shards.shards += four_shards()[1:]
    shard_map.invalidate(seen_at=clock.now, predicted_shard="s0")
    assert shard_map.refresh_count == 2 and "s0" not in shard_map.open_shards()

    shard_map.invalidate(seen_at=clock.now + 1, predicted_shard="s0")  # s0 is already known closed
    assert shard_map.refresh_count == 2
    shard_map.invalidate(seen_at=clock.now, predicted_shard="s1")  # not after the last update
    assert shard_map.refresh_count == 2


def test_a_closed_shard_answers_hash_range_until_its_ttl_passes():
    shard_map, list_shards, clock = make_map()
    shard_map.refresh()
    list_shards.shards = [shard("merged", 0, 2 * QUARTER - 1), *four_shards()[2:]]
    clock.now += 1
    shard_map.invalidate(clock.now, "s0")
    assert shard_map.predict(0) == "merged"
    assert shard_map.hash_range("s0") == HashRange(0, QUARTER - 1)
    clock.now += 59.9
    assert shard_map.hash_range("s1") == HashRange(QUARTER, 2 * QUARTER - 1)
    clock.now += 0.2
    assert shard_map.hash_range("s0") is None and shard_map.hash_range("s1") is None


def test_failed_refreshes_back_off_1s_times_1_5_up_to_30s():
    shard_map, list_shards, clock = make_map()
    list_shards.error = "LimitExceededException"
    step = 0.25
    attempts_at = []
    for _ in range(2000):
        before = len(list_shards.calls)
        assert not shard_map.refresh_if_due()
        if len(list_shards.calls) > before:
            attempts_at.append(clock.now)
        clock.now += step

    backoffs = [min(1.0 * 1.5**n, 30.0) for n in range(12)]
    # Polled every `step` seconds, each attempt comes at the first poll after its backoff.
    expected_gaps = [math.ceil(backoff / step) * step for backoff in backoffs]
    gaps = [b - a for a, b in itertools.pairwise(attempts_at)]
    assert gaps[: len(expected_gaps)] == expected_gaps
    assert "LimitExceededException" in shard_map.last_error


def test_invalidate_after_a_failed_refresh_waits_for_the_backoff():
    shard_map, list_shards, clock = make_map()
    shard_map.refresh()
    list_shards.error = "AccessDeniedException"
    clock.now += 1
    shard_map.invalidate(clock.now, "s0")
    assert not shard_map.ready and shard_map.predict(0) is None
    calls = len(list_shards.calls)
    for _ in range(10):
        shard_map.invalidate(clock.now + 0.1, "s2")  # a storm of wrong-shard reports
    assert shard_map.refresh_if_due() is False
    assert len(list_shards.calls) == calls, "no ListShards before the backoff passes"
    list_shards.error = None
    clock.now += 1.0
    assert shard_map.refresh_if_due()
    assert shard_map.hash_range("s0") == HashRange(0, QUARTER - 1), "the old ranges stayed answerable"
