"""The records inside the producer: a buffered user record, and one entry of a PutRecords request.

Every stage passes these along: the reducer packs `BufferedRecord`s into `KinesisRecord`s, the
collector packs those into requests, and the retrier writes each attempt back onto the members.
"""

from __future__ import annotations

from concurrent.futures import Future

from shardline.kinesis._records import UserRecord, hash_key
from shardline.kpl._identity import AggregateId
from shardline.producer._result import Attempt, RecordResult

#: Bounds of the KPL format's bytes around a user record inside an aggregate, beyond its data,
#: partition key and id: the record's framing, key index and data length, and its partition-key
#: table entry's; an explicit hash key's index and table entry; an id tag's key and framing.
RECORD_FRAMING = 24
HASH_KEY_FRAMING = 45
ID_FRAMING = 12


def buffered_size(record: UserRecord) -> int:
    """What the buffer bound counts for `record`: data, partition key and id."""
    return len(record.data) + len(record.partition_key) + (len(record.id) if record.id is not None else 0)


class BufferedRecord:
    """A user record inside the producer, with everything its retries need to remember.

    `sequence` is the order of put() (it keeps per-shard order across re-queues); `assigned`
    says the partitioner ran (once per record). `owner` is the thread that put it: only that
    thread's flush deadline can expire it. `in_flight` is set while a request carries it.
    `result` is set when the record is done, and `future` (only records given to put() have
    one) is resolved with it. `sealed_in` is the sealed aggregate it may only ever be sent in
    again, once one was (see `KinesisRecord`); `wire` bounds the bytes it adds to an aggregate.
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
        "sealed_in",
        "sequence",
        "size",
        "wire",
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
        self.size = buffered_size(record)  # what the buffer bound counts
        self.future = future
        self.result: RecordResult | None = None
        self.sequence = sequence
        self.arrived = arrived
        self.expires = expires
        self.hash_key = -1
        self.predicted_shard: str | None = None
        self.assigned = False
        self.attempts: list[Attempt] = []
        self.sealed_in: KinesisRecord | None = None
        self.wire = 0

    def assign(self, record: UserRecord) -> None:
        self.record = record
        self.hash_key = hash_key(record)
        self.assigned = True
        self.wire = (
            len(record.data)
            + len(record.partition_key.encode("utf-8"))
            + RECORD_FRAMING
            + (HASH_KEY_FRAMING if record.explicit_hash_key is not None else 0)
            + (len(record.id) + ID_FRAMING if record.id is not None else 0)
        )


class KinesisRecord:
    """One entry of a PutRecords request: a KPL aggregate of one or more user records.

    `aggregate_id` is its identity (see `_lanes`); `route_key` the hash key Kinesis routes it by
    (its explicit hash key, else its partition key's MD5: a lone record's own). Once `sealed`, its
    members are only ever sent again inside it, identical (same id, same data bytes): after an
    unknown outcome (`maybe_landed`: a copy may be in the stream) or a landing outside some
    members' shard, when it is re-routed by the first unconfirmed member's hash key.
    `first_sent`/`last_sent` are clock times of its sends; `retired` once it is never sent again.
    """

    __slots__ = (
        "aggregate_id",
        "data",
        "explicit_hash_key",
        "first_sent",
        "last_sent",
        "maybe_landed",
        "members",
        "partition_key",
        "predicted_shard",
        "retired",
        "route_key",
        "sealed",
        "sends",
    )

    def __init__(
        self,
        members: list[BufferedRecord],
        partition_key: str,
        explicit_hash_key: str | None,
        data: bytes,
        predicted_shard: str | None,
        aggregate_id: AggregateId | None = None,
    ) -> None:
        self.members = members
        self.partition_key = partition_key
        self.explicit_hash_key = explicit_hash_key
        self.data = data
        self.predicted_shard = predicted_shard
        self.aggregate_id = aggregate_id
        self.route_key = int(explicit_hash_key) if explicit_hash_key is not None else members[0].hash_key
        self.sealed = False
        self.maybe_landed = False
        self.retired = False
        self.sends = 0
        self.first_sent = self.last_sent = 0.0

    @property
    def size(self) -> int:
        """Bytes as Kinesis meters them: data plus UTF-8 partition key."""
        return len(self.data) + len(self.partition_key.encode("utf-8"))

    @property
    def order(self) -> int:
        """Its place in put() order: its first member's."""
        return self.members[0].sequence

    def reroute(self, hash_key: int) -> None:
        """Send it next by `hash_key` (the data stays the same bytes)."""
        self.route_key = hash_key
        self.explicit_hash_key = str(hash_key)

    def entry(self) -> dict[str, object]:
        """The PutRecords request entry."""
        entry: dict[str, object] = {"Data": self.data, "PartitionKey": self.partition_key}
        if self.explicit_hash_key is not None:
            entry["ExplicitHashKey"] = self.explicit_hash_key
        return entry
