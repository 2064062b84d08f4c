"""The verdict of a send run (`local.commands.verify`) against a moto-backed sink, counter table and DLQ."""

from __future__ import annotations

import json
import threading
import time

import pytest

import local.commands.send
from local.app.provision import client
from local.commands.send import parse_payload
from local.commands.send_payloads import parse_template
from local.commands.verify_readers import SinkReader
from local.commands.verify_render import progress_line, render
from tests.support.send import Pipeline, StubApi, Written, _group, _send, _verify

pytestmark = pytest.mark.integration


def test_verify_passes_when_each_record_is_in_the_sink_once_and_counts_are_exact(
    stub_api: StubApi, pipeline: Pipeline
) -> None:
    report = _send(stub_api, 200, keys=9, batch=50)
    pipeline.write_sink(stub_api.written)
    pipeline.count(stub_api.written)
    verdict = _verify(pipeline, report)
    assert verdict.ok, render(verdict)
    sink, counter = _group(verdict, "event-sink"), _group(verdict, "key-counter")
    assert (sink.group.kind, counter.group.kind) == ("records", "counter")
    assert sink.applied == counter.applied == 200
    assert sink.latency_s["p50"] >= 0 and sink.latency_s["max"] >= sink.latency_s["p99"]
    assert sink.drain_s is not None and counter.drain_s is not None
    assert json.loads(json.dumps(verdict.as_dict()))["ok"] is True
    assert "event-sink" in render(verdict) and "key-counter" in render(verdict)


def test_verify_detects_a_lost_record(stub_api: StubApi, pipeline: Pipeline) -> None:
    report = _send(stub_api, 50, batch=50)
    lost = stub_api.written[17]
    pipeline.write_sink([w for w in stub_api.written if w is not lost])
    pipeline.count(stub_api.written)
    verdict = _verify(pipeline, report, timeout=2)
    sink = _group(verdict, "event-sink")
    assert not verdict.ok and verdict.timed_out
    assert sink.lost == [parse_payload(lost.data)["seq"]] and sink.drain_s is None
    assert _group(verdict, "key-counter").ok
    # The verdict says where the stream holds it: the consumers, not the producer, lost it.
    [where] = verdict.stream.where[sink.lost[0]]
    assert where.startswith(f"{lost.shard_id}@{lost.sequence_number}#{lost.sub_sequence} aggregate=")
    assert f"record {sink.lost[0]} in the stream: {where}" in render(verdict)


def test_verify_detects_a_duplicated_record(stub_api: StubApi, pipeline: Pipeline) -> None:
    report = _send(stub_api, 50, batch=50)
    pipeline.write_sink(stub_api.written)
    again = stub_api.written[3]
    # The same record written again further down its shard (a producer retry that had landed).
    pipeline.write_sink([Written(again.shard_id, "59000000000000000000000", again.key, again.data)])
    pipeline.count(stub_api.written)
    verdict = _verify(pipeline, report)
    assert not verdict.ok
    assert _group(verdict, "event-sink").duplicated == {parse_payload(again.data)["seq"]: 2}


def test_verify_detects_a_wrong_count(stub_api: StubApi, pipeline: Pipeline) -> None:
    report = _send(stub_api, 60, keys=6, batch=60)
    pipeline.write_sink(stub_api.written)
    pipeline.count([*stub_api.written, stub_api.written[0]])  # one record counted twice
    verdict = _verify(pipeline, report)
    counter = _group(verdict, "key-counter")
    assert not verdict.ok and _group(verdict, "event-sink").ok
    assert counter.wrong_counts == {stub_api.written[0].key: (10, 11)}


def test_verify_reports_dlq_depth_and_poison_records_whole(stub_api: StubApi, pipeline: Pipeline) -> None:
    report = _send(stub_api, 30, poison_every=10)
    poison = [w for w in stub_api.written if parse_payload(w.data).get("poison")]
    healthy = [w for w in stub_api.written if w not in poison]
    assert {len(w.data) for w in poison} == {450 * 1024}  # over a DynamoDB item: event-sink cannot
    pipeline.write_sink(healthy)
    pipeline.count(stub_api.written)  # the key counter counts poison records too
    for w in poison:
        pipeline.dead_letter(w, "event-sink")
    verdict = _verify(pipeline, report)
    sink = _group(verdict, "event-sink")
    assert verdict.ok, render(verdict)
    assert sink.dlq_depth == 3 and sink.poison_whole == 3 and not sink.poison_missing
    # The letters are still in the queue for the next reader (read without being consumed).
    attributes = client("sqs", pipeline.endpoint).get_queue_attributes(
        QueueUrl=pipeline.dlq_url, AttributeNames=["ApproximateNumberOfMessages"]
    )
    assert attributes["Attributes"]["ApproximateNumberOfMessages"] == "3"


