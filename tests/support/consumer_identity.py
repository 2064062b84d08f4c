"""The consumer's identity scenario (`shardline.testing`): a parent shard split at 2**127, its
aggregates and their members, ids and sequence numbers, and a Kinesis that lists those shards."""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import Any

from shardline.consumer import ConsumedRecord, KinesisConsumer, LeaseTable
from shardline.errors import DependencyUnavailable
from shardline.kinesis import UserRecord
from shardline.kpl._identity import AggregateId
from shardline.testing import (
    SEQUENCE_STEP,
    InMemoryLeaseTable,
    kinesis_event,
)
from shardline.testing._events import FIRST_SEQUENCE

STREAM = "events"
PARENT, LOW, HIGH = "shardId-000000000000", "shardId-000000000001", "shardId-000000000002"
TOP = 2**128 - 1
MIDDLE = 2**127
ARRIVAL = 1_700_000_000.0


class Died(BaseException):
    """The process dies (out of memory, the function's timeout): nothing after it runs."""


def members(prefix: str, count: int, hash_key: int | None = None) -> list[UserRecord]:
    return [
        UserRecord(f"{prefix}-{i}", f"{prefix}-{i}".encode(), None if hash_key is None else str(hash_key + i))
        for i in range(count)
    ]


def aggregate_id(counter: int, floor: int | None = None, producer: str = "p1", lane: str = "0") -> str:
    return AggregateId(producer, lane, counter, counter if floor is None else floor).encode()


def entry(users: list[UserRecord], aggregate: str, sequence: int, shard: str = PARENT) -> dict[str, Any]:
    """One Lambda event record holding `users` in the aggregate `aggregate`."""
    [record] = kinesis_event(
        users,
        shard_id=shard,
        aggregate_ids=[aggregate],
        first_sequence=sequence,
        arrival=ARRIVAL + (sequence - FIRST_SEQUENCE) // SEQUENCE_STEP,  # a second per record
    )["Records"]
    return record


def seq(n: int) -> int:
    return FIRST_SEQUENCE + n * SEQUENCE_STEP


def counting_sink(table_name: str = "applied") -> Callable[[ConsumedRecord], list[dict[str, Any]]]:
    """A transactional sink: ADD 1 per user record, keyed by the record's data (unique per member)."""

    def handle(record: ConsumedRecord) -> list[dict[str, Any]]:
        return [
            {
                "Update": {
                    "TableName": table_name,
                    "Key": {"id": {"S": record.data.decode()}},
                    "UpdateExpression": "ADD n :one",
                    "ExpressionAttributeValues": {":one": {"N": "1"}},
                }
            }
        ]

    return handle


def put_layout(
    kinesis: Any,
    stream: str,
    layout: list[tuple[list[UserRecord], str]],
    explicit_hash_key: str | None = None,
) -> None:
    """Put each aggregate of `layout` (its members, its id) on `stream` in order, as the producer's bytes."""
    for index, (users, aggregate) in enumerate(layout):
        record = entry(users, aggregate, seq(index))["kinesis"]
        hash_key = {} if explicit_hash_key is None else {"ExplicitHashKey": explicit_hash_key}
        kinesis.put_record(
            StreamName=stream,
            PartitionKey=record["partitionKey"],
            Data=base64.b64decode(record["data"]),
            **hash_key,
        )


def counting_group(
    group: str, table: LeaseTable, kinesis: Any, sink: str, down: Callable[[], bool], **options: Any
) -> KinesisConsumer:
    """A group whose handler counts each user record in the table `sink` (`counting_sink`) and
    fails as a dependency outage while `down()`."""
    consumer = KinesisConsumer(group, table, kinesis=kinesis, checkpoint_every=1, **options)
    count = counting_sink(sink)

    @consumer.handler
    def handle(record: ConsumedRecord) -> list[dict[str, Any]]:
        if down():
            raise DependencyUnavailable("the sink's region is down")
        return count(record)

    return consumer


def applied(table: InMemoryLeaseTable, name: str = "applied") -> dict[str, int]:
    return {item["id"]["S"]: int(item["n"]["N"]) for item in table.items(name)}


# -- the shard of the crash-point test -----------------------------------------------------------

A = {n: members(f"a{n}", 3 if n != 5 else 2) for n in range(1, 6)}
SHARD_RECORDS = [
    entry(A[1], aggregate_id(1), seq(0)),
    entry(A[2], aggregate_id(2), seq(1)),
    entry(A[1], aggregate_id(1), seq(2)),  # a copy of A1 in the same batch (batches of 3)
    entry(A[3], aggregate_id(3), seq(3)),  # A3 resent after a lost reply: the copy lands first...
    entry(A[4], aggregate_id(4, floor=4), seq(4)),  # A3 confirmed: settled, the floor passes it
    entry(A[3], aggregate_id(3), seq(5)),  # ...the original, a slow write, lands last
    entry(A[2], aggregate_id(2), seq(6)),  # a copy of A2 in another batch
    entry(A[5], aggregate_id(5), seq(7)),
]
EXPECTED = {record.data.decode(): 1 for users in A.values() for record in users}


class FakeKinesis:
    """ListShards of a stream whose parent split at 2**127; every shard is probed empty."""

    def list_shards(self, **request: Any) -> dict[str, Any]:
        def shard(shard_id: str, low: int, high: int, parent: str | None, closed: bool) -> dict[str, Any]:
            out: dict[str, Any] = {
                "ShardId": shard_id,
                "HashKeyRange": {"StartingHashKey": str(low), "EndingHashKey": str(high)},
                "SequenceNumberRange": {"StartingSequenceNumber": "1"},
            }
            if parent:
                out["ParentShardId"] = parent
            if closed:
                out["SequenceNumberRange"]["EndingSequenceNumber"] = "2"
            return out

        return {
            "Shards": [
                shard(PARENT, 0, TOP, None, True),
                shard(LOW, 0, MIDDLE - 1, PARENT, False),
                shard(HIGH, MIDDLE, TOP, PARENT, False),
            ]
        }

    def get_shard_iterator(self, **request: Any) -> dict[str, Any]:
        return {"ShardIterator": "it"}

    def get_records(self, **request: Any) -> dict[str, Any]:
        return {"Records": [], "NextShardIterator": None}
