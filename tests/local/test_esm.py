"""The Kinesis event-source mapping runner (`local.esm.MappingRunner`) against Lambda's behaviour.

Each test runs a real runner against a real Kinesis endpoint on loopback (moto server; kinesis-mock
for resharding, which moto gets wrong), with SQS on moto server for the on-failure destination,
around a purpose-built function from `tests.local.esm_functions`. Retry backoffs are shortened
through the runner's settings; Lambda's numbers stay the defaults.
"""

from __future__ import annotations

import base64
import contextlib
import itertools
import re
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from local import model
from local._esm_batches import MAX_PAYLOAD_BYTES
from local.esm import MappingRunner
from local.model import EventSourceMapping, InvokeResult
from tests.local.esm_functions import (
    CallableInvoker,
    answer_once,
    fail_first,
    fail_on,
    slow_on_shard,
    succeed,
)
from tests.local.esm_functions.aws import (
    answer_get_records,
    client,
    create_stream,
    iso_ms,
    parse_iso,
    put,
    put_keys,
    read_back,
    receive,
    seqs,
    split,
    wait_until,
)

pytestmark = pytest.mark.integration

FUNCTION = "esm-test-function"
ROLE_ARN = f"arn:aws:iam::{model.ACCOUNT}:role/esm-test-role"
FAST_RETRIES = {"retry_base_delay": 0.05, "retry_max_delay": 0.2}
ISO_MS = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


def mapping(stream: str, **settings: Any) -> EventSourceMapping:
    settings.setdefault("starting_position", "TRIM_HORIZON")
    return EventSourceMapping(
        logical_id="Mapping", uuid=str(uuid.uuid4()), function_name=FUNCTION, stream_name=stream, **settings
    )


@contextlib.contextmanager
def running(
    endpoint: str, esm: EventSourceMapping, invoker: CallableInvoker, **options: Any
) -> Iterator[MappingRunner]:
    runner = MappingRunner(esm, invoker, endpoint_url=endpoint, function_role_arn=ROLE_ARN, **options)
    runner.start()
    try:
        yield runner
    finally:
        runner.stop()


@pytest.fixture
def endpoint(moto_server: str) -> str:
    """The Kinesis and SQS endpoint every test but the resharding ones runs against."""
    return moto_server


@pytest.fixture
def resharding_endpoint(kinesis_mock: str) -> str:
    """A Kinesis endpoint right about SplitShard (moto keeps writing to the closed parent)."""
    return kinesis_mock


@pytest.fixture
def kinesis(endpoint: str) -> Any:
    return client("kinesis", endpoint)


@pytest.fixture
def queue(endpoint: str) -> tuple[str, str]:
    """An SQS on-failure queue: (ARN as a template names it, URL)."""
    sqs = client("sqs", endpoint)
    name = f"esm-dlq-{uuid.uuid4().hex[:8]}"
    url = sqs.create_queue(QueueName=name)["QueueUrl"]
    return model.queue_arn(name), url


# -- batching ------------------------------------------------------------------------------------


def test_batch_size_caps_each_invocation_and_keeps_order(endpoint, kinesis):
    stream = create_stream(kinesis)
    sent = seqs(put(kinesis, stream, *[b"r%d" % i for i in range(10)]))
    invoker = CallableInvoker(FUNCTION, succeed)
    with running(endpoint, mapping(stream, batch_size=4), invoker) as runner:
        wait_until(lambda: sum(map(len, invoker.batches())) >= 10, what="10 records")
        assert invoker.batches() == [sent[:4], sent[4:8], sent[8:]]
        assert runner.stats()["shardId-000000000000"]["position"] == sent[-1]


def test_batching_window_holds_a_partial_batch_until_the_window_ends(endpoint, kinesis):
    stream = create_stream(kinesis)
    invoker = CallableInvoker(FUNCTION, succeed)
    window = 3
    with running(endpoint, mapping(stream, batch_size=100, batching_window_seconds=window), invoker):
        first_put = time.monotonic()
        sent = seqs(put(kinesis, stream, b"a", b"b"))
        time.sleep(1.0)
        sent += seqs(put(kinesis, stream, b"c", b"d"))
        wait_until(lambda: invoker.invocations, timeout=window + 15, what="the window's invocation")
        time.sleep(1.5)  # nothing else comes
        [invocation] = invoker.invocations
    assert invocation.sequence_numbers == sent  # one partial batch: 4 of 100
    assert invocation.at - first_put >= window - 0.1  # the window starts when its first record is read


