"""Issue 39, property 5, in milliseconds: dedup state follows the whole lineage (`ShardLineage`).

The shards are a `Topology` (ListShards, and GetRecords over the records each shard holds, as the
lineage's probe reads them); the lease table is the DynamoDB `LeaseTable` (on moto) and the
in-memory one, each test running on both. What the integration tests cannot stage cheaply:
a merged child's partly applied aggregate through a further split, a child delivered before an
intermediate shard that holds records, a grandparent trimmed past retention.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

from shardline.consumer import KinesisConsumer, LeaseTable
from shardline.kinesis import SHARD_END, Position
from shardline.testing import InMemoryLeaseTable, MappingReplay
from tests.support.consumer_identity import TOP, aggregate_id, counting_sink, entry, members, seq

MIDDLE, QUARTER = 2**127, 2**126
P, A, B, M, M1, M2 = (f"shardId-00000000000{n}" for n in range(6))
SINK = "applied"


class Topology:
    """A stream's shards: {id: (low, high, parents, closed)}, and the records each holds."""

    def __init__(self, shards: dict[str, tuple[int, int, tuple[str, ...], bool]]) -> None:
        self.shards = shards
        self.records: dict[str, list[dict[str, Any]]] = {shard: [] for shard in shards}
        self.trimmed: set[str] = set()

    def hold(self, shard: str, *events: dict[str, Any]) -> list[dict[str, Any]]:
        """`shard` holds these event records; they are returned for the mapping to deliver."""
        self.records[shard] += events
        return list(events)

    def list_shards(self, **request: Any) -> dict[str, Any]:
        listed = []
        for shard, (low, high, parents, closed) in self.shards.items():
            if shard in self.trimmed:
                continue
            listing: dict[str, Any] = {
                "ShardId": shard,
                "HashKeyRange": {"StartingHashKey": str(low), "EndingHashKey": str(high)},
                "SequenceNumberRange": {"StartingSequenceNumber": "1"},
            }
            for key, parent in zip(("ParentShardId", "AdjacentParentShardId"), parents, strict=False):
                listing[key] = parent
            if closed:
                listing["SequenceNumberRange"]["EndingSequenceNumber"] = "2"
            listed.append(listing)
        return {"Shards": listed}

    def get_shard_iterator(self, **request: Any) -> dict[str, Any]:
        start = int(request.get("StartingSequenceNumber", 0))
        return {"ShardIterator": f"{request['ShardId']}|{start}"}

    def get_records(self, **request: Any) -> dict[str, Any]:
        shard, _, start = request["ShardIterator"].partition("|")
        found = [
            {"SequenceNumber": e["kinesis"]["sequenceNumber"], "Data": base64.b64decode(e["kinesis"]["data"])}
            for e in self.records[shard]
            if int(e["kinesis"]["sequenceNumber"]) >= int(start)
        ]
        return {"Records": found, "NextShardIterator": None}


@pytest.fixture(params=["dynamodb", "in-memory"])
def table(request: pytest.FixtureRequest) -> Iterator[Any]:
    if request.param == "in-memory":
        yield InMemoryLeaseTable()
        return
    with mock_aws():
        dynamodb = boto3.client("dynamodb", region_name="us-east-1")
        LeaseTable.create(dynamodb, "leases")
        dynamodb.create_table(
            TableName=SINK,
            KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
            BillingMode="PAY_PER_REQUEST",
        )
        store = LeaseTable(dynamodb, "leases", clock=lambda: 1000.0, sleep=lambda seconds: None)
        store.applied = lambda: {  # type: ignore[attr-defined]
            item["id"]["S"]: int(item["n"]["N"]) for item in dynamodb.scan(TableName=SINK)["Items"]
        }
        yield store


def applied(table: Any) -> dict[str, int]:
    if isinstance(table, InMemoryLeaseTable):
        return {item["id"]["S"]: int(item["n"]["N"]) for item in table.items(SINK)}
    return dict(table.applied())


