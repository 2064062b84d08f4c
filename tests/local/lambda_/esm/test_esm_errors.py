"""The Kinesis event-source mapping runner against Lambda's error handling: retries, bisect,
record age, and the on-failure SQS queue with Lambda's message.

As in `test_esm.py`: a real runner against the local AWS endpoint (Kinesis limits on; SQS for the
on-failure queue), around purpose-built functions invoked in process.
"""

from __future__ import annotations

import re
import time
from typing import Any

import pytest

from local.app import model
from local.app.model import InvokeResult
from tests.support.esm import CallableInvoker, answer_once, fail_first, fail_on, succeed
from tests.support.esm.aws import (
    client,
    create_stream,
    iso_ms,
    new_queue,
    parse_iso,
    put,
    read_back,
    receive,
    seqs,
    wait_until,
)
from tests.support.esm.harness import FAST_RETRIES, FUNCTION, ONLY_SHARD, mapping, running

pytestmark = pytest.mark.integration

ISO_MS = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


@pytest.fixture
def kinesis(local_endpoint: str) -> Any:
    return client("kinesis", local_endpoint)


# -- errors, retries, bisect, on-failure ---------------------------------------------------------


def test_bisect_isolates_a_poison_record(local_endpoint, kinesis):
    stream = create_stream(kinesis)
    sent = seqs(put(kinesis, stream, *[b"ok" if i != 5 else b"poison" for i in range(8)]))
    invoker = CallableInvoker(FUNCTION, fail_on(b"poison"))
    queue_arn, queue_url = new_queue(local_endpoint)
    esm = mapping(
        stream, batch_size=8, bisect_on_error=True, maximum_retry_attempts=0, on_failure_arn=queue_arn
    )
    with running(local_endpoint, esm, invoker, **FAST_RETRIES) as runner:
        [message] = receive(local_endpoint, queue_url, 1)
        wait_until(lambda: runner.stats()[ONLY_SHARD]["position"] == sent[-1], what="the end")
        stats = runner.stats()[ONLY_SHARD]
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


def test_retry_exhaustion_sends_lambdas_message_to_the_on_failure_queue(local_endpoint, kinesis):
    stream = create_stream(kinesis)
    sent = seqs(put(kinesis, stream, b"poison", b"x", b"y"))
    stored = read_back(kinesis, stream)
    invoker = CallableInvoker(FUNCTION, fail_on(b"poison"))
    queue_arn, queue_url = new_queue(local_endpoint)
    esm = mapping(stream, maximum_retry_attempts=2, on_failure_arn=queue_arn)
    before = time.time()
    with running(local_endpoint, esm, invoker, **FAST_RETRIES) as runner:
        [message] = receive(local_endpoint, queue_url, 1)
        after = time.time()
        flowing = seqs(put(kinesis, stream, b"next"))
        wait_until(lambda: len(invoker.invocations) >= 4, what="the next record")
        stats = runner.stats()[ONLY_SHARD]
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
            "shardId": ONLY_SHARD,
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
    local_endpoint, kinesis
):
    stream = create_stream(kinesis)
    sent = seqs(put(kinesis, stream, b"a", b"b"))
    invoker = CallableInvoker(FUNCTION, succeed)
    queue_arn, queue_url = new_queue(local_endpoint)
    esm = mapping(stream, maximum_record_age_seconds=60, on_failure_arn=queue_arn)

    def an_hour_later() -> float:
        return time.time() + 3600

    with running(local_endpoint, esm, invoker, clock=an_hour_later) as runner:
        [message] = receive(local_endpoint, queue_url, 1)
        stats = runner.stats()[ONLY_SHARD]
    assert invoker.invocations == []
    assert message["requestContext"]["condition"] == "RecordAgeExceeded"
    # As AWS recorded it (tests/conformance/aws_recorded/kinesis_esm.json): 1, never invoked or not.
    assert message["requestContext"]["approximateInvokeCount"] == 1
    assert "responseContext" not in message  # no RecordAgeExceeded message has one
    info = message["KinesisBatchInfo"]
    assert (info["startSequenceNumber"], info["endSequenceNumber"], info["batchSize"]) == (
        sent[0],
        sent[1],
        2,
    )
    assert (stats["position"], stats["records_discarded"]) == (sent[-1], 2)