def test_a_full_batch_does_not_wait_for_the_window(endpoint, kinesis):
    stream = create_stream(kinesis)
    invoker = CallableInvoker(FUNCTION, succeed)
    with running(endpoint, mapping(stream, batch_size=3, batching_window_seconds=60), invoker):
        started = time.monotonic()
        sent = seqs(put(kinesis, stream, b"a", b"b", b"c"))
        wait_until(lambda: invoker.invocations, timeout=30, what="the full batch")
    assert invoker.batches() == [sent]
    assert invoker.invocations[0].at - started < 30  # far inside the 60 s window


def test_the_event_is_cut_at_six_megabytes(endpoint, kinesis):
    stream = create_stream(kinesis)
    megabyte = b"x" * (1024 * 1024 - 16)  # a record near Kinesis's 1 MiB; base64 makes it ~1.4 MB
    sent = seqs(put(kinesis, stream, *[megabyte] * 5))
    invoker = CallableInvoker(FUNCTION, succeed)
    with running(endpoint, mapping(stream, batch_size=100), invoker):
        wait_until(lambda: sum(map(len, invoker.batches())) >= 5, timeout=60, what="5 records")
    assert invoker.batches() == [sent[:4], sent[4:]]
    assert all(invocation.event_bytes <= MAX_PAYLOAD_BYTES for invocation in invoker.invocations)
    assert invoker.invocations[0].event_bytes > MAX_PAYLOAD_BYTES - invoker.invocations[1].event_bytes


# -- starting positions --------------------------------------------------------------------------


def test_latest_skips_records_written_before_the_mapping_started(endpoint, kinesis):
    stream = create_stream(kinesis)
    put(kinesis, stream, b"old-1", b"old-2")
    invoker = CallableInvoker(FUNCTION, succeed)
    with running(endpoint, mapping(stream, starting_position="LATEST"), invoker):
        new = seqs(put(kinesis, stream, b"new"))
        wait_until(lambda: invoker.invocations, what="the new record")
        time.sleep(1.5)
    assert invoker.batches() == [new]


def test_trim_horizon_reads_records_written_before_the_mapping_started(endpoint, kinesis):
    stream = create_stream(kinesis)
    old = seqs(put(kinesis, stream, b"old-1", b"old-2"))
    invoker = CallableInvoker(FUNCTION, succeed)
    with running(endpoint, mapping(stream, starting_position="TRIM_HORIZON"), invoker):
        new = seqs(put(kinesis, stream, b"new"))
        wait_until(lambda: sum(map(len, invoker.batches())) >= 3, what="3 records")
    assert [s for batch in invoker.batches() for s in batch] == old + new


def test_at_timestamp_starts_at_the_first_record_arriving_at_or_after_it(endpoint, kinesis):
    stream = create_stream(kinesis)
    put(kinesis, stream, b"before")
    time.sleep(1.1)
    records_after = seqs(put(kinesis, stream, b"after-1", b"after-2"))
    arrival = read_back(kinesis, stream)[1]["ApproximateArrivalTimestamp"].timestamp()
    esm = mapping(stream, starting_position="AT_TIMESTAMP", starting_position_timestamp=arrival)
    invoker = CallableInvoker(FUNCTION, succeed)
    with running(endpoint, esm, invoker):
        wait_until(lambda: sum(map(len, invoker.batches())) >= 2, what="2 records")
        time.sleep(1.5)
    assert [s for batch in invoker.batches() for s in batch] == records_after


# -- the event -----------------------------------------------------------------------------------


