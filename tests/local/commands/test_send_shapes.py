"""`send` grown for the chaos campaign: load shapes, and the verdict's outcomes record by record, by
identity (accepted: applied once; refused: nowhere; re-posted: one record to the consumers), with the
Kinesis-level duplicates read from the stream."""

from __future__ import annotations

import math
from collections import Counter

import pytest

from local.commands.send import parse_payload
from local.commands.send_shapes import (
    MAX_DATA_SIZE,
    POISON_SIZE,
    LoadShape,
    ShapeError,
    parse_size,
    parse_skew,
)
from local.commands.verify_render import render
from tests.support.send import Pipeline, StubApi, Written, _group, _send, _verify

pytestmark = pytest.mark.integration


# --- load shapes -----------------------------------------------------------------------------------


def test_sizes_are_log_uniform_between_the_bounds():
    shape = LoadShape(20_000, min_size=100, max_size=MAX_DATA_SIZE, seed=1)
    sizes = [shape.size(seq) for seq in range(20_000)]
    assert min(sizes) >= 100 and max(sizes) <= MAX_DATA_SIZE
    decades = Counter(int(math.log10(size)) for size in sizes)  # 2: 100-999 B ... 5: 100 KB-1 MB
    shares = [decades[d] / len(sizes) for d in (2, 3, 4, 5)]
    assert all(0.18 < share < 0.32 for share in shares), shares  # about a quarter in each decade


def test_zipf_skew_puts_most_records_on_a_few_keys():
    shape = LoadShape(50_000, keys=1_000, skew="zipf:1.1", seed=2)
    counts = Counter(shape.key_index(seq) for seq in range(50_000))
    top10 = sum(n for _, n in counts.most_common(10)) / 50_000
    assert counts.most_common(1)[0][0] == 0 and 0.35 < top10 < 0.65  # 1/(k+1)^1.1 over 1,000 keys
    assert counts[0] / counts[9] == pytest.approx(10**1.1, rel=0.25)


def test_a_hot_key_takes_its_share_and_the_rest_is_uniform():
    shape = LoadShape(20_000, keys=50, skew="hot:0.6", seed=3)
    counts = Counter(shape.key_index(seq) for seq in range(20_000))
    assert counts[0] / 20_000 == pytest.approx(0.6 + 0.4 / 50, abs=0.02)
    others = [counts[k] for k in range(1, 50)]
    assert max(others) < 2.5 * min(others)


def test_poison_records_come_at_their_rate_and_are_over_a_dynamodb_item():
    shape = LoadShape(10_000, poison_rate=0.01, seed=4)
    assert 60 <= shape.poison_count <= 140
    assert {shape.size(seq) for seq in range(10_000) if shape.poison(seq)} == {POISON_SIZE}


def test_a_seed_makes_the_same_run_record_by_record():
    one, two = (LoadShape(1_000, 100, 10_000, keys=30, skew="zipf", poison_rate=0.05, seed=9) for _ in "ab")
    assert [(one.size(s), one.key_index(s)) for s in range(1_000)] == [
        (two.size(s), two.key_index(s)) for s in range(1_000)
    ]


@pytest.mark.parametrize(
    ("call", "named"),
    [
        (lambda: parse_size("10-5"), "--size"),
        (lambda: parse_size("2000000"), "--size"),
        (lambda: parse_skew("pareto"), "--skew"),
        (lambda: parse_skew("hot:2"), "--skew"),
        (lambda: LoadShape(10, poison_rate=1.5), "--poison-rate"),
    ],
)
def test_a_bad_shape_is_refused_naming_its_option(call, named):
    with pytest.raises(ShapeError, match=named):
        call()


def test_large_records_go_in_requests_under_the_body_budget(stub_api: StubApi):
    report = _send(stub_api, 12, size=900_000, batch=500)
    assert len(report.accepted) == 12
    assert all(len(received.body) <= 5_000_000 for received in stub_api.received)
    assert len(stub_api.received) >= 3


def test_ndjson_bodies_carry_one_record_per_line(stub_api: StubApi):
    report = _send(stub_api, 20, batch=20, ndjson=True)
    [received] = stub_api.received
    assert received.headers["content-type"] == "application/x-ndjson"
    assert len(received.body.splitlines()) == 20 and len(report.accepted) == 20


# --- the verdict, record by record -----------------------------------------------------------------


def test_a_refused_record_found_in_a_sink_fails_the_verdict(stub_api: StubApi, pipeline: Pipeline):
    stub_api.script = ["400"]  # the first request (records 0-4) is refused; the second accepted
    report = _send(stub_api, 10, batch=5, concurrency=1)
    assert sorted(report.failed) == list(range(5)) and sorted(report.accepted) == list(range(5, 10))
    # As if record 2 had been written although the API said it was not: a real problem.
    after = stub_api.written[0]
    later = str(int(after.sequence_number) + 500)
    ghost = Written(after.shard_id, later, after.key, report.payload_of(2, 0.0))
    pipeline.write_sink([*stub_api.written, ghost])
    pipeline.count(stub_api.written)
    verdict = _verify(pipeline, report)
    assert not verdict.ok and _group(verdict, "event-sink").refused_present == [2]


