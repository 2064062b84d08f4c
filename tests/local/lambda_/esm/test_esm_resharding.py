"""The Kinesis event-source mapping runner across a reshard: a parent's records all go to the
function before any of its children's, after a split (one parent) and after a merge (two parents),
whether the reshard came before the mapping started or while it ran.

The reshards are made through the local AWS endpoint with boto3, as an operator would, and the
runner reads the same endpoint (Kinesis limits on). One case runs against kinesis-mock too: an
independent implementation of resharding (ChildShards, a closed shard's end), so the runner is not
only right against our own reading of the service in `local.endpoint.kinesis.fixes`.
"""

from __future__ import annotations

import pytest

from tests.support.esm import CallableInvoker, slow_on_shards
from tests.support.esm.aws import client, create_stream, merge, put_keys, shard_ids, split, wait_until
from tests.support.esm.harness import FUNCTION, mapping, running

pytestmark = pytest.mark.integration

SLOW_PARENT_S = 0.2  # each parent batch takes this long, so a child polled too early would overtake it


def assert_parents_before_children(
    invoker: CallableInvoker, parents: list[str], children: list[str], total: int
) -> None:
    """Every parent had batches, the last of them began before any child's, and no record came twice."""
    shards = [invocation.shard_id for invocation in invoker.invocations]
    first_child = min(i for i, shard in enumerate(shards) if shard in children)
    for parent in parents:
        assert parent in shards, f"no batch from {parent}"
        last_parent = max(i for i, shard in enumerate(shards) if shard == parent)
        assert last_parent < first_child
        done = invoker.invocations[last_parent].at
        assert all(inv.at > done for inv in invoker.invocations if inv.shard_id in children)
    delivered = [s for batch in invoker.batches() for s in batch]
    assert len(delivered) == len(set(delivered)) == total


def delivered(invoker: CallableInvoker) -> int:
    return sum(map(len, invoker.batches()))


@pytest.mark.parametrize("server", ["local_endpoint", "kinesis_mock"])
def test_a_parent_is_drained_before_its_children_are_polled_after_a_split(request, server):
    endpoint = request.getfixturevalue(server)
    kinesis = client("kinesis", endpoint)
    stream = create_stream(kinesis)
    [parent] = shard_ids(kinesis, stream)
    put_keys(kinesis, stream, 0, 20)
    children = split(kinesis, stream)
    put_keys(kinesis, stream, 20, 20)
    invoker = CallableInvoker(FUNCTION, slow_on_shards([parent], SLOW_PARENT_S))
    with running(endpoint, mapping(stream, batch_size=5), invoker) as runner:
        assert {runner.stats()[child]["state"] for child in children} == {"waiting-for-parent"}
        wait_until(lambda: delivered(invoker) >= 40, timeout=60, what="40 records")
        assert runner.stats()[parent]["state"] == "done"
    assert_parents_before_children(invoker, [parent], children, 40)


def test_both_parents_are_drained_before_the_child_is_polled_after_a_merge(local_endpoint):
    kinesis = client("kinesis", local_endpoint)
    stream = create_stream(kinesis, shards=2)
    parents = shard_ids(kinesis, stream)
    put_keys(kinesis, stream, 0, 20)  # 20 keys hash to both shards
    child = merge(kinesis, stream)
    put_keys(kinesis, stream, 20, 20)
    invoker = CallableInvoker(FUNCTION, slow_on_shards(parents, SLOW_PARENT_S))
    with running(local_endpoint, mapping(stream, batch_size=5), invoker) as runner:
        assert runner.stats()[child]["state"] == "waiting-for-parent"
        wait_until(lambda: delivered(invoker) >= 40, timeout=60, what="40 records")
        assert {runner.stats()[parent]["state"] for parent in parents} == {"done"}
    assert_parents_before_children(invoker, parents, [child], 40)


@pytest.mark.parametrize("reshard", ["split", "merge"])
def test_children_created_while_running_are_found_from_the_parents_last_read(local_endpoint, reshard):
    kinesis = client("kinesis", local_endpoint)
    stream = create_stream(kinesis, shards=1 if reshard == "split" else 2)
    parents = shard_ids(kinesis, stream)
    invoker = CallableInvoker(FUNCTION, slow_on_shards(parents, SLOW_PARENT_S))
    # No re-listing during the test: only the parents' ChildShards can lead to the children.
    with running(
        local_endpoint, mapping(stream, batch_size=5), invoker, shard_refresh_interval=600
    ) as runner:
        put_keys(kinesis, stream, 0, 20)
        children = split(kinesis, stream) if reshard == "split" else [merge(kinesis, stream)]
        put_keys(kinesis, stream, 20, 20)
        wait_until(lambda: delivered(invoker) >= 40, timeout=60, what="40 records")
        assert set(runner.stats()) == {*parents, *children}
    assert_parents_before_children(invoker, parents, children, 40)
