"""The event-source mapping runner and the worker processes fit: a mapping invokes a function
through `local.lambda_.workers.Functions` (as `python -m local up` wires them), not the in-process invoker
of the other `test_esm*` modules.

The event crosses the process boundary as JSON and reaches the handler whole; the handler's partial
batch response comes back and is honoured; its exception comes back as Lambda's error result
("Unhandled"), which the runner retries and then reports to the on-failure queue.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from local.app import model
from local.app.model import Function
from local.lambda_.workers import Functions
from tests.support.esm.aws import client, create_stream, new_queue, put, receive, seqs, wait_until
from tests.support.esm.harness import FAST_RETRIES, ONLY_SHARD, ROLE_ARN, mapping, running

pytestmark = pytest.mark.integration

REPORTER = Function(
    logical_id="Reporter",
    name="esm-reporter",
    handler="app.handler",
    code_dir=Path(__file__).resolve().parents[3] / "support" / "esm" / "reporter",
    timeout_seconds=30,
)


def received_events(log: str) -> list[dict]:
    """What the function printed of each invocation: the event as it got it, its pid and request id."""
    return [json.loads(line) for line in log.splitlines() if line.startswith('{"received"')]


def test_a_mapping_invokes_worker_processes_and_honours_their_partial_responses_and_errors(
    local_endpoint, tmp_path
):
    kinesis = client("kinesis", local_endpoint)
    stream = create_stream(kinesis)
    queue_arn, queue_url = new_queue(local_endpoint)
    esm = mapping(
        stream,
        function_name=REPORTER.name,
        report_batch_item_failures=True,
        maximum_retry_attempts=1,
        on_failure_arn=queue_arn,
    )
    first = seqs(put(kinesis, stream, b"a", b"fail-once", b"b"))
    with Functions([REPORTER], endpoint_url=local_endpoint, log_dir=tmp_path) as functions:
        functions.start()
        with running(local_endpoint, esm, functions, **FAST_RETRIES) as runner:

            def position() -> str | None:
                return runner.stats()[ONLY_SHARD]["position"]

            wait_until(lambda: position() == first[-1], what="the batch, retried from the reported record")
            poison = seqs(put(kinesis, stream, b"raise"))
            [message] = receive(local_endpoint, queue_url, 1)
            after = seqs(put(kinesis, stream, b"c"))
            wait_until(lambda: position() == after[-1], what="the record after the poison one")
            stats = runner.stats()[ONLY_SHARD]
        function_stats = functions.stats()[REPORTER.name]
        log = functions.log_path(REPORTER.name).read_text()

    events = received_events(log)
    batches = [[r["kinesis"]["sequenceNumber"] for r in e["received"]["Records"]] for e in events]
    # The partial response resumes at the reported record; the raise is tried twice (1 retry allowed).
    assert batches == [first, first[1:], poison, poison, after]
    assert os.getpid() not in {e["pid"] for e in events}  # handled in another process
    record = events[0]["received"]["Records"][0]
    assert (record["eventID"], record["invokeIdentityArn"], record["eventSourceARN"]) == (
        f"{ONLY_SHARD}:{first[0]}",
        ROLE_ARN,
        model.stream_arn(stream),
    )
    assert record["kinesis"]["data"] == "YQ=="  # b"a", base64 as Lambda sends it
    assert message["requestContext"]["condition"] == "RetryAttemptsExhausted"
    assert message["requestContext"]["requestId"] == events[3]["request_id"]  # the last try's request
    assert message["requestContext"]["approximateInvokeCount"] == 2
    assert message["responseContext"]["functionError"] == "Unhandled"
    assert message["KinesisBatchInfo"]["startSequenceNumber"] == poison[0]
    assert (stats["function_errors"], stats["retries"], stats["records_sent_to_on_failure"]) == (2, 2, 1)
    assert (function_stats["invocations"], function_stats["errors"]) == (5, 2)
    assert f"ValueError: record {poison[0]} cannot be processed" in log  # the error, in the function's log
