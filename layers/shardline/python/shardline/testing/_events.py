"""Lambda Kinesis events built from user records, as the event-source mapping delivers them.

    event = kinesis_event([UserRecord("user-1", b"a"), UserRecord("user-2", b"b")], stream="orders")
    consumer.process(event, FakeLambdaContext())

Records are packed into KPL aggregates (`aggregate=True`, the default) as shardline's producer
sends them: partition key "a" (Lambda's event carries no explicit hash key, so the aggregate's is
not seen), and a group of one record goes plain, with its own partition key. With
`aggregate=False` each user record is one Kinesis record. Sequence numbers are Kinesis-shaped:
56-digit decimal strings increasing along the shard.

Identity: a `UserRecord` with an `id` carries it (its `sl.id` tag, `sl.k` when `id_derived`:
`ConsumedRecord.id`), and one with a `caller` carries it too (the aggregate's `sl.c` tag): an
aggregate holds one caller's records, so a group also ends where the caller changes, and a lone
record with a caller goes as a one-record aggregate (plain, it would lose its caller). With
`producer`, every group — a lone record too — is an aggregate with a shardline aggregate id
(`ConsumedRecord.aggregate_id`), numbered as a producer numbers them in the shard's lane:
`AggregateId(producer, "<shard number>", n, n)` for n = `first_counter`, … (every earlier
aggregate settled). `aggregate_ids` gives each aggregate's id instead, in order. A copy of an
aggregate (the same id, a lost reply retried) is the same payload again at a later sequence
number: `copies`.

    event = kinesis_event(records, producer="p1")
    again = copies(event["Records"][:1], first_sequence=last_sequence + SEQUENCE_STEP)
"""

from __future__ import annotations

import base64
import time
from collections.abc import Iterable, Mapping
from typing import Any

from shardline.kinesis._records import UserRecord
from shardline.kpl._encode import encode
from shardline.kpl._identity import AggregateId
from shardline.producer._reducer import AGGREGATE_PARTITION_KEY

#: A real-looking first sequence number (56 digits); later records add `SEQUENCE_STEP` each.
FIRST_SEQUENCE = 49_590_338_271_490_256_608_559_692_538_361_571_095_921_575_989_136_588_898
SEQUENCE_STEP = 10**16
_REGION = "us-east-1"
_ACCOUNT = "123456789012"


def _by_caller(users: list[UserRecord]) -> list[list[UserRecord]]:
    """`users` cut into runs of one caller each (None and "" are one: no caller), order kept."""
    runs: list[list[UserRecord]] = []
    for user in users:
        if runs and (runs[-1][-1].caller or "") == (user.caller or ""):
            runs[-1].append(user)
        else:
            runs.append([user])
    return runs