def test_a_reposted_record_applied_once_passes_and_the_stream_counts_its_copies(
    stub_api: StubApi, pipeline: Pipeline
):
    stub_api.script = ["drop"]  # written, the reply lost: the same records, posted again, land again
    report = _send(stub_api, 10, batch=10, concurrency=1)
    assert sorted(report.reposted) == list(range(10)) and len(report.accepted) == 10
    pipeline.apply(stub_api.written)  # each id once, as the consumers apply it
    verdict = _verify(pipeline, report)
    assert verdict.ok, render(verdict)
    assert verdict.stream.reposted_records == 10 and verdict.stream.duplicates == 10
    assert verdict.stream.aggregate_copies == 0 and verdict.stream.kinesis_records == 2
    assert _group(verdict, "event-sink").reposted_present == 10
    assert verdict.lost == verdict.duplicate_effects == 0
    assert "10 records re-posted into the stream again" in render(verdict)


def test_a_reposted_record_applied_twice_is_a_duplicate_effect(stub_api: StubApi, pipeline: Pipeline):
    stub_api.script = ["drop"]
    report = _send(stub_api, 6, keys=2, batch=6, concurrency=1)
    pipeline.write_sink(stub_api.written, by_position=True)  # both copies applied: what keying by id prevents
    pipeline.count(stub_api.written)
    verdict = _verify(pipeline, report)
    assert not verdict.ok
    assert _group(verdict, "event-sink").duplicated == {seq: 2 for seq in range(6)}
    assert len(_group(verdict, "key-counter").wrong_counts) == 2
    assert verdict.duplicate_effects == 6 + 6
    at = _group(verdict, "event-sink").duplicated_at
    assert sorted(at) == list(range(6)) and all(len(set(items)) == 2 for items in at.values())
    assert f"record 0 in event-sink 2 times: {'; '.join(at[0])}" in render(verdict)
    assert len(verdict.stream.where[0]) == 2  # and the stream holds it twice (a re-post): where, said


def test_an_aggregate_copy_is_a_kinesis_duplicate_the_consumers_skip(stub_api: StubApi, pipeline: Pipeline):
    stub_api.script = ["dup"]  # the producer resent an aggregate after a lost Kinesis reply
    report = _send(stub_api, 7, batch=7, concurrency=1)
    assert not report.reposted  # the API answered: nothing for the client to re-post
    pipeline.apply(stub_api.written)
    verdict = _verify(pipeline, report)
    assert verdict.ok, render(verdict)
    stream = verdict.stream
    assert (stream.aggregate_copies, stream.records_in_aggregate_copies, stream.duplicates) == (1, 7, 7)
    assert stream.reposted_records == 0 and not stream.unbacked  # the answer named the second copy


def test_an_accepted_record_not_at_the_position_answered_fails(stub_api: StubApi, pipeline: Pipeline):
    report = _send(stub_api, 5, batch=5, concurrency=1)
    pipeline.apply(stub_api.written)
    report.accepted[3].sequence_number = str(int(report.accepted[3].sequence_number) + 1)  # a made-up success
    verdict = _verify(pipeline, report)
    assert not verdict.ok and verdict.stream.unbacked == [3]
    assert all(g.ok for g in verdict.groups)  # only the stream can tell


def test_a_refused_record_in_the_stream_fails(stub_api: StubApi, pipeline: Pipeline):
    stub_api.script = [("207w", [2])] + ["400"] * 5
    report = _send(stub_api, 5, batch=5, concurrency=1)
    assert sorted(report.failed) == [2]
    stub_api._write([stub_api.received[0].records[2]])  # it was written although the API said not
    pipeline.apply([w for w in stub_api.written if parse_payload(w.data)["seq"] != 2])
    verdict = _verify(pipeline, report)
    assert not verdict.ok and verdict.stream.refused_in_stream == [2]


def test_with_ids_a_sink_item_must_carry_its_record_id(stub_api: StubApi, pipeline: Pipeline):
    report = _send(stub_api, 4, batch=4, concurrency=1)
    for w in stub_api.written:
        w.id = None if parse_payload(w.data)["seq"] == 1 else w.id
    pipeline.write_sink(stub_api.written)
    pipeline.count(stub_api.written)
    verdict = _verify(pipeline, report)
    assert not verdict.ok and _group(verdict, "event-sink").wrong_ids == {1: [None]}


def test_without_ids_a_reposted_record_is_at_least_once_and_others_exactly_once(
    stub_api: StubApi, pipeline: Pipeline
):
    stub_api.script = ["drop"]  # batch 0 (records 0-4) re-posted; batch 1 (5-9) not
    report = _send(stub_api, 10, batch=5, concurrency=1, ids=False)
    assert sorted(report.reposted) == list(range(5))
    pipeline.apply(stub_api.written)  # no ids: both posts are records of their own, both applied
    verdict = _verify(pipeline, report)
    assert verdict.ok, render(verdict)
    assert verdict.stream.reposted_records == 5 and "at least once" in render(verdict)
    again = next(w for w in stub_api.written if parse_payload(w.data)["seq"] == 7)
    pipeline.write_sink([Written(again.shard_id, again.sequence_number, again.key, again.data, 9)])
    verdict = _verify(pipeline, report)
    assert not verdict.ok and _group(verdict, "event-sink").duplicated == {7: 2}
