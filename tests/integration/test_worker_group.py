"""Worker consumer groups on the local endpoint (limits on): `shardline worker` processes sharing a
stream through the lease table — balance, fail-over after a kill, fencing of a paused worker, a
worker joining, SIGTERM's hand-over, a split and a merge. Every test ends by reading the sink: each
record's id applied exactly once (`tests/support/worker_group.py`)."""

from __future__ import annotations

import base64
import json
import signal
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.worker_group import WorkerGroup, worker_group

LEASE_S = 3.0
RENEW_S = LEASE_S / 3


@pytest.fixture
def group8(local_endpoint: str, tmp_path: Path) -> Iterator[WorkerGroup]:
    yield from worker_group(local_endpoint, tmp_path / "group", shards=8, lease_duration=LEASE_S)


@pytest.fixture
def group2(local_endpoint: str, tmp_path: Path) -> Iterator[WorkerGroup]:
    yield from worker_group(local_endpoint, tmp_path / "group", shards=2, lease_duration=LEASE_S)


def exactly_once(group: WorkerGroup, timeout: float = 120.0) -> None:
    counts = group.wait_applied(timeout)
    missing = [rid for rid in group.sent if rid not in counts]
    twice = {rid: n for rid, n in counts.items() if n != 1}
    assert not missing, f"{len(missing)} records never applied, e.g. {missing[:5]}"
    assert not twice, f"records applied more than once: {dict(list(twice.items())[:5])}"
    assert len(counts) == len(group.sent)


def test_three_workers_on_eight_shards_settle_to_3_3_2_and_apply_every_record_once(group8):
    group8.send(3000)
    for name in ("w1", "w2", "w3"):
        group8.start(name)
    assert group8.wait_for(lambda: sorted(group8.owners().values()) == [2, 3, 3], timeout=60), group8.owners()
    exactly_once(group8)
    time.sleep(3 * RENEW_S)  # settled means settled: no lease moves once the shares are met
    assert sorted(group8.owners().values()) == [2, 3, 3]


def test_a_killed_workers_shards_are_taken_within_the_lease_and_one_interval_and_resume_at_the_checkpoint(
    group8,
):
    group8.send(2400)
    group8.start("w1", "--batch-limit", "50", slow_ms=3)
    group8.start("w2", "--batch-limit", "50", slow_ms=3)
    assert group8.wait_for(lambda: sorted(group8.owners().values()) == [4, 4], timeout=60), group8.owners()
    assert group8.wait_for(lambda: len(group8.applied()) > 400, timeout=60)  # mid-run: batches in flight
    victims = {row.key: row.checkpoint for row in group8.rows() if row.owner == "w1"}
    group8.signal("w1", signal.SIGKILL)
    killed = time.monotonic()
    assert group8.wait_for(lambda: group8.owners() == {"w2": 8}, timeout=30, interval=0.05), group8.owners()
    failover = time.monotonic() - killed
    # The bound is the lease duration + one renewal interval; a loaded 2-core machine gets twice that.
    assert failover <= 2 * (LEASE_S + RENEW_S), f"fail-over took {failover:.1f} s"
    exactly_once(group8)
    for row in group8.rows():  # each taken shard resumed at its checkpoint: none moved back
        if row.key in victims:
            assert row.checkpoint >= victims[row.key]


def test_a_paused_worker_cannot_commit_once_its_lease_was_taken(group2):
    group2.send(1500)
    group2.start("w1", "--batch-limit", "100", slow_ms=10)  # batches of ~1 s
    assert group2.wait_for(lambda: group2.owners() == {"w1": 2}, timeout=30)
    assert group2.wait_for(lambda: len(group2.applied()) > 100, timeout=60)
    group2.signal("w1", signal.SIGSTOP)  # mid-batch: its handler and its renewals stop
    try:
        group2.start("w2", "--batch-limit", "100")
        assert group2.wait_for(lambda: group2.owners() == {"w2": 2}, timeout=30), group2.owners()
    finally:
        group2.signal("w1", signal.SIGCONT)  # it wakes holding a batch it may no longer commit
    exactly_once(group2)
    assert group2.wait_for(lambda: "lease lost" in group2.log("w1"), timeout=30), group2.log("w1")[-2000:]
    # Awake again, it is a live worker like any other: it takes its share back, from here on.
    assert group2.wait_for(lambda: sorted(group2.owners().values()) == [1, 1], timeout=30), group2.owners()
    group2.send(300)
    exactly_once(group2)


def test_a_joining_worker_takes_leases_and_no_record_is_applied_twice(group8):
    group8.send(3000)
    group8.start("w1", "--batch-limit", "50", slow_ms=3)
    assert group8.wait_for(lambda: group8.owners() == {"w1": 8}, timeout=30)
    assert group8.wait_for(lambda: len(group8.applied()) > 200, timeout=60)
    group8.start("w2", "--batch-limit", "50", slow_ms=3)
    assert group8.wait_for(lambda: sorted(group8.owners().values()) == [4, 4], timeout=60), group8.owners()
    exactly_once(group8)


#: Long: a hand-over within it is the release's doing, not the lease expiring.
LONG_LEASE_S = 20.0


@pytest.fixture
def group4_long_lease(local_endpoint: str, tmp_path: Path) -> Iterator[WorkerGroup]:
    yield from worker_group(local_endpoint, tmp_path / "group", shards=4, lease_duration=LONG_LEASE_S)


