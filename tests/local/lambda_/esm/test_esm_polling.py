"""The Kinesis event-source mapping runner's polling against Lambda's: once a second when idle,
backing off when the shard's read limits refuse it, a renewed iterator, a prompt stop.

As in `test_esm.py`: a real runner against the local AWS endpoint with Kinesis's per-shard limits on
(5 GetRecords and 2 MiB a second per shard, shared by every consumer), so the throttles here are
the endpoint's own.
"""

from __future__ import annotations

import itertools
import threading
import time
from typing import Any

import pytest

from local.lambda_.esm.runner import MappingRunner
from tests.support.esm import CallableInvoker, fail_on, succeed
from tests.support.esm.aws import (
    THROTTLED,
    answer_get_records,
    client,
    create_stream,
    log_get_records,
    put,
    read_back,
    seqs,
    wait_until,
)
from tests.support.esm.harness import FUNCTION, ONLY_SHARD, ROLE_ARN, mapping, settle

pytestmark = pytest.mark.integration

MiB = 1024 * 1024
FIRST_BACKOFF, MAX_BACKOFF = 0.2, 5.0  # the runner's answer to a throttle: 0.2 s, doubling, 5 s at most


@pytest.fixture
def kinesis(local_endpoint: str) -> Any:
    return client("kinesis", local_endpoint)


def test_an_idle_shard_is_polled_about_once_a_second(local_endpoint, kinesis):
    stream = create_stream(kinesis)
    invoker = CallableInvoker(FUNCTION, succeed)
    runner = MappingRunner(mapping(stream), invoker, endpoint_url=local_endpoint, function_role_arn=ROLE_ARN)
    calls = log_get_records(runner.kinesis)
    runner.start()
    try:
        time.sleep(6.0)  # the span observed, not a wait for something
    finally:
        runner.stop()
    assert 3 <= len(calls) <= 9  # ~6 in 6 s on an idle shard; never back to back
    gaps = [b[0] - a[0] for a, b in itertools.pairwise(calls)]
    assert min(gaps) >= 0.8
    assert [code for _, _, code in calls] == [None] * len(calls)  # once a second is within the limits


def test_a_throttled_get_records_is_answered_by_backing_off(local_endpoint, kinesis):
    """Another consumer reads 6 MiB from the shard just before the mapping starts: at 2 MiB/s, the
    shard refuses every read for the next 3 s, so the runner's first calls are throttled by the
    endpoint. It waits 0.2 s, then twice as long after each refusal, and loses nothing."""
    stream = create_stream(kinesis)
    megabyte = b"x" * (MiB - 16)  # with its key, one second of a shard's write budget
    sent = seqs(put(kinesis, stream, *[megabyte] * 6))
    invoker = CallableInvoker(FUNCTION, succeed)
    runner = MappingRunner(mapping(stream), invoker, endpoint_url=local_endpoint, function_role_arn=ROLE_ARN)
    calls = log_get_records(runner.kinesis)
    assert len(read_back(kinesis, stream)) == 6  # the other consumer's read: 6 MiB in one answer
    runner.start()
    try:
        wait_until(lambda: sum(map(len, invoker.batches())) >= 6, timeout=60, what="the records")
        stats = runner.stats()[ONLY_SHARD]
    finally:
        runner.stop()
    assert [s for batch in invoker.batches() for s in batch] == sent  # once each, in order
    refused = list(itertools.takewhile(lambda call: call[2] == THROTTLED, calls))
    assert len(refused) >= 2, calls  # 3 s of refusals hold at least the calls at ~0, 0.2 and 0.6 s
    assert stats["throttles"] == sum(code == THROTTLED for _, _, code in calls)
    for attempt, (call, following) in enumerate(itertools.pairwise(calls[: len(refused) + 1])):
        backoff = min(FIRST_BACKOFF * 2**attempt, MAX_BACKOFF)
        assert following[0] - call[1] >= backoff * 0.99  # from the refusal to the next call


def test_an_expired_iterator_is_renewed_without_losing_or_repeating_records(local_endpoint, kinesis):
    """The endpoint's iterators outlive any test (Kinesis's last 5 minutes), so the expiry is
    answered in the runner's client, as the endpoint would answer it."""
    stream = create_stream(kinesis)
    first = seqs(put(kinesis, stream, b"a", b"b"))
    invoker = CallableInvoker(FUNCTION, succeed)
    runner = MappingRunner(mapping(stream), invoker, endpoint_url=local_endpoint, function_role_arn=ROLE_ARN)
    answer_get_records(runner.kinesis, [None, "ExpiredIteratorException", "ExpiredIteratorException"])
    runner.start()
    try:
        wait_until(lambda: invoker.invocations, what="the first records")
        second = seqs(put(kinesis, stream, b"c", b"d"))
        wait_until(lambda: sum(map(len, invoker.batches())) >= 4, what="the records after the expiry")
        settle(runner)
    finally:
        runner.stop()
    assert [s for batch in invoker.batches() for s in batch] == first + second


def test_8_the_iterator_age_falls_to_zero_once_the_shard_is_drained(local_endpoint, kinesis):
    """Lambda's IteratorAge is the age of the last record a batch delivered; at the tip of the
    shard the mapping is behind by nothing, and `status` must not keep the drain's last value."""
    stream = create_stream(kinesis)
    put(kinesis, stream, b"a", b"b")
    time.sleep(1.5)  # the records' age when their batch is delivered: over a second
    invoker = CallableInvoker(FUNCTION, succeed)
    runner = MappingRunner(mapping(stream), invoker, endpoint_url=local_endpoint, function_role_arn=ROLE_ARN)
    runner.start()
    try:
        delivered = wait_until(
            lambda: runner.stats()[ONLY_SHARD]["records"] == 2 and runner.stats(), what="both"
        )
        assert delivered[ONLY_SHARD]["iterator_age_ms"] >= 1500  # as the batch ended
        wait_until(lambda: runner.stats()[ONLY_SHARD]["iterator_age_ms"] == 0, what="an age of 0 at the tip")
    finally:
        runner.stop()


def test_stop_is_prompt_even_during_a_retry_backoff(local_endpoint, kinesis):
    stream = create_stream(kinesis, shards=2)
    put(kinesis, stream, b"poison")
    invoker = CallableInvoker(FUNCTION, fail_on(b"poison"))
    runner = MappingRunner(
        mapping(stream),
        invoker,
        endpoint_url=local_endpoint,
        function_role_arn=ROLE_ARN,
        retry_base_delay=60,
        retry_max_delay=60,
    )
    runner.start()
    try:
        # Once the retry is counted, its shard sleeps in a 60 s backoff (the other shard idles).
        wait_until(lambda: any(shard["retries"] for shard in runner.stats().values()), what="the backoff")
    finally:
        started = time.monotonic()
        runner.stop()
        stopped_in = time.monotonic() - started
    assert stopped_in < 8.0  # not the 60 s backoff, nor stop()'s own 10 s limit for a stuck thread
    assert [t.name for t in threading.enumerate() if t.name.startswith("esm-")] == []


def test_parallelization_factor_above_one_is_announced_and_runs_as_one():
    esm = mapping("any-stream", parallelization_factor=4)
    runner = MappingRunner(
        esm, CallableInvoker(FUNCTION, succeed), endpoint_url="http://127.0.0.1:9", function_role_arn=ROLE_ARN
    )
    assert any("ParallelizationFactor 4" in notice for notice in runner.notices)
