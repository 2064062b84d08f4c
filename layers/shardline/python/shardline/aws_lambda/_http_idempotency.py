"""The producer API's memory of ids: an id re-used with another payload is refused (422), never
dropped by one sink and written over by another.

Per (stream, caller scope, scoped id) the producer function keeps, in a DynamoDB table (the
`ProducerApi` construct's idempotency table), the payload hash of the last record with that id it
wrote — explicit ids and `<Idempotency-Key>:<index>` ids alike, in the two namespaces of the
design (`<scope>/i/<id>`, `<scope>/k/<key>:<index>`). Before a request is sent, `conflicts` reads
its ids (BatchGetItem, strongly consistent): a record whose id is known with another hash refuses
the whole request, and nothing of it is written. After the request, `remember` records the hash
of every record that was written or may have been (confirmed, or unconfirmed: its reply was
lost); a record known not to be in the stream is not recorded, so its id stays free.

Why after, not before: a hash recorded for a record that never lands would refuse a later post of
that id with another body, though no copy exists; a record written and not recorded (the
function died between the two, or the table was unavailable) only lets a later other-body post
through to the consumers, which catch it as a conflict (same scoped id, another payload hash) and
dead-letter it. Two concurrent requests with one id and different bodies both pass the read: the
consumers catch that case the same way.

How long a hash is kept: `IDEMPOTENCY_TTL_SECONDS`, which the construct derives as the consumers
derive their client-id guards' (`consumer._once.guard_ttl_seconds`: the stream's retention + the
longest a dead-letter queue keeps a copy, SQS's 14 days, + a day), for the longest-kept of the
API's streams (16 days without it): a hash lives as long as a consumer's guard of its id, so as
long as a copy of the record can still be read or redriven. An item past its `expiresAt` counts as
absent (DynamoDB's TTL deletes it within days).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from typing import Any, NamedTuple, Protocol, TypeVar

from shardline.aws_lambda._environment import DEFAULT_IDEMPOTENCY_TTL_SECONDS
from shardline.kinesis._payload import payload_hash as kinesis_payload_hash
from shardline.kinesis._records import UserRecord
from shardline.kpl._identity import caller_scope
from shardline.producer._result import RecordResult

__all__ = [
    "EXPIRES_AT_ATTRIBUTE",
    "HASH_ATTRIBUTE",
    "KEY_ATTRIBUTE",
    "IdConflict",
    "IdempotencyStore",
    "IdempotencyUnavailable",
    "payload_hash",
    "scoped_key",
]

#: The table's partition key (S): `<stream>/<caller scope>/<i|k>/<id>`.
KEY_ATTRIBUTE = "scopedId"
#: The payload hash (S, hex sha256) of the last record written with that id.
HASH_ATTRIBUTE = "payloadHash"
#: Epoch seconds after which the item counts as absent: the table's TTL attribute.
EXPIRES_AT_ATTRIBUTE = "expiresAt"
#: DynamoDB's per-call bounds.
_GET_BATCH = 100
_WRITE_BATCH = 25
#: Rounds for a batch's unprocessed keys or items (throttling), with jittered backoff between.
_MAX_ROUNDS = 5
#: A request's DynamoDB calls in flight at once (its reads, then its writes).
_CALLS_IN_FLIGHT = 8
_BACKOFF_BASE_S = 0.02
_BACKOFF_CAP_S = 0.5


_Answer = TypeVar("_Answer")


class IdempotencyClient(Protocol):
    """The two DynamoDB calls of the idempotency table."""

    def batch_get_item(self, **kwargs: Any) -> Mapping[str, Any]: ...

    def batch_write_item(self, **kwargs: Any) -> Mapping[str, Any]: ...


class IdConflict(NamedTuple):
    """Record `record_index` re-uses `record_id` (derived from an Idempotency-Key if `derived`),
    written before with another payload."""

    record_index: int
    record_id: str
    derived: bool
    known_hash: str
    payload_hash: str


class IdempotencyUnavailable(Exception):
    """The table could not be read: nothing was sent; `code` is DynamoDB's error code."""

    def __init__(self, code: str) -> None:
        super().__init__(f"the idempotency table could not be read ({code})")
        self.code = code


def payload_hash(record: UserRecord) -> str:
    """What "the same payload" means for a re-used id, as the consumers compute it
    (`ConsumedRecord.payload_hash`): `shardline.kinesis._payload.payload_hash` of the record's
    partition key, explicit hash key and data."""
    return kinesis_payload_hash(record.partition_key, record.explicit_hash_key, record.data)


def scoped_key(stream: str, caller: str, record: UserRecord) -> str:
    """The table key of a record's id: its stream, its caller's scope and its namespace."""
    assert record.id is not None
    who = record.caller if record.caller is not None else caller
    return f"{stream}/{caller_scope(who)}/{'k' if record.id_derived else 'i'}/{record.id}"


