"""Consumer group `event_sink`: every user record of the stream, exactly once, in a DynamoDB table.

Each record is one item, keyed by the record's own identity and built from the record alone, so
it is the same item however often it is written: the handler returns it as an idempotent put
(`shardline.consumer.idempotent_put`), which the consumer writes with BatchWriteItem before the
checkpoint moves past the record — no transaction, no guard: one write unit per KB of the item
(a transaction would bill two, and a guard item two more). A crash or a replay writes the same
items again; nothing is ever added twice, and the checkpoint passes a record only once its item
landed. The Lambda function is the event-source mapping's target, with ReportBatchItemFailures on.

Identity, and what applies a record once:

- A producer retry (a lost PutRecords reply) puts a second copy of the same aggregate in the
  stream: the consumer skips it by its aggregate id, before this handler sees it. Nothing to do.
- A client re-POST (a request that failed as a whole, posted again) is a new Kinesis record. A
  record with a client id (`ConsumedRecord.id`: the record's HTTP `id`, or
  `<Idempotency-Key>:<index>`) is keyed by that id *as its caller's* (`ConsumedRecord.scoped_id`:
  the caller's scope, `i` explicit or `k` derived, the id): every copy writes the one item
  `id#<scoped id>` (its `sequenceNumber` and `approximateArrival` are those of the copy written
  last). Two callers' equal ids, or an explicit `k:1` and a derived `k:1`, are two items. A
  record without a client id is keyed by its position in the shard: a client re-POST of it is
  a new record and gets an item of its own.
- The same scoped id re-used with another payload (partition key, hash key, data) is a conflict,
  not a copy: the item keeps its payload hash (`shardlinePayload`) and is written on that
  condition (`idempotent_put(..., payload_hash=)`), so the second payload never overwrites the
  first — even from another shard at the same moment. The conflicting record is dead-lettered
  whole (both hashes in the dead letter; metric `ClientIdConflicts`). Cost: such puts go in
  TransactWriteItems calls of up to 100 (2 write units per KB of each item); records without a
  client id stay on BatchWriteItem (25 a call, 1 write unit per KB).

That is the rule for a sink of your own whose effect is an item: key it by `record.scoped_id`
when it is set (else by the record's position) and return `idempotent_put(table, item,
payload_hash=record.payload_hash)`. Effects that are not idempotent (a count, an item that
depends on what is there) go in the transaction, with a `once` guard (functions/key_counter).

Items written before ids were scoped (`id#<client id>`) stay where they are and are not found
by `id_key` any more; a re-POST of such a record after the upgrade writes a new, scoped item.

Sink table (hash key `pk` S, range key `sk` S), one item per user record:

    pk                   "id#<scoped id>" for a record with a client id, else "<stream name>#<shard id>"
    sk                   "id" for a record with a client id, else
                         "<sequence number, zero-padded to 129 digits>#<sub-sequence, 6 digits>"
    sequenceNumber       S  the Kinesis record's sequence number, as Kinesis writes it
    subSequenceNumber    N  its index in the KPL aggregate (absent for a record that was not aggregated;
                            `sk` then ends in #000000)
    partitionKey         S  the user record's partition key
    explicitHashKey      S  when the producer set one
    data                 B  the payload, as sent
    approximateArrival   N  epoch seconds (milliseconds precision) Kinesis received the record
    recordId             S  the client's id of the record, when it has one
    caller               S  who asked for it to be written (the `sl.c` caller), when named
    idDerived            BOOL true when the id was derived from an Idempotency-Key
    shardlinePayload     S  the record's payload hash, when it has a client id (the condition)
    aggregateId          S  the id of the shardline aggregate it came in (producer.lane.counter.floor)
    expiresAt            N  epoch seconds: the record's arrival + SINK_TTL_DAYS, the table's TTL
                            attribute (DynamoDB deletes the item within days after it); absent
                            when SINK_TTL_DAYS is unset. From the arrival, not the write, so a
                            replayed or redriven record writes the very same item (a redrive of a
                            record older than the TTL writes one already due to expire)

129 digits is the longest sequence number the Kinesis API allows, and a KPL aggregate (1 MiB, at
least 6 bytes a sub-record) holds fewer than 10**6 records, so `sk` sorts as the shard does: a Query
on `pk` reads a shard's records without client ids in order; a record is found with
`item_key(...)` (by position) or `id_key(...)` (by client id).

A record too large for a DynamoDB item (400 KB) fails in the handler, so after MAX_ATTEMPTS it goes,
whole, to the DLQ (when DLQ_URL is set) instead of breaking the batch of puts.

Environment (read at the first invocation): SHARDLINE_GROUP, LEASE_TABLE, SINK_TABLE, DLQ_URL
(optional), MAX_ATTEMPTS (3), CHECKPOINT_INTERVAL (seconds, 5), TIME_MARGIN (seconds, 2),
SINK_TTL_DAYS (the CDK app sets `sinkTtlDays`, 30; unset: items are kept), FAILURE_DETAIL
(`fingerprint`); Powertools' POWERTOOLS_SERVICE_NAME, POWERTOOLS_METRICS_NAMESPACE ("shardline"),
POWERTOOLS_TRACE_DISABLED.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from shardline.aws_lambda import ConsumerEnvironment, ConsumerFunction
from shardline.consumer import ConsumedRecord, idempotent_put
from shardline.consumer._once import EXPIRES_AT_ATTRIBUTE

SEQUENCE_DIGITS = 129
SUB_SEQUENCE_DIGITS = 6
MAX_DATA_BYTES = 400 * 1024 - 2 * 1024  # DynamoDB's item limit, less room for the keys and attributes
DAY_SECONDS = 24 * 3600


def item_key(stream: str, shard_id: str, sequence: str, sub_sequence: int | None) -> dict[str, Any]:
    """The sink table key of a user record without a client id: its position."""
    return {
        "pk": {"S": f"{stream}#{shard_id}"},
        "sk": {"S": f"{sequence.zfill(SEQUENCE_DIGITS)}#{sub_sequence or 0:0{SUB_SEQUENCE_DIGITS}d}"},
    }


def id_key(scoped_id: str) -> dict[str, Any]:
    """The sink table key of a user record with a client id: its scoped id (`ConsumedRecord.scoped_id`,
    the id as its caller's), never the bare id; `sk` "id" is no position's."""
    return {"pk": {"S": f"id#{scoped_id}"}, "sk": {"S": "id"}}


def to_sink(table: str, record: ConsumedRecord, *, ttl_days: int | None = None) -> list[dict[str, Any]]:
    """The user logic: the record's item, as an idempotent put; with `ttl_days`, the item expires
    that many days after the record's arrival."""
    if len(record.data) > MAX_DATA_BYTES:
        raise ValueError(f"{len(record.data)} bytes of data do not fit in a DynamoDB item")
    scoped_id = record.scoped_id
    if scoped_id is not None and record.id is not None:
        item = id_key(scoped_id) | {"recordId": {"S": record.id}}
        if record.caller:
            item["caller"] = {"S": record.caller}
        if record.id_derived:
            item["idDerived"] = {"BOOL": True}
    else:
        item = item_key(record.stream, record.shard_id, record.sequence_number, record.sub_sequence_number)
    item |= {
        "sequenceNumber": {"S": record.sequence_number},
        "partitionKey": {"S": record.partition_key},
        "data": {"B": record.data},
        "approximateArrival": {"N": f"{record.approximate_arrival:.3f}"},
    }
    if record.sub_sequence_number is not None:
        item["subSequenceNumber"] = {"N": str(record.sub_sequence_number)}
    if record.explicit_hash_key is not None:
        item["explicitHashKey"] = {"S": record.explicit_hash_key}
    if record.aggregate_id is not None:
        item["aggregateId"] = {"S": record.aggregate_id}
    if ttl_days is not None:
        item[EXPIRES_AT_ATTRIBUTE] = {"N": str(int(record.approximate_arrival) + ttl_days * DAY_SECONDS)}
    if scoped_id is not None:  # the id's item is the first payload's: another payload is a conflict
        return [idempotent_put(table, item, payload_hash=record.payload_hash)]
    return [idempotent_put(table, item)]


function = ConsumerFunction(
    lambda table: partial(to_sink, table, ttl_days=ConsumerEnvironment.from_environ().sink_ttl_days)
)
handler = function.handler  # Logger, Tracer and EMF Metrics wired by ConsumerFunction
