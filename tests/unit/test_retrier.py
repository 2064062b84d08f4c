"""The retrier's classification table, one row per test, on hand-built outcomes.

The shard map is real (over an injected ListShards); time is a fake clock.
"""

from __future__ import annotations

import random
from concurrent.futures import Future

import pytest

from shardline.errors import COUNT_MISMATCH, EXPIRED, WRONG_SHARD
from shardline.kinesis import ShardMap, UserRecord
from shardline.producer import ProducerConfig, ProducerMetrics, RecordResult
from shardline.producer._buffered import BufferedRecord, KinesisRecord
from shardline.producer._collector import PutRecordsBatch
from shardline.producer._reducer import AGGREGATE_PARTITION_KEY
from shardline.producer._retrier import Retrier
from shardline.producer._sender import SendOutcome
from tests.fakes import QUARTER, Clock, FakeListShards, four_shards, shard

THROTTLED = "ProvisionedThroughputExceededException"


class Harness:
    def __init__(self, **config) -> None:
        self.clock = Clock()
        self.list_shards = FakeListShards(four_shards())
        self.shard_map = ShardMap(self.list_shards, stream_name="s", clock=self.clock)
        self.shard_map.refresh()
        self.finished: dict[int, RecordResult] = {}
        self.retried: dict[int, float] = {}
        self.config = ProducerConfig(**config)
        self.retrier = Retrier(
            shard_map=self.shard_map,
            config=self.config,
            clock=self.clock,
            rng=random.Random(1),
            metrics=ProducerMetrics(),
            finish=lambda record, result: self.finished.__setitem__(record.sequence, result),
            retry=lambda record, at: self.retried.__setitem__(record.sequence, at),
        )
        self._sequence = 0

    def buffered(self, hash_key: int, predicted: str | None) -> BufferedRecord:
        record = BufferedRecord(
            UserRecord("k", b"d", str(hash_key)),
            Future(),
            self._sequence,
            arrived=self.clock.now,
            expires=self.clock.now + self.config.record_ttl,
        )
        record.assign(record.record)
        record.predicted_shard = predicted
        self._sequence += 1
        return record

    def batch(self, *groups: list[BufferedRecord]) -> PutRecordsBatch:
        batch = PutRecordsBatch(500, 5 * 1024 * 1024)
        for members in groups:
            first = members[0]
            batch.add(
                KinesisRecord(
                    members, AGGREGATE_PARTITION_KEY, str(first.hash_key), b"x", first.predicted_shard
                )
            )
        return batch

    def outcome(self, *entries: dict, error: str | None = None) -> SendOutcome:
        return SendOutcome(self.clock.now, 0.01, entries=entries, error_code=error, error_message="msg")


def ok(shard_id: str, sequence: str = "42") -> dict:
    return {"ShardId": shard_id, "SequenceNumber": sequence}


def test_success_in_the_predicted_shard_finishes_with_sub_sequence_numbers():
    h = Harness()
    members = [h.buffered(1, "s0"), h.buffered(2, "s0")]
    h.retrier.handle(h.batch(members), h.outcome(ok("s0")))
    assert [h.finished[i].sub_sequence_number for i in (0, 1)] == [0, 1]
    assert all(r.success and r.shard_id == "s0" and r.sequence_number == "42" for r in h.finished.values())
    assert h.shard_map.refresh_count == 1


def test_a_lone_record_has_no_sub_sequence_number():
    h = Harness()
    h.retrier.handle(h.batch([h.buffered(1, None)]), h.outcome(ok("s3")))
    assert h.finished[0].success and h.finished[0].sub_sequence_number is None