def consumer_on(table: Any, kinesis: Topology) -> KinesisConsumer:
    consumer = KinesisConsumer("g", table, kinesis=kinesis)
    consumer.handler(counting_sink(SINK))
    return consumer


def deliver(consumer: KinesisConsumer, records: list[dict[str, Any]]) -> dict[str, Any]:
    """One invocation of the mapping with `records` (one shard's)."""
    return consumer.process({"Records": records}, None)


def test_property_5_a_merged_childs_partly_applied_aggregate_survives_a_further_split(table) -> None:
    """P split into A and B, merged into M, M split at a quarter into M1 and M2. An aggregate z
    built for P lands in B after the split: B applies only its high member. M inherits z applied
    in [MIDDLE, TOP] only; split again, M1's part of that is no range at all. z's re-routed copy
    then lands in M1 and M2, and a copy of y (applied whole in P) in M1: each member once."""
    kinesis = Topology(
        {
            P: (0, TOP, (), True),
            A: (0, MIDDLE - 1, (P,), True),
            B: (MIDDLE, TOP, (P,), True),
            M: (0, TOP, (A, B), True),
            M1: (0, QUARTER - 1, (M,), False),
            M2: (QUARTER, TOP, (M,), False),
        }
    )
    consumer = consumer_on(table, kinesis)
    y = members("y", 2, hash_key=5)
    z = (
        members("z-a", 1, hash_key=5)
        + members("z-b", 1, hash_key=QUARTER + 5)
        + members("z-c", 1, MIDDLE + 5)
    )
    other = aggregate_id(1, producer="p2")
    for shard, events in [
        (P, [entry(y, aggregate_id(1), seq(0), P)]),
        (A, [entry(members("a", 1, hash_key=9), aggregate_id(2, producer="p3"), seq(1), A)]),
        (B, [entry(z, aggregate_id(2), seq(2), B)]),  # built for P: only z-c is B's
        (M, [entry(members("m", 1, hash_key=9), other, seq(3), M)]),
        (M1, [entry(y, aggregate_id(1), seq(4), M1), entry(z, aggregate_id(2), seq(5), M1)]),
        (M2, [entry(z, aggregate_id(2), seq(6), M2)]),
    ]:
        MappingReplay(kinesis.hold(shard, *events)).drain(consumer.process)
    assert applied(table) == {"y-0": 1, "y-1": 1, "z-a-0": 1, "z-b-0": 1, "z-c-0": 1, "a-0": 1, "m-0": 1}
    metrics = consumer.metrics.snapshot()
    assert metrics["AggregateCopiesSkipped"] == 1  # y in M1; z's copies apply only what no one did


def test_property_5_a_child_waits_for_an_intermediate_shard_whose_records_have_not_run(table) -> None:
    """P (consumed by this group) split into A and B; A split into A1 (M1 here) and A2 (M2).
    A holds the lost copy of x and has no row yet when A1's batch, holding the resend, comes
    first: A1 waits (its batch is retried) until A ran, then skips the resend."""
    kinesis = Topology(
        {
            P: (0, TOP, (), True),
            A: (0, MIDDLE - 1, (P,), True),
            B: (MIDDLE, TOP, (P,), False),
            M1: (0, QUARTER - 1, (A,), False),
            M2: (QUARTER, MIDDLE - 1, (A,), False),
        }
    )
    consumer = consumer_on(table, kinesis)
    x = members("x", 2, hash_key=7)
    MappingReplay(kinesis.hold(P, entry(members("p", 1, 3), aggregate_id(1), seq(0), P))).drain(
        consumer.process
    )
    in_a = kinesis.hold(A, entry(x, aggregate_id(2), seq(1), A))
    in_a1 = kinesis.hold(M1, entry(x, aggregate_id(2), seq(2), M1))

    answer = deliver(consumer, in_a1)
    assert answer == {"batchItemFailures": [{"itemIdentifier": in_a1[0]["kinesis"]["sequenceNumber"]}]}
    assert applied(table) == {"p-0": 1} and consumer.metrics.snapshot()["BatchesWaitingForParent"] == 1
    MappingReplay(in_a).drain(consumer.process)
    MappingReplay(in_a1).drain(consumer.process)
    assert applied(table) == {"p-0": 1, "x-0": 1, "x-1": 1}
    assert table.get(A).checkpoint == Position(SHARD_END)


