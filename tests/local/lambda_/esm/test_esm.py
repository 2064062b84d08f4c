"""The Kinesis event-source mapping runner (`local.lambda_.esm`) against Lambda's behaviour:
batching, starting positions, the event, partial batch responses.

Each test runs a real runner against the local AWS endpoint (`local.endpoint.server`, Kinesis's per-shard
limits on, as `make local` runs it) around a purpose-built function from `tests.support.esm`,
invoked in process (`test_esm_workers.py` runs one in real worker processes). Errors, retries and
the on-failure queue are in `test_esm_errors.py`; polling and throttles in `test_esm_polling.py`;
resharding in `test_esm_resharding.py`.
"""

from __future__ import annotations

import base64
import time
from typing import Any

import pytest

from local.app import model
from local.lambda_.esm.batches import MAX_PAYLOAD_BYTES
from tests.support.esm import CallableInvoker, answer_once, succeed
from tests.support.esm.aws import client, create_stream, put, read_back, seqs, wait_until
from tests.support.esm.harness import (
    FAST_RETRIES,
    FUNCTION,
    ONLY_SHARD,
    ROLE_ARN,
    mapping,
    running,
    settle,
)

pytestmark = pytest.mark.integration


@pytest.fixture
def kinesis(local_endpoint: str) -> Any:
    return client("kinesis", local_endpoint)


# -- batching ------------------------------------------------------------------------------------


def test_batch_size_caps_each_invocation_and_keeps_order(local_endpoint, kinesis):
    stream = create_stream(kinesis)
    sent = seqs(put(kinesis, stream, *[b"r%d" % i for i in range(10)]))
    invoker = CallableInvoker(FUNCTION, succeed)
    with running(local_endpoint, mapping(stream, batch_size=4), invoker) as runner:
        wait_until(lambda: sum(map(len, invoker.batches())) >= 10, what="10 records")
        assert invoker.batches() == [sent[:4], sent[4:8], sent[8:]]
        assert runner.stats()[ONLY_SHARD]["position"] == sent[-1]


def test_batching_window_holds_a_partial_batch_until_the_window_ends(local_endpoint, kinesis):
    stream = create_stream(kinesis)
    invoker = CallableInvoker(FUNCTION, succeed)
    window = 3
    esm = mapping(stream, batch_size=100, batching_window_seconds=window)
    with running(local_endpoint, esm, invoker) as runner:
        first_put = time.monotonic()
        sent = seqs(put(kinesis, stream, b"a", b"b"))
        time.sleep(1.0)
        sent += seqs(put(kinesis, stream, b"c", b"d"))
        wait_until(lambda: invoker.invocations, timeout=window + 15, what="the window's invocation")
        settle(runner)  # nothing else comes
        [invocation] = invoker.invocations
    assert invocation.sequence_numbers == sent  # one partial batch: 4 of 100
    assert invocation.at - first_put >= window - 0.1  # the window starts when its first record is read


def test_a_full_batch_does_not_wait_for_the_window(local_endpoint, kinesis):
    stream = create_stream(kinesis)
    invoker = CallableInvoker(FUNCTION, succeed)
    with running(local_endpoint, mapping(stream, batch_size=3, batching_window_seconds=60), invoker):
        started = time.monotonic()
        sent = seqs(put(kinesis, stream, b"a", b"b", b"c"))
        wait_until(lambda: invoker.invocations, timeout=30, what="the full batch")
    assert invoker.batches() == [sent]
    assert invoker.invocations[0].at - started < 30  # far inside the 60 s window


def test_the_event_is_cut_at_six_megabytes(local_endpoint, kinesis):
    stream = create_stream(kinesis)
    megabyte = b"x" * (1024 * 1024 - 16)  # a record near Kinesis's 1 MiB; base64 makes it ~1.4 MB
    sent = seqs(put(kinesis, stream, *[megabyte] * 5))
    invoker = CallableInvoker(FUNCTION, succeed)
    with running(local_endpoint, mapping(stream, batch_size=100), invoker):
        wait_until(lambda: sum(map(len, invoker.batches())) >= 5, timeout=60, what="5 records")
    assert invoker.batches() == [sent[:4], sent[4:]]
    assert all(invocation.event_bytes <= MAX_PAYLOAD_BYTES for invocation in invoker.invocations)
    assert invoker.invocations[0].event_bytes > MAX_PAYLOAD_BYTES - invoker.invocations[1].event_bytes


# -- starting positions --------------------------------------------------------------------------