def test_event_records_have_lambdas_shape(endpoint, kinesis):
    stream = create_stream(kinesis)
    [answer] = put(kinesis, stream, b"hello \x00 world", key="pk-7")
    [stored] = read_back(kinesis, stream)
    invoker = CallableInvoker(FUNCTION, succeed)
    with running(endpoint, mapping(stream), invoker):
        wait_until(lambda: invoker.invocations, what="an invocation")
    assert list(invoker.invocations[0].event) == ["Records"]
    [record] = invoker.invocations[0].event["Records"]
    assert record == {
        "kinesis": {
            "kinesisSchemaVersion": "1.0",
            "partitionKey": "pk-7",
            "sequenceNumber": answer["SequenceNumber"],
            "data": base64.b64encode(b"hello \x00 world").decode(),
            "approximateArrivalTimestamp": record["kinesis"]["approximateArrivalTimestamp"],
        },
        "eventSource": "aws:kinesis",
        "eventVersion": "1.0",
        "eventID": f"shardId-000000000000:{answer['SequenceNumber']}",
        "eventName": "aws:kinesis:record",
        "invokeIdentityArn": ROLE_ARN,
        "awsRegion": "us-east-1",
        "eventSourceARN": f"arn:aws:kinesis:us-east-1:{model.ACCOUNT}:stream/{stream}",
    }
    arrival = record["kinesis"]["approximateArrivalTimestamp"]
    assert isinstance(arrival, float)
    assert arrival == pytest.approx(stored["ApproximateArrivalTimestamp"].timestamp(), abs=0.001)


# -- partial batch responses ---------------------------------------------------------------------


def test_partial_batch_response_resumes_from_the_lowest_reported_sequence_number(endpoint, kinesis):
    stream = create_stream(kinesis)
    sent = seqs(put(kinesis, stream, *[b"r%d" % i for i in range(10)]))
    report = answer_once(
        lambda event: {"batchItemFailures": [{"itemIdentifier": sent[6]}, {"itemIdentifier": sent[3]}]}
    )
    invoker = CallableInvoker(FUNCTION, report)
    esm = mapping(stream, batch_size=10, report_batch_item_failures=True)
    with running(endpoint, esm, invoker, **FAST_RETRIES) as runner:
        wait_until(lambda: len(invoker.invocations) >= 2, what="the retry")
        time.sleep(1.0)
        stats = runner.stats()["shardId-000000000000"]
    assert invoker.batches() == [sent, sent[3:]]  # 0-2 never again; 3-9 again, 6 included
    assert stats["position"] == sent[-1]
    assert stats["retries"] == 1


@pytest.mark.parametrize(
    "item",
    [
        {"itemIdentifier": ""},
        {"itemIdentifier": None},
        {"itemId": "WRONG KEY"},
        {"itemIdentifier": "99999999"},
    ],
    ids=["empty", "null", "missing", "not-in-batch"],
)
def test_an_unusable_item_identifier_fails_the_whole_batch(endpoint, kinesis, item):
    stream = create_stream(kinesis)
    sent = seqs(put(kinesis, stream, b"a", b"b", b"c"))
    invoker = CallableInvoker(FUNCTION, answer_once(lambda event: {"batchItemFailures": [item]}))
    esm = mapping(stream, report_batch_item_failures=True)
    with running(endpoint, esm, invoker, **FAST_RETRIES) as runner:
        wait_until(lambda: len(invoker.invocations) >= 2, what="the retry")
        time.sleep(1.0)
        stats = runner.stats()["shardId-000000000000"]
    assert invoker.batches() == [sent, sent]
    assert stats["invalid_responses"] == 1


@pytest.mark.parametrize(
    "answer",
    [None, {}, {"batchItemFailures": []}, {"batchItemFailures": None}],
    ids=["null", "empty", "[]", "null-list"],
)
def test_an_empty_or_null_partial_response_is_a_success(endpoint, kinesis, answer):
    stream = create_stream(kinesis)
    sent = seqs(put(kinesis, stream, b"a", b"b"))
    invoker = CallableInvoker(FUNCTION, lambda event: answer)
    esm = mapping(stream, report_batch_item_failures=True)
    with running(endpoint, esm, invoker, **FAST_RETRIES) as runner:
        wait_until(lambda: invoker.invocations, what="an invocation")
        time.sleep(1.0)
        stats = runner.stats()["shardId-000000000000"]
    assert invoker.batches() == [sent]
    assert (stats["position"], stats["retries"]) == (sent[-1], 0)


