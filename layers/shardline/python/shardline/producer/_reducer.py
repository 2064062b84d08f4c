"""Reducer: turns the user records bound for one predicted shard into Kinesis records.

Records of one shard are packed, in order, into KPL aggregates of at most
`aggregation_max_size` bytes (counted as Kinesis meters a record: payload plus partition key)
and `aggregation_max_count` records. An aggregate only ever holds records the current shard
map puts in the same shard. It is sent with partition key "a" and its first record's hash key
as explicit hash key, so Kinesis routes it by that record. A lone record — or any record
whose shard is unknown — is sent as a plain Kinesis record with its own keys.
"""

from __future__ import annotations

from shardline.kpl._encode import AggregateBuilder
from shardline.producer._buffered import BufferedRecord, KinesisRecord
from shardline.producer._queues import ShardQueue

AGGREGATE_PARTITION_KEY = "a"
#: Upper bounds of the KPL format's overhead: per record its tags, lengths, key indexes and a
#: partition-key table entry's framing; per aggregate the magic, the MD5 and the key "a".
_FRAMING_PER_RECORD = 24
_FRAMING_PER_AGGREGATE = 4 + 16 + 1


def single(member: BufferedRecord) -> KinesisRecord:
    """A Kinesis record carrying one user record with its own keys."""
    record = member.record
    return KinesisRecord(
        [member], record.partition_key, record.explicit_hash_key, record.data, member.predicted_shard
    )


class Reducer:
    """Builds one Kinesis record at a time from a shard's queue, filling it up to the caps."""

    def __init__(self, *, max_size: int, max_count: int, enabled: bool = True) -> None:
        self._max_size = max_size
        self._max_count = max_count
        self._enabled = enabled

    def take(
        self, queue: ShardQueue, predicted_shard: str | None, allowance: float = float("inf")
    ) -> KinesisRecord:
        """Pop the longest run of `queue`'s next records that fits one Kinesis record.

        `queue` must not be empty. The aggregate stops at `allowance` bytes when that is lower
        than the cap (what the shard's token bucket holds now), but always takes one record.
        """
        first = queue.pop()
        following = queue.peek()
        if predicted_shard is None or not self._enabled or following is None:
            return single(first)
        cap = int(min(self._max_size, max(allowance, 0))) - len(AGGREGATE_PARTITION_KEY)
        builder = AggregateBuilder()
        builder.add(first.record)
        members = [first]
        while (
            following is not None and builder.count < self._max_count and builder.add(following.record, cap)
        ):
            members.append(queue.pop())
            following = queue.peek()
        if len(members) == 1:
            return single(first)
        return KinesisRecord(
            members, AGGREGATE_PARTITION_KEY, str(first.hash_key), builder.build(), predicted_shard
        )

    def size_bound(self, queue: ShardQueue) -> int:
        """At most the size of the next Kinesis record `take` builds from `queue`: its bytes plus
        the aggregate's framing (a few bytes per record, the magic and the MD5), within the cap."""
        framing = _FRAMING_PER_RECORD * len(queue) + _FRAMING_PER_AGGREGATE
        return min(self._max_size, queue.bytes + framing)
