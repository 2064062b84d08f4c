"""Reducer: turns the user records bound for one predicted shard into Kinesis records.

Records of one shard are packed, in order, into KPL aggregates of at most
`aggregation_max_size` bytes (counted as Kinesis meters a record: payload plus partition key)
and `aggregation_max_count` records. An aggregate only ever holds records the current shard
map puts in the same shard. It is sent with partition key "a" and its first record's hash key
as explicit hash key, so Kinesis routes it by that record. A lone record — or any record
whose shard is unknown — is sent as a plain Kinesis record with its own keys.
"""

from __future__ import annotations

from concurrent.futures import Future

from shardline.aggregation import AggregateBuilder
from shardline.records import UserRecord, hash_key
from shardline.result import Attempt, RecordResult

AGGREGATE_PARTITION_KEY = "a"


class BufferedRecord:
    """A user record inside the producer, with everything its retries need to remember.

    `sequence` is the order of put() (it keeps per-shard order across re-queues); `assigned`
    says the partitioner ran (once per record). `result` is set when the record is done, and
    `future` (only records given to put() have one) is resolved with it.
    """

    __slots__ = (
        "arrived",
        "assigned",
        "attempts",
        "expires",
        "future",
        "hash_key",
        "predicted_shard",
        "record",
        "result",
        "sequence",
    )

    def __init__(
        self,
        record: UserRecord,
        future: Future[RecordResult] | None,
        sequence: int,
        arrived: float,
        expires: float,
    ) -> None:
        self.record = record
        self.future = future
        self.result: RecordResult | None = None
        self.sequence = sequence
        self.arrived = arrived
        self.expires = expires
        self.hash_key = -1
        self.predicted_shard: str | None = None
        self.assigned = False
        self.attempts: list[Attempt] = []

    def assign(self, record: UserRecord) -> None:
        self.record = record
        self.hash_key = hash_key(record)
        self.assigned = True


class KinesisRecord:
    """One entry of a PutRecords request: a lone user record or a KPL aggregate."""

    __slots__ = ("data", "explicit_hash_key", "members", "partition_key", "predicted_shard")

    def __init__(
        self,
        members: list[BufferedRecord],
        partition_key: str,
        explicit_hash_key: str | None,
        data: bytes,
        predicted_shard: str | None,
    ) -> None:
        self.members = members
        self.partition_key = partition_key
        self.explicit_hash_key = explicit_hash_key
        self.data = data
        self.predicted_shard = predicted_shard

    @property
    def size(self) -> int:
        """Bytes as Kinesis meters them: data plus UTF-8 partition key."""
        return len(self.data) + len(self.partition_key.encode("utf-8"))

    @property
    def aggregated(self) -> bool:
        return len(self.members) > 1

    def entry(self) -> dict[str, object]:
        """The PutRecords request entry."""
        entry: dict[str, object] = {"Data": self.data, "PartitionKey": self.partition_key}
        if self.explicit_hash_key is not None:
            entry["ExplicitHashKey"] = self.explicit_hash_key
        return entry


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

    def take(self, queue: list[BufferedRecord], predicted_shard: str | None) -> KinesisRecord:
        """Pop the longest prefix of `queue` (ordered, oldest last) that fits one Kinesis record.

        `queue` is a stack: the next record is `queue[-1]`. It must not be empty.
        """
        first = queue.pop()
        if predicted_shard is None or not self._enabled or not queue:
            return single(first)
        cap = self._max_size - len(AGGREGATE_PARTITION_KEY)
        builder = AggregateBuilder()
        builder.add(first.record)
        members = [first]
        while queue and builder.count < self._max_count and builder.add(queue[-1].record, cap):
            members.append(queue.pop())
        if len(members) == 1:
            return single(first)
        return KinesisRecord(
            members, AGGREGATE_PARTITION_KEY, str(first.hash_key), builder.build(), predicted_shard
        )

    @staticmethod
    def give_back(queue: list[BufferedRecord], kinesis_record: KinesisRecord) -> None:
        """Return an unsent Kinesis record's members to the front of `queue`, order kept."""
        queue.extend(reversed(kinesis_record.members))