def test_verify_detects_a_healthy_record_in_the_dlq(stub_api: StubApi, pipeline: Pipeline) -> None:
    report = _send(stub_api, 20)
    dead = stub_api.written[5]
    pipeline.write_sink([w for w in stub_api.written if w is not dead])
    pipeline.count([w for w in stub_api.written if w is not dead])
    pipeline.dead_letter(dead, "event-sink")
    pipeline.dead_letter(dead, "key-counter")
    verdict = _verify(pipeline, report, timeout=3)  # never drains: the record is in no sink
    assert not verdict.ok
    seq = parse_payload(dead.data)["seq"]
    assert _group(verdict, "event-sink").dead_lettered == [seq] and _group(verdict, "event-sink").lost == []
    assert _group(verdict, "key-counter").dead_lettered == [seq]


def test_verify_reads_the_sink_incrementally(stub_api: StubApi, pipeline: Pipeline) -> None:
    earlier = _send(stub_api, 40, run_id="run-earlier")
    pipeline.write_sink(
        stub_api.written, by_position=True
    )  # an earlier run's records, below this run's positions
    stub_api.written.clear()
    report = _send(stub_api, 100, batch=20, run_id="run-now")
    shards = {w.shard_id for w in stub_api.written}
    reader = SinkReader(pipeline.dynamodb(), pipeline.sink, pipeline.stream, "run-now")
    for shard_id in shards:
        first = min((w.sequence_number for w in stub_api.written if w.shard_id == shard_id), key=int)
        reader.add_shard(shard_id, first)
    pipeline.write_sink(stub_api.written[:60], by_position=True)
    reader.poll()
    assert reader.items_read == 60 and reader.queries == len(shards)
    reader.poll()  # nothing new: one Query per partition, no item read again
    assert reader.items_read == 60 and reader.queries == 2 * len(shards)
    pipeline.write_sink(stub_api.written[60:], by_position=True)
    reader.poll()
    assert reader.items_read == 100 and sorted(reader.positions) == list(range(100))
    assert len(earlier.accepted) == 40 and len(report.accepted) == 100


def test_verify_reads_items_keyed_by_id_once_each_by_batch_get(stub_api: StubApi, pipeline: Pipeline) -> None:
    report = _send(stub_api, 1000, batch=100, run_id="run-ids")
    seq_of_id = {report.id_of(seq): seq for seq in range(1000)}
    reader = SinkReader(pipeline.dynamodb(), pipeline.sink, pipeline.stream, "run-ids", seq_of_id=seq_of_id)
    in_order = sorted(stub_api.written, key=lambda w: parse_payload(w.data)["seq"])
    pipeline.write_sink(in_order[:120])  # keyed `id#-/i/<id>`, as functions/event_sink writes them
    reader.poll()  # ids in the order sent: 2 calls find the 120, then 3 calls that find none end the poll
    assert reader.items_read == 120 and reader.queries == 5
    reader.poll()  # only ids not found yet are asked for, from the first of them
    assert reader.items_read == 120 and reader.queries == 8
    pipeline.write_sink(in_order[120:])
    reader.poll()
    assert reader.items_read == 1000 and sorted(reader.positions) == list(range(1000))
    assert all(where == [f"id#-/i/{report.id_of(seq)}|id"] for seq, where in reader.positions.items())


def test_a_thorough_poll_asks_for_every_id_a_gap_hides(stub_api: StubApi, pipeline: Pipeline) -> None:
    report = _send(stub_api, 1000, batch=100, run_id="run-gap")
    seq_of_id = {report.id_of(seq): seq for seq in range(1000)}
    reader = SinkReader(pipeline.dynamodb(), pipeline.sink, pipeline.stream, "run-gap", seq_of_id=seq_of_id)
    in_order = sorted(stub_api.written, key=lambda w: parse_payload(w.data)["seq"])
    pipeline.write_sink(in_order[400:])  # the first 400 never reached the sink: lost
    reader.poll()
    assert reader.items_read == 0 and reader.queries == 3  # 300 ids found nothing: not asked further
    reader.poll(thorough=True)  # the final read of a verdict
    assert sorted(reader.positions) == list(range(400, 1000))


def test_verify_reads_only_new_items_while_the_sink_fills(stub_api: StubApi, pipeline: Pipeline) -> None:
    report = _send(stub_api, 120, batch=10)
    done = threading.Event()

    def fill() -> None:
        for start in range(0, 120, 20):
            pipeline.write_sink(stub_api.written[start : start + 20])
            time.sleep(0.3)
        pipeline.count(stub_api.written)
        done.set()

    filler = threading.Thread(target=fill)
    filler.start()
    try:
        verdict = _verify(pipeline, report)
    finally:
        filler.join()
    sink = _group(verdict, "event-sink")
    assert verdict.ok, render(verdict)
    assert sink.items_read == 120  # many polls, each item read once
    assert sink.queries > len({w.shard_id for w in stub_api.written})  # it did poll more than once


def test_verify_measures_latency_from_post_to_first_seen_and_drain_after_the_last_post(
    stub_api: StubApi, pipeline: Pipeline
) -> None:
    report = _send(stub_api, 40)
    time.sleep(1.0)  # the consumers are a second behind
    pipeline.write_sink(stub_api.written)
    pipeline.count(stub_api.written)
    verdict = _verify(pipeline, report)
    sink, counter = _group(verdict, "event-sink"), _group(verdict, "key-counter")
    assert verdict.ok, render(verdict)
    assert 1.0 <= sink.latency_s["p50"] <= sink.latency_s["p99"] <= sink.latency_s["max"]
    assert sink.drain_s >= 1.0 and counter.drain_s >= 1.0
    assert verdict.as_dict()["latency_resolution_s"] == 0.1