def test_a_parent_without_a_row_in_a_lineage_the_group_never_read_does_not_block(table) -> None:
    """The mapping started after the reshard (LATEST): A's records are not the group's, nothing
    above A has a row, and A1 runs at once."""
    kinesis = Topology({P: (0, TOP, (), True), A: (0, TOP, (P,), True), M1: (0, MIDDLE - 1, (A,), False)})
    consumer = consumer_on(table, kinesis)
    kinesis.hold(P, entry(members("p", 1, 3), aggregate_id(1), seq(0), P))
    kinesis.hold(A, entry(members("a", 1, 3), aggregate_id(2), seq(1), A))
    MappingReplay(kinesis.hold(M1, entry(members("c", 1, 3), aggregate_id(3), seq(2), M1))).drain(
        consumer.process
    )
    assert applied(table) == {"c-0": 1} and table.get(A) is None and table.get(P) is None


def test_property_5_a_grandparent_trimmed_past_retention_still_hands_down_its_rows_state(table) -> None:
    """P, no longer listed, has its row (its final state); A, between P and the child, never
    checkpointed (a worker's row, marked SHARD_END): the child starts from P's state."""
    kinesis = Topology({P: (0, TOP, (), True), A: (0, TOP, (P,), True), M1: (0, MIDDLE - 1, (A,), False)})
    consumer = consumer_on(table, kinesis)
    x = members("x", 2, hash_key=7)
    MappingReplay(kinesis.hold(P, entry(x, aggregate_id(1), seq(0), P))).drain(consumer.process)
    assert table.start_at(A, Position("0"), parent_shard_ids=[P])
    assert table.mark_shard_end(table.get(A))
    kinesis.trimmed.add(P)
    MappingReplay(kinesis.hold(M1, entry(x, aggregate_id(1), seq(2), M1))).drain(consumer.process)
    assert applied(table) == {"x-0": 1, "x-1": 1}
    assert consumer.metrics.snapshot()["AggregateCopiesSkipped"] == 1


@pytest.mark.parametrize("middle", ["no row", "a row that never checkpointed"])
@pytest.mark.parametrize("depth", [1, 2, 3, 4])
def test_property_5_a_resend_any_number_of_reshards_down_is_skipped(table, depth: int, middle: str) -> None:
    """P applied x; P split, and the low child split again, `depth` times: the shards in between
    received nothing. The resend of x lands in the last low child (its members are low)."""
    chain = [f"shardId-{n:012d}" for n in range(depth + 1)]
    shards: dict[str, tuple[int, int, tuple[str, ...], bool]] = {chain[0]: (0, TOP, (), True)}
    for level in range(1, depth + 1):
        high = (TOP + 1) // 2**level - 1
        shards[chain[level]] = (0, high, (chain[level - 1],), level < depth)
        shards[f"shardId-{100 + level:012d}"] = (
            high + 1,
            (TOP + 1) // 2 ** (level - 1) - 1,
            (chain[level - 1],),
            False,
        )
    kinesis = Topology(shards)
    consumer = consumer_on(table, kinesis)
    x = members("x", 2, hash_key=7)
    MappingReplay(kinesis.hold(chain[0], entry(x, aggregate_id(1), seq(0), chain[0]))).drain(consumer.process)
    if middle != "no row":  # as a worker leaves them: created at discovery, read to the end
        for shard in chain[1:-1]:
            assert table.start_at(shard, Position("TRIM_HORIZON"), parent_shard_ids=shards[shard][2])
            assert table.mark_shard_end(table.get(shard))
    leaf = chain[-1]
    MappingReplay(kinesis.hold(leaf, entry(x, aggregate_id(1), seq(1), leaf))).drain(consumer.process)
    assert applied(table) == {"x-0": 1, "x-1": 1}
    assert consumer.metrics.snapshot()["AggregateCopiesSkipped"] == 1
