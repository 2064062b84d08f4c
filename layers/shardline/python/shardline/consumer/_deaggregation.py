"""Lambda Kinesis events to user records: base64, KPL de-aggregation, positions.

A Kinesis record that is not a KPL aggregate — or claims to be one but fails its MD5 or cannot be
decoded — is passed through as one user record (as the KCL does), and counted. A sub-record whose
hash key lies outside the shard's range is delivered, never dropped, and counted (the KCL drops
the whole aggregate in that case).
"""

from __future__ import annotations

import base64
import binascii
import json
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


def _field(record: Mapping[str, Any], index: int, *path: str) -> Any:
    value: Any = record
    for depth, name in enumerate(path):
        if not isinstance(value, Mapping) or name not in value:
            raise EventError(index, ".".join(path[: depth + 1]), "is missing")
        value = value[name]
    return value


def stream_and_shard(event_record: Mapping[str, Any], index: int = 0) -> tuple[str, str]:
    """(stream name, shard id) of a Lambda Kinesis event record, from its ARN and event id."""
    arn = _field(event_record, index, "eventSourceARN")
    event_id = _field(event_record, index, "eventID")
    if not isinstance(arn, str) or ":stream/" not in arn:
        raise EventError(index, "eventSourceARN", f"is not a Kinesis stream ARN: {arn!r}")
    if not isinstance(event_id, str) or ":" not in event_id:
        raise EventError(index, "eventID", f"is not '<shard id>:<sequence number>': {event_id!r}")
    return arn.split(":stream/", 1)[1].split("/", 1)[0], event_id.split(":", 1)[0]


def deaggregate(
    kinesis_event_records: Sequence[Mapping[str, Any]],
    *,
    hash_range: _HashRange | None = None,
    metrics: _Counter | None = None,
) -> list[ConsumedRecord]:
    """Every user record of the event's Kinesis records, in order.

    Raises `EventError` (index and field) for a record missing a field or with bad base64.
    `hash_range`, when given, is the shard's: sub-records outside it are counted
    (`OutOfRangeRecords`) and still delivered. Counts go to `metrics` when given.
    """
    out: list[ConsumedRecord] = []
    make = tuple.__new__  # ConsumedRecord is a NamedTuple: skip its Python-level __new__
    passed_through = out_of_range = 0
    for index, event_record in enumerate(kinesis_event_records):
        stream, shard_id = stream_and_shard(event_record, index)
        kinesis = _field(event_record, index, "kinesis")
        sequence = _field(event_record, index, "kinesis", "sequenceNumber")
        encoded = _field(event_record, index, "kinesis", "data")
        arrival = float(kinesis.get("approximateArrivalTimestamp") or 0.0)
        try:
            data = base64.b64decode(encoded, validate=True)
        except (binascii.Error, TypeError, ValueError) as exc:
            raise EventError(index, "kinesis.data", f"is not valid base64 ({exc})") from None
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
        key = _field(event_record, index, "kinesis", "partitionKey")
        out.append(
            make(
                ConsumedRecord,
                (stream, shard_id, sequence, None, key, kinesis.get("explicitHashKey"), data, arrival),
            )
        )
    if metrics is not None:
        metrics.count("UserRecords", len(out))
        metrics.count("CorruptAggregatesPassedThrough", passed_through)
        metrics.count("OutOfRangeRecords", out_of_range)
    return out