def test_records_ageing_out_during_retries_go_to_the_on_failure_queue_as_age_exceeded(
    local_endpoint, kinesis
):
    stream = create_stream(kinesis)
    sent = seqs(put(kinesis, stream, b"poison"))
    invoker = CallableInvoker(FUNCTION, fail_on(b"poison"))
    queue_arn, queue_url = new_queue(local_endpoint)
    offset = {"s": 0.0}
    esm = mapping(stream, maximum_record_age_seconds=60, on_failure_arn=queue_arn)
    with running(local_endpoint, esm, invoker, clock=lambda: time.time() + offset["s"], **FAST_RETRIES):
        wait_until(lambda: len(invoker.invocations) >= 2, what="two failed invocations")
        offset["s"] = 120.0
        [message] = receive(local_endpoint, queue_url, 1)
    tries = len(invoker.invocations)
    assert message["requestContext"]["condition"] == "RecordAgeExceeded"
    assert message["requestContext"]["approximateInvokeCount"] == tries
    assert "responseContext" not in message  # as AWS recorded it, though the function was invoked
    assert message["KinesisBatchInfo"]["startSequenceNumber"] == sent[0]


def test_infinite_retries_keep_retrying_until_the_function_recovers(local_endpoint, kinesis):
    stream = create_stream(kinesis)
    sent = seqs(put(kinesis, stream, b"a", b"b"))
    invoker = CallableInvoker(FUNCTION, fail_first(6))
    queue_arn, queue_url = new_queue(local_endpoint)
    esm = mapping(stream, maximum_retry_attempts=-1, on_failure_arn=queue_arn)
    with running(local_endpoint, esm, invoker, **FAST_RETRIES) as runner:
        wait_until(lambda: runner.stats()[ONLY_SHARD]["position"] == sent[-1], what="recovery")
        stats = runner.stats()[ONLY_SHARD]
    assert invoker.batches() == [sent] * 7
    assert [i.function_error for i in invoker.invocations] == ["Unhandled"] * 6 + [None]
    assert (stats["retries"], stats["records_discarded"]) == (6, 0)
    sqs = client("sqs", local_endpoint)
    assert sqs.receive_message(QueueUrl=queue_url, WaitTimeSeconds=0).get("Messages", []) == []


def test_bisect_with_a_partial_response_splits_at_the_reported_record(local_endpoint, kinesis):
    stream = create_stream(kinesis)
    sent = seqs(put(kinesis, stream, *[b"r%d" % i for i in range(6)]))
    invoker = CallableInvoker(
        FUNCTION, answer_once(lambda e: {"batchItemFailures": [{"itemIdentifier": sent[4]}]})
    )
    esm = mapping(stream, bisect_on_error=True, report_batch_item_failures=True, maximum_retry_attempts=0)
    with running(local_endpoint, esm, invoker, **FAST_RETRIES) as runner:
        wait_until(lambda: runner.stats()[ONLY_SHARD]["position"] == sent[-1], what="the end")
        stats = runner.stats()[ONLY_SHARD]
    assert invoker.batches() == [sent, sent[4:]]  # not halves: the split is at the reported record
    assert (stats["bisects"], stats["retries"], stats["records_discarded"]) == (1, 0, 0)


class FailingBeforeTheFunction(CallableInvoker):
    """An invoker that cannot reach the function at first (a throttle, no worker): no function error."""

    def __init__(self, times: int) -> None:
        super().__init__(FUNCTION, succeed)
        self.refusals = times

    def invoke(self, function_name: str, event: Any, *, wait: bool = True) -> InvokeResult:
        if self.refusals:
            self.refusals -= 1
            raise RuntimeError("TooManyRequestsException (the function was not run)")
        return super().invoke(function_name, event)


def test_errors_before_the_function_runs_are_retried_without_counting(local_endpoint, kinesis):
    stream = create_stream(kinesis)
    sent = seqs(put(kinesis, stream, b"a"))
    invoker = FailingBeforeTheFunction(times=3)
    esm = mapping(stream, maximum_retry_attempts=0, on_failure_arn=new_queue(local_endpoint)[0])
    with running(local_endpoint, esm, invoker, **FAST_RETRIES) as runner:
        wait_until(lambda: runner.stats()[ONLY_SHARD]["position"] == sent[-1], what="the record")
        stats = runner.stats()[ONLY_SHARD]
    assert invoker.batches() == [sent]  # 0 retries allowed, yet nothing was discarded
    assert (stats["retries"], stats["records_discarded"]) == (0, 0)
    assert "TooManyRequestsException" in stats["last_error"]
