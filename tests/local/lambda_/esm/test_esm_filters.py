"""A mapping's FilterCriteria on the real runner: only matching records reach the function, the
others are passed over (the position moves past them), and what Lambda refuses stops the mapping
from starting, with the reason."""

from __future__ import annotations

import json
from typing import Any

import pytest

from local.lambda_.esm.filters import FilterError
from local.lambda_.esm.runner import MappingRunner
from tests.support.esm import CallableInvoker, succeed
from tests.support.esm.aws import client, create_stream, put, seqs, wait_until
from tests.support.esm.harness import FUNCTION, ONLY_SHARD, ROLE_ARN, mapping, running, settle

pytestmark = pytest.mark.integration

BUYS = json.dumps({"Filters": [{"Pattern": json.dumps({"data": {"type": ["buy"]}})}]})


@pytest.fixture
def kinesis(local_endpoint: str) -> Any:
    return client("kinesis", local_endpoint)


def order(kind: str, n: int) -> bytes:
    return json.dumps({"type": kind, "n": n}).encode()


def test_a_filtered_mapping_delivers_only_matching_records(local_endpoint, kinesis):
    stream = create_stream(kinesis)
    sent = seqs(
        put(
            kinesis, stream, order("buy", 1), order("sell", 2), b"not json", order("buy", 3), order("sell", 4)
        )
    )
    invoker = CallableInvoker(FUNCTION, succeed)
    with running(local_endpoint, mapping(stream, filter_criteria=BUYS), invoker) as runner:
        wait_until(lambda: sum(map(len, invoker.batches())) >= 2, what="the two buys")
        settle(runner)
        stats = runner.stats()[ONLY_SHARD]
    assert [seq for batch in invoker.batches() for seq in batch] == [sent[0], sent[3]]
    assert stats["records_filtered_out"] == 3
    assert stats["position"] == sent[-1]  # past the dropped sell at the end


def test_a_batch_of_only_filtered_records_invokes_nothing_and_moves_on(local_endpoint, kinesis):
    stream = create_stream(kinesis)
    sent = seqs(put(kinesis, stream, order("sell", 1), order("sell", 2)))
    invoker = CallableInvoker(FUNCTION, succeed)
    with running(local_endpoint, mapping(stream, filter_criteria=BUYS), invoker) as runner:
        wait_until(lambda: runner.stats()[ONLY_SHARD]["position"] == sent[-1], what="the position past both")
        settle(runner)
    assert invoker.invocations == []


def test_a_filter_lambda_refuses_stops_the_mapping_at_start_up(local_endpoint, kinesis):
    stream = create_stream(kinesis)
    on_key = json.dumps({"Filters": [{"Pattern": json.dumps({"partitionKey": ["1"]})}]})
    with pytest.raises(FilterError, match=r"Mapping: FilterCriteria refused.*data key only"):
        MappingRunner(
            mapping(stream, filter_criteria=on_key),
            CallableInvoker(FUNCTION, succeed),
            endpoint_url=local_endpoint,
            function_role_arn=ROLE_ARN,
        )