class IdempotencyStore:
    """Reads and records the payload hashes of ids in `table` (see the module docstring)."""

    def __init__(
        self,
        client: Callable[[], IdempotencyClient],
        table: str,
        *,
        ttl_seconds: int = DEFAULT_IDEMPOTENCY_TTL_SECONDS,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
        rng: random.Random | None = None,
    ) -> None:
        self._client = client
        self.table = table
        self.ttl_seconds = ttl_seconds
        self._clock = clock
        self._sleep = sleep
        self._rng = rng or random.Random()
        self._pool: ThreadPoolExecutor | None = None  # made at the first request of several calls, kept warm

    def conflicts(self, stream: str, records: Sequence[UserRecord], *, caller: str = "") -> list[IdConflict]:
        """The records of a request whose id is known with another payload hash; raises
        `IdempotencyUnavailable` if the table cannot be read (then nothing may be sent). A record's
        caller is its own (`UserRecord.caller`, stamped by the API), else `caller`."""
        wanted = {
            scoped_key(stream, caller, record): index for index, record in enumerate(records) if record.id
        }
        known: dict[str, str] = {}
        keys = list(wanted)
        for answer in self._each(
            self._read, [keys[at : at + _GET_BATCH] for at in range(0, len(keys), _GET_BATCH)]
        ):
            known |= answer
        found: list[IdConflict] = []
        for key, index in wanted.items():
            record = records[index]
            mine = payload_hash(record)
            if key in known and known[key] != mine:
                assert record.id is not None
                found.append(IdConflict(index, record.id, record.id_derived, known[key], mine))
        return sorted(found)

    def remember(
        self,
        stream: str,
        records: Sequence[UserRecord],
        results: Sequence[RecordResult],
        *,
        caller: str = "",
    ) -> int:
        """Record the hash of every record with an id that was written or may have been; returns how
        many could not be recorded (the table refused them: logged and counted by the caller)."""
        expires = int(self._clock()) + self.ttl_seconds
        items = [
            {
                KEY_ATTRIBUTE: {"S": scoped_key(stream, caller, record)},
                HASH_ATTRIBUTE: {"S": payload_hash(record)},
                EXPIRES_AT_ATTRIBUTE: {"N": str(expires)},
            }
            for record, result in zip(records, results, strict=True)
            if record.id and (result.success or result.unconfirmed)
        ]
        return sum(
            self._each(
                self._write, [items[at : at + _WRITE_BATCH] for at in range(0, len(items), _WRITE_BATCH)]
            )
        )

    def _each(self, call: Callable[[list[Any]], _Answer], batches: list[list[Any]]) -> list[_Answer]:
        """`call` on every batch, up to `_CALLS_IN_FLIGHT` at once, answers in order; the first
        error raised is raised. One after another, a 500-record request's 25 round trips (5 reads,
        20 writes) were most of its latency, deployed and locally alike."""
        if len(batches) <= 1:
            return [call(batch) for batch in batches]
        self._client()  # made once, here, not by the threads at once (a client is thread-safe)
        if self._pool is None:  # its threads start as calls need them and outlive an invocation
            self._pool = ThreadPoolExecutor(_CALLS_IN_FLIGHT, "shardline-idempotency")
        calls = [self._pool.submit(call, batch) for batch in batches]
        wait(calls)  # every call ended before the invocation does, as with one after another
        return [answer.result() for answer in calls]

    def _read(self, keys: list[str]) -> dict[str, str]:
        """Hash by key of the live items among `keys` (at most 100)."""
        from botocore.exceptions import BotoCoreError, ClientError

        request: dict[str, Any] = {
            self.table: {
                "Keys": [{KEY_ATTRIBUTE: {"S": key}} for key in keys],
                "ConsistentRead": True,
                "ProjectionExpression": "#k, #h, #e",
                "ExpressionAttributeNames": {
                    "#k": KEY_ATTRIBUTE,
                    "#h": HASH_ATTRIBUTE,
                    "#e": EXPIRES_AT_ATTRIBUTE,
                },
            }
        }
        now = self._clock()
        known: dict[str, str] = {}
        for attempt in self._rounds():
            try:
                answer = self._client().batch_get_item(RequestItems=request)
            except ClientError as error:
                code = str(error.response.get("Error", {}).get("Code") or "ClientError")
                if attempt == _MAX_ROUNDS - 1:
                    raise IdempotencyUnavailable(code) from None
                continue
            except BotoCoreError as error:
                if attempt == _MAX_ROUNDS - 1:
                    raise IdempotencyUnavailable(type(error).__name__) from None
                continue
            for item in answer.get("Responses", {}).get(self.table, []):
                expires = item.get(EXPIRES_AT_ATTRIBUTE, {}).get("N")
                if expires is None or float(expires) > now:
                    known[item[KEY_ATTRIBUTE]["S"]] = item[HASH_ATTRIBUTE]["S"]
            request = dict(answer.get("UnprocessedKeys") or {})
            if not request:
                return known
        raise IdempotencyUnavailable("UnprocessedKeys")

    def _write(self, items: list[dict[str, Any]]) -> int:
        """Put `items` (at most 25); how many were left unwritten after the last round."""
        from botocore.exceptions import BotoCoreError, ClientError

        request: dict[str, Any] = {self.table: [{"PutRequest": {"Item": item}} for item in items]}
        for _ in self._rounds():
            try:
                answer = self._client().batch_write_item(RequestItems=request)
            except (ClientError, BotoCoreError):
                continue
            request = dict(answer.get("UnprocessedItems") or {})
            if not request:
                return 0
        return len(request.get(self.table, []))

    def _rounds(self) -> Iterator[int]:
        """`_MAX_ROUNDS` attempts, a jittered exponential backoff before each but the first."""
        for attempt in range(_MAX_ROUNDS):
            if attempt:
                cap = min(_BACKOFF_CAP_S, _BACKOFF_BASE_S * 2**attempt)
                self._sleep(self._rng.uniform(0, cap))
            yield attempt
