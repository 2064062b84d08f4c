"""The Kinesis event-source mapping against what AWS recorded: the event record, the on-failure
message and the partial-batch behaviours (tests/conformance/aws_recorded/kinesis_esm.json).

A real mapping runner (`local.lambda_.esm`) reads a stream of the local endpoint over loopback and
sends its on-failure messages to the endpoint's SQS; the function is a Python callable run in
process (`tests.support.esm.CallableInvoker`: an exception is Lambda's "Unhandled" error). Each
test sets the mapping up as the recorded test did (batch size, retries, records, the function's
answer) and compares what the runtime produced with AWS's recording field by field.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from tests.support.esm import CallableInvoker, data_of
from tests.support.esm.aws import client, create_stream, new_queue, put, receive, seqs, wait_until
from tests.support.esm.harness import FAST_RETRIES, FUNCTION, mapping, running, settle
from tests.support.recorded import load, mismatches, shape_of

pytestmark = pytest.mark.integration

RECORDED = load("kinesis_esm")
FAILURES = RECORDED["batch_item_failures"]["failures"]
SUCCESSES = RECORDED["batch_item_failures"]["successes"]


@pytest.fixture
def kinesis(local_endpoint: str) -> Any:
    return client("kinesis", local_endpoint)


def raises(event: dict[str, Any]) -> None:
    raise ZeroDivisionError("division by zero")


def answers(answer: Any) -> Any:
    """The function of LocalStack's `create_lambda_with_response`: the same answer every time."""
    return raises if answer == "raises (1 / 0)" else (lambda event: answer)


def test_event_record_has_the_recorded_keys_and_formats(local_endpoint, kinesis):
    """Source: kinesis_esm.json `event_record` — LocalStack tests/aws/services/lambda_/
    event_source_mapping/test_lambda_integration_kinesis.snapshot.json, TestKinesisSource::
    test_create_kinesis_event_source_mapping, kinesis_records (AWS-validated 2025-11-25); and
    `event_record_doc_example` (the Lambda developer guide's example event) for the type of
    approximateArrivalTimestamp, which the snapshot hides behind a placeholder."""
    stream = create_stream(kinesis)
    put(kinesis, stream, b"hello", key="test_0")  # the recorded record's data and partition key
    invoker = CallableInvoker(FUNCTION, lambda event: None)
    with running(local_endpoint, mapping(stream), invoker, **FAST_RETRIES):
        wait_until(lambda: invoker.invocations, what="an invocation")
    record = invoker.invocations[0].event["Records"][0]
    assert mismatches(record, RECORDED["event_record"]["recorded"]) == []
    example = RECORDED["event_record_doc_example"]["recorded"]
    assert shape_of(record["kinesis"]) == shape_of(example["kinesis"])
    assert shape_of({k: record[k] for k in example}) == shape_of(example)


def test_on_failure_message_after_a_function_error(local_endpoint, kinesis):
    """Source: kinesis_esm.json `on_failure.function_error` — TestKinesisSource::
    test_kinesis_event_source_mapping_with_on_failure_destination_config, sqs_payload
    (AWS-validated 2025-11-25): BatchSize 1, MaximumRetryAttempts 1, a function that raises."""
    stream = create_stream(kinesis)
    data = json.dumps({"input": "hello", "value": "world", "raise_error": 1}).encode()
    [sent] = seqs(put(kinesis, stream, data, key="custom"))
    queue_arn, queue_url = new_queue(local_endpoint)
    esm = mapping(
        stream, batch_size=1, batching_window_seconds=1, maximum_retry_attempts=1, on_failure_arn=queue_arn
    )
    invoker = CallableInvoker(FUNCTION, raises)
    with running(local_endpoint, esm, invoker, **FAST_RETRIES):
        [message] = receive(local_endpoint, queue_url, 1)
    assert mismatches(message, RECORDED["on_failure"]["function_error"]["recorded"]) == []
    assert message["KinesisBatchInfo"]["startSequenceNumber"] == sent
    assert list(message) == list(RECORDED["on_failure"]["function_error"]["recorded"])  # and in AWS's order


def test_on_failure_message_after_a_partial_batch_response(local_endpoint, kinesis):
    """Source: kinesis_esm.json `on_failure.partial_batch_response` — TestKinesisSource::
    test_kinesis_report_batch_item_failures, sqs_payload (AWS-validated 2025-11-25): six records,
    BatchSize 3, MaximumRetryAttempts 3, the sixth reported in batchItemFailures every time; AWS
    sends it alone, invoked 4 times, with functionError null."""
    stream = create_stream(kinesis)
    datas = [json.dumps({"should_fail": i == 5}).encode() for i in range(6)]
    sent = [seqs(put(kinesis, stream, data, key=f"test_{i}"))[0] for i, data in enumerate(datas)]
    queue_arn, queue_url = new_queue(local_endpoint)
    esm = mapping(
        stream,
        batch_size=3,
        batching_window_seconds=1,
        maximum_retry_attempts=3,
        report_batch_item_failures=True,
        on_failure_arn=queue_arn,
    )

    def reports_should_fail(event: dict[str, Any]) -> dict[str, Any]:
        failing = [r for r in event["Records"] if json.loads(data_of(r))["should_fail"]]
        return {"batchItemFailures": [{"itemIdentifier": r["kinesis"]["sequenceNumber"]} for r in failing]}

    invoker = CallableInvoker(FUNCTION, reports_should_fail)
    with running(local_endpoint, esm, invoker, **FAST_RETRIES):
        [message] = receive(local_endpoint, queue_url, 1)
    assert mismatches(message, RECORDED["on_failure"]["partial_batch_response"]["recorded"]) == []
    info = message["KinesisBatchInfo"]
    assert (info["startSequenceNumber"], info["endSequenceNumber"]) == (sent[5], sent[5])