# -- errors, retries, bisect, on-failure ---------------------------------------------------------


def test_bisect_isolates_a_poison_record(endpoint, kinesis, queue):
    stream = create_stream(kinesis)
    sent = seqs(put(kinesis, stream, *[b"ok" if i != 5 else b"poison" for i in range(8)]))
    invoker = CallableInvoker(FUNCTION, fail_on(b"poison"))
    queue_arn, queue_url = queue
    esm = mapping(
        stream, batch_size=8, bisect_on_error=True, maximum_retry_attempts=0, on_failure_arn=queue_arn
    )
    with running(endpoint, esm, invoker, **FAST_RETRIES) as runner:
        [message] = receive(endpoint, queue_url, 1)
        wait_until(lambda: runner.stats()["shardId-000000000000"]["position"] == sent[-1], what="the end")
        stats = runner.stats()["shardId-000000000000"]
    # Halves, then halves of the failing half, down to the poison record alone (no retry: 0 allowed).
    assert invoker.batches() == [sent, sent[:4], sent[4:], sent[4:6], [sent[4]], [sent[5]], sent[6:]]
    info = message["KinesisBatchInfo"]
    assert (info["startSequenceNumber"], info["endSequenceNumber"], info["batchSize"]) == (
        sent[5],
        sent[5],
        1,
    )
    assert message["requestContext"]["approximateInvokeCount"] == 4  # [0-7], [4-7], [4-5], [5]
    assert (stats["bisects"], stats["retries"], stats["records_sent_to_on_failure"]) == (3, 0, 1)


def test_retry_exhaustion_sends_lambdas_message_to_the_on_failure_queue(endpoint, kinesis, queue):
    stream = create_stream(kinesis)
    sent = seqs(put(kinesis, stream, b"poison", b"x", b"y"))
    stored = read_back(kinesis, stream)
    invoker = CallableInvoker(FUNCTION, fail_on(b"poison"))
    queue_arn, queue_url = queue
    esm = mapping(stream, maximum_retry_attempts=2, on_failure_arn=queue_arn)
    before = time.time()
    with running(endpoint, esm, invoker, **FAST_RETRIES) as runner:
        [message] = receive(endpoint, queue_url, 1)
        after = time.time()
        flowing = seqs(put(kinesis, stream, b"next"))
        wait_until(lambda: len(invoker.invocations) >= 4, what="the next record")
        stats = runner.stats()["shardId-000000000000"]
    assert invoker.batches() == [sent, sent, sent, flowing]  # the first try and 2 retries; then it moves on
    assert message == {
        "requestContext": {
            "requestId": invoker.invocations[2].request_id,
            "functionArn": f"arn:aws:lambda:us-east-1:{model.ACCOUNT}:function:{FUNCTION}",
            "condition": "RetryAttemptsExhausted",
            "approximateInvokeCount": 3,
        },
        "responseContext": {"statusCode": 200, "executedVersion": "$LATEST", "functionError": "Unhandled"},
        "version": "1.0",
        "timestamp": message["timestamp"],
        "KinesisBatchInfo": {
            "shardId": "shardId-000000000000",
            "startSequenceNumber": sent[0],
            "endSequenceNumber": sent[-1],
            "approximateArrivalOfFirstRecord": iso_ms(stored[0]["ApproximateArrivalTimestamp"]),
            "approximateArrivalOfLastRecord": iso_ms(stored[2]["ApproximateArrivalTimestamp"]),
            "batchSize": 3,
            "streamArn": f"arn:aws:kinesis:us-east-1:{model.ACCOUNT}:stream/{stream}",
        },
    }
    assert list(message) == ["requestContext", "responseContext", "version", "timestamp", "KinesisBatchInfo"]
    assert ISO_MS.match(message["timestamp"])
    assert before - 1 <= parse_iso(message["timestamp"]) <= after + 1
    assert (stats["function_errors"], stats["retries"], stats["records_sent_to_on_failure"]) == (3, 2, 3)


