"""KinesisConsumer.process against moto server (Kinesis, DynamoDB, SQS) with real KPL aggregates.

Each test writes records with shardline's producer, then replays the shard through
`MappingReplay` (shardline.testing), the way the event-source mapping does.
"""

from __future__ import annotations

import json
import threading
from collections import Counter

from shardline.consumer import DeadLetterQueue
from shardline.kinesis import Position
from shardline.testing import FakeLambdaContext, MappingReplay
from tests.support.integration import CONSUMER_RECORDS as RECORDS
from tests.support.integration import n_of


def test_a_replayed_batch_repeats_no_side_effect(pipeline):
    seen: list[int] = []
    consumer = pipeline.consumer()
    consumer.handler(lambda record: seen.append(n_of(record)))
    event = pipeline.feed(batch_size=100).next_event()

    assert consumer.process(event, FakeLambdaContext()) == {"batchItemFailures": []}
    assert consumer.process(event, FakeLambdaContext()) == {"batchItemFailures": []}

    assert seen == list(range(RECORDS))
    metrics = consumer.metrics.snapshot()
    assert metrics["DuplicatesSkipped"] == RECORDS and metrics["RecordsProcessed"] == RECORDS
    assert metrics["UserRecords"] == 2 * RECORDS and metrics["RecordsReceived"] < RECORDS, "aggregated"


def test_the_checkpoint_is_written_every_n_records_and_at_the_end_not_per_record(pipeline):
    consumer = pipeline.consumer(checkpoint_every=25)
    consumer.handler(lambda record: None)

    consumer.process(pipeline.feed(batch_size=100).next_event(), FakeLambdaContext())

    assert consumer.metrics.snapshot()["CheckpointsWritten"] == 3  # after 25, 50, and 60
    lease = pipeline.leases.get(pipeline.shard_id)
    last = pipeline.feed(batch_size=100).records[-1]["kinesis"]["sequenceNumber"]
    assert lease.checkpoint.sequence == last


def test_a_handler_error_checkpoints_before_it_and_reports_its_kinesis_record(pipeline):
    calls: list[int] = []
    fail_once = {23}

    consumer = pipeline.consumer()

    @consumer.handler
    def handle(record):
        calls.append(n_of(record))
        if n_of(record) in fail_once:
            fail_once.clear()
            raise RuntimeError("boom")

    feed = pipeline.feed(batch_size=100)
    response = feed.invoke(consumer.process)

    failing = next(r for r in feed.records if 23 in _numbers(r))
    assert response == {"batchItemFailures": [{"itemIdentifier": failing["kinesis"]["sequenceNumber"]}]}
    assert calls == list(range(24)), "nothing after the failing record ran"
    lease = pipeline.leases.get(pipeline.shard_id)
    assert lease.checkpoint.sequence == failing["kinesis"]["sequenceNumber"] or int(
        lease.checkpoint.sequence
    ) < int(failing["kinesis"]["sequenceNumber"])
    assert lease.failed_attempts == 1 and lease.last_error.startswith("RuntimeError [")
    assert "boom" not in lease.last_error, "the message is written only when the group opts in"

    feed.drain(consumer.process)

    assert calls == list(range(24)) + list(range(23, RECORDS)), "the replay skipped 0..22 of the aggregate"


def test_a_poison_record_goes_whole_to_the_dlq_and_the_shard_moves_on(pipeline):
    processed: list[int] = []
    consumer = pipeline.consumer(dlq=DeadLetterQueue(pipeline.sqs, pipeline.queue_url), max_attempts=3)

    @consumer.handler
    def handle(record):
        if n_of(record) == 31:
            raise ValueError("cannot parse order 31")
        processed.append(n_of(record))

    feed = pipeline.feed(batch_size=10)
    feed.drain(consumer.process)

    assert processed == [n for n in range(RECORDS) if n != 31]
    [letter] = pipeline.dead_letters()
    assert json.loads(__import__("base64").b64decode(letter["data"])) == {"n": 31}
    assert letter["partitionKey"] == "key-3" and letter["attempts"] == 3
    assert letter["errorType"] == "ValueError" and letter["subSequenceNumber"] is not None
    assert "order 31" not in json.dumps({k: v for k, v in letter.items() if k != "data"})
    assert consumer.metrics.snapshot()["RecordsSentToDLQ"] == 1
    assert pipeline.leases.get(pipeline.shard_id).failed_at is None


