"""What can go wrong in shardline: one exception tree, and the error codes of record results.

Every exception shardline raises on purpose derives from `ShardlineError`; where callers have
always caught `ValueError`, the class is a `ValueError` too::

    ShardlineError
    ├── ConfigurationError (ValueError)   a setting, limit or environment variable is unusable
    ├── InvalidRecord (ValueError)        records Kinesis would reject; `problems` names each
    │                                     record's index and field; nothing was sent
    ├── AggregationError (ValueError)     bytes claim to be a KPL aggregate but do not decode
    ├── EventError (ValueError)           a Lambda Kinesis event record is malformed
    ├── RequestRejected                   an HTTP request answered 4xx; `response` says why
    ├── BufferFull                        put() with `when_buffer_full="raise"` found the
    │                                     producer's buffer bound reached; nothing was buffered
    ├── LeaseLost                         another invocation took the shard's lease: stop
    ├── DependencyUnavailable             raised by a consumer handler: a dependency failed, not
    │                                     the record; the shard stalls and retries, nothing is
    │                                     counted against the record
    ├── SinkConflict                      a sink write in a checkpoint transaction failed
    │   │                                 its own condition; nothing was written
    │   └── ClientIdConflict              a client id already applied with another payload:
    │                                     the record is dead-lettered whole, never dropped
    └── SinkRejected                      DynamoDB refused a sink write as invalid (an item
                                          over 400 KB, an empty key, one item twice, ...);
                                          nothing was written

A `RecordResult` that failed carries an `error_code`: Kinesis's own (for example
`ProvisionedThroughputExceededException`) or one of shardline's decisions below, and says with
`unconfirmed` whether a copy of it may be in the stream anyway (a request whose reply never came).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple, Protocol

__all__ = [
    "COUNT_MISMATCH",
    "EXPIRED",
    "MALFORMED_RESPONSE",
    "PARTITIONER_ERROR",
    "PERMANENT_ERROR_CODES",
    "THROTTLE_ERROR_CODES",
    "UNAVAILABLE_ERROR_CODES",
    "WRONG_SHARD",
    "AggregationError",
    "BufferFull",
    "ClientIdConflict",
    "ConfigurationError",
    "DependencyUnavailable",
    "EventError",
    "HttpAnswer",
    "InvalidRecord",
    "LeaseLost",
    "RecordProblem",
    "RequestRejected",
    "ShardlineError",
    "SinkConflict",
    "SinkRejected",
]

# -- error codes of record results -------------------------------------------------------------

#: The record's TTL or the flush deadline passed before it could be sent (or sent again), or
#: before Kinesis confirmed it (`unconfirmed` then says whether a copy may be in the stream).
EXPIRED = "Expired"
#: The record's aggregate landed in a shard whose hash range does not hold it (a reshard): it is
#: not confirmed there, and the same aggregate is sent again, routed by the record's hash key.
WRONG_SHARD = "Wrong Shard"
#: The PutRecords response held a different number of entries than the request: where (or
#: whether) each record landed is unknown, so each aggregate of the request is resent identical.
COUNT_MISMATCH = "RecordCountMismatch"
#: The partitioner raised on this record; it was never sent.
PARTITIONER_ERROR = "PartitionerError"
#: A PutRecords success entry without a `ShardId` or `SequenceNumber`: where (or whether) the
#: record landed is unknown, so its aggregate is resent identical (consumers skip a second copy).
MALFORMED_RESPONSE = "MalformedResponse"

#: Codes that mean "slow down", per record or per request.
THROTTLE_ERROR_CODES = frozenset({"ProvisionedThroughputExceededException", "ThrottlingException"})

#: Request-level codes that no retry can fix: the producer fails the records at once instead of
#: retrying them until their TTL (the KPL retries them; a Lambda cannot wait).
PERMANENT_ERROR_CODES = frozenset(
    {
        "ResourceNotFoundException",
        "AccessDeniedException",
        "ValidationException",
        "InvalidArgumentException",
        "UnrecognizedClientException",
    }
)

#: Final codes that mean "the stream cannot take writes right now": throttled or unavailable.
#: Not ResourceNotFoundException: a missing stream stays missing (the HTTP API answers 404).
UNAVAILABLE_ERROR_CODES = THROTTLE_ERROR_CODES | frozenset(
    {
        "KMSThrottlingException",
        "KMSUnavailableException",
        "ResourceInUseException",
        "InternalFailure",
        "ServiceUnavailable",
        "ServiceUnavailableException",
    }
)

# -- exceptions --------------------------------------------------------------------------------


class ShardlineError(Exception):
    """The base of every exception shardline raises on purpose."""


class ConfigurationError(ShardlineError, ValueError):
    """A setting, limit or environment variable is unusable; the message names it."""


class RecordProblem(NamedTuple):
    """Why the record at `index` cannot be sent: which `field`, and a human `message`."""

    # `index` shadows tuple.index on purpose: the HTTP contract answers `{index, field, message}`.
    index: int  # type: ignore[assignment]
    field: str
    message: str

    def __str__(self) -> str:
        return f"record {self.index}: {self.field}: {self.message}"


class InvalidRecord(ShardlineError, ValueError):
    """A batch holds at least one record Kinesis would reject. Nothing was sent.

    `problems` lists every problem; `index`, `field` and `message` describe the first.
    """

    def __init__(self, problems: list[RecordProblem]) -> None:
        if not problems:
            raise ValueError("InvalidRecord needs at least one problem")
        self.problems = tuple(problems)
        first = self.problems[0]
        self.index, self.field, self.message = first.index, first.field, first.message
        more = f" (and {len(self.problems) - 1} more)" if len(self.problems) > 1 else ""
        super().__init__(f"{first}{more}")


class AggregationError(ShardlineError, ValueError):
    """A payload claimed to be a KPL aggregate but cannot be decoded exactly."""


class EventError(ShardlineError, ValueError):
    """A Lambda Kinesis event record is malformed; names the record index and the field."""

    def __init__(self, index: int, field: str, message: str) -> None:
        self.index, self.field = index, field
        super().__init__(f"event record {index}: {field}: {message}")


class HttpAnswer(Protocol):
    """What `RequestRejected.response` is (`shardline.aws_lambda`'s answer): a status and a JSON
    body. A protocol, so this module, the root of the library, imports nothing above it."""

    @property
    def status(self) -> int: ...

    @property
    def body(self) -> Mapping[str, Any]: ...


class RequestRejected(ShardlineError):
    """An HTTP request cannot be served; `response` is the 4xx answer. Nothing was sent."""

    def __init__(self, response: HttpAnswer) -> None:
        super().__init__(response.body.get("message", ""))
        self.response = response


class BufferFull(ShardlineError):
    """The producer already buffers `max_buffered_records` records or `max_buffered_bytes` bytes."""


class LeaseLost(ShardlineError):
    """Another invocation took the lease: stop, write nothing more."""


class DependencyUnavailable(ShardlineError):
    """Raise it from a consumer handler when what failed is not the record but something the
    handler depends on (an API, a database): the shard stalls — counted in `ShardStalls`, noted
    in the lease row, logged with this message — and the record is retried with backoff, never
    counted as its failure nor dead-lettered. Raise it only for such outages: a record that
    raises it every time stalls its shard until the mapping's record age discards the batch.

        try:
            prices.lookup(order["sku"])
        except httpx.TransportError as exc:
            raise DependencyUnavailable("prices API unreachable") from exc
    """


class SinkConflict(ShardlineError):
    """A sink write in a checkpoint transaction failed its own condition; nothing was written.

    `indexes` are the positions, among the transaction's sink writes, of the writes whose
    condition failed (empty when DynamoDB did not say); `reasons` are DynamoDB's cancellation
    reasons for them.
    """

    def __init__(
        self,
        message: str,
        indexes: tuple[int, ...] = (),
        reasons: tuple[str, ...] = (),
        items: tuple[Mapping[str, Any] | None, ...] = (),
    ) -> None:
        super().__init__(message)
        self.indexes, self.reasons = indexes, reasons
        #: For each of `indexes`, the item as it was when its condition failed (DynamoDB's
        #: `ReturnValuesOnConditionCheckFailure=ALL_OLD`, when the write asked for it), else None.
        self.items = items or (None,) * len(indexes)


class ClientIdConflict(SinkConflict):
    """A record's client id (`ConsumedRecord.scoped_id`) was already applied with another payload.

    The sink holds the first payload's item or guard, whose payload hash (`applied_hash`) differs
    from this record's (`payload_hash`): the record is neither applied nor skipped — it is counted
    (`ClientIdConflicts`) and dead-lettered whole at once, with both hashes in the dead letter.
    """

    def __init__(self, scoped_id: str, applied_hash: str, payload_hash: str) -> None:
        super().__init__(
            f"client id {scoped_id!r} was already applied with payload hash {applied_hash}; "
            f"this record's payload hash is {payload_hash}: a re-used id with another payload, refused"
        )
        self.scoped_id, self.applied_hash, self.payload_hash = scoped_id, applied_hash, payload_hash

    def details(self) -> dict[str, str]:
        """What the dead letter and the lease row say of it (`details["clientIdConflict"]`)."""
        return {
            "scopedId": self.scoped_id,
            "appliedPayloadHash": self.applied_hash,
            "payloadHash": self.payload_hash,
        }


class SinkRejected(ShardlineError):
    """DynamoDB refused a checkpoint transaction's sink writes as invalid; nothing was written.

    `indexes` are the refused writes' positions among the sink writes when DynamoDB said which
    (a `ValidationError` cancellation reason), else empty (a `ValidationException`).
    """

    def __init__(self, message: str, indexes: tuple[int, ...] = ()) -> None:
        super().__init__(message)
        self.indexes = indexes
