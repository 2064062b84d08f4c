"""Reducer: turns the user records bound for one predicted shard into Kinesis records.

Every Kinesis record is a KPL aggregate carrying an `AggregateId` (its lane's next counter and
floor, from `_lanes`) as its first record's `sl.a` tag, its caller as the `sl.c` tag beside it
(unless the caller is ""), and each record's own id as its `sl.id` tag (`sl.k` when derived).
Records of one shard are packed, in order, into aggregates of at most `aggregation_max_size`
bytes (counted as Kinesis meters a record: payload plus partition key) and `aggregation_max_count`
records. An aggregate only ever holds records the current shard map puts in the same shard, and
records of one caller: aggregation is per (predicted shard, caller), and an aggregate ends where
the queue's next record is another caller's, so records still leave in put() order. A record's
caller is its `UserRecord.caller` (the producer stamps `ProducerConfig.caller` on records that
have none before they are queued; None and "" are both "no caller"). It is
sent with partition key "a" and its first record's hash key as explicit hash key, so Kinesis routes
it by that record. A lone record — or any record whose shard is unknown — is sent as a
one-record aggregate with its own partition key and explicit hash key, so it routes as it would
alone.
"""

from __future__ import annotations

from shardline.kpl._encode import FRAMING_SIZE, AggregateBuilder
from shardline.producer._buffered import BufferedRecord, KinesisRecord
from shardline.producer._lanes import Lanes
from shardline.producer._queues import ShardQueue

AGGREGATE_PARTITION_KEY = "a"
#: Upper bound of an aggregate's own bytes: the magic and the MD5, and its id's tag (key "sl.a";
#: a 16-character producer id, a lane of at most 12 characters, two 16-digit hex numbers).
_FRAMING_PER_AGGREGATE = FRAMING_SIZE + 80
#: Bytes of an `sl.c` tag beyond the caller itself (at most 512 characters): tag, key, lengths.
CALLER_FRAMING = 12


def single(member: BufferedRecord, lanes: Lanes, lane: str) -> KinesisRecord:
    """A one-record aggregate carrying `member` with its own keys."""
    record = member.record
    aggregate_id = lanes.new_id(lane)
    builder = AggregateBuilder(aggregate_id.encode(), record.caller)
    builder.add(record)
    return KinesisRecord(
        [member],
        record.partition_key,
        record.explicit_hash_key,
        builder.build(),
        member.predicted_shard,
        aggregate_id,
    )


class Reducer:
    """Builds one Kinesis record at a time from a shard's queue, filling it up to the caps."""

    def __init__(self, *, lanes: Lanes, max_size: int, max_count: int, enabled: bool = True) -> None:
        self._lanes = lanes
        self._max_size = max_size
        self._max_count = max_count if enabled else 1

    def take(
        self,
        queue: ShardQueue,
        predicted_shard: str | None,
        lane: str,
        allowance: float = float("inf"),
    ) -> KinesisRecord:
        """Pop the longest run of `queue`'s next records that fits one Kinesis record, numbered in `lane`.

        `queue` must not be empty. The aggregate stops at `allowance` bytes when that is lower
        than the cap (what the shard's token bucket holds now), but always takes one record.
        """
        first = queue.pop()
        following = queue.peek()
        if predicted_shard is None or self._max_count == 1 or following is None:
            return single(first, self._lanes, lane)
        cap = int(min(self._max_size, max(allowance, 0))) - len(AGGREGATE_PARTITION_KEY)
        aggregate_id = self._lanes.new_id(lane)
        caller = first.record.caller or ""
        builder = AggregateBuilder(aggregate_id.encode(), caller)
        builder.add(first.record)
        members = [first]
        while (
            following is not None
            and builder.count < self._max_count
            and (following.record.caller or "") == caller  # an aggregate holds one caller's records
            and builder.add(following.record, cap)
        ):
            members.append(queue.pop())
            following = queue.peek()
        if len(members) == 1:
            return KinesisRecord(
                members,
                first.record.partition_key,
                first.record.explicit_hash_key,
                builder.build(),
                predicted_shard,
                aggregate_id,
            )
        return KinesisRecord(
            members,
            AGGREGATE_PARTITION_KEY,
            str(first.hash_key),
            builder.build(),
            predicted_shard,
            aggregate_id,
        )

    def size_bound(self, queue: ShardQueue) -> int:
        """At most the size of the next Kinesis record `take` builds from `queue`: its records'
        bytes inside an aggregate (each record's `wire`), the aggregate's own framing, id and
        caller tags, and its partition key (the first record's own, when it goes alone) — within
        the cap."""
        head = queue.peek()
        outer = 0
        if head is not None:
            caller = head.record.caller
            outer = len(head.record.partition_key.encode("utf-8")) + (
                len(caller) + CALLER_FRAMING if caller else 0
            )
        return min(self._max_size, queue.wire + _FRAMING_PER_AGGREGATE + outer)
