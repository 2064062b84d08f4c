"""Lambda Kinesis events to user records: every field checked, base64, KPL de-aggregation, positions.

A Kinesis record that is not a KPL aggregate — or claims to be one but fails its MD5 or cannot be
decoded — is passed through as one user record (as the KCL does), and counted. A sub-record whose
hash key lies outside the shard's range is delivered, never dropped, and counted (the KCL drops
the whole aggregate in that case).
"""

from __future__ import annotations

import base64
import binascii
import json
import math
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple, Protocol

from shardline.errors import AggregationError, EventError
from shardline.kinesis._positions import Position
from shardline.kinesis._records import hash_key
from shardline.kpl._decode import decode, is_aggregated


class ConsumedRecord(NamedTuple):
    """A user record as a consumer sees it.

    `sub_sequence_number` is its index in a KPL aggregate, None when the Kinesis record was not
    aggregated. `approximate_arrival` is the epoch seconds Kinesis received the Kinesis record.
    """

    stream: str
    shard_id: str
    sequence_number: str
    sub_sequence_number: int | None
    partition_key: str
    explicit_hash_key: str | None
    data: bytes
    approximate_arrival: float

    @property
    def position(self) -> Position:
        """Where a checkpoint after this record points."""
        return Position(self.sequence_number, self.sub_sequence_number or 0)

    def text(self, encoding: str = "utf-8") -> str:
        return self.data.decode(encoding)

    def json(self) -> Any:
        return json.loads(self.data)


class _Counter(Protocol):
    def count(self, name: str, value: int = 1) -> None: ...


class _HashRange(Protocol):
    def __contains__(self, hash_key: object) -> bool: ...


class KinesisRecord(NamedTuple):
    """One record of a Lambda Kinesis event, checked and base64-decoded."""

    stream: str
    shard_id: str
    sequence_number: str
    partition_key: str
    explicit_hash_key: str | None
    data: bytes
    approximate_arrival: float


def _field(record: Mapping[str, Any], index: int, *path: str) -> Any:
    value: Any = record
    for depth, name in enumerate(path):
        if not isinstance(value, Mapping) or name not in value:
            raise EventError(index, ".".join(path[: depth + 1]), "is missing")
        value = value[name]
    return value


def _decimal(value: object) -> bool:
    return isinstance(value, str) and value.isascii() and value.isdigit()


def stream_and_shard(event_record: Mapping[str, Any], index: int = 0) -> tuple[str, str]:
    """(stream name, shard id) of a Lambda Kinesis event record, from its ARN and event id."""
    arn = _field(event_record, index, "eventSourceARN")
    event_id = _field(event_record, index, "eventID")
    if not isinstance(arn, str) or ":stream/" not in arn:
        raise EventError(index, "eventSourceARN", f"is not a Kinesis stream ARN: {arn!r}")
    if not isinstance(event_id, str) or ":" not in event_id:
        raise EventError(index, "eventID", f"is not '<shard id>:<sequence number>': {event_id!r}")
    return arn.split(":stream/", 1)[1].split("/", 1)[0], event_id.split(":", 1)[0]


