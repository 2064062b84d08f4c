"""Record objects of the producer's HTTP contract to `UserRecord`s, with every problem named.

A record object is `{"data": <base64>, "partitionKey": str, "explicitHashKey": str?, "id": str?}`,
or has `"json": <any JSON value>` instead of `data` (sent as compact UTF-8 JSON). `id` is the
client's identity for the record (1 to 128 visible ASCII characters): shardline consumers apply a
record with an id once, however often it is posted. A request's `Idempotency-Key` (see
`_http_request`) gives every record without its own id the id `<key>:<index>`, marked derived
(`UserRecord.id_derived`): consumers keep derived ids apart from explicit ones, so a client's id
`k:1` never meets another request's derived `k:1`. Two records of one request may not share an id
(explicit with explicit, derived with derived). Every record is stamped with the request's
authenticated caller (`_http_caller`): a record object has no field for it, so a body that claims
one is refused. Problems are reported with the record's index and the field as the HTTP contract
names it; messages never echo payloads.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Sequence
from typing import Any

from shardline.errors import InvalidRecord, RecordProblem
from shardline.kinesis._limits import DEFAULT_LIMITS, Limits
from shardline.kinesis._records import UserRecord, find_problems

_RECORD_FIELDS = frozenset({"data", "json", "partitionKey", "explicitHashKey", "id"})
_LIBRARY_FIELDS = {"partition_key": "partitionKey", "explicit_hash_key": "explicitHashKey"}
REFUSED_EXPLICIT_HASH_KEY = (
    "is not accepted on this stream: its records are routed by their partition key only"
)


def to_user_records(
    items: Sequence[Any],
    limits: Limits = DEFAULT_LIMITS,
    *,
    idempotency_key: str | None = None,
    explicit_hash_keys: bool = True,
    caller: str | None = None,
) -> list[UserRecord]:
    """Convert every record object, or raise `InvalidRecord` listing every problem of every record.

    With `idempotency_key` (already checked: `_http_request.check_idempotency_key`), a record
    without its own `id` gets `<key>:<index>`, derived. With `explicit_hash_keys=False` a record
    that gives an `explicitHashKey` is refused (the stream routes by partition key only). Every
    record gets `caller` (the authenticated principal; None: the producer's own caller)."""
    records: list[UserRecord] = []
    problems: list[RecordProblem] = []
    first_index: dict[tuple[bool, str], int] = {}
    for index, item in enumerate(items):
        default_id = None if idempotency_key is None else derived_id(idempotency_key, index)
        record, found = to_user_record(index, item, limits, default_id=default_id, caller=caller)
        problems.extend(found)
        if not explicit_hash_keys and isinstance(item, dict) and "explicitHashKey" in item:
            problems.append(RecordProblem(index, "explicitHashKey", REFUSED_EXPLICIT_HASH_KEY))
            continue
        if record is None:
            continue
        records.append(record)
        if record.id is not None:
            earlier = first_index.setdefault((record.id_derived, record.id), index)
            if earlier != index:
                problems.append(RecordProblem(index, "id", f"is the id of record {earlier} too"))
    if problems:
        raise InvalidRecord(problems)
    return records


def derived_id(idempotency_key: str, index: int) -> str:
    """The id a record without its own gets from the request's `Idempotency-Key`."""
    return f"{idempotency_key}:{index}"


def to_user_record(
    index: int,
    item: Any,
    limits: Limits = DEFAULT_LIMITS,
    *,
    default_id: str | None = None,
    caller: str | None = None,
) -> tuple[UserRecord | None, list[RecordProblem]]:
    """One record object as a `UserRecord`, or None and its problems, fields named as in the contract.
    `default_id` is the record's (derived) id when it gives none of its own; `caller` its caller."""
    if not isinstance(item, dict):
        return None, [RecordProblem(index, "record", f"must be a JSON object, got {_json_type(item)}")]
    payload_field, data, payload_problem = _payload(index, item)
    problems = _unknown_field_problems(index, item)
    problems += [payload_problem] if payload_problem is not None else []
    problems += _key_type_problems(index, item)
    key, explicit, record_id = item.get("partitionKey"), item.get("explicitHashKey"), item.get("id")
    if record_id is not None and not isinstance(record_id, str):
        problems.append(RecordProblem(index, "id", f"must be a string, got {_json_type(record_id)}"))
    if (
        not isinstance(key, str)
        or not (explicit is None or isinstance(explicit, str))
        or not (record_id is None or isinstance(record_id, str))
    ):
        return None, problems
    derived = record_id is None and default_id is not None
    record = UserRecord(key, data or b"", explicit, default_id if derived else record_id, caller, derived)
    problems += _kinesis_problems(index, record, payload_field, limits, check_size=data is not None)
    return (None, problems) if problems else (record, [])


def _unknown_field_problems(index: int, item: dict[str, Any]) -> list[RecordProblem]:
    """A problem for every field the contract does not define (a typo must not be ignored)."""
    return [
        RecordProblem(index, name[:64], "is not a known field") for name in item if name not in _RECORD_FIELDS
    ]


def _key_type_problems(index: int, item: dict[str, Any]) -> list[RecordProblem]:
    """Problems with the JSON types of `partitionKey` (required string) and `explicitHashKey` (string)."""
    problems: list[RecordProblem] = []
    key = item.get("partitionKey")
    if key is None:
        problems.append(RecordProblem(index, "partitionKey", "is required"))
    elif not isinstance(key, str):
        problems.append(RecordProblem(index, "partitionKey", f"must be a string, got {_json_type(key)}"))
    explicit = item.get("explicitHashKey")
    if explicit is not None and not isinstance(explicit, str):
        message = f"must be a string of decimal digits, got {_json_type(explicit)}"
        problems.append(RecordProblem(index, "explicitHashKey", message))
    return problems


def _kinesis_problems(
    index: int, record: UserRecord, payload_field: str, limits: Limits, *, check_size: bool
) -> list[RecordProblem]:
    """The Kinesis rules (`shardline.kinesis.find_problems`), fields renamed; the size rule only if
    the payload decoded."""
    problems: list[RecordProblem] = []
    for problem in find_problems([record], limits):
        if problem.field == "data":
            if check_size:
                problems.append(RecordProblem(index, payload_field, problem.message))
        else:
            problems.append(
                RecordProblem(index, _LIBRARY_FIELDS.get(problem.field, problem.field), problem.message)
            )
    return problems


def _payload(index: int, item: dict[str, Any]) -> tuple[str, bytes | None, RecordProblem | None]:
    """Which payload field the record uses, its bytes, and what is wrong with it (if anything)."""
    has_data, has_json = "data" in item, "json" in item
    if has_data and has_json:
        return "data", None, RecordProblem(index, "data", 'give either "data" or "json", not both')
    if has_json:
        try:
            text = json.dumps(item["json"], separators=(",", ":"), ensure_ascii=False, allow_nan=False)
            return "json", text.encode("utf-8"), None
        except UnicodeEncodeError:
            return "json", None, RecordProblem(index, "json", "holds a string that is not valid Unicode")
        except ValueError:  # a number such as 1e400 parses as infinity, which JSON cannot hold
            return "json", None, RecordProblem(index, "json", "holds a number too large for a float")
    if not has_data:
        return "data", None, RecordProblem(index, "data", 'is required (base64), unless "json" is given')
    value = item["data"]
    if not isinstance(value, str):
        return "data", None, RecordProblem(index, "data", f"must be a base64 string, got {_json_type(value)}")
    try:
        return "data", base64.b64decode(value, validate=True), None
    except (binascii.Error, ValueError):
        return "data", None, RecordProblem(index, "data", "is not valid base64")


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"
