"""User records, their hash keys, and validation before anything is sent.

A `UserRecord` is what a caller hands to shardline: a partition key, a data blob, rarely an
explicit hash key, and optionally the caller's own id for the record (carried to the consumers,
which apply each id once: a record posted again with the same id is not applied twice). An id
belongs to its caller (`caller`: who asked shardline to write the record, stamped by the producer,
never claimed by a body), and an id derived from an `Idempotency-Key` (`id_derived`) lives apart
from explicit ids: explicit `k:1` and derived `k:1` are two identities. Its
hash key (`hash_key`) decides its shard. `validate` checks a whole batch against
`shardline.kinesis._limits` and reports every problem with the record's index and field, so a
caller can reject a request before one byte reaches Kinesis. A partition key's length is
counted as Kinesis counts it (`partition_key_length`: UTF-16 code units).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from typing import NamedTuple

from shardline.errors import InvalidRecord, RecordProblem
from shardline.kinesis._limits import (
    DEFAULT_LIMITS,
    MAX_CALLER_LENGTH,
    MAX_HASH_KEY,
    MAX_PARTITION_KEY_LENGTH,
    MAX_RECORD_ID_LENGTH,
    MIN_PARTITION_KEY_LENGTH,
    Limits,
    envelope_size,
)

# The service's pattern: at most 39 digits (2**128-1 has 39), no leading zeros.
_DECIMAL_HASH_KEY = re.compile(r"0|[1-9][0-9]{0,38}")
#: A record id: visible ASCII, no spaces (it travels in headers, JSON and DynamoDB keys unescaped).
_RECORD_ID = re.compile(rf"[\x21-\x7e]{{1,{MAX_RECORD_ID_LENGTH}}}")
#: A caller: visible ASCII, no spaces ("" is "no caller": this deployment's library producers).
_CALLER = re.compile(rf"[\x21-\x7e]{{0,{MAX_CALLER_LENGTH}}}")


class UserRecord(NamedTuple):
    """One record as the user sees it. Immutable; cheap to create (the decoder makes millions).

    `id` is the caller's identity for the record (1 to 128 visible ASCII characters), or None.
    shardline consumers apply a record with an id at most once per (caller, id), however often it
    is sent. `caller` is who asked shardline to write it (at most 512 visible ASCII characters;
    None: the producer's own `ProducerConfig.caller`; "": no caller). `id_derived` is True when
    `id` was derived from an `Idempotency-Key` (`<key>:<index>`), not given by the caller.
    """

    partition_key: str
    data: bytes
    explicit_hash_key: str | None = None
    id: str | None = None
    caller: str | None = None
    id_derived: bool = False


def md5_hash_key(partition_key: str) -> int:
    """The hash key Kinesis derives from a partition key: MD5 of its UTF-8 bytes, big-endian."""
    return int.from_bytes(hashlib.md5(partition_key.encode("utf-8")).digest(), "big")


def hash_key(record: UserRecord) -> int:
    """The 128-bit hash key that decides `record`'s shard."""
    if record.explicit_hash_key is not None:
        return int(record.explicit_hash_key)
    return md5_hash_key(record.partition_key)


def partition_key_length(partition_key: str) -> int:
    """The length Kinesis checks against 1..256: UTF-16 code units, not code points.

    The service (a JVM) and kinesis-mock measure a Java String, so a character beyond U+FFFF
    counts twice; counting code points would pass a key of 200 emoji (400 units), and Kinesis
    would then reject the whole PutRecords request, every other record of it included.
    """
    # surrogatepass: a lone surrogate is one unit, as in Java; the UTF-8 check rejects it later.
    return len(partition_key.encode("utf-16-le", "surrogatepass")) // 2


def record_size(record: UserRecord) -> int:
    """Bytes the record counts against the record-size limit: data plus UTF-8 partition key."""
    return len(record.data) + len(record.partition_key.encode("utf-8"))


def caller_problem(caller: object) -> str | None:
    """What is wrong with `caller` as a caller (a str of at most 512 visible ASCII characters,
    "" included), or None."""
    if not isinstance(caller, str):
        return f"must be a str, got {type(caller).__name__}"
    if not _CALLER.fullmatch(caller):
        shown = f"{caller[:40]!r}{'...' if len(caller) > 40 else ''}"
        return (
            f"must be at most {MAX_CALLER_LENGTH} visible ASCII characters (no spaces), "
            f"got {len(caller)} characters: {shown}"
        )
    return None


def find_problems(records: Iterable[object], limits: Limits = DEFAULT_LIMITS) -> list[RecordProblem]:
    """Every problem in `records`, in index order; an empty list means the batch can be sent."""
    problems: list[RecordProblem] = []
    for index, record in enumerate(records):
        problems.extend(_problems_of(index, record, limits))
    return problems


def validate(records: Iterable[object], limits: Limits = DEFAULT_LIMITS) -> list[UserRecord]:
    """Return `records` as a list if all are valid, else raise `InvalidRecord` naming each problem."""
    batch = list(records)
    problems = find_problems(batch, limits)
    if problems:
        raise InvalidRecord(problems)
    return batch  # type: ignore[return-value]  # every element passed the UserRecord checks


def _problems_of(index: int, record: object, limits: Limits) -> list[RecordProblem]:  # noqa: C901 -- over the gate before it existed; issue 26 cuts it
    if not isinstance(record, UserRecord):
        return [RecordProblem(index, "record", f"expected a UserRecord, got {type(record).__name__}")]
    problems: list[RecordProblem] = []
    # Typed as object: a caller's record may hold anything at run time, and that is what is checked.
    key: object = record.partition_key
    key_bytes = 0
    if not isinstance(key, str):
        problems.append(RecordProblem(index, "partition_key", f"must be a str, got {type(key).__name__}"))
    elif not MIN_PARTITION_KEY_LENGTH <= (units := partition_key_length(key)) <= MAX_PARTITION_KEY_LENGTH:
        problems.append(
            RecordProblem(
                index,
                "partition_key",
                f"must be {MIN_PARTITION_KEY_LENGTH} to {MAX_PARTITION_KEY_LENGTH} UTF-16 code units "
                f"(a character beyond U+FFFF, such as an emoji, counts as 2), got {units}",
            )
        )
    else:
        try:
            key_bytes = len(key.encode("utf-8"))
        except UnicodeEncodeError:
            problems.append(RecordProblem(index, "partition_key", "is not encodable as UTF-8"))
    record_id: object = record.id
    id_bytes = 0
    if record_id is not None:
        if not isinstance(record_id, str):
            kind = type(record_id).__name__
            problems.append(RecordProblem(index, "id", f"must be a str or None, got {kind}"))
        elif not _RECORD_ID.fullmatch(record_id):
            problems.append(
                RecordProblem(
                    index,
                    "id",
                    f"must be 1 to {MAX_RECORD_ID_LENGTH} visible ASCII characters (no spaces), "
                    f"got {record_id[:40]!r}{'...' if len(record_id) > 40 else ''}",
                )
            )
        else:
            id_bytes = len(record_id)
    if record.id_derived is not False and (record.id_derived is not True or record_id is None):
        problems.append(
            RecordProblem(index, "id_derived", "must be a bool, and True only for a record with an id")
        )
    caller: object = record.caller
    caller_bytes = 0
    if caller is not None:
        if not isinstance(caller, str):
            kind = type(caller).__name__
            problems.append(RecordProblem(index, "caller", f"must be a str or None, got {kind}"))
        elif (wrong := caller_problem(caller)) is not None:
            problems.append(RecordProblem(index, "caller", wrong))
        else:
            caller_bytes = len(caller)
    data: object = record.data
    if not isinstance(data, bytes):
        problems.append(RecordProblem(index, "data", f"must be bytes, got {type(data).__name__}"))
    elif (size := envelope_size(len(data), key_bytes, id_bytes, caller_bytes)) > limits.max_record_size:
        problems.append(
            RecordProblem(
                index,
                "data",
                f"record is {len(data) + key_bytes} bytes (data plus partition key) and {size} in "
                f"shardline's envelope (a one-record KPL aggregate carrying its ids and caller); "
                f"the stream accepts at most {limits.max_record_size}",
            )
        )
    ehk: object = record.explicit_hash_key
    if ehk is not None:
        if not isinstance(ehk, str):
            problems.append(
                RecordProblem(index, "explicit_hash_key", f"must be a str or None, got {type(ehk).__name__}")
            )
        elif not _DECIMAL_HASH_KEY.fullmatch(ehk):
            problems.append(
                RecordProblem(index, "explicit_hash_key", "must be a decimal integer without leading zeros")
            )
        elif int(ehk) > MAX_HASH_KEY:
            problems.append(RecordProblem(index, "explicit_hash_key", "must be within 0..2**128-1"))
    return problems
