"""Issue 39, property 5: dedup state follows the whole lineage — for both drivers.

A PutRecords lands in the stream's first shards and its reply is lost; the stream is resharded
twice before the producer's resend lands (split–split, split–merge, merge–split), so the resend
lands in descendants two reshards down, and the shards in between received nothing: no lease row
under the Lambda driver, a row that never checkpointed under the worker. Kinesis is kinesis-mock
(the lease and sink tables on moto server's DynamoDB) or the local endpoint, whose resharding is
made right in local/ (its own DynamoDB); see `tests/support/lineage.py`. Every record must be
applied exactly once.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.support.lineage import (
    Sink,
    applied_twice,
    expected,
    lambda_driver,
    merge_split,
    resend_after,
    split_merge,
    split_split,
    worker_driver,
)

DRIVERS = {"lambda": lambda_driver, "worker": worker_driver}


@pytest.fixture(params=["kinesis-mock", "local-endpoint"])
def endpoints(request: pytest.FixtureRequest) -> tuple[str, str]:
    """(Kinesis endpoint, DynamoDB endpoint) on loopback."""
    if request.param == "kinesis-mock":
        return request.getfixturevalue("kinesis_mock"), request.getfixturevalue("moto_server")
    local = request.getfixturevalue("local_endpoint")
    return local, local


def run(endpoints: tuple[str, str], driver: str, shards: int, reshard: Callable[[Any, str], None]):
    kinesis, dynamodb = endpoints
    raw, stream = resend_after(kinesis, shards, reshard)
    sink = Sink(dynamodb)
    consumer = DRIVERS[driver](raw, stream, sink)
    counts = sink.counts()
    assert not applied_twice(counts), f"{len(applied_twice(counts))} of 9 records applied twice: {counts}"
    assert counts == expected()
    return consumer.metrics.snapshot()


@pytest.mark.parametrize("driver", list(DRIVERS))
def test_property_5_dedup_state_follows_split_split_through_an_empty_middle_shard(endpoints, driver):
    metrics = run(endpoints, driver, 1, split_split)
    assert metrics["AggregateCopiesSkipped"] == 4, "the resend, in each of the four grandchildren"


@pytest.mark.parametrize("driver", list(DRIVERS))
def test_property_5_dedup_state_follows_split_merge(endpoints, driver):
    metrics = run(endpoints, driver, 1, split_merge)
    assert metrics["AggregateCopiesSkipped"] == 1, "the resend, in the merged child"


@pytest.mark.parametrize("driver", list(DRIVERS))
def test_property_5_dedup_state_follows_merge_split(endpoints, driver):
    metrics = run(endpoints, driver, 2, merge_split)
    assert metrics["AggregateCopiesSkipped"] == 3, (
        "the low parent's resend in both children, the high one's in one"
    )