def test_without_a_dlq_a_poison_record_blocks_and_is_reported_every_time(pipeline):
    consumer = pipeline.consumer(max_attempts=2)
    consumer.handler(lambda record: 1 / 0 if n_of(record) == 5 else None)
    feed = pipeline.feed(batch_size=10)
    for _ in range(4):
        feed.invoke(consumer.process)
    assert not feed.finished and pipeline.leases.get(pipeline.shard_id).failed_attempts == 4


def test_near_the_time_limit_it_checkpoints_and_reports_the_rest(pipeline):
    processed: list[int] = []
    remaining = {"ms": 60_000}
    consumer = pipeline.consumer(time_margin=5.0)

    @consumer.handler
    def handle(record):
        processed.append(n_of(record))
        if len(processed) == 12:
            remaining["ms"] = 4_000  # the invocation is running out

    feed = pipeline.feed(batch_size=100)
    response = feed.invoke(consumer.process, FakeLambdaContext(lambda: remaining["ms"]))

    assert processed == list(range(12)) and response["batchItemFailures"]
    assert pipeline.leases.get(pipeline.shard_id).checkpoint == Position(*_position_of(feed, 11))
    remaining["ms"] = 60_000
    feed.drain(consumer.process)
    assert processed == list(range(RECORDS))


def test_a_lost_lease_stops_side_effects_and_moves_no_checkpoint(pipeline):
    processed: list[int] = []
    consumer = pipeline.consumer(checkpoint_every=5)

    @consumer.handler
    def handle(record):
        processed.append(n_of(record))
        if n_of(record) == 7:
            pipeline.leases.take(pipeline.shard_id, owner="another-invocation")

    feed = pipeline.feed(batch_size=100)
    response = feed.invoke(consumer.process)

    row = pipeline.leases.get(pipeline.shard_id)
    assert row.owner == "another-invocation"
    assert row.checkpoint == Position(*_position_of(feed, 4)), "the checkpoint after record 4 stands"
    # The loss is found at the next checkpoint write (after record 9); nothing runs after that.
    assert processed == list(range(10)) and response["batchItemFailures"]
    assert consumer.metrics.snapshot()["LeaseLosses"] == 1