def test_records_older_than_the_maximum_age_are_not_invoked_and_go_to_the_on_failure_queue(
    endpoint, kinesis, queue
):
    stream = create_stream(kinesis)
    sent = seqs(put(kinesis, stream, b"a", b"b"))
    invoker = CallableInvoker(FUNCTION, succeed)
    queue_arn, queue_url = queue
    esm = mapping(stream, maximum_record_age_seconds=60, on_failure_arn=queue_arn)

    def an_hour_later() -> float:
        return time.time() + 3600

    with running(endpoint, esm, invoker, clock=an_hour_later) as runner:
        [message] = receive(endpoint, queue_url, 1)
        stats = runner.stats()["shardId-000000000000"]
    assert invoker.invocations == []
    assert message["requestContext"]["condition"] == "RecordAgeExceeded"
    assert message["requestContext"]["approximateInvokeCount"] == 0
    assert "responseContext" not in message  # never invoked: no response to describe
    info = message["KinesisBatchInfo"]
    assert (info["startSequenceNumber"], info["endSequenceNumber"], info["batchSize"]) == (
        sent[0],
        sent[1],
        2,
    )
    assert (stats["position"], stats["records_discarded"]) == (sent[-1], 2)


def test_records_ageing_out_during_retries_go_to_the_on_failure_queue_as_age_exceeded(
    endpoint, kinesis, queue
):
    stream = create_stream(kinesis)
    sent = seqs(put(kinesis, stream, b"poison"))
    invoker = CallableInvoker(FUNCTION, fail_on(b"poison"))
    queue_arn, queue_url = queue
    offset = {"s": 0.0}
    esm = mapping(stream, maximum_record_age_seconds=60, on_failure_arn=queue_arn)
    with running(endpoint, esm, invoker, clock=lambda: time.time() + offset["s"], **FAST_RETRIES):
        wait_until(lambda: len(invoker.invocations) >= 2, what="two failed invocations")
        offset["s"] = 120.0
        [message] = receive(endpoint, queue_url, 1)
    tries = len(invoker.invocations)
    assert message["requestContext"]["condition"] == "RecordAgeExceeded"
    assert message["requestContext"]["approximateInvokeCount"] == tries
    assert message["responseContext"]["functionError"] == "Unhandled"
    assert message["KinesisBatchInfo"]["startSequenceNumber"] == sent[0]


def test_infinite_retries_keep_retrying_until_the_function_recovers(endpoint, kinesis, queue):
    stream = create_stream(kinesis)
    sent = seqs(put(kinesis, stream, b"a", b"b"))
    invoker = CallableInvoker(FUNCTION, fail_first(6))
    queue_arn, queue_url = queue
    esm = mapping(stream, maximum_retry_attempts=-1, on_failure_arn=queue_arn)
    with running(endpoint, esm, invoker, **FAST_RETRIES) as runner:
        wait_until(lambda: runner.stats()["shardId-000000000000"]["position"] == sent[-1], what="recovery")
        stats = runner.stats()["shardId-000000000000"]
    assert invoker.batches() == [sent] * 7
    assert [i.function_error for i in invoker.invocations] == ["Unhandled"] * 6 + [None]
    assert (stats["retries"], stats["records_discarded"]) == (6, 0)
    sqs = client("sqs", endpoint)
    assert sqs.receive_message(QueueUrl=queue_url, WaitTimeSeconds=0).get("Messages", []) == []


def test_bisect_with_a_partial_response_splits_at_the_reported_record(endpoint, kinesis):
    stream = create_stream(kinesis)
    sent = seqs(put(kinesis, stream, *[b"r%d" % i for i in range(6)]))
    invoker = CallableInvoker(
        FUNCTION, answer_once(lambda e: {"batchItemFailures": [{"itemIdentifier": sent[4]}]})
    )
    esm = mapping(stream, bisect_on_error=True, report_batch_item_failures=True, maximum_retry_attempts=0)
    with running(endpoint, esm, invoker, **FAST_RETRIES) as runner:
        wait_until(lambda: runner.stats()["shardId-000000000000"]["position"] == sent[-1], what="the end")
        stats = runner.stats()["shardId-000000000000"]
    assert invoker.batches() == [sent, sent[4:]]  # not halves: the split is at the reported record
    assert (stats["bisects"], stats["retries"], stats["records_discarded"]) == (1, 0, 0)


