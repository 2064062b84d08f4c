"""An in-memory Kinesis data stream: build a `Producer` on it as on boto3's client, and read back
what each shard holds.

    kinesis = InMemoryKinesis("events", shard_count=4, clock=clock)
    producer = Producer(kinesis, "events", clock=clock, sleep=clock.sleep)
    kinesis.fail_next(Fault.LOSE_REPLY)        # the next PutRecords lands, its reply is lost
    producer.put_many(records)
    kinesis.user_records(kinesis.shard_of(hash_key(records[0])))   # aggregates decoded

As httpx's `MockTransport` stands where a transport goes, `InMemoryKinesis` stands where the
Kinesis client goes: it has the calls of `shardline.protocols.KinesisClient` (PutRecords and
ListShards), taking keyword arguments and returning the response dict as boto3 does, and raising
as botocore raises.

Like Kinesis, where a producer relies on it:
- Shards split the 128-bit hash-key space evenly (`shardId-000000000000`, ...); a record lands in
  the open shard whose range holds its explicit hash key, else its partition key's MD5.
  `split_shard` reshards: the parent closes (listed with an `EndingSequenceNumber`), two children
  open. ListShards pages with `MaxResults`/`NextToken` and honours `ShardFilter` `AT_LATEST`.
- PutRecords answers per record: `SequenceNumber` and `ShardId`, or `ErrorCode`/`ErrorMessage`
  (then nothing of that record is written), with `FailedRecordCount`. Sequence numbers are
  56-digit strings that increase within a shard (and across the stream).
- With `enforce_limits=True` each shard takes at most `limits.shard_write_records_per_second`
  records and `limits.shard_write_bytes_per_second` bytes (data plus partition key) in any one
  second of `clock`; a record over either is refused `ProvisionedThroughputExceededException`.
- Validation as botocore raises it: a missing, unknown or mistyped parameter or an empty one is
  botocore's `ParamValidationError` (checked client-side, nothing sent); more than
  `limits.max_records_per_request` records, a partition key over 256 characters or a record over
  `limits.max_record_size` is a `ClientError` `ValidationException`; a request over
  `limits.max_request_size` or a bad explicit hash key is `InvalidArgumentException`; another
  stream's name is `ResourceNotFoundException`.

Faults (`fail_next`), queued per operation and applied one per call: `Fault.THROTTLE` refuses
every record of a PutRecords `ProvisionedThroughputExceededException` (a ListShards raises
`LimitExceededException`); `Fault.REFUSE` refuses every record `InternalFailure`; `Fault.FAIL`
raises a 500 `InternalFailure` before anything is written; `Fault.LOSE_REPLY` writes, then raises
botocore's `ReadTimeoutError` as a lost reply does.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Mapping
from enum import StrEnum
from typing import Any, NamedTuple

from botocore.exceptions import ClientError, ParamValidationError, ReadTimeoutError

from shardline.kinesis._limits import DEFAULT_LIMITS, MAX_HASH_KEY, MAX_PARTITION_KEY_LENGTH, Limits
from shardline.kinesis._records import UserRecord, md5_hash_key
from shardline.kpl._decode import decode, is_aggregated
from shardline.testing._events import FIRST_SEQUENCE, SEQUENCE_STEP

THROTTLED = "ProvisionedThroughputExceededException"
_PUT_PARAMETERS = frozenset({"StreamName", "StreamARN", "Records"})
_ENTRY_PARAMETERS = frozenset({"Data", "PartitionKey", "ExplicitHashKey"})
_LIST_PARAMETERS = frozenset(
    {"StreamName", "StreamARN", "NextToken", "MaxResults", "ShardFilter", "ExclusiveStartShardId"}
)


class Fault(StrEnum):
    """What `InMemoryKinesis.fail_next` does to one call."""

    THROTTLE = "throttle"  # every record refused for the shard's write limit (nothing written)
    REFUSE = "refuse"  # every record refused InternalFailure (nothing written)
    FAIL = "fail"  # the call fails with a 500 InternalFailure before anything is written
    LOSE_REPLY = "lose-reply"  # the records are written, then the reply is lost (a read timeout)


class StoredRecord(NamedTuple):
    """One Kinesis record as a shard holds it: what PutRecords sent, and where it sits."""

    shard_id: str
    sequence_number: str
    partition_key: str
    data: bytes
    explicit_hash_key: str | None
    arrived: float  # on the stream's clock

    def user_records(self) -> list[UserRecord]:
        """Its user records: a KPL aggregate decoded by shardline's decoder, else the record itself."""
        if is_aggregated(self.data):
            return decode(self.data)
        return [UserRecord(self.partition_key, self.data, self.explicit_hash_key)]