def test_success_in_a_child_holding_the_hash_finishes_and_invalidates_once():
    h = Harness()
    members = [h.buffered(1, "s0"), h.buffered(QUARTER // 2 - 1, "s0")]
    h.clock.now += 1
    h.list_shards.shards = [
        shard("child-a", 0, QUARTER // 2),
        shard("child-b", QUARTER // 2 + 1, QUARTER - 1),
    ]
    h.list_shards.shards += four_shards()[1:]
    h.retrier.handle(h.batch(members), h.outcome(ok("child-a")))
    assert all(h.finished[i].success and h.finished[i].shard_id == "child-a" for i in (0, 1))
    assert h.shard_map.refresh_count == 2, "one refresh for the whole Kinesis record"


def test_success_outside_the_actual_shard_retries_as_wrong_shard():
    h = Harness()
    inside, outside = h.buffered(1, "s0"), h.buffered(QUARTER - 1, "s0")
    h.clock.now += 1
    h.list_shards.shards = [
        shard("child-a", 0, QUARTER // 2),
        shard("child-b", QUARTER // 2 + 1, QUARTER - 1),
    ]
    h.list_shards.shards += four_shards()[1:]
    h.retrier.handle(h.batch([inside, outside]), h.outcome(ok("child-a")))
    assert h.finished[0].success
    assert 1 in h.retried and outside.attempts[-1].error_code == WRONG_SHARD
    assert h.shard_map.refresh_count == 2


def test_success_in_a_shard_the_map_cannot_resolve_is_retried_not_trusted():
    h = Harness()
    member = h.buffered(1, "s0")
    h.clock.now += 1
    h.list_shards.error = "AccessDeniedException"
    h.retrier.handle(h.batch([member]), h.outcome(ok("unknown-shard")))
    assert 0 in h.retried and member.attempts[-1].error_code == WRONG_SHARD


@pytest.mark.parametrize("fail_if_throttled", [False, True])
def test_per_record_throttle_retries_unless_fail_if_throttled(fail_if_throttled):
    h = Harness(fail_if_throttled=fail_if_throttled)
    throttled, fine = h.buffered(1, "s0"), h.buffered(QUARTER + 1, "s1")
    entries = ({"ErrorCode": THROTTLED, "ErrorMessage": "slow down"}, ok("s1"))
    h.retrier.handle(h.batch([throttled], [fine]), h.outcome(*entries))
    assert h.finished[1].success
    if fail_if_throttled:
        assert h.finished[0].error_code == THROTTLED and len(h.finished[0].attempts) == 1
    else:
        assert 0 in h.retried and 0 not in h.finished


def test_per_record_internal_error_is_retried_even_with_fail_if_throttled():
    h = Harness(fail_if_throttled=True)
    h.retrier.handle(h.batch([h.buffered(1, "s0")]), h.outcome({"ErrorCode": "InternalFailure"}))
    assert 0 in h.retried


@pytest.mark.parametrize(
    ("code", "fail_if_throttled", "retried"),
    [
        ("InternalFailure", False, True),
        (THROTTLED, False, True),
        (THROTTLED, True, False),
        ("ResourceNotFoundException", False, False),
    ],
)
def test_request_level_errors(code, fail_if_throttled, retried):
    h = Harness(fail_if_throttled=fail_if_throttled)
    members = [h.buffered(1, "s0"), h.buffered(2, "s0")]
    h.retrier.handle(h.batch(members), h.outcome(error=code))
    if retried:
        assert set(h.retried) == {0, 1}
    else:
        assert all(h.finished[i].error_code == code for i in (0, 1))
    assert all(m.attempts[-1].error_code == code for m in members)


def test_record_count_mismatch_fails_every_record():
    h = Harness()
    batch = h.batch([h.buffered(1, "s0")], [h.buffered(QUARTER + 1, "s1")])
    h.retrier.handle(batch, h.outcome(ok("s0")))
    assert [h.finished[i].error_code for i in (0, 1)] == [COUNT_MISMATCH, COUNT_MISMATCH]


def test_retries_back_off_exponentially_with_full_jitter_within_the_cap():
    h = Harness(retry_base_delay=0.1, retry_max_delay=1.0)
    member = h.buffered(1, "s0")
    for failures in range(1, 9):
        h.retrier.handle(h.batch([member]), h.outcome({"ErrorCode": "InternalFailure"}))
        delay = h.retried[0] - h.clock.now
        assert 0 <= delay <= min(1.0, 0.1 * 2 ** (failures - 1))
    assert len(member.attempts) == 8


def test_a_retry_after_the_ttl_expires_the_record_with_its_history():
    h = Harness(record_ttl=5.0)
    member = h.buffered(1, "s0")
    h.clock.now += 5.0
    h.retrier.handle(h.batch([member]), h.outcome({"ErrorCode": THROTTLED}))
    result = h.finished[0]
    assert result.error_code == EXPIRED
    assert [a.error_code for a in result.attempts] == [THROTTLED, EXPIRED]