def test_a_record_given_up_after_posts_that_may_have_landed_is_unconfirmed_and_may_be_applied_once(
    stub_api: StubApi, pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch whose every reply is lost is written on every post and never confirmed: send gives it
    up as *unconfirmed* (post it again as it was), not refused, and the verdict lets its ids be in
    the sink and the counts once each — as the consumers, deduplicating by id, apply them."""
    monkeypatch.setattr(local.commands.send, "MAX_ATTEMPTS", 3)
    stub_api.script = ["drop"] * 3
    report = _send(stub_api, 20, keys=4, batch=10, concurrency=1)
    assert len(report.accepted) == 10 and not report.failed
    assert sorted(report.unconfirmed) == list(range(10))
    assert report.unconfirmed[0].endswith("(after 3 posts); an earlier post may have been written")
    assert len(stub_api.written) == 10 * 3 + 10  # each unconfirmed record landed three times
    once = list({w.id: w for w in stub_api.written}.values())  # the consumers apply each id once
    pipeline.write_sink(once)
    pipeline.count(once)
    verdict = _verify(pipeline, report)
    assert verdict.ok, render(verdict)
    assert report.as_dict()["unconfirmed"] == 10 and "10 unconfirmed" in render(verdict)


def test_7_the_verdict_knows_a_templated_run_by_its_ids_in_sink_dlq_and_stream(
    stub_api: StubApi, pipeline: Pipeline
) -> None:
    """A run of the user's payloads carries no run or seq in its data: the sink, the DLQ (a dead
    letter's `recordId`) and the stream (the KPL aggregate's ids) know its records by their ids."""
    template = parse_template('{"order": "{id}", "tenant": "{i}"}')
    report = _send(stub_api, 30, keys=5, batch=10, payloads=template, run_id="run-tpl")
    refused = [w for w in stub_api.written if json.loads(w.data)["tenant"] == 3]
    pipeline.write_sink([w for w in stub_api.written if w not in refused])
    pipeline.count(stub_api.written)
    for w in refused:
        pipeline.dead_letter(w, "event-sink", ValueError("tenant 3 is closed"))
    verdict = _verify(pipeline, report, timeout=5)
    sink = _group(verdict, "event-sink")
    seqs = sorted(int(w.id.rsplit("-", 1)[1]) for w in refused if w.id)
    assert seqs == [3, 8, 13, 18, 23, 28]
    assert sink.dead_lettered == seqs and sink.lost == [] and not sink.duplicated
    assert verdict.stream.user_records == 30 and verdict.stream.unbacked == [] and verdict.stream.ok


def test_7_verdict_counts_only_this_runs_dead_letters(stub_api: StubApi, pipeline: Pipeline) -> None:
    """The DLQ holds an earlier run's letters: this run's verdict neither counts nor judges them."""
    template = parse_template('{"order": "{id}", "tenant": "{i}"}')
    _send(stub_api, 10, keys=5, payloads=template, run_id="run-before")
    for w in stub_api.written[:4]:
        pipeline.dead_letter(w, "event-sink", ValueError("tenant closed"))
    stub_api.written.clear()
    report = _send(stub_api, 10, keys=5, payloads=template, run_id="run-now")
    pipeline.write_sink(stub_api.written)
    pipeline.count(stub_api.written)
    verdict = _verify(pipeline, report)
    sink = _group(verdict, "event-sink")
    assert verdict.ok, render(verdict)
    assert (sink.applied, sink.dlq_depth, sink.missing, sink.dlq_queue_depth) == (10, 0, 0, 4)
    assert sink.dead_letter_causes == {} and sink.dead_lettered == []
    assert "event-sink: its DLQ holds 4 more messages, not this run's (not judged)" in render(verdict)
    line = progress_line(verdict.groups, 1.0).plain
    assert "event-sink: applied 10/10" in line and "dead-lettered" not in line


def test_7_a_poison_record_in_the_dlq_is_counted_by_cause_and_is_ok(
    stub_api: StubApi, pipeline: Pipeline
) -> None:
    report = _send(stub_api, 20, poison_every=10, run_id="run-poison")
    poison = [w for w in stub_api.written if parse_payload(w.data).get("poison")]
    pipeline.write_sink([w for w in stub_api.written if w not in poison])
    pipeline.count(stub_api.written)
    for w in poison:
        pipeline.dead_letter(w, "event-sink", ValueError("item too large"))
    verdict = _verify(pipeline, report)
    sink = _group(verdict, "event-sink")
    assert verdict.ok, render(verdict)
    assert (sink.applied, sink.dlq_depth, sink.missing) == (18, 2, 0) and sink.dead_lettered == []
    cause = sink.dead_letter_causes["ValueError: item too large"]
    assert (cause.count, cause.poison, cause.ids) == (2, 2, ["run-poison-9", "run-poison-19"])