def test_two_invocations_on_one_shard_only_one_commits(pipeline):
    both_inside = threading.Barrier(2, timeout=10)
    first_done = threading.Event()
    committed: Counter[str] = Counter()
    results: dict = {}

    def run(name: str) -> None:
        consumer = pipeline.consumer(detect_crashes=False)  # hold: the first to write wins

        @consumer.handler
        def handle(record):
            if n_of(record) == 0:
                both_inside.wait()  # both invocations hold the lease at the same counter
            if name == "second" and n_of(record) == RECORDS - 1:
                # moto evaluates conditional writes without a lock, so the two commits are
                # ordered here; DynamoDB itself makes them atomic.
                first_done.wait(timeout=10)

        results[name] = consumer.process(pipeline.feed(batch_size=100).next_event(), FakeLambdaContext())
        committed[name] = consumer.metrics.snapshot()["CheckpointsWritten"]
        if name == "first":
            first_done.set()

    threads = [threading.Thread(target=run, args=(name,)) for name in ("first", "second")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert committed == {"first": 1, "second": 0}
    assert results["first"] == {"batchItemFailures": []} and results["second"]["batchItemFailures"]
    assert pipeline.leases.get(pipeline.shard_id).counter == 2, "created at 1, one commit"


def test_with_crash_detection_the_invocation_that_began_last_holds_the_shard(pipeline):
    first_inside = threading.Event()
    second_done = threading.Event()
    committed: Counter[str] = Counter()
    results: dict = {}

    def run(name: str) -> None:
        consumer = pipeline.consumer()

        @consumer.handler
        def handle(record):
            if name == "first" and n_of(record) == 0:
                first_inside.set()
                second_done.wait(timeout=10)  # the second begins, runs and commits meanwhile

        results[name] = consumer.process(pipeline.feed(batch_size=100).next_event(), FakeLambdaContext())
        committed[name] = consumer.metrics.snapshot()["CheckpointsWritten"]

    first = threading.Thread(target=run, args=("first",))
    first.start()
    assert first_inside.wait(timeout=10)
    run("second")  # finds the first's in-flight mark: to it, the first looks dead
    second_done.set()
    first.join()

    assert committed["first"] == 0 and results["first"]["batchItemFailures"], "fenced at its first write"
    assert results["second"] == {"batchItemFailures": []}
    row = pipeline.leases.get(pipeline.shard_id)
    assert (
        row.checkpoint.sequence
        == pipeline.feed(batch_size=100).next_event()["Records"][-1]["kinesis"]["sequenceNumber"]
    )
    assert row.failed_at is None and row.inflight is None, "the blame was cleared as the record passed"


def _numbers(lambda_record: dict) -> set[int]:
    from shardline.consumer import deaggregate

    return {n_of(r) for r in deaggregate([lambda_record])}


def _position_of(feed: MappingReplay, n: int) -> tuple[str, int]:
    from shardline.consumer import deaggregate

    for record in deaggregate(feed.records):
        if n_of(record) == n:
            return record.sequence_number, record.sub_sequence_number or 0
    raise AssertionError(n)


def test_the_checkpoint_is_also_written_every_interval_seconds(pipeline):
    now = {"t": 0.0}
    consumer = pipeline.consumer(checkpoint_every=1_000, checkpoint_interval=10.0, clock=lambda: now["t"])

    @consumer.handler
    def handle(record):
        now["t"] += 1.0  # each record takes a second

    consumer.process(pipeline.feed(batch_size=100).next_event(), FakeLambdaContext())

    assert consumer.metrics.snapshot()["CheckpointsWritten"] == RECORDS // 10


def test_a_batch_handler_gets_the_new_records_at_once_and_a_failed_batch_is_split(pipeline):
    batches: list[list[int]] = []
    consumer = pipeline.consumer()
    failures = iter([RuntimeError("first try fails")])

    @consumer.batch_handler
    def handle(records):
        batches.append([n_of(r) for r in records])
        error = next(failures, None)
        if error:
            raise error

    feed = pipeline.feed(batch_size=100)
    first = feed.invoke(consumer.process)

    everything = list(range(RECORDS))
    half = RECORDS // 2
    assert first == {"batchItemFailures": []}, "the halves succeeded in the same invocation"
    assert batches == [everything, everything[:half], everything[half:]]
    assert consumer.metrics.snapshot()["BatchesSplit"] == 1
    assert consumer.metrics.snapshot()["RecordsFailed"] == 0, "no record failed on its own"
    assert consumer.metrics.snapshot()["CheckpointsWritten"] == 1


def test_metrics_say_how_far_behind_the_newest_record_was(pipeline):
    consumer = pipeline.consumer()
    consumer.handler(lambda record: None)
    consumer.process(pipeline.feed(batch_size=100).next_event(), FakeLambdaContext())
    behind = consumer.metrics.snapshot()["MillisBehindLatest"]
    assert behind is not None and 0 <= behind < 600_000


def test_a_handler_returning_too_many_writes_fails_that_record_and_it_is_dead_lettered(pipeline):
    consumer = pipeline.consumer(
        dlq=DeadLetterQueue(pipeline.sqs, pipeline.queue_url), max_attempts=2, failure_detail="message"
    )

    def write(n: int) -> dict:
        return {"Put": {"TableName": pipeline.sink, "Item": {"id": {"S": f"{n}"}}}}

    @consumer.handler
    def handle(record):
        if n_of(record) == 7:
            return [write(1000 + i) for i in range(100)]  # one more than fits beside the checkpoint
        return [write(n_of(record))]

    pipeline.feed(batch_size=20).drain(consumer.process)

    assert sorted(int(item["id"]["S"]) for item in pipeline.sink_items()) == [
        n for n in range(RECORDS) if n != 7
    ]
    [letter] = pipeline.dead_letters()
    assert "100 writes" in letter["error"] and "100 writes" in letter["errorMessage"]  # opted in
