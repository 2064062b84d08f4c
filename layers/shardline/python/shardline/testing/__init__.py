"""What you need to test your own handlers and producers, in milliseconds and without AWS or moto.

    from shardline.testing import FakeLambdaContext, InMemoryLeaseTable, MappingReplay, kinesis_event
    from shardline.testing import Fault, InMemoryKinesis

    table = InMemoryLeaseTable(key_schema={"orders": ["id"]})
    consumer = KinesisConsumer("orders", table)
    consumer.handler(my_handler)
    replay = MappingReplay(kinesis_event(records)["Records"], batch_size=10)
    replay.drain(consumer.process)
    assert len(table.items("orders")) == len(records)

    kinesis = InMemoryKinesis("events", shard_count=4)
    producer = Producer(kinesis, "events")   # as on boto3.client("kinesis")
    kinesis.fail_next(Fault.LOSE_REPLY)
    producer.put_many(records)
    assert kinesis.user_records(kinesis.shard_of(hash_key(records[0])))

- `InMemoryLeaseTable`: `LeaseTable` with the same conditional writes, rows and sink tables in
  memory, read and write counters (`LeaseWrite` names the kinds of write), and `fail_next` to
  inject a failure before or after a write lands.
- `kinesis_event` / `event_record`: Lambda Kinesis events from user records (KPL-aggregated or not)
  or from GetRecords output, with Kinesis-shaped sequence numbers; records with client ids and
  aggregates with shardline aggregate ids (`producer=`), and `copies` of event records (a
  retried PutRecords) at later sequence numbers.
- `MappingReplay`: replays a shard as the event-source mapping does (batches, retries of crashed
  batches, restarts at `batchItemFailures`); `read_shard` reads a real shard to replay it.
- `FakeLambdaContext`: request id, function name and a remaining time you control.
- `InMemoryKinesis`: a Kinesis stream in memory that a `Producer` is built on as on boto3's client
  (PutRecords with per-record answers and per-shard sequence numbers, ListShards over hash-key
  ranges, `split_shard`, optional per-shard write limits, botocore's validation errors), with
  `fail_next(Fault...)` to throttle, refuse, fail or lose a reply after the write lands, and
  `records`/`user_records` to read back what each shard holds (aggregates decoded).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from shardline._lazy import lazy_exports

if TYPE_CHECKING:
    from shardline.testing._events import SEQUENCE_STEP as SEQUENCE_STEP
    from shardline.testing._events import copies as copies
    from shardline.testing._events import event_record as event_record
    from shardline.testing._events import kinesis_event as kinesis_event
    from shardline.testing._kinesis import Fault as Fault
    from shardline.testing._kinesis import InMemoryKinesis as InMemoryKinesis
    from shardline.testing._kinesis import StoredRecord as StoredRecord
    from shardline.testing._lease_requests import LeaseWrite as LeaseWrite
    from shardline.testing._lease_table import InMemoryLeaseTable as InMemoryLeaseTable
    from shardline.testing._replay import FakeLambdaContext as FakeLambdaContext
    from shardline.testing._replay import MappingReplay as MappingReplay
    from shardline.testing._replay import read_shard as read_shard

_EXPORTS = {
    "InMemoryLeaseTable": "_lease_table",
    "LeaseWrite": "_lease_requests",
    "kinesis_event": "_events",
    "event_record": "_events",
    "copies": "_events",
    "SEQUENCE_STEP": "_events",
    "InMemoryKinesis": "_kinesis",
    "Fault": "_kinesis",
    "StoredRecord": "_kinesis",
    "MappingReplay": "_replay",
    "FakeLambdaContext": "_replay",
    "read_shard": "_replay",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
