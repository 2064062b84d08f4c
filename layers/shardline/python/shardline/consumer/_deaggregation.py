"""Lambda Kinesis events to user records: every field checked, base64, KPL de-aggregation, positions.

A Kinesis record that is not a KPL aggregate — or claims to be one but fails its MD5, cannot be
decoded, or holds keys Kinesis would have refused (an empty partition key, one over 256 UTF-16
code units, a hash key that is not a decimal below 2**128: a forged aggregate, not a KPL's) — is
passed through as one user record (as the KCL does), counted (`CorruptAggregatesPassedThrough`)
and logged with its sequence number and what is wrong.

Identity: a user record carries the ids it arrived with — `ConsumedRecord.id`, the
caller's own (the `sl.id` tag, or `sl.k` for one derived from an Idempotency-Key:
`id_derived`), `ConsumedRecord.caller`, who asked for it to be written (the aggregate's `sl.c`
tag; None when absent), and `ConsumedRecord.aggregate_id`, the id of the shardline aggregate it
came in (the `sl.a` tag), None for records of other producers. An id belongs to its caller:
`scoped_id` names it for keys, `payload_hash` says what "the same payload" is for it. shardline's producer
re-routes an aggregate whose members span shards (after a reshard) to each member's shard, the
same aggregate each time; so, for an aggregate that carries a valid shardline id, a member whose
hash key lies outside the shard's range is skipped, never delivered (`OutOfRangeRecordsSkipped`):
the copy in that member's own shard delivers it. A member outside the range of a foreign
aggregate (no id) is delivered, never dropped, and counted (`OutOfRangeRecords`; the KCL drops
the whole aggregate in that case). With a `dedup` run (`_dedup_run.DedupRun`), a Kinesis record
that is a copy of an aggregate already applied is skipped whole (`AggregateCopiesSkipped`).
"""

from __future__ import annotations

import binascii
import json
import logging
import math
from collections.abc import Iterator, Mapping, Sequence
from itertools import count, repeat
from typing import Any, NamedTuple, Protocol

from shardline.errors import AggregationError, EventError
from shardline.kinesis._payload import payload_hash
from shardline.kinesis._positions import Position
from shardline.kinesis._records import hash_key
from shardline.kpl._decode import decode, decode_columns, is_aggregated, members
from shardline.kpl._identity import AggregateId, caller_scope
from shardline.kpl._walk import Columns

logger = logging.getLogger(__name__)


class ConsumedRecord(NamedTuple):
    """A user record as a consumer sees it.

    `sub_sequence_number` is its index in a KPL aggregate, None when the Kinesis record was not
    aggregated. `approximate_arrival` is the epoch seconds Kinesis received the Kinesis record.
    `aggregate_id` is the id of the shardline aggregate it came in (`AggregateId.parse` reads
    it), None outside one; `id` is the caller's own id for the record (HTTP: its `id`, or
    `<Idempotency-Key>:<index>` with `id_derived` True), None when it was given none; `caller` is
    who asked for it to be written (HTTP: the authenticated principal; a library producer's
    `ProducerConfig.caller`), None when the aggregate names none. An id is the caller's: a sink
    that must apply a client id once keys its item or guard by `scoped_id`, never by `id`
    (`shardline.consumer.once`, `idempotent_put`), and passes `payload_hash`, so that the same id
    re-used with another payload is a conflict, not a copy. Copies of an aggregate are skipped for you.
    """

    stream: str
    shard_id: str
    sequence_number: str
    sub_sequence_number: int | None
    partition_key: str
    explicit_hash_key: str | None
    data: bytes
    approximate_arrival: float
    aggregate_id: str | None = None
    id: str | None = None
    caller: str | None = None
    id_derived: bool = False

    @property
    def scoped_id(self) -> str | None:
        """The record's id as its caller's (`<caller scope>/<i|k>/<id>`: explicit `i`, derived
        `k`), the one name every key built from an id uses; None when the record has no id."""
        if self.id is None:
            return None
        return f"{caller_scope(self.caller)}/{'k' if self.id_derived else 'i'}/{self.id}"

    @property
    def payload_hash(self) -> str:
        """The hex SHA-256 of (partition key, explicit hash key or "", data): what "the same
        payload" means for a re-used id (`shardline.kinesis._payload`)."""
        return payload_hash(self.partition_key, self.explicit_hash_key, self.data)

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


class _Dedup(Protocol):
    """What de-aggregation asks of the applied-aggregate state (`_dedup_run.DedupRun`)."""

    def admit(self, aggregate_id: str, sequence: str, arrival: float, caller: str | None = None) -> bool: ...

    def replayed(self, sequence: str) -> bool: ...

    def covered(self) -> list[int] | None: ...

    def ends_at(self, sub_sequence: int | None, partial: bool = False) -> None: ...


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


def _is_shardline_id(value: str) -> bool:
    try:
        AggregateId.parse(value)
    except AggregationError:
        return False
    return True


def _within(key_hash: int, ranges: list[int]) -> bool:
    return any(ranges[at] <= key_hash <= ranges[at + 1] for at in range(0, len(ranges), 2))