class FailingBeforeTheFunction(CallableInvoker):
    """An invoker that cannot reach the function at first (a throttle, no worker): no function error."""

    def __init__(self, times: int) -> None:
        super().__init__(FUNCTION, succeed)
        self.refusals = times

    def invoke(self, function_name: str, event: Any) -> InvokeResult:
        if self.refusals:
            self.refusals -= 1
            raise RuntimeError("TooManyRequestsException (the function was not run)")
        return super().invoke(function_name, event)


def test_errors_before_the_function_runs_are_retried_without_counting(endpoint, kinesis, queue):
    stream = create_stream(kinesis)
    sent = seqs(put(kinesis, stream, b"a"))
    invoker = FailingBeforeTheFunction(times=3)
    esm = mapping(stream, maximum_retry_attempts=0, on_failure_arn=queue[0])
    with running(endpoint, esm, invoker, **FAST_RETRIES) as runner:
        wait_until(lambda: runner.stats()["shardId-000000000000"]["position"] == sent[-1], what="the record")
        stats = runner.stats()["shardId-000000000000"]
    assert invoker.batches() == [sent]  # 0 retries allowed, yet nothing was discarded
    assert (stats["retries"], stats["records_discarded"]) == (0, 0)
    assert "TooManyRequestsException" in stats["last_error"]


# -- polling -------------------------------------------------------------------------------------


def test_an_idle_shard_is_polled_about_once_a_second(endpoint, kinesis):
    stream = create_stream(kinesis)
    invoker = CallableInvoker(FUNCTION, succeed)
    runner = MappingRunner(mapping(stream), invoker, endpoint_url=endpoint, function_role_arn=ROLE_ARN)
    calls: list[float] = []
    runner.kinesis.meta.events.register(
        "before-call.kinesis.GetRecords", lambda **_: calls.append(time.monotonic())
    )
    runner.start()
    try:
        time.sleep(6.0)
    finally:
        runner.stop()
    assert 3 <= len(calls) <= 9  # ~6 in 6 s on an idle shard; never back to back
    gaps = [b - a for a, b in itertools.pairwise(calls)]
    assert min(gaps) >= 0.8


def test_a_throttled_get_records_is_answered_by_backing_off(endpoint, kinesis):
    stream = create_stream(kinesis)
    sent = seqs(put(kinesis, stream, b"a", b"b"))
    invoker = CallableInvoker(FUNCTION, succeed)
    runner = MappingRunner(mapping(stream), invoker, endpoint_url=endpoint, function_role_arn=ROLE_ARN)
    throttle = "ProvisionedThroughputExceededException"
    calls = answer_get_records(runner.kinesis, [throttle] * 4)
    runner.start()
    try:
        wait_until(lambda: invoker.invocations, what="the records, once the throttles end")
        stats = runner.stats()["shardId-000000000000"]
    finally:
        runner.stop()
    assert invoker.batches() == [sent]
    assert stats["throttles"] == 4
    waits = [b[0] - a[0] for a, b in itertools.pairwise(calls[:5])]
    assert all(later > earlier for earlier, later in itertools.pairwise(waits))  # growing backoff
    assert waits[0] >= 0.15


def test_an_expired_iterator_is_renewed_without_losing_or_repeating_records(endpoint, kinesis):
    stream = create_stream(kinesis)
    first = seqs(put(kinesis, stream, b"a", b"b"))
    invoker = CallableInvoker(FUNCTION, succeed)
    runner = MappingRunner(mapping(stream), invoker, endpoint_url=endpoint, function_role_arn=ROLE_ARN)
    answer_get_records(runner.kinesis, [None, "ExpiredIteratorException", "ExpiredIteratorException"])
    runner.start()
    try:
        wait_until(lambda: invoker.invocations, what="the first records")
        second = seqs(put(kinesis, stream, b"c", b"d"))
        wait_until(lambda: sum(map(len, invoker.batches())) >= 4, what="the records after the expiry")
        time.sleep(1.5)
    finally:
        runner.stop()
    assert [s for batch in invoker.batches() for s in batch] == first + second


