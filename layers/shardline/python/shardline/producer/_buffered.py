"""The records inside the producer: a buffered user record, and one entry of a PutRecords request.

Every stage passes these along: the reducer packs `BufferedRecord`s into `KinesisRecord`s, the
collector packs those into requests, and the retrier writes each attempt back onto the members.
"""

from __future__ import annotations

from concurrent.futures import Future

from shardline.kinesis._records import UserRecord, hash_key
from shardline.producer._result import Attempt, RecordResult


class BufferedRecord:
    """A user record inside the producer, with everything its retries need to remember.

    `sequence` is the order of put() (it keeps per-shard order across re-queues); `assigned`
    says the partitioner ran (once per record). `owner` is the thread that put it: only that
    thread's flush deadline can expire it. `in_flight` is set while a request carries it.
    `result` is set when the record is done, and `future` (only records given to put() have
    one) is resolved with it.
    """

    __slots__ = (
        "arrived",
        "assigned",
        "attempts",
        "expires",
        "future",
        "hash_key",
        "in_flight",
        "owner",
        "predicted_shard",
        "record",
        "result",
        "sequence",
        "size",
    )

    def __init__(
        self,
        record: UserRecord,
        future: Future[RecordResult] | None,
        sequence: int,
        arrived: float,
        expires: float,
        owner: int = 0,
    ) -> None:
        self.record = record
        self.owner = owner
        self.in_flight = False
        self.size = len(record.data) + len(record.partition_key)  # what the buffer bound counts
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