def read_record(event_record: Mapping[str, Any], index: int) -> KinesisRecord:
    """One event record, every field checked; `EventError` names the index and the first bad field."""
    if not isinstance(event_record, Mapping):
        raise EventError(index, "(record)", f"is not an object: {type(event_record).__name__}")
    stream, shard_id = stream_and_shard(event_record, index)
    kinesis = _field(event_record, index, "kinesis")
    if not isinstance(kinesis, Mapping):
        raise EventError(index, "kinesis", f"is not an object: {type(kinesis).__name__}")
    sequence = _field(event_record, index, "kinesis", "sequenceNumber")
    if not _decimal(sequence):
        raise EventError(index, "kinesis.sequenceNumber", f"is not a decimal string: {sequence!r}")
    key = _field(event_record, index, "kinesis", "partitionKey")
    if not isinstance(key, str):
        raise EventError(index, "kinesis.partitionKey", f"is not a string: {key!r}")
    explicit = kinesis.get("explicitHashKey")
    if explicit is not None and not _decimal(explicit):
        raise EventError(index, "kinesis.explicitHashKey", f"is not a decimal string: {explicit!r}")
    arrival = kinesis.get("approximateArrivalTimestamp")
    if arrival is None:
        arrival = 0.0
    elif isinstance(arrival, bool) or not isinstance(arrival, int | float) or not math.isfinite(arrival):
        raise EventError(index, "kinesis.approximateArrivalTimestamp", f"is not epoch seconds: {arrival!r}")
    encoded = _field(event_record, index, "kinesis", "data")
    if not isinstance(encoded, str):
        raise EventError(index, "kinesis.data", f"is not a base64 string: {type(encoded).__name__}")
    try:
        data = base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise EventError(index, "kinesis.data", f"is not valid base64 ({exc})") from None
    return KinesisRecord(stream, shard_id, sequence, key, explicit, data, float(arrival))


def read_event(event: object) -> dict[tuple[str, str], list[KinesisRecord]]:
    """Every record of a Lambda Kinesis event, checked before anything runs, by (stream, shard).

    Raises `EventError` (index and field) for the first malformed record: no handler has run yet.
    """
    if not isinstance(event, Mapping):
        raise EventError(-1, "(event)", f"is not an object: {type(event).__name__}")
    event_records = event.get("Records") or []
    if not isinstance(event_records, list):
        raise EventError(-1, "Records", f"is not a list: {type(event_records).__name__}")
    by_shard: dict[tuple[str, str], list[KinesisRecord]] = {}
    for index, event_record in enumerate(event_records):
        record = read_record(event_record, index)
        by_shard.setdefault((record.stream, record.shard_id), []).append(record)
    return by_shard


def deaggregate(
    kinesis_event_records: Sequence[Mapping[str, Any]],
    *,
    hash_range: _HashRange | None = None,
    metrics: _Counter | None = None,
) -> list[ConsumedRecord]:
    """Every user record of the event's Kinesis records, in order.

    Raises `EventError` (index and field) for a malformed record, before returning anything.
    `hash_range`, when given, is the shard's: sub-records outside it are counted
    (`OutOfRangeRecords`) and still delivered. Counts go to `metrics` when given.
    """
    records = [read_record(event_record, index) for index, event_record in enumerate(kinesis_event_records)]
    return user_records(records, hash_range=hash_range, metrics=metrics)


def user_records(
    records: Sequence[KinesisRecord],
    *,
    hash_range: _HashRange | None = None,
    metrics: _Counter | None = None,
) -> list[ConsumedRecord]:
    """The user records of checked Kinesis records (`read_event`), in order: see `deaggregate`."""
    out: list[ConsumedRecord] = []
    make = tuple.__new__  # ConsumedRecord is a NamedTuple: skip its Python-level __new__
    passed_through = out_of_range = 0
    for stream, shard_id, sequence, key, explicit, data, arrival in records:
        if is_aggregated(data):
            try:
                users = decode(data)
            except AggregationError:
                users = None
                passed_through += 1
            if users is not None:
                for sub, user in enumerate(users):
                    if hash_range is not None and hash_key(user) not in hash_range:
                        out_of_range += 1
                    out.append(
                        make(
                            ConsumedRecord,
                            (stream, shard_id, sequence, sub, user[0], user[2], user[1], arrival),
                        )
                    )
                continue
        out.append(make(ConsumedRecord, (stream, shard_id, sequence, None, key, explicit, data, arrival)))
    if metrics is not None:
        metrics.count("UserRecords", len(out))
        metrics.count("CorruptAggregatesPassedThrough", passed_through)
        metrics.count("OutOfRangeRecords", out_of_range)
    return out