@pytest.mark.parametrize("case", sorted(FAILURES))
def test_an_unusable_answer_fails_the_batch_as_recorded(local_endpoint, kinesis, case):
    """Source: kinesis_esm.json `batch_item_failures.failures` — TestKinesisSource::
    test_kinesis_report_batch_item_failure_scenarios[case], kinesis_events and sqs_payload
    (AWS-validated 2025-11-25): BatchSize 1, MaximumRetryAttempts 2, ReportBatchItemFailures;
    an identifier that is missing, empty, null or not a string, or an exception, fails the whole
    batch: invoked 3 times, then the on-failure message."""
    recorded = FAILURES[case]
    stream = create_stream(kinesis)
    put(kinesis, stream, b"hello", key="test")
    queue_arn, queue_url = new_queue(local_endpoint)
    esm = mapping(
        stream,
        batch_size=1,
        batching_window_seconds=1,
        maximum_retry_attempts=2,
        report_batch_item_failures=True,
        on_failure_arn=queue_arn,
    )
    invoker = CallableInvoker(FUNCTION, answers(recorded["answer"]))
    with running(local_endpoint, esm, invoker, **FAST_RETRIES) as runner:
        [message] = receive(local_endpoint, queue_url, 1)
        settle(runner)
    assert len(invoker.invocations) == recorded["invocations"]
    assert mismatches(message, recorded["on_failure_message"]) == []


@pytest.mark.parametrize("case", sorted(SUCCESSES))
def test_an_empty_answer_is_a_success_as_recorded(local_endpoint, kinesis, case):
    """Source: kinesis_esm.json `batch_item_failures.successes` — TestKinesisSource::
    test_kinesis_report_batch_item_success_scenarios[case], kinesis_events (AWS-validated
    2025-11-25): "", [], null, {}, an empty or null batchItemFailures: one invocation."""
    recorded = SUCCESSES[case]
    stream = create_stream(kinesis)
    [sent] = seqs(put(kinesis, stream, b"hello", key="test"))
    esm = mapping(
        stream,
        batch_size=1,
        batching_window_seconds=1,
        maximum_retry_attempts=2,
        report_batch_item_failures=True,
    )
    invoker = CallableInvoker(FUNCTION, answers(recorded["answer"]))
    with running(local_endpoint, esm, invoker, **FAST_RETRIES) as runner:
        wait_until(lambda: runner.stats()["shardId-000000000000"]["position"] == sent, what="the checkpoint")
        settle(runner)
    assert len(invoker.invocations) == recorded["invocations"]


def test_on_failure_message_for_records_that_aged_out_while_retrying(local_endpoint, kinesis):
    """Source: kinesis_esm.json `on_failure.age_exceeded_while_retrying` — TestKinesisSource::
    test_kinesis_maximum_record_age_exceeded[expire-while-retrying], record_age_exceeded_payload
    (AWS-validated 2025-11-25): MaximumRetryAttempts -1, MaximumRecordAgeInSeconds 60, a function
    that raises; AWS's message has no responseContext. Its approximateInvokeCount (8) is how many
    times AWS retried in 60 s: here the clock jumps, so the count is the local invocations'."""
    recorded = RECORDED["on_failure"]["age_exceeded_while_retrying"]["recorded"]
    stream = create_stream(kinesis)
    put(kinesis, stream, b"stream-data", key="test")
    queue_arn, queue_url = new_queue(local_endpoint)
    offset = {"s": 0.0}
    esm = mapping(
        stream,
        batch_size=1,
        batching_window_seconds=1,
        maximum_retry_attempts=-1,
        maximum_record_age_seconds=60,
        on_failure_arn=queue_arn,
    )
    invoker = CallableInvoker(FUNCTION, raises)
    with running(local_endpoint, esm, invoker, clock=lambda: time.time() + offset["s"], **FAST_RETRIES):
        wait_until(lambda: len(invoker.invocations) >= 2, what="two failed invocations")
        offset["s"] = 120.0
        [message] = receive(local_endpoint, queue_url, 1)
    ignore = frozenset({"$.requestContext.approximateInvokeCount"})
    assert mismatches(message, recorded, ignore=ignore) == []
    assert message["requestContext"]["approximateInvokeCount"] == len(invoker.invocations)


def test_on_failure_message_for_records_too_old_on_their_first_read(local_endpoint, kinesis):
    """Source: kinesis_esm.json `on_failure.age_exceeded_before_first_invocation` —
    TestKinesisSource::test_kinesis_maximum_record_age_exceeded[expire-before-ingestion],
    record_age_exceeded_payload (AWS-validated 2025-11-25): MaximumRetryAttempts 0, a record
    older than MaximumRecordAgeInSeconds (60) when first read; approximateInvokeCount 1, no
    responseContext."""
    stream = create_stream(kinesis)
    put(kinesis, stream, b"stream-data", key="test")
    queue_arn, queue_url = new_queue(local_endpoint)
    esm = mapping(
        stream,
        batch_size=1,
        batching_window_seconds=1,
        maximum_retry_attempts=0,
        maximum_record_age_seconds=60,
        on_failure_arn=queue_arn,
    )
    invoker = CallableInvoker(FUNCTION, raises)
    with running(local_endpoint, esm, invoker, clock=lambda: time.time() + 120, **FAST_RETRIES):
        [message] = receive(local_endpoint, queue_url, 1)
    assert (
        mismatches(message, RECORDED["on_failure"]["age_exceeded_before_first_invocation"]["recorded"]) == []
    )
    assert invoker.invocations == []