def sub_record_count(data: bytes) -> int:
    """User records a Kinesis record's data holds as a consumer reads it (1 unless a decodable KPL
    aggregate): the checkpoint past its last one is at sub-sequence count - 1."""
    if not is_aggregated(data):
        return 1
    try:
        return len(decode(data))
    except AggregationError:
        return 1


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
        # `b64decode(validate=True)` is this call after an ASCII copy of the text: a quarter slower
        # on a 1 MB batch, with the same answers and errors.
        data = binascii.a2b_base64(encoded, strict_mode=True)
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
    `hash_range`, when given, is the shard's: members of a shardline aggregate (one with an id)
    outside it are skipped (`OutOfRangeRecordsSkipped`), sub-records of other aggregates outside
    it are counted (`OutOfRangeRecords`) and still delivered. Counts go to `metrics` when given.
    """
    records = [read_record(event_record, index) for index, event_record in enumerate(kinesis_event_records)]
    return user_records(records, hash_range=hash_range, metrics=metrics)


def user_records(  # noqa: C901 -- over the gate before it existed; issue 26 cuts it
    records: Sequence[KinesisRecord],
    *,
    hash_range: _HashRange | None = None,
    metrics: _Counter | None = None,
    dedup: _Dedup | None = None,
    sub_counts: dict[str, int] | None = None,
) -> list[ConsumedRecord]:
    """The user records of checked Kinesis records (`read_event`), in order: see `deaggregate`.

    With `dedup`, each shardline aggregate is first offered to `dedup.admit` (False: a copy of an
    aggregate already applied, skipped whole), then told where its last delivered member is.
    `sub_counts` gets, by sequence number, the user records of each aggregate decoded
    (`sub_record_count`, without decoding it again)."""
    out: list[ConsumedRecord] = []
    append = out.append
    make = tuple.__new__  # ConsumedRecord is a NamedTuple: skip its Python-level __new__
    passed_through = out_of_range = skipped_out_of_range = copies = replayed = 0
    for stream, shard_id, sequence, key, explicit, data, arrival in records:
        if is_aggregated(data):
            try:
                columns: Columns | None = decode_columns(data)
            except AggregationError as corrupt:
                columns = None
                passed_through += 1
                logger.warning(
                    "shard %s: Kinesis record %s looks like a KPL aggregate but is not one (%s): "
                    "passed through whole, as one record",
                    shard_id,
                    sequence,
                    corrupt,
                )
            if columns is not None:
                size, aggregate_id = len(columns.data), columns.aggregate_id
                if sub_counts is not None:
                    sub_counts[sequence] = size
                covered = None
                if aggregate_id is not None and dedup is not None:
                    if not dedup.admit(aggregate_id, sequence, arrival, columns.caller if size else None):
                        if dedup.replayed(sequence):
                            replayed += size
                        else:
                            copies += 1
                        continue
                    before, outside = len(out), skipped_out_of_range
                    covered = dedup.covered()
                if hash_range is None and covered is None:  # the hot path: no object per member here
                    out += _consumed(columns, stream, shard_id, sequence, arrival)
                else:
                    skip_outside = aggregate_id is not None and _is_shardline_id(aggregate_id)
                    users = members(columns)
                    for sub, user in enumerate(users):
                        key_hash = hash_key(user)
                        if hash_range is not None and key_hash not in hash_range:
                            if skip_outside:
                                skipped_out_of_range += 1
                                continue
                            out_of_range += 1
                        if covered is not None and _within(key_hash, covered):
                            replayed += 1  # a parent applied it (a copy re-routed after a merge)
                            continue
                        append(
                            make(
                                ConsumedRecord,
                                (
                                    stream, shard_id, sequence, sub, user[0], user[2],
                                    user[1], arrival, aggregate_id, user[3], user[4], user[5],
                                ),
                            )
                        )  # fmt: skip
                if aggregate_id is not None and dedup is not None:
                    dedup.ends_at(out[-1][3] if len(out) > before else None, skipped_out_of_range > outside)
                continue
        append(
            make(
                ConsumedRecord,
                (stream, shard_id, sequence, None, key, explicit, data, arrival, None, None, None, False),
            )
        )
    if metrics is not None:
        metrics.count("UserRecords", len(out) + replayed)
        metrics.count("CorruptAggregatesPassedThrough", passed_through)
        metrics.count("OutOfRangeRecords", out_of_range)
        metrics.count("OutOfRangeRecordsSkipped", skipped_out_of_range)
        metrics.count("AggregateCopiesSkipped", copies)
        metrics.count("DuplicatesSkipped", replayed)
    return out


def _consumed(
    columns: Columns, stream: str, shard_id: str, sequence: str, arrival: float
) -> Iterator[ConsumedRecord]:
    """An aggregate's members as `ConsumedRecord`s, made by `map` and `zip` in C: one tuple per
    member, no Python frame per member (ConsumedRecord's own __new__ is Python's: skipped)."""
    hash_keys: Iterator[str | None] | list[str | None]
    ids: Iterator[str | None] | list[str | None]
    derived: Iterator[bool] | list[bool]
    if columns.odd:
        hash_keys, (ids, derived) = columns.hash_keys(), columns.ids()
    else:  # the common aggregate: no member has a hash key or an id
        hash_keys, ids, derived = repeat(None), repeat(None), repeat(False)
    fields = zip(
        repeat(stream), repeat(shard_id), repeat(sequence), count(), columns.keys, hash_keys,
        columns.data, repeat(arrival), repeat(columns.aggregate_id), ids, repeat(columns.caller), derived,
    )  # fmt: skip
    return map(tuple.__new__, repeat(ConsumedRecord), fields)
