"""The producer's per-shard token buckets and send queues (issue 9), on a fake clock."""

from __future__ import annotations

import itertools
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from shardline.kinesis import MAX_HASH_KEY, UserRecord
from shardline.producer._buffered import BufferedRecord
from shardline.producer._limiter import ShardLimiter
from shardline.producer._queues import ShardQueue, lane_of, lane_range
from shardline.producer._result import RecordResult
from tests.support.fakes import Clock

MiB = 1024 * 1024


def test_bucket_capacity_is_one_second_of_the_limit_whatever_the_rate_limit():
    clock = Clock()
    limiter = ShardLimiter(rate_limit=150, clock=clock)

    assert limiter.try_take("s", MiB), "a full second's bytes at once"
    assert not limiter.try_take("s", 1), "never the KPL's 1.5x first burst"
    assert limiter.allowance("s") == 0


def test_buckets_refill_at_rate_limit_percent_of_the_limit():
    clock = Clock()
    limiter = ShardLimiter(rate_limit=150, clock=clock)
    limiter.try_take("s", MiB)

    clock.now += 0.5
    assert limiter.allowance("s") == 0.75 * MiB
    assert limiter.wait_time("s", MiB) == (MiB - 0.75 * MiB) / (1.5 * MiB)
    clock.now += 10
    assert limiter.allowance("s") == MiB, "capped at one second's worth"


def test_the_records_bucket_holds_1000_records_a_second():
    clock = Clock()
    limiter = ShardLimiter(rate_limit=100, clock=clock)
    assert all(limiter.try_take("s", 1) for _ in range(1_000))
    assert not limiter.try_take("s", 1) and limiter.allowance("s") == 0
    clock.now += 0.001
    assert limiter.try_take("s", 1)


def test_tokens_of_a_request_that_failed_as_a_whole_are_given_back():
    clock = Clock()
    limiter = ShardLimiter(rate_limit=100, clock=clock)
    limiter.try_take("s", MiB)

    limiter.give_back("s", 1, MiB)

    assert limiter.try_take("s", MiB)
    limiter.give_back("s", 5, 10 * MiB)
    assert limiter.allowance("s") == MiB, "never above capacity"


def test_buckets_of_closed_shards_are_dropped():
    clock = Clock()
    limiter = ShardLimiter(clock=clock)
    for shard in ("parent", "left", "right"):
        limiter.try_take(shard, MiB)

    limiter.keep_only({"left", "right"})

    assert limiter.allowance("parent") == MiB, "a new, full bucket: the old one was dropped"
    assert limiter.allowance("left") == 0


def test_unknown_shards_bypass_the_limiter():
    limiter = ShardLimiter(clock=Clock())
    assert limiter.try_take(None, 100 * MiB) and limiter.wait_time(None, 100 * MiB) == 0


def _record(sequence: int) -> BufferedRecord:
    return BufferedRecord(UserRecord("k", bytes(10)), None, sequence, 0.0, 30.0)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.sampled_from(["put", "retry", "take", "give_back", "resolve"]), max_size=80),
    st.integers(0, 99),
)
def test_a_queue_always_hands_out_its_oldest_unresolved_record(operations, seed):
    rng = random.Random(seed)
    queue = ShardQueue(lane_range(0, 1))
    sequence = 0
    queued: set[int] = set()
    records: dict[int, BufferedRecord] = {}
    out: list[BufferedRecord] = []  # taken and not yet given back or retried
    for operation in operations:
        if operation == "put":
            records[sequence] = record = _record(sequence)
            queue.push(record)
            queued.add(sequence)
            sequence += 1
        elif operation == "take" and queued:
            record = queue.pop()
            assert record.sequence == min(queued), "the oldest unresolved record comes first"
            queued.discard(record.sequence)
            out.append(record)
        elif operation == "give_back" and out:
            members = out[-rng.randint(1, len(out)) :]
            del out[-len(members) :]
            members.sort(key=lambda r: r.sequence)
            queue.give_back(members)
            queued.update(r.sequence for r in members)
        elif operation == "retry" and out:
            record = out.pop(rng.randrange(len(out)))
            queue.push(record)
            queued.add(record.sequence)
        elif operation == "resolve" and queued:
            victim = rng.choice(sorted(queued))
            records[victim].result = RecordResult(False, error_code="Expired")
            queued.discard(victim)
        assert queue.bytes >= sum(records[s].size for s in queued), "resolved records count until reached"
        assert bool(queue) == bool(queued)
    assert sorted(r.sequence for r in queue.drain()) == sorted(queued)
    assert queue.bytes == 0


def test_lanes_cut_the_hash_key_space_into_contiguous_slices():
    lanes = 8
    ranges = [lane_range(lane, lanes) for lane in range(lanes)]
    assert ranges[0].start == 0 and ranges[-1].end == MAX_HASH_KEY
    assert all(a.end + 1 == b.start for a, b in itertools.pairwise(ranges))
    for key in (0, 1, MAX_HASH_KEY // 3, MAX_HASH_KEY):
        assert key in ranges[lane_of(key, lanes)]
