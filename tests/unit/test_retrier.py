"""The retrier's classification table, one row per test, on hand-built outcomes; and the lanes
that number aggregates (counters and floors).

The shard map is real (over an injected ListShards); time is a fake clock.
"""

from __future__ import annotations

import random
from concurrent.futures import Future

import pytest

from shardline.errors import COUNT_MISMATCH, EXPIRED, MALFORMED_RESPONSE, WRONG_SHARD
from shardline.kinesis import ShardMap, UserRecord
from shardline.kpl._identity import AggregateId
from shardline.producer import ProducerConfig, ProducerMetrics, RecordResult
from shardline.producer._buffered import BufferedRecord, KinesisRecord
from shardline.producer._collector import PutRecordsBatch
from shardline.producer._config import RESEND_HORIZON_S
from shardline.producer._lanes import Lanes, hash_lane, shard_lane
from shardline.producer._reducer import AGGREGATE_PARTITION_KEY
from shardline.producer._retrier import Retrier
from shardline.producer._sender import SendOutcome, read_entry
from tests.support.fakes import QUARTER, Clock, FakeListShards, four_shards, shard

THROTTLED = "ProvisionedThroughputExceededException"


class Harness:
    def __init__(self, **config) -> None:
        self.clock = Clock()
        self.list_shards = FakeListShards(four_shards())
        self.shard_map = ShardMap(self.list_shards, stream_name="s", clock=self.clock)
        self.shard_map.refresh()
        self.finished: dict[int, RecordResult] = {}
        self.retried: dict[int, float] = {}
        self.resent: list[tuple[KinesisRecord, float]] = []
        self.config = ProducerConfig(**config)
        self.metrics = ProducerMetrics()
        self.lanes = Lanes("p", self.clock)
        self.retrier = Retrier(
            shard_map=self.shard_map,
            config=self.config,
            clock=self.clock,
            rng=random.Random(1),
            metrics=self.metrics,
            lanes=self.lanes,
            outcomes=self,  # an `Outcomes` that does not park: the map refreshes inline
        )
        self._sequence = 0

    def finish(self, record: BufferedRecord, result: RecordResult) -> None:
        assert record.result is None, "a record is finished once"
        record.result = result
        self.finished[record.sequence] = result

    def retry(self, record: BufferedRecord, at: float) -> None:
        self.retried[record.sequence] = at

    def resend(self, kinesis_record: KinesisRecord, at: float) -> None:
        self.resent.append((kinesis_record, at))

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

    def aggregate(self, members: list[BufferedRecord]) -> KinesisRecord:
        first = members[0]
        aggregate_id = self.lanes.new_id("0")
        kinesis_record = KinesisRecord(
            members, AGGREGATE_PARTITION_KEY, str(first.hash_key), b"x", first.predicted_shard, aggregate_id
        )
        kinesis_record.sends = 1
        kinesis_record.first_sent = kinesis_record.last_sent = self.clock.now
        return kinesis_record

    def batch(self, *groups: list[BufferedRecord] | KinesisRecord) -> PutRecordsBatch:
        batch = PutRecordsBatch(500, 5 * 1024 * 1024)
        for group in groups:
            batch.add(group if isinstance(group, KinesisRecord) else self.aggregate(group))
        return batch

    def outcome(self, *entries: dict, error: str | None = None, unanswered: bool = False) -> SendOutcome:
        return SendOutcome(
            self.clock.now,
            0.01,
            entries=tuple(read_entry(entry) for entry in entries),
            error_code=error,
            error_message="msg",
            unanswered=unanswered,
        )


def ok(shard_id: str, sequence: str = "42") -> dict:
    return {"ShardId": shard_id, "SequenceNumber": sequence}