def test_latest_skips_records_written_before_the_mapping_started(local_endpoint, kinesis):
    stream = create_stream(kinesis)
    put(kinesis, stream, b"old-1", b"old-2")
    invoker = CallableInvoker(FUNCTION, succeed)
    with running(local_endpoint, mapping(stream, starting_position="LATEST"), invoker) as runner:
        new = seqs(put(kinesis, stream, b"new"))
        wait_until(lambda: invoker.invocations, what="the new record")
        settle(runner)
    assert invoker.batches() == [new]


def test_trim_horizon_reads_records_written_before_the_mapping_started(local_endpoint, kinesis):
    stream = create_stream(kinesis)
    old = seqs(put(kinesis, stream, b"old-1", b"old-2"))
    invoker = CallableInvoker(FUNCTION, succeed)
    with running(local_endpoint, mapping(stream, starting_position="TRIM_HORIZON"), invoker):
        new = seqs(put(kinesis, stream, b"new"))
        wait_until(lambda: sum(map(len, invoker.batches())) >= 3, what="3 records")
    assert [s for batch in invoker.batches() for s in batch] == old + new


def test_at_timestamp_starts_at_the_first_record_arriving_at_or_after_it(local_endpoint, kinesis):
    stream = create_stream(kinesis)
    put(kinesis, stream, b"before")
    time.sleep(1.1)
    records_after = seqs(put(kinesis, stream, b"after-1", b"after-2"))
    arrival = read_back(kinesis, stream)[1]["ApproximateArrivalTimestamp"].timestamp()
    esm = mapping(stream, starting_position="AT_TIMESTAMP", starting_position_timestamp=arrival)
    invoker = CallableInvoker(FUNCTION, succeed)
    with running(local_endpoint, esm, invoker) as runner:
        wait_until(lambda: sum(map(len, invoker.batches())) >= 2, what="2 records")
        settle(runner)
    assert [s for batch in invoker.batches() for s in batch] == records_after


# -- the event -----------------------------------------------------------------------------------


def test_event_records_have_lambdas_shape(local_endpoint, kinesis):
    stream = create_stream(kinesis)
    [answer] = put(kinesis, stream, b"hello \x00 world", key="pk-7")
    [stored] = read_back(kinesis, stream)
    invoker = CallableInvoker(FUNCTION, succeed)
    with running(local_endpoint, mapping(stream), invoker):
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


def test_partial_batch_response_resumes_from_the_lowest_reported_sequence_number(local_endpoint, kinesis):
    stream = create_stream(kinesis)
    sent = seqs(put(kinesis, stream, *[b"r%d" % i for i in range(10)]))
    report = answer_once(
        lambda event: {"batchItemFailures": [{"itemIdentifier": sent[6]}, {"itemIdentifier": sent[3]}]}
    )
    invoker = CallableInvoker(FUNCTION, report)
    esm = mapping(stream, batch_size=10, report_batch_item_failures=True)
    with running(local_endpoint, esm, invoker, **FAST_RETRIES) as runner:
        wait_until(lambda: runner.stats()[ONLY_SHARD]["position"] == sent[-1], what="the retry's success")
        settle(runner)
        stats = runner.stats()[ONLY_SHARD]
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
def test_an_unusable_item_identifier_fails_the_whole_batch(local_endpoint, kinesis, item):
    stream = create_stream(kinesis)
    sent = seqs(put(kinesis, stream, b"a", b"b", b"c"))
    invoker = CallableInvoker(FUNCTION, answer_once(lambda event: {"batchItemFailures": [item]}))
    esm = mapping(stream, report_batch_item_failures=True)
    with running(local_endpoint, esm, invoker, **FAST_RETRIES) as runner:
        wait_until(lambda: runner.stats()[ONLY_SHARD]["position"] == sent[-1], what="the retry's success")
        settle(runner)
        stats = runner.stats()[ONLY_SHARD]
    assert invoker.batches() == [sent, sent]
    assert stats["invalid_responses"] == 1


@pytest.mark.parametrize(
    "answer",
    [None, {}, {"batchItemFailures": []}, {"batchItemFailures": None}],
    ids=["null", "empty", "[]", "null-list"],
)
def test_an_empty_or_null_partial_response_is_a_success(local_endpoint, kinesis, answer):
    stream = create_stream(kinesis)
    sent = seqs(put(kinesis, stream, b"a", b"b"))
    invoker = CallableInvoker(FUNCTION, lambda event: answer)
    esm = mapping(stream, report_batch_item_failures=True)
    with running(local_endpoint, esm, invoker, **FAST_RETRIES) as runner:
        wait_until(lambda: runner.stats()[ONLY_SHARD]["position"] == sent[-1], what="the checkpoint")
        settle(runner)
        stats = runner.stats()[ONLY_SHARD]
    assert invoker.batches() == [sent]
    assert (stats["position"], stats["retries"]) == (sent[-1], 0)
