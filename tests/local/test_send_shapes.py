"""`send` grown for the chaos campaign: load shapes, a retry policy that never makes a copy, and the
verdict's outcomes record by record (accepted, refused, unknown)."""

# ruff: noqa: F811 -- fixtures are imported from send_helpers and requested by name

from __future__ import annotations

import math
from collections import Counter

import pytest

from local._send_shapes import MAX_DATA_SIZE, POISON_SIZE, LoadShape, ShapeError, parse_size, parse_skew
from local.send import parse_payload
from tests.local.send_helpers import (  # noqa: F401 (fixtures)
    Pipeline,
    StubApi,
    Written,
    _group,
    _send,
    _verify,
    pipeline,
    stub_api,
)

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


# --- retries that never make a copy ----------------------------------------------------------------


@pytest.mark.parametrize("status", ["500", "502", "504", "drop"])
def test_an_answer_that_cannot_say_is_not_retried_and_its_records_are_unknown(stub_api: StubApi, status):
    stub_api.script = [status]
    report = _send(stub_api, 10, batch=10, concurrency=1)
    assert len(stub_api.received) == 1  # never sent again
    assert sorted(report.unknown) == list(range(10)) and not report.accepted and not report.failed


def test_outcome_unknown_entries_are_not_retried(stub_api: StubApi):
    stub_api.script = [("207?", [1, 3])]
    report = _send(stub_api, 5, batch=5, concurrency=1)
    assert sorted(report.unknown) == [1, 3] and sorted(report.accepted) == [0, 2, 4]
    assert len(stub_api.received) == 1  # nothing sent again
    assert report.unknown_reasons["OutcomeUnknown"] == 2


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


def test_an_unknown_record_found_once_passes_and_is_counted(stub_api: StubApi, pipeline: Pipeline):
    stub_api.script = [("207?", [4])]
    report = _send(stub_api, 10, batch=10, concurrency=1)
    assert sorted(report.unknown) == [4]
    pipeline.write_sink(stub_api.written)  # it did land: once in the sink, counted once
    pipeline.count(stub_api.written)
    verdict = _verify(pipeline, report)
    assert verdict.ok, verdict.render()
    assert _group(verdict, "event-sink").unknown_present == 1


def test_an_unknown_record_in_the_sink_but_not_counted_fails(stub_api: StubApi, pipeline: Pipeline):
    stub_api.script = [("207?", [4])]
    report = _send(stub_api, 10, batch=10, concurrency=1)
    pipeline.write_sink(stub_api.written)
    unknown = next(w for w in stub_api.written if parse_payload(w.data)["seq"] == 4)
    pipeline.count([w for w in stub_api.written if w is not unknown])
    verdict = _verify(pipeline, report, timeout=2)
    assert not verdict.ok and _group(verdict, "key-counter").wrong_counts


def test_an_unknown_record_twice_in_the_sink_is_a_duplicate(stub_api: StubApi, pipeline: Pipeline):
    stub_api.script = [("207?", [4])]
    report = _send(stub_api, 10, batch=10, concurrency=1)
    unknown = next(w for w in stub_api.written if parse_payload(w.data)["seq"] == 4)
    copy = Written(unknown.shard_id, str(int(unknown.sequence_number) + 999), unknown.key, unknown.data)
    pipeline.write_sink([*stub_api.written, copy])
    pipeline.count([*stub_api.written, copy])
    verdict = _verify(pipeline, report)
    assert not verdict.ok and _group(verdict, "event-sink").duplicated == {4: 2}