def test_stop_is_prompt_even_during_a_retry_backoff(endpoint, kinesis):
    stream = create_stream(kinesis, shards=2)
    put(kinesis, stream, b"poison")
    invoker = CallableInvoker(FUNCTION, fail_on(b"poison"))
    runner = MappingRunner(
        mapping(stream),
        invoker,
        endpoint_url=endpoint,
        function_role_arn=ROLE_ARN,
        retry_base_delay=60,
        retry_max_delay=60,
    )
    runner.start()
    wait_until(lambda: invoker.invocations, what="the failing invocation")
    time.sleep(0.3)  # the shard now sleeps in its 60 s backoff, the other idles
    started = time.monotonic()
    runner.stop()
    assert time.monotonic() - started < 3.0
    assert [t.name for t in threading.enumerate() if t.name.startswith("esm-")] == []


def test_parallelization_factor_above_one_is_announced_and_runs_as_one():
    esm = mapping("any-stream", parallelization_factor=4)
    runner = MappingRunner(
        esm, CallableInvoker(FUNCTION, succeed), endpoint_url="http://127.0.0.1:9", function_role_arn=ROLE_ARN
    )
    assert any("ParallelizationFactor 4" in notice for notice in runner.notices)


# -- resharding (kinesis-mock: moto keeps writing to a closed parent) ----------------------------


def assert_parent_before_children(
    invoker: CallableInvoker, parent: str, children: list[str], total: int
) -> None:
    shards = [invocation.shard_id for invocation in invoker.invocations]
    last_parent = max(i for i, shard in enumerate(shards) if shard == parent)
    first_child = min(i for i, shard in enumerate(shards) if shard in children)
    assert last_parent < first_child
    done = invoker.invocations[last_parent].at  # the parent's last batch began before any child's
    assert all(inv.at > done for inv in invoker.invocations if inv.shard_id in children)
    delivered = [s for batch in invoker.batches() for s in batch]
    assert len(delivered) == len(set(delivered)) == total


def test_a_parent_is_drained_before_its_children_are_polled_after_a_split(resharding_endpoint):
    kinesis = client("kinesis", resharding_endpoint)
    stream = create_stream(kinesis)
    parent = kinesis.list_shards(StreamName=stream)["Shards"][0]["ShardId"]
    put_keys(kinesis, stream, 0, 20)
    children = split(kinesis, stream)
    put_keys(kinesis, stream, 20, 20)
    invoker = CallableInvoker(FUNCTION, slow_on_shard(parent, 0.2))
    with running(resharding_endpoint, mapping(stream, batch_size=5), invoker) as runner:
        assert {runner.stats()[child]["state"] for child in children} == {"waiting-for-parent"}
        wait_until(lambda: sum(map(len, invoker.batches())) >= 40, timeout=60, what="40 records")
        assert runner.stats()[parent]["state"] == "done"
    assert_parent_before_children(invoker, parent, children, 40)


def test_children_created_while_running_are_found_from_the_parents_last_read(resharding_endpoint):
    kinesis = client("kinesis", resharding_endpoint)
    stream = create_stream(kinesis)
    parent = kinesis.list_shards(StreamName=stream)["Shards"][0]["ShardId"]
    invoker = CallableInvoker(FUNCTION, slow_on_shard(parent, 0.2))
    # No re-listing during the test: only the parent's ChildShards can lead to the children.
    with running(
        resharding_endpoint, mapping(stream, batch_size=5), invoker, shard_refresh_interval=600
    ) as runner:
        put_keys(kinesis, stream, 0, 20)
        children = split(kinesis, stream)
        put_keys(kinesis, stream, 20, 20)
        wait_until(lambda: sum(map(len, invoker.batches())) >= 40, timeout=60, what="40 records")
        assert set(runner.stats()) == {parent, *children}
    assert_parent_before_children(invoker, parent, children, 40)