def split_s0(h: Harness) -> None:
    """s0 split in two children; the map learns it at its next refresh."""
    h.clock.now += 1
    h.list_shards.shards = [
        shard("child-a", 0, QUARTER // 2),
        shard("child-b", QUARTER // 2 + 1, QUARTER - 1),
    ]
    h.list_shards.shards += four_shards()[1:]


def test_success_in_the_predicted_shard_finishes_with_sub_sequence_numbers():
    h = Harness()
    members = [h.buffered(1, "s0"), h.buffered(2, "s0")]
    h.retrier.handle(h.batch(members), h.outcome(ok("s0")))
    assert [h.finished[i].sub_sequence_number for i in (0, 1)] == [0, 1]
    assert all(r.success and r.shard_id == "s0" and r.sequence_number == "42" for r in h.finished.values())
    assert h.shard_map.refresh_count == 1


def test_a_lone_record_is_a_one_record_aggregate_at_sub_sequence_0():
    h = Harness()
    h.retrier.handle(h.batch([h.buffered(1, None)]), h.outcome(ok("s3")))
    assert h.finished[0].success and h.finished[0].sub_sequence_number == 0
    assert h.lanes.floor("0") == 2, "confirmed: settled"


def test_success_in_a_child_holding_the_hash_finishes_and_invalidates_once():
    h = Harness()
    members = [h.buffered(1, "s0"), h.buffered(QUARTER // 2 - 1, "s0")]
    split_s0(h)
    h.retrier.handle(h.batch(members), h.outcome(ok("child-a")))
    assert all(h.finished[i].success and h.finished[i].shard_id == "child-a" for i in (0, 1))
    assert h.shard_map.refresh_count == 2, "one refresh for the whole Kinesis record"


def test_success_outside_the_actual_shard_reroutes_the_same_aggregate_by_the_member_left():
    h = Harness()
    inside, outside = h.buffered(1, "s0"), h.buffered(QUARTER - 1, "s0")
    split_s0(h)
    batch = h.batch([inside, outside])
    [kinesis_record] = batch.records
    data = kinesis_record.data
    h.retrier.handle(batch, h.outcome(ok("child-a")))
    assert h.finished[0].success and 1 not in h.finished and 1 not in h.retried, "not released"
    [(resent, _)] = h.resent
    assert resent is kinesis_record and resent.data == data and resent.sealed
    assert resent.explicit_hash_key == str(QUARTER - 1) and resent.route_key == QUARTER - 1
    assert outside.attempts[-1].error_code == WRONG_SHARD and outside.sealed_in is kinesis_record
    assert h.metrics.snapshot()["AggregatesRerouted"] == 1 and h.shard_map.refresh_count == 2
    resent.predicted_shard = "child-b"
    h.retrier.handle(h.batch(resent), h.outcome(ok("child-b", "43")))
    assert (h.finished[1].shard_id, h.finished[1].sequence_number, h.finished[1].sub_sequence_number) == (
        "child-b",
        "43",
        1,
    )
    assert h.finished[0].sequence_number == "42", "confirmed once, by the first copy"


def test_a_member_kinesis_routed_the_copy_by_is_confirmed_even_where_the_map_cannot_place_the_shard():
    h = Harness()
    member = h.buffered(1, "s0")
    h.clock.now += 1
    h.list_shards.error = "AccessDeniedException"
    h.retrier.handle(h.batch([member]), h.outcome(ok("unknown-shard")))
    assert h.finished[0].success and h.finished[0].shard_id == "unknown-shard"


def test_other_members_in_a_shard_the_map_cannot_place_are_rerouted_and_fail_unconfirmed():
    h = Harness(record_ttl=5.0)
    first, second = h.buffered(1, "s0"), h.buffered(2, "s0")
    h.clock.now += 1
    h.list_shards.error = "AccessDeniedException"
    h.retrier.handle(h.batch([first, second]), h.outcome(ok("unknown-shard")))
    assert h.finished[0].success and 1 not in h.finished
    [(kinesis_record, _)] = h.resent
    assert kinesis_record.route_key == 2 and kinesis_record.maybe_landed
    h.clock.now += 10  # past the TTL: given up, and it may be in the stream (it landed somewhere)
    assert not h.retrier.resend_due(kinesis_record, h.clock.now)
    assert h.finished[1].error_code == EXPIRED and h.finished[1].unconfirmed
    assert h.finished[0].unconfirmed is False


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


def test_2_a_record_throttled_for_throttled_give_up_seconds_fails_with_the_throttle_code():
    h = Harness(throttled_give_up=3.0)
    record = h.buffered(1, "s0")
    throttle = {"ErrorCode": THROTTLED, "ErrorMessage": "slow down"}
    for second in range(3):  # refused at 0, 1 and 2 s (+10 ms each): under 3 s of throttling
        h.retrier.handle(h.batch([record]), h.outcome(throttle))
        assert 0 not in h.finished, f"given up after {second} s"
        h.clock.now += 1.0
    h.retrier.handle(h.batch([record]), h.outcome(throttle))  # at 3 s: the run lasted 3.01 s
    assert h.finished[0].error_code == THROTTLED and len(h.finished[0].attempts) == 4


def test_2_a_throttle_run_broken_by_another_failure_starts_over():
    h = Harness(throttled_give_up=1.5)
    record = h.buffered(1, "s0")
    throttle = {"ErrorCode": THROTTLED, "ErrorMessage": "slow down"}
    internal = {"ErrorCode": "InternalFailure", "ErrorMessage": "oops"}
    for entry in (throttle, throttle, internal, throttle):  # 0, 1 s; 2 s breaks it; 3 s starts again
        h.retrier.handle(h.batch([record]), h.outcome(entry))
        h.clock.now += 1.0
    assert 0 not in h.finished
    h.retrier.handle(h.batch([record]), h.outcome(throttle))  # 4 s: throttled since 3 s only
    assert 0 not in h.finished
    h.clock.now += 1.0
    h.retrier.handle(h.batch([record]), h.outcome(throttle))  # 5 s: since 3 s, 2.01 s
    assert h.finished[0].error_code == THROTTLED


def test_2_without_throttled_give_up_a_throttled_record_waits_for_its_ttl():
    h = Harness(record_ttl=30.0)
    record = h.buffered(1, "s0")
    for _ in range(20):
        h.retrier.handle(h.batch([record]), h.outcome({"ErrorCode": THROTTLED, "ErrorMessage": "x"}))
        h.clock.now += 1.0
    assert 0 not in h.finished and 0 in h.retried


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
def test_answered_request_level_errors_release_or_fail_the_members(code, fail_if_throttled, retried):
    h = Harness(fail_if_throttled=fail_if_throttled)
    members = [h.buffered(1, "s0"), h.buffered(2, "s0")]
    h.retrier.handle(h.batch(members), h.outcome(error=code))
    if retried:
        assert set(h.retried) == {0, 1}
    else:
        assert all(h.finished[i].error_code == code and not h.finished[i].unconfirmed for i in (0, 1))
    assert all(m.attempts[-1].error_code == code for m in members)
    assert not h.resent and h.lanes.floor("0") == 2, "refused: never in the stream, settled"


@pytest.mark.parametrize(
    ("outcome", "code"),
    [
        ({"error": "Internal", "unanswered": True}, "Internal"),  # no reply: timeout, reset, closed
        ({"error": "ServiceUnavailable", "unanswered": True}, "ServiceUnavailable"),  # a 5xx
        ({"entries": ({"ShardId": "s0"},)}, MALFORMED_RESPONSE),
        ({"entries": ()}, COUNT_MISMATCH),
    ],
    ids=["no-reply", "5xx", "malformed", "count-mismatch"],
)
def test_an_unknown_outcome_seals_the_aggregate_and_resends_it_identical(outcome, code):
    h = Harness()
    members = [h.buffered(1, "s0"), h.buffered(2, "s0")]
    batch = h.batch(members)
    [kinesis_record] = batch.records
    entry, data, aggregate_id = kinesis_record.entry(), kinesis_record.data, kinesis_record.aggregate_id
    entries = outcome.get("entries", ())
    unanswered = outcome.get("unanswered", False)
    h.retrier.handle(batch, h.outcome(*entries, error=outcome.get("error"), unanswered=unanswered))
    assert not h.finished and not h.retried, "neither failed nor released"
    [(resent, at)] = h.resent
    assert resent is kinesis_record and resent.sealed and resent.maybe_landed
    assert resent.entry() == entry and resent.data == data and resent.aggregate_id == aggregate_id
    assert all(m.sealed_in is kinesis_record and m.attempts[-1].error_code == code for m in members)
    assert h.clock.now <= at <= h.clock.now + h.config.retry_base_delay
    assert h.metrics.snapshot()["AggregatesSealed"] == 1
    assert h.lanes.floor("0") == 1, "not settled: it may be in the stream"


def test_a_sealed_aggregate_refused_is_resent_whole_not_released():
    h = Harness()
    members = [h.buffered(1, "s0"), h.buffered(2, "s0")]
    batch = h.batch(members)
    h.retrier.handle(batch, h.outcome(error="Internal", unanswered=True))
    [(sealed, _)] = h.resent
    h.retrier.handle(h.batch(sealed), h.outcome({"ErrorCode": THROTTLED, "ErrorMessage": "slow"}))
    assert not h.retried and [r for r, _ in h.resent] == [sealed, sealed]
    assert h.metrics.snapshot()["AggregatesSealed"] == 1, "sealed once"


def test_a_sealed_aggregate_failed_for_good_reports_its_members_unconfirmed():
    h = Harness()
    members = [h.buffered(1, "s0"), h.buffered(2, "s0")]
    h.retrier.handle(h.batch(members), h.outcome(error="Internal", unanswered=True))
    [(sealed, _)] = h.resent
    h.retrier.handle(h.batch(sealed), h.outcome(error="AccessDeniedException"))
    assert all(h.finished[i].error_code == "AccessDeniedException" for i in (0, 1))
    assert all(h.finished[i].unconfirmed for i in (0, 1))
    assert "may be in the stream" in h.finished[0].error_message
    assert h.metrics.snapshot()["UserRecordsNotLanded"] == 2


def test_a_sealed_aggregate_is_not_resent_past_the_resend_horizon():
    h = Harness(record_ttl=1000.0)
    members = [h.buffered(1, "s0")]
    h.retrier.handle(h.batch(members), h.outcome(error="Internal", unanswered=True))
    [(sealed, _)] = h.resent
    assert h.retrier.resend_due(sealed, h.clock.now + RESEND_HORIZON_S - 1)
    assert not h.retrier.resend_due(sealed, h.clock.now + RESEND_HORIZON_S)
    assert h.finished[0].error_code == EXPIRED and h.finished[0].unconfirmed
    assert h.lanes.floor("0") == 1, "a copy may still be unaccounted for"
    h.clock.now += RESEND_HORIZON_S  # the horizon after its last send: settled
    assert h.lanes.floor("0") == 2


def test_a_sealed_aggregate_with_one_member_expired_still_goes_for_the_other():
    h = Harness(record_ttl=5.0)
    early, late = h.buffered(1, "s0"), h.buffered(2, "s0")
    late.expires += 10
    h.retrier.handle(h.batch([early, late]), h.outcome(error="Internal", unanswered=True))
    [(sealed, _)] = h.resent
    h.clock.now += 6
    assert h.retrier.resend_due(sealed, h.clock.now)
    assert h.finished[0].error_code == EXPIRED and h.finished[0].unconfirmed and 1 not in h.finished
    h.retrier.handle(h.batch(sealed), h.outcome(ok("s0", "77")))
    assert h.finished[1].success and h.finished[1].sequence_number == "77"
    assert h.finished[0].error_code == EXPIRED, "a result is final"
    assert h.lanes.floor("0") == 1, "not every member confirmed, and a copy went unanswered"


def test_a_lost_reply_then_a_confirmed_resend_succeeds_with_both_attempts():
    h = Harness()
    member = h.buffered(1, "s0")
    h.retrier.handle(h.batch([member]), h.outcome(error="Internal", unanswered=True))
    [(sealed, _)] = h.resent
    h.retrier.handle(h.batch(sealed), h.outcome(ok("s0", "9")))
    result = h.finished[0]
    assert result.success and result.sequence_number == "9" and not result.unconfirmed
    assert [a.error_code for a in result.attempts] == ["Internal", None]
    assert h.lanes.floor("0") == 2, "every member confirmed: settled"


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
    assert result.error_code == EXPIRED and not result.unconfirmed
    assert [a.error_code for a in result.attempts] == [THROTTLED, EXPIRED]


# -- lanes: counters and floors --------------------------------------------------------------


def test_lane_names_are_the_shard_ids_digits_or_the_hash_lane():
    assert shard_lane("shardId-000000000012") == "12" and shard_lane("shardId-000000000000") == "0"
    assert hash_lane(3) == "l3"
    assert AggregateId.parse(AggregateId("p", shard_lane("shardId-999999999999"), 1, 1).encode())


def test_counters_count_per_lane_and_the_floor_is_the_smallest_unsettled():
    clock = Clock()
    lanes = Lanes("p", clock)
    one, two, three = (lanes.new_id("0") for _ in range(3))
    assert [(a.counter, a.floor) for a in (one, two, three)] == [(1, 1), (2, 1), (3, 1)]
    assert lanes.new_id("1") == AggregateId("p", "1", 1, 1), "each lane counts on its own"
    lanes.settle(two)
    assert lanes.floor("0") == 1, "1 is not settled"
    lanes.settle(one)
    assert lanes.floor("0") == 3
    lanes.settle_at(three, clock.now + 5)
    assert lanes.new_id("0") == AggregateId("p", "0", 4, 3)
    clock.now += 5
    assert lanes.new_id("0") == AggregateId("p", "0", 5, 4)


def test_an_aggregate_built_but_not_sent_gives_its_counter_back_or_settles_it():
    lanes = Lanes("p", Clock())
    one, two = lanes.new_id("0"), lanes.new_id("0")
    lanes.retract(two)  # the last handed out: handed out again
    assert lanes.new_id("0") == AggregateId("p", "0", 2, 1)
    three = lanes.new_id("0")
    lanes.new_id("0")
    lanes.retract(three)  # not the last: a gap, settled
    lanes.settle(one)
    assert lanes.floor("0") == 2
    lanes.settle(two)
    assert lanes.floor("0") == 4


def test_a_rerouted_aggregate_confirms_only_the_members_its_landing_shard_holds():
    """Predicted and actual shard agree for the re-routed copy, but only for the member it was
    routed by: the others were predicted (before a reshard) for a shard that no longer exists."""
    h = Harness()
    a, b, c = (
        h.buffered(1, "parent"),
        h.buffered(QUARTER + 1, "parent"),
        h.buffered(2 * QUARTER + 1, "parent"),
    )
    kinesis_record = h.aggregate([a, b, c])
    kinesis_record.sealed = True
    kinesis_record.reroute(b.hash_key)
    kinesis_record.predicted_shard = "s1"
    h.retrier.handle(h.batch(kinesis_record), h.outcome(ok("s1")))
    assert h.finished[1].success and h.finished[1].shard_id == "s1"
    assert 0 not in h.finished and 2 not in h.finished, "s1 does not hold them"
    [(resent, _)] = h.resent
    assert resent is kinesis_record and resent.route_key == a.hash_key