def kinesis_event(
    records: Iterable[UserRecord],
    *,
    stream: str = "events",
    shard_id: str = "shardId-000000000000",
    aggregate: bool = True,
    records_per_aggregate: int = 100,
    first_sequence: int = FIRST_SEQUENCE,
    arrival: float | None = None,
    producer: str | None = None,
    first_counter: int = 1,
    aggregate_ids: Iterable[str] | None = None,
) -> dict[str, list[dict[str, Any]]]:
    """`{"Records": [...]}` carrying `records` in order, from one shard of `stream`.

    Sequence numbers start at `first_sequence` (continue a shard with the last one plus
    `SEQUENCE_STEP`); `arrival` is the approximate arrival time in epoch seconds (default: now).
    `producer` / `aggregate_ids`: aggregates with shardline aggregate ids (module docstring).
    """
    if records_per_aggregate < 1:
        raise ValueError("records_per_aggregate must be at least 1")
    users = list(records)
    arrived = time.time() if arrival is None else arrival
    entries: list[tuple[str, bytes]] = []
    groups = [
        group
        for i in range(0, len(users), records_per_aggregate)
        for group in _by_caller(users[i : i + records_per_aggregate])
    ]
    if not aggregate:
        groups = [[user] for user in users]
    ids: list[str] | None = None
    if aggregate_ids is not None:
        ids = list(aggregate_ids)
        if len(ids) != len(groups):
            raise ValueError(f"{len(ids)} aggregate ids for {len(groups)} aggregates")
    elif producer is not None:
        lane = str(int(shard_id.rsplit("-", 1)[-1]))
        ids = [
            AggregateId(producer, lane, counter, counter).encode()
            for counter in range(first_counter, first_counter + len(groups))
        ]
    for index, group in enumerate(groups):
        if ids is not None:  # shardline's producer: an aggregate, a lone record keeping its keys
            key = group[0].partition_key if len(group) == 1 else AGGREGATE_PARTITION_KEY
            entries.append((key, encode(group, ids[index])))
        elif len(group) == 1 and aggregate and group[0].caller:  # its caller travels only in an aggregate
            entries.append((group[0].partition_key, encode(group)))
        elif len(group) == 1:  # the producer sends a lone record with its own keys
            entries.append((group[0].partition_key, group[0].data))
        else:
            entries.append((AGGREGATE_PARTITION_KEY, encode(group)))
    return {
        "Records": [
            event_record(
                stream,
                shard_id,
                {
                    "PartitionKey": key,
                    "Data": data,
                    "SequenceNumber": str(first_sequence + index * SEQUENCE_STEP),
                    "ApproximateArrivalTimestamp": arrived,
                },
            )
            for index, (key, data) in enumerate(entries)
        ]
    }


def copies(
    event_records: Iterable[Mapping[str, Any]], *, first_sequence: int, arrival: float | None = None
) -> list[dict[str, Any]]:
    """Copies of Lambda event records (the same payloads and keys, so the same aggregate ids), as
    a retried PutRecords lands them: at new sequence numbers from `first_sequence` on, arriving
    at `arrival` (default: the originals' arrival times)."""
    out: list[dict[str, Any]] = []
    for index, original in enumerate(event_records):
        arn, event_id, kinesis = original["eventSourceARN"], original["eventID"], original["kinesis"]
        stream = arn.split(":stream/", 1)[1]
        out.append(
            event_record(
                stream,
                event_id.split(":", 1)[0],
                {
                    "PartitionKey": kinesis["partitionKey"],
                    "Data": base64.b64decode(kinesis["data"]),
                    "SequenceNumber": str(first_sequence + index * SEQUENCE_STEP),
                    "ApproximateArrivalTimestamp": (
                        kinesis["approximateArrivalTimestamp"] if arrival is None else arrival
                    ),
                },
            )
        )
    return out


def event_record(stream: str, shard_id: str, record: Mapping[str, Any]) -> dict[str, Any]:
    """One Lambda event record from a GetRecords record (`PartitionKey`, `Data`, `SequenceNumber`,
    `ApproximateArrivalTimestamp` as a datetime or epoch seconds)."""
    arrival = record["ApproximateArrivalTimestamp"]
    seconds = arrival if isinstance(arrival, int | float) else arrival.timestamp()
    return {
        "kinesis": {
            "kinesisSchemaVersion": "1.0",
            "partitionKey": record["PartitionKey"],
            "sequenceNumber": record["SequenceNumber"],
            "data": base64.b64encode(record["Data"]).decode("ascii"),
            "approximateArrivalTimestamp": seconds,
        },
        "eventSource": "aws:kinesis",
        "eventVersion": "1.0",
        "eventID": f"{shard_id}:{record['SequenceNumber']}",
        "eventName": "aws:kinesis:record",
        "invokeIdentityArn": f"arn:aws:iam::{_ACCOUNT}:role/consumer",
        "awsRegion": _REGION,
        "eventSourceARN": f"arn:aws:kinesis:{_REGION}:{_ACCOUNT}:stream/{stream}",
    }
