"""The producer: lands user records in Kinesis, aggregated per predicted shard, with a result each.

    from shardline.producer import Producer, ProducerConfig, UserRecord

    producer = Producer(boto3.client("kinesis"), "events", config=ProducerConfig(record_ttl=10))
    results = producer.put_many([UserRecord("user-1", b"hello")], deadline=5.0)

The pipeline, one private module per stage, each with its contract in its docstring::

    UserRecord -> partitioner (_partitioning) -> ShardMap.predict -> _collector (queues per
    shard; packs them, through _reducer's KPL aggregates each carrying an id from _lanes and
    _limiter's per-shard token buckets, into PutRecords requests) -> _sender (one PutRecords
    call; its answer read into typed entries) -> _retrier (classify: done, retry, resend a sealed
    aggregate identical, re-route, fail) -> RecordResult

`_producer` is the public face and the threading, `_dispatch` holds every unresolved record and
moves them on one step at a time (sending, outcomes, retries; its state private), `_queues` orders
each shard's records, `_buffered` holds the records every stage passes along, `_incarnation` follows
the process a producer id was drawn in (a forked child or a SnapStart restore draws a new one).
`shardline.testing.InMemoryKinesis` is a stream in memory to build a `Producer` on in tests.

Identity, not read-back: every Kinesis record sent is a KPL aggregate (a lone record one of one)
whose id — producer, lane, counter, floor — consumers deduplicate copies by. A request whose
outcome is unknown (no reply, a 5xx, a malformed or short response) is resent as the identical
aggregate within the records' deadline; a record succeeds only with the shard and sequence number
Kinesis returned for a copy in a shard that holds its hash key, and never from reading the
stream. A record given up after an unanswered request fails with `unconfirmed=True`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from shardline._lazy import lazy_exports

if TYPE_CHECKING:
    from shardline.errors import BufferFull as BufferFull
    from shardline.errors import InvalidRecord as InvalidRecord
    from shardline.kinesis._records import UserRecord as UserRecord
    from shardline.producer._config import ProducerConfig as ProducerConfig
    from shardline.producer._metrics import ProducerMetrics as ProducerMetrics
    from shardline.producer._partitioning import ByExplicitHashKey as ByExplicitHashKey
    from shardline.producer._partitioning import ByPartitionKey as ByPartitionKey
    from shardline.producer._partitioning import Partitioner as Partitioner
    from shardline.producer._partitioning import RandomShard as RandomShard
    from shardline.producer._partitioning import RoundRobin as RoundRobin
    from shardline.producer._producer import Producer as Producer
    from shardline.producer._producer import deadline_from_context as deadline_from_context
    from shardline.producer._result import Attempt as Attempt
    from shardline.producer._result import RecordResult as RecordResult

_EXPORTS = {
    "Producer": "_producer",
    "deadline_from_context": "_producer",
    "ProducerConfig": "_config",
    "RecordResult": "_result",
    "Attempt": "_result",
    "ProducerMetrics": "_metrics",
    "Partitioner": "_partitioning",
    "ByPartitionKey": "_partitioning",
    "ByExplicitHashKey": "_partitioning",
    "RoundRobin": "_partitioning",
    "RandomShard": "_partitioning",
    "UserRecord": "shardline.kinesis._records",
    "InvalidRecord": "shardline.errors",
    "BufferFull": "shardline.errors",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
