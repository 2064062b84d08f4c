"""Consumer groups, in Lambda or in workers: de-aggregate, skip what was processed, checkpoint what survived.

    from shardline.consumer import KinesisConsumer, ConsumedRecord, LeaseTable, DeadLetterQueue

    consumer = KinesisConsumer("orders", LeaseTable(dynamodb, "orders-leases"), kinesis=kinesis)

    @consumer.handler
    def handle(record: ConsumedRecord) -> None: ...

    def lambda_handler(event, context):
        return consumer.process(event, context)   # {"batchItemFailures": [...]}

    Worker(consumer, kinesis, "orders-stream").run()   # or: a long-running worker, leasing shards itself

Identity: a Kinesis record that is a copy of a shardline aggregate already applied (a lost
PutRecords reply, retried) is skipped — the lease row remembers the aggregates each shard applied,
written with the checkpoint — so a handler sees each of the producer's user records once, as a
transactional sink applies it once. `ConsumedRecord.id` is the client's own id for a record,
`ConsumedRecord.caller` who asked for it to be written; an id is its caller's, so a sink keys by
`ConsumedRecord.scoped_id` and guards on it with `once(table, key, payload_hash=...)` (a guard
item written in the checkpoint's transaction), so that a client's re-POST of the same id is
applied once too, and the same id with another payload is a conflict (`ClientIdConflict`,
dead-lettered), never dropped. A record without a client id that a client posts again is a new
record. A sink item keyed by the record's identity and built from the record alone is the same on
every replay: return it as `idempotent_put(table, item)` and it is written with BatchWriteItem
before the checkpoint, with no transaction and no guard (half the write units); keyed by a client
id, with `payload_hash=`, it is written on a condition another payload cannot pass (in a
TransactWriteItems call of up to 100 such puts).

Private modules, one concern each: `_consumer` (the group and its settings), `_shard_run` (one
invocation's work on one shard, composed of `_handler_loop` (running the handler over the
records), `_checkpoint` (what may be committed, with which writes, blamed on whom) and
`_failure_policy` (attempts, backoff, the dead-letter queue); `_chunks` cuts a batch handler's
records until a failure is alone), `_transaction` (sink writes waiting for the checkpoint, and
whose they are), `_handler_deadline` (interrupting a handler at the time budget),
`_careful` (pinning a crash on the record that ran alone), `_stalls` (failures of the
environment, which stall a shard and blame no record), `_redrive` (putting what the mapping
discarded back through the group), `_deaggregation` (events to user records, with their ids),
`_dedup` (the aggregates a shard applied: producer-retry dedup; counter ranges in `_lane_ranges`),
`_dedup_run` (one run's copies skipped, the state each checkpoint writes), `_once` (client-id guards;
which refusals are copies and which conflicts: `_guard_refusals`),
`_idempotent` (sink items written the same way on every replay, with BatchWriteItem before the checkpoint),
`_lease_store` (the `Lease` row and `LeaseStore`, the protocol of a lease table, which
`LeaseTable` and `shardline.testing.InMemoryLeaseTable` implement), `_leases` (`LeaseTable`, the
KCL-compatible lease/checkpoint table in DynamoDB; its items' encoding in `_lease_codec`, sink
tables' keys in `_sink_keys`), `_dead_letters` (poison records, whole,
in SQS or S3), `_resharding` (parents before children, and their dedup state handed down),
`_metrics`; the worker driver: `_worker` (`Worker`: leases taken, renewed and handed back, shards
read and processed), `_worker_leases` (the leases one worker holds, fenced across its threads),
`_lease_balance` (expiry observed, each worker's share, one steal at a time), `_shard_reader`
(GetRecords within a shard's limits into a bounded queue).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from shardline._lazy import lazy_exports

if TYPE_CHECKING:
    from shardline.consumer._consumer import KinesisConsumer as KinesisConsumer
    from shardline.consumer._dead_letters import DEAD_LETTER_VERSION as DEAD_LETTER_VERSION
    from shardline.consumer._dead_letters import DeadLetterQueue as DeadLetterQueue
    from shardline.consumer._dead_letters import dead_letter_id as dead_letter_id
    from shardline.consumer._dead_letters import dead_letter_message as dead_letter_message
    from shardline.consumer._deaggregation import ConsumedRecord as ConsumedRecord
    from shardline.consumer._deaggregation import deaggregate as deaggregate
    from shardline.consumer._deaggregation import read_event as read_event
    from shardline.consumer._deaggregation import stream_and_shard as stream_and_shard
    from shardline.consumer._idempotent import idempotent_put as idempotent_put
    from shardline.consumer._idempotent import is_idempotent_put as is_idempotent_put
    from shardline.consumer._lease_store import MAX_TRANSACTION_ITEMS as MAX_TRANSACTION_ITEMS
    from shardline.consumer._lease_store import Lease as Lease
    from shardline.consumer._lease_store import LeaseStore as LeaseStore
    from shardline.consumer._leases import LeaseTable as LeaseTable
    from shardline.consumer._metrics import ConsumerMetrics as ConsumerMetrics
    from shardline.consumer._once import is_once_guard as is_once_guard
    from shardline.consumer._once import once as once
    from shardline.consumer._redrive import RedriveResult as RedriveResult
    from shardline.consumer._redrive import redrive as redrive
    from shardline.consumer._redrive_start import GuardsExpired as GuardsExpired
    from shardline.consumer._redrive_start import RedriveRefused as RedriveRefused
    from shardline.consumer._resharding import ShardLineage as ShardLineage
    from shardline.consumer._settings import BatchHandler as BatchHandler
    from shardline.consumer._settings import BatchWrites as BatchWrites
    from shardline.consumer._settings import ConsumerSettings as ConsumerSettings
    from shardline.consumer._settings import RecordHandler as RecordHandler
    from shardline.consumer._settings import Writes as Writes
    from shardline.consumer._settings import client_config as client_config
    from shardline.consumer._worker import Worker as Worker
    from shardline.errors import ClientIdConflict as ClientIdConflict
    from shardline.errors import DependencyUnavailable as DependencyUnavailable
    from shardline.errors import EventError as EventError
    from shardline.errors import LeaseLost as LeaseLost
    from shardline.errors import SinkConflict as SinkConflict
    from shardline.errors import SinkRejected as SinkRejected

_EXPORTS = {
    "KinesisConsumer": "_consumer",
    "Worker": "_worker",
    "ConsumerSettings": "_settings",
    "RecordHandler": "_settings",
    "BatchHandler": "_settings",
    "BatchWrites": "_settings",
    "Writes": "_settings",
    "client_config": "_settings",
    "ConsumedRecord": "_deaggregation",
    "deaggregate": "_deaggregation",
    "read_event": "_deaggregation",
    "stream_and_shard": "_deaggregation",
    "LeaseTable": "_leases",
    "LeaseStore": "_lease_store",
    "Lease": "_lease_store",
    "MAX_TRANSACTION_ITEMS": "_lease_store",
    "DeadLetterQueue": "_dead_letters",
    "dead_letter_message": "_dead_letters",
    "dead_letter_id": "_dead_letters",
    "DEAD_LETTER_VERSION": "_dead_letters",
    "ShardLineage": "_resharding",
    "ConsumerMetrics": "_metrics",
    "once": "_once",
    "idempotent_put": "_idempotent",
    "is_idempotent_put": "_idempotent",
    "is_once_guard": "_once",
    "redrive": "_redrive",
    "RedriveResult": "_redrive",
    "RedriveRefused": "_redrive_start",
    "GuardsExpired": "_redrive_start",
    "DependencyUnavailable": "shardline.errors",
    "EventError": "shardline.errors",
    "LeaseLost": "shardline.errors",
    "ClientIdConflict": "shardline.errors",
    "SinkConflict": "shardline.errors",
    "SinkRejected": "shardline.errors",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