def test_sigterm_hands_leases_over_at_once(group4_long_lease):
    group = group4_long_lease
    group.send(1000)
    group.start("w1", "--renew-interval", "1")
    assert group.wait_for(lambda: group.owners() == {"w1": 4}, timeout=30)
    group.start("w2", "--renew-interval", "1")
    assert group.wait_for(lambda: sorted(group.owners().values()) == [2, 2], timeout=30), group.owners()
    exactly_once(group)
    group.signal("w1", signal.SIGTERM)
    assert group.workers["w1"].wait(timeout=30) == 0
    released = time.monotonic()
    assert not [row for row in group.rows() if row.owner == "w1"]  # handed back before it exited
    assert group.wait_for(lambda: group.owners() == {"w2": 4}, timeout=LONG_LEASE_S, interval=0.05)
    assert time.monotonic() - released < LONG_LEASE_S / 2
    group.send(500)
    exactly_once(group)


def test_a_split_and_a_merge_during_the_run_process_parents_before_children_exactly(group2):
    kinesis, stream = group2.kinesis, group2.stream
    group2.send(600)
    group2.start("w1", "--batch-limit", "100")
    group2.start("w2", "--batch-limit", "100")
    assert group2.wait_for(lambda: len(group2.applied()) > 100, timeout=60)
    shards = kinesis.list_shards(StreamName=stream)["Shards"]
    first = shards[0]
    low, high = int(first["HashKeyRange"]["StartingHashKey"]), int(first["HashKeyRange"]["EndingHashKey"])
    kinesis.split_shard(
        StreamName=stream, ShardToSplit=first["ShardId"], NewStartingHashKey=str((low + high) // 2)
    )
    _wait_active(group2)
    group2.send(600)
    open_shards = [
        s
        for s in kinesis.list_shards(StreamName=stream)["Shards"]
        if "EndingSequenceNumber" not in s["SequenceNumberRange"]
    ]
    by_start = sorted(open_shards, key=lambda s: int(s["HashKeyRange"]["StartingHashKey"]))
    kinesis.merge_shards(
        StreamName=stream, ShardToMerge=by_start[1]["ShardId"], AdjacentShardToMerge=by_start[2]["ShardId"]
    )
    _wait_active(group2)
    group2.send(600)
    exactly_once(group2)
    shards = {s["ShardId"]: s for s in kinesis.list_shards(StreamName=stream)["Shards"]}
    times: dict[str, list[float]] = {}
    for item in group2.items():
        times.setdefault(item["shard"]["S"], []).append(float(item["appliedAt"]["N"]))
    checked = 0
    for shard_id, shard in shards.items():
        for parent in (shard.get("ParentShardId"), shard.get("AdjacentParentShardId")):
            if parent and parent in times and shard_id in times:
                assert max(times[parent]) < min(times[shard_id]), (
                    f"{shard_id} ran before its parent {parent} finished"
                )
                checked += 1
    assert checked >= 3  # two children of the split, the merged child of two parents
    assert group2.wait_for(
        lambda: all(
            row.checkpoint.sequence == "SHARD_END"
            for row in group2.rows()
            if "EndingSequenceNumber" in shards[row.key]["SequenceNumberRange"]
        ),
        timeout=30,
    )


def _wait_active(group: WorkerGroup) -> None:
    assert group.wait_for(
        lambda: (
            group.kinesis.describe_stream_summary(StreamName=group.stream)["StreamDescriptionSummary"][
                "StreamStatus"
            ]
            == "ACTIVE"
        ),
        timeout=30,
    )


def test_a_handler_that_hangs_is_interrupted_at_the_batch_timeout_and_its_record_dead_lettered(group2):
    hung = group2.send(200, hang=frozenset({57}))[57]
    group2.sent.remove(hung)  # never applied: it goes to the dead-letter queue, whole
    group2.start("w1", "--batch-timeout", "3", "--max-attempts", "2")
    exactly_once(group2)
    assert group2.wait_for(lambda: any(letter["data"] for letter in group2.dead_letters()), timeout=60)
    [letter] = group2.dead_letters()
    assert json.loads(base64.b64decode(letter["data"]))["id"] == hung
    assert letter["attempts"] == 2 and letter["errorType"].endswith("HandlerTimedOut")
    assert hung not in group2.applied()


def test_workers_with_enhanced_fan_out_subscribe_to_their_shards_and_apply_every_record_once(group2):
    kinesis = group2.kinesis
    stream_arn = kinesis.describe_stream_summary(StreamName=group2.stream)["StreamDescriptionSummary"][
        "StreamARN"
    ]
    consumer = kinesis.register_stream_consumer(StreamARN=stream_arn, ConsumerName=group2.name)["Consumer"]
    arn = consumer["ConsumerARN"]
    assert group2.wait_for(
        lambda: (
            kinesis.describe_stream_consumer(ConsumerARN=arn)["ConsumerDescription"]["ConsumerStatus"]
            == "ACTIVE"
        ),
        timeout=30,
    )
    group2.send(800)
    group2.start("w1", "--consumer-arn", arn)
    group2.start("w2", "--consumer-arn", arn)
    assert group2.wait_for(lambda: sorted(group2.owners().values()) == [1, 1], timeout=60), group2.owners()
    exactly_once(group2)
    group2.send(400)  # records pushed to the open subscriptions as they land
    exactly_once(group2)
    usage = _get_json(f"{group2.endpoint}/_shardline/usage")
    consumers = usage["services"].get("kinesis_consumers", {})
    assert consumers.get(f"{group2.stream}/{group2.name}", {}).get("subscriptions", 0) >= 2, consumers


def _get_json(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=10) as answer:
        return dict(json.loads(answer.read()))