class _Shard:
    __slots__ = ("closed_at", "end", "parent", "records", "shard_id", "start", "writes")

    def __init__(self, shard_id: str, start: int, end: int, parent: str | None = None) -> None:
        self.shard_id = shard_id
        self.start = start
        self.end = end
        self.parent = parent
        self.records: list[StoredRecord] = []
        self.writes: list[tuple[float, int]] = []  # (clock time, bytes) of writes in the last second
        self.closed_at: str | None = None  # the ending sequence number once closed

    def listing(self) -> dict[str, Any]:
        sequence_range = {"StartingSequenceNumber": str(FIRST_SEQUENCE)}
        if self.closed_at is not None:
            sequence_range["EndingSequenceNumber"] = self.closed_at
        shard: dict[str, Any] = {
            "ShardId": self.shard_id,
            "HashKeyRange": {"StartingHashKey": str(self.start), "EndingHashKey": str(self.end)},
            "SequenceNumberRange": sequence_range,
        }
        if self.parent is not None:
            shard["ParentShardId"] = self.parent
        return shard


class InMemoryKinesis:
    """One Kinesis data stream in memory, called as boto3's Kinesis client is (see the module).

    `calls` counts the calls by operation, and `requests` holds every PutRecords' `Records` as sent
    (faulted calls included), so a test can see how the producer packed and retried.
    """

    def __init__(
        self,
        stream_name: str = "events",
        shard_count: int = 1,
        *,
        enforce_limits: bool = False,
        limits: Limits = DEFAULT_LIMITS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if shard_count < 1:
            raise ValueError("shard_count must be at least 1")
        self.stream_name = stream_name
        self.enforce_limits = enforce_limits
        self.limits = limits
        self._clock = clock
        space = MAX_HASH_KEY + 1
        self._shards = [
            _Shard(_shard_id(i), i * space // shard_count, (i + 1) * space // shard_count - 1)
            for i in range(shard_count)
        ]
        self._written = 0
        self._faults: dict[str, list[Fault]] = {}
        self.calls: Counter[str] = Counter()
        self.requests: list[list[Mapping[str, Any]]] = []

    # -- test controls and read-back -----------------------------------------------------------

    def fail_next(self, fault: Fault, times: int = 1, *, operation: str = "PutRecords") -> None:
        """Apply `fault` to the next `times` calls of `operation` ("PutRecords" or "ListShards";
        a ListShards takes `THROTTLE` and `FAIL` only). Faults queue up in order."""
        if operation not in ("PutRecords", "ListShards"):
            raise ValueError(f"operation {operation!r}: PutRecords or ListShards")
        if operation == "ListShards" and fault not in (Fault.THROTTLE, Fault.FAIL):
            raise ValueError(f"ListShards takes Fault.THROTTLE or Fault.FAIL, not {fault}")
        self._faults.setdefault(operation, []).extend([fault] * times)

    def shard_ids(self, *, open_only: bool = False) -> list[str]:
        """Every shard's id (closed ones too, unless `open_only`), in creation order."""
        return [s.shard_id for s in self._shards if not open_only or s.closed_at is None]

    def shard_of(self, hash_key: int) -> str:
        """The open shard whose hash range holds `hash_key`: where a record routed by it lands."""
        return self._open_shard(hash_key).shard_id

    def records(self, shard_id: str) -> list[StoredRecord]:
        """The Kinesis records `shard_id` holds, in sequence-number order."""
        return list(self._shard(shard_id).records)

    def user_records(self, shard_id: str) -> list[UserRecord]:
        """The user records `shard_id` holds, aggregates decoded, in order. A copy written twice (a
        lost reply resent) is there twice, as in a real stream."""
        return [user for record in self._shard(shard_id).records for user in record.user_records()]

    def split_shard(self, shard_id: str, new_starting_hash_key: int) -> tuple[str, str]:
        """Split open shard `shard_id` at `new_starting_hash_key`: it closes, two children open.
        Returns the children's ids (the lower half's first)."""
        parent = self._shard(shard_id)
        if parent.closed_at is not None or not parent.start < new_starting_hash_key <= parent.end:
            raise ValueError(f"cannot split {shard_id} at {new_starting_hash_key}")
        parent.closed_at = self._next_sequence()
        low = _Shard(_shard_id(len(self._shards)), parent.start, new_starting_hash_key - 1, shard_id)
        high = _Shard(_shard_id(len(self._shards) + 1), new_starting_hash_key, parent.end, shard_id)
        self._shards += [low, high]
        return low.shard_id, high.shard_id

    # -- the Kinesis API -------------------------------------------------------------------------

    def put_records(self, **kwargs: Any) -> dict[str, Any]:
        """PutRecords: each record lands, or is answered with an error code (see the module)."""
        self.calls["PutRecords"] += 1
        entries = _checked_put(kwargs)
        self.requests.append(entries)
        self._check_stream(kwargs, "PutRecords")
        routed = self._validated(entries)
        fault = self._fault("PutRecords")
        if fault is Fault.FAIL:
            raise _client_error("InternalFailure", "injected: the service failed", "PutRecords", 500)
        if fault in (Fault.THROTTLE, Fault.REFUSE):
            code = THROTTLED if fault is Fault.THROTTLE else "InternalFailure"
            answers = [_refusal(code) for _ in entries]
        else:
            answers = [self._write(entry, hash_key) for entry, hash_key in zip(entries, routed, strict=True)]
        if fault is Fault.LOSE_REPLY:
            raise ReadTimeoutError(endpoint_url="memory://kinesis (injected: the reply was lost)")
        failed = sum(1 for answer in answers if "ErrorCode" in answer)
        return {"FailedRecordCount": failed, "Records": answers, "ResponseMetadata": {"HTTPStatusCode": 200}}

    def list_shards(self, **kwargs: Any) -> dict[str, Any]:
        """ListShards, paged (`MaxResults`, `NextToken`), `ShardFilter` `AT_LATEST` honoured."""
        self.calls["ListShards"] += 1
        unknown = sorted(set(kwargs) - _LIST_PARAMETERS)
        if unknown:
            raise ParamValidationError(report=f'Unknown parameter in input: "{unknown[0]}"')
        token = kwargs.get("NextToken")
        if token is not None and ({"StreamName", "StreamARN", "ShardFilter"} & set(kwargs)):
            message = "NextToken and StreamName or ShardFilter cannot be provided together."
            raise _client_error("InvalidArgumentException", message, "ListShards")
        if token is None:
            self._check_stream(kwargs, "ListShards")
        fault = self._fault("ListShards")
        if fault is Fault.THROTTLE:
            raise _client_error("LimitExceededException", "injected: rate exceeded", "ListShards")
        if fault is Fault.FAIL:
            raise _client_error("InternalFailure", "injected: the service failed", "ListShards", 500)
        start, latest = (int(token.split(":")[0]), token.endswith(":latest")) if token else (0, False)
        latest = latest or (kwargs.get("ShardFilter") or {}).get("Type") == "AT_LATEST"
        shards = [s for s in self._shards if not latest or s.closed_at is None]
        end = start + int(kwargs.get("MaxResults", 1000))
        response: dict[str, Any] = {"Shards": [s.listing() for s in shards[start:end]]}
        if end < len(shards):
            response["NextToken"] = f"{end}:{'latest' if latest else 'all'}"
        return response

    # -- inside ------------------------------------------------------------------------------

    def _check_stream(self, kwargs: Mapping[str, Any], operation: str) -> None:
        name = kwargs.get("StreamName") or str(kwargs.get("StreamARN", "")).rpartition("/")[2]
        if name != self.stream_name:
            message = f"Stream {name} under account 000000000000 not found."
            raise _client_error("ResourceNotFoundException", message, operation)

    def _validated(self, entries: list[Mapping[str, Any]]) -> list[int]:
        """Each entry's hash key; raises as the service does for a request it rejects whole."""
        limits = self.limits
        if len(entries) > limits.max_records_per_request:
            message = (
                f"1 validation error detected: Value at 'records' failed to satisfy constraint: "
                f"Member must have length less than or equal to {limits.max_records_per_request}"
            )
            raise _client_error("ValidationException", message, "PutRecords")
        total, routed = 0, []
        for index, entry in enumerate(entries):
            key, data = entry["PartitionKey"], _data(entry)
            if len(key) > MAX_PARTITION_KEY_LENGTH or len(data) + len(key.encode()) > limits.max_record_size:
                field = "partitionKey" if len(key) > MAX_PARTITION_KEY_LENGTH else "data"
                message = (
                    f"1 validation error detected: Value at 'records.{index + 1}.member.{field}' "
                    "failed to satisfy constraint: Member must have length within the stream's limit"
                )
                raise _client_error("ValidationException", message, "PutRecords")
            total += len(data) + len(key.encode())
            routed.append(_hash_key_of(entry))
        if total > limits.max_request_size:
            message = f"Records size exceeds {limits.max_request_size // (1024 * 1024)} MB limit"
            raise _client_error("InvalidArgumentException", message, "PutRecords")
        return routed

    def _write(self, entry: Mapping[str, Any], hash_key: int) -> dict[str, str]:
        shard = self._open_shard(hash_key)
        data, key = _data(entry), entry["PartitionKey"]
        size, now = len(data) + len(key.encode()), self._clock()
        if self.enforce_limits and not self._within_limits(shard, size, now):
            return _refusal(THROTTLED)
        sequence = self._next_sequence()
        shard.records.append(
            StoredRecord(shard.shard_id, sequence, key, data, entry.get("ExplicitHashKey"), now)
        )
        return {"SequenceNumber": sequence, "ShardId": shard.shard_id}

    def _within_limits(self, shard: _Shard, size: int, now: float) -> bool:
        """Take one record of `size` bytes from the shard's last second of writes, if both fit."""
        shard.writes = [(at, written) for at, written in shard.writes if at > now - 1.0]
        limits = self.limits
        if len(shard.writes) >= limits.shard_write_records_per_second:
            return False
        if sum(written for _, written in shard.writes) + size > limits.shard_write_bytes_per_second:
            return False
        shard.writes.append((now, size))
        return True

    def _next_sequence(self) -> str:
        self._written += 1
        return str(FIRST_SEQUENCE + self._written * SEQUENCE_STEP)

    def _open_shard(self, hash_key: int) -> _Shard:
        for shard in self._shards:
            if shard.closed_at is None and shard.start <= hash_key <= shard.end:
                return shard
        raise AssertionError(f"no open shard holds {hash_key}: the open shards cover the key space")

    def _shard(self, shard_id: str) -> _Shard:
        for shard in self._shards:
            if shard.shard_id == shard_id:
                return shard
        raise KeyError(f"no shard {shard_id!r}; shards: {self.shard_ids()}")

    def _fault(self, operation: str) -> Fault | None:
        faults = self._faults.get(operation)
        return faults.pop(0) if faults else None


def _checked_put(kwargs: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The Records of a PutRecords call, checked as botocore checks parameters before sending."""
    problems = [f'Unknown parameter in input: "{name}"' for name in sorted(set(kwargs) - _PUT_PARAMETERS)]
    records = kwargs.get("Records")
    if records is None:
        problems.append('Missing required parameter in input: "Records"')
    elif not isinstance(records, list | tuple):
        problems.append(f"Invalid type for parameter Records, value: {records!r}, type: {type(records)}")
    elif not records:
        problems.append("Invalid length for parameter Records, value: 0, valid min length: 1")
    else:
        for index, entry in enumerate(records):
            problems += _entry_problems(index, entry)
    if problems:
        raise ParamValidationError(report="\n".join(problems))
    return list(records)  # type: ignore[arg-type]  # a list or tuple, checked above


def _entry_problems(index: int, entry: object) -> list[str]:
    where = f"Records[{index}]"
    if not isinstance(entry, Mapping):
        return [f"Invalid type for parameter {where}, value: {entry!r}, type: {type(entry)}"]
    problems = [f'Unknown parameter in {where}: "{name}"' for name in sorted(set(entry) - _ENTRY_PARAMETERS)]
    for name, types in (("Data", (bytes, bytearray, str)), ("PartitionKey", (str,))):
        value = entry.get(name)
        if value is None:
            problems.append(f'Missing required parameter in {where}: "{name}"')
        elif not isinstance(value, types):
            problems.append(
                f"Invalid type for parameter {where}.{name}, value: {value!r}, type: {type(value)}"
            )
        elif name == "PartitionKey" and not value:
            problems.append(
                f"Invalid length for parameter {where}.PartitionKey, value: 0, valid min length: 1"
            )
    ehk = entry.get("ExplicitHashKey")
    if ehk is not None and not isinstance(ehk, str):
        problems.append(
            f"Invalid type for parameter {where}.ExplicitHashKey, value: {ehk!r}, type: {type(ehk)}"
        )
    return problems


def _data(entry: Mapping[str, Any]) -> bytes:
    """A blob as botocore sends it: bytes as they are, a str as its UTF-8."""
    data = entry["Data"]
    return data.encode() if isinstance(data, str) else bytes(data)


def _hash_key_of(entry: Mapping[str, Any]) -> int:
    ehk = entry.get("ExplicitHashKey")
    if ehk is None:
        return md5_hash_key(entry["PartitionKey"])
    if not (ehk.isascii() and ehk.isdigit() and int(ehk) <= MAX_HASH_KEY):
        message = (
            "Invalid ExplicitHashKey. ExplicitHashKey must be in the range: [0, 2^128-1]. "
            f"Specified value was {ehk}"
        )
        raise _client_error("InvalidArgumentException", message, "PutRecords")
    return int(ehk)


def _refusal(code: str) -> dict[str, str]:
    if code == THROTTLED:
        return {"ErrorCode": code, "ErrorMessage": "Rate exceeded for shard in stream under account."}
    return {"ErrorCode": code, "ErrorMessage": "Internal service failure."}


def _client_error(code: str, message: str, operation: str, status: int = 400) -> ClientError:
    response: Any = {
        "Error": {"Code": code, "Message": message},
        "ResponseMetadata": {"HTTPStatusCode": status},
    }
    return ClientError(response, operation)


def _shard_id(number: int) -> str:
    return f"shardId-{number:012d}"
