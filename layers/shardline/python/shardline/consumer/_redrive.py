"""Redriving what the event-source mapping discarded: the records an on-failure message points at,
read back from the stream and put through the consumer group while the stream still holds them.

    result = redrive(consumer, kinesis, message)   # the on-failure record: a dict, or its JSON text
    result.finished, result.processed, result.missing

A Kinesis event-source mapping that gives up on a batch (MaximumRecordAgeInSeconds,
MaximumRetryAttempts) sends its on-failure destination metadata only: the batch's shard and its
first and last sequence numbers (`KinesisBatchInfo`). `redrive` reads those records back
(GetShardIterator AT_SEQUENCE_NUMBER, then GetRecords past the last one), builds the Lambda event
the mapping delivered, and runs it through `consumer.process` under a lease row of its own — the
shard's lease key + `#redrive#<first sequence number>` — delivering the rest again, as the mapping
does, while a record fails, up to `max_deliveries`.

That row (created by the group's run when it noted the discard, else here) starts where the group
stopped applying the batch: at the checkpoint the shard's row noted when the mapping moved past the
stalled batch (its `skippedByMapping` entry whose `start` is
the batch's first sequence number); without one, at the shard's checkpoint when it lies inside the
batch (the group applied up to there and has not moved since); else just before the batch. So a
record the group applied is not applied again, a redrive cut short resumes where it stopped, and a
redrive run twice applies nothing twice.

Records the stream no longer holds (past its retention, or the stream deleted) cannot be redriven:
`RedriveResult.missing` says which. Errors of Kinesis or DynamoDB propagate: run it again, it resumes.

Applied once with the group's own run. A producer retry's copies of one aggregate can straddle the
batch: copy 1 inside it (the redrive's to apply), copy 2 after it (the group's run: the mapping's
deliveries, or a worker's batches). `_redrive_claims` keeps, in the redrive row, the aggregates each
run applied (`redriveClaims`, `groupClaims`) and a version (`applyVersion`). Why a copy cannot be
applied twice, under any interleaving and crash:

1. An aggregate is applied only by a checkpoint write — the sink writes of its members commit in
   the same UpdateItem/TransactWriteItems as the checkpoint that passes them — and every such
   write, of either run, also writes that run's claims with the aggregate in them (a run claims an
   aggregate with the commit of its first member, before the aggregate is wholly passed), on
   condition that `applyVersion` is the value the run read with the other run's claims, and
   increments it. A write lands whole or not at all: a crash before or after it, or a lost reply
   (re-read: `_confirm_landed`), leaves the claims and the effects together.
2. Each run reads the other's claims before it decides which records to apply (de-aggregation's
   `admit` skips a claimed aggregate) and never applies past its last read without the version
   condition holding. Suppose both applied aggregate A: the two commits C1 (first) and C2 (second)
   are serialized by DynamoDB on the row's `applyVersion`. C2's run read the claims before C1
   landed — else it saw A claimed and skipped it — so C2's condition names a version C1 has since
   incremented, and C2 fails. Its run then re-reads the claims (`Arbiters.refresh`): A is claimed,
   so it stops before A (`RetryFrom`, the mapping or the redrive's next delivery skips A); an
   unrelated claim only retries the commit under the new version.
3. Two redrives of one shard meet in the earlier batch's row: the later redrive consults the rows
   of the earlier noted batches as the group's run does (their `groupClaims`, in the same
   window), so a pair of redrives that can hold copies of one aggregate writes one common row
   with every commit of either, and 2 holds for them as for the group. (Each later redrive is
   noted — the group notes a batch before it moves past it — and reads the notes when it begins
   a delivery, so the earlier redrive's row is known to it.) A redrive whose own batch was not
   noted (`allow_unnoted`) consults every noted row, since no other redrive knows of it.
4. The group's run can only apply copies the redrive row hears of: it notes the discarded batch —
   creating the redrive row first — before it applies anything of the delivery past the batch, and
   consults every noted row while its records may be copies of the batch's (`CLAIM_WINDOW_S`).
   The redrive starts from the group's applied-aggregate state as of the batch (its floors only
   settle aggregates before the batch), so it also skips copies the group applied before it.
5. The redrive's other writes (its lease, failures, careful spans) do not touch `applyVersion`, and
   the group's claim item does not touch the redrive row's lease: neither run's fencing is
   disturbed by the other, and a run that dies between batches holds no claim it did not commit.

What it does not cover: records without a shardline aggregate id (no copy can be told; a sink
keyed or guarded by the client's id is, `once`), two redrives neither of whose batches was
noted, a group's row that moved past the batch without
noting it (refused: `RedriveRefused`, unless `allow_unnoted=True`), and records whose client-id
guards may have expired (refused: `GuardsExpired`, unless `allow_expired_guards=True`).
"""

from __future__ import annotations

import base64
import json
import logging
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeGuard

from botocore.exceptions import ClientError

from shardline.consumer._redrive_claims import REDRIVE_SUFFIX
from shardline.consumer._redrive_start import (
    BatchInfo,
    check_guards,
    guard_ttl,
    row_start,
)

if TYPE_CHECKING:  # annotations only
    from shardline.consumer._consumer import KinesisConsumer
    from shardline.protocols import KinesisReadClient, LambdaContext

logger = logging.getLogger(__name__)

#: GetShardIterator and GetRecords refusals that mean "not here": the start is gone, or the stream.
_NOT_HELD = frozenset({"InvalidArgumentException", "ResourceNotFoundException"})
_THROTTLED = frozenset({"ProvisionedThroughputExceededException", "LimitExceededException"})
_CALL_ATTEMPTS = 8
_BACKOFF_S = 0.2
_BACKOFF_CAP_S = 5.0
_GET_RECORDS_LIMIT = 10_000


@dataclass(frozen=True, slots=True)
class Missing:
    """Records of the batch the stream no longer holds: sequence numbers from `start` up to, not
    including, `held_from` (None: the whole batch, through `end`)."""

    start: str
    end: str | None
    held_from: str | None
    reason: str

    def __str__(self) -> str:
        if self.held_from is None:
            span = f"every record from {self.start}" + (f" to {self.end}" if self.end else "")
        else:
            span = f"the records from {self.start} up to (not including) {self.held_from}"
        return f"{span}: {self.reason}"


@dataclass(frozen=True, slots=True)
class RedriveResult:
    """What a redrive did. `finished`: every record the stream still holds went through (applied,
    already applied, or dead-lettered); `missing`: what it no longer holds (None: nothing)."""

    stream: str
    shard_id: str
    start: str
    end: str | None
    lease_key: str  # the redrive's own lease row
    records_read: int = 0  # Kinesis records read back from the stream
    processed: int = 0  # user records whose handler ran and returned
    already_applied: int = 0  # user records at or below the redrive row's checkpoint when it began
    copies_skipped: int = 0  # aggregates skipped: the group's own run applied a copy (`_redrive_claims`)
    failed: int = 0  # failed attempts
    dead_lettered: int = 0
    deliveries: int = 0
    finished: bool = False
    retry_from: str | None = None  # not finished: the sequence number still failing
    error: str | None = None  # not finished: why, as the redrive's lease row says
    missing: Missing | None = None

    @property
    def complete(self) -> bool:
        """Finished, and nothing of the batch was missing: the on-failure message can go."""
        return self.finished and self.missing is None


def redrive(
    consumer: KinesisConsumer,
    kinesis_client: KinesisReadClient,
    message: Mapping[str, Any] | str | bytes,
    *,
    context: LambdaContext | None = None,
    max_deliveries: int = 10,
    max_reads: int = 1000,
    sleep: Callable[[float], None] = time.sleep,
    guard_ttl_seconds: float | None = None,
    allow_expired_guards: bool = False,
    allow_unnoted: bool = False,
    now: Callable[[], float] = time.time,
) -> RedriveResult:
    """Put the batch an on-failure `message` points at through `consumer` (module docstring).

    `message`: the on-failure record as Lambda sends it (a dict or its JSON text), or the SQS
    message or SNS notification carrying it. `context`: a Lambda context, to stop before its time
    runs out (the next run resumes). At most `max_deliveries` deliveries and `max_reads` GetRecords
    calls; `sleep` waits out Kinesis throttling. Raises `ValueError` for a message that is not a
    Kinesis on-failure record.

    `GuardsExpired` (nothing written) when a record of the batch with a client id is older than
    its `once` guard lasts — `guard_ttl_seconds`, else `SHARDLINE_GUARD_TTL_SECONDS`, else 16 days
    — unless `allow_expired_guards=True`; `now` is the clock the ages are measured with.
    `RedriveRefused` when the group's row moved past the batch without noting it (what the group
    applied since cannot be told from what it settled), unless `allow_unnoted=True`.
    """
    info = batch_info(message)
    main_key = consumer.settings.lease_key(info.stream, info.shard_id)
    suffix = f"{REDRIVE_SUFFIX}{info.start}"
    key = main_key + suffix
    table = consumer.table
    records, missing, read_all = _RangeReader(kinesis_client, info, max_reads, sleep).read()
    done = RedriveResult(info.stream, info.shard_id, info.start, info.end, key, len(records), missing=missing)
    if not records:
        return replace(done, finished=read_all)
    event_records = [_event_record(info, record) for record in records]
    if not allow_expired_guards:
        check_guards(info, event_records, guard_ttl(guard_ttl_seconds), now())
    if table.get(key) is None:
        main = table.get(main_key)
        start, applied = row_start(main, info, allow_unnoted)
        if table.start_at(key, start, applied=applied):
            logger.info("redrive %s: lease row created", key)
    metrics = consumer.metrics
    before = metrics.snapshot()
    already = deliveries = 0
    retry_from: str | None = None
    while deliveries < max_deliveries and not _out_of_time(context, consumer.settings.time_margin):
        first = metrics.snapshot()
        answer = consumer.process({"Records": event_records}, context, lease_key_suffix=suffix)
        deliveries += 1
        if deliveries == 1:
            already = _delta(first, metrics.snapshot(), "DuplicatesSkipped")
        failures = [str(f.get("itemIdentifier", "")) for f in answer.get("batchItemFailures") or []]
        if not failures:
            retry_from = None
            break
        retry_from = min(failures, key=lambda sequence: int(sequence) if sequence.isdigit() else -1)
        event_records = _from(event_records, retry_from)  # as the mapping retries: from that record on
    after = metrics.snapshot()
    error = None
    if retry_from is not None or deliveries == 0:
        lease = table.get(key)
        error = (lease.stalled_cause or lease.last_error) if lease is not None else None
        if deliveries == 0:
            error = error or "out of time before the first delivery"
    return replace(
        done,
        processed=_delta(before, after, "RecordsProcessed"),
        already_applied=already,
        copies_skipped=_delta(before, after, "RedriveCopiesSkipped"),
        failed=_delta(before, after, "RecordsFailed"),
        dead_lettered=_delta(before, after, "RecordsSentToDLQ"),
        deliveries=deliveries,
        finished=read_all and deliveries > 0 and retry_from is None,
        retry_from=retry_from,
        error=error,
    )


# -- the message -----------------------------------------------------------------------------------


def batch_info(message: Mapping[str, Any] | str | bytes) -> BatchInfo:
    """The `KinesisBatchInfo` of an on-failure record (or of the SQS message or SNS notification
    carrying it), every field checked; `ValueError` names the first that is wrong."""
    record = _unwrap(message)
    info = record.get("KinesisBatchInfo")
    if not isinstance(info, Mapping):
        raise ValueError(f"not a Kinesis on-failure record (no KinesisBatchInfo): keys {sorted(record)}")
    arn, shard_id = info.get("streamArn"), info.get("shardId")
    start, end, size = info.get("startSequenceNumber"), info.get("endSequenceNumber"), info.get("batchSize")
    if not isinstance(arn, str) or ":stream/" not in arn or len(arn.split(":")) < 6:
        raise ValueError(f"KinesisBatchInfo.streamArn is not a Kinesis stream ARN: {arn!r}")
    if not isinstance(shard_id, str) or not shard_id:
        raise ValueError(f"KinesisBatchInfo.shardId is not a shard id: {shard_id!r}")
    if not _decimal(start):
        raise ValueError(f"KinesisBatchInfo.startSequenceNumber is not a sequence number: {start!r}")
    if end is not None and (not _decimal(end) or int(end) < int(start)):
        raise ValueError(f"KinesisBatchInfo.endSequenceNumber is not a sequence number from {start}: {end!r}")
    if end is None and (not isinstance(size, int) or isinstance(size, bool) or size < 1):
        raise ValueError("KinesisBatchInfo has neither endSequenceNumber nor a batchSize")
    stream = arn.split(":stream/", 1)[1].split("/", 1)[0]
    return BatchInfo(arn, stream, shard_id, start, end, size if isinstance(size, int) else None)


def _unwrap(message: object, depth: int = 0) -> Mapping[str, Any]:
    if isinstance(message, str | bytes | bytearray):
        try:
            message = json.loads(message)
        except ValueError as exc:
            raise ValueError(f"an on-failure message is JSON: {exc}") from None
    if not isinstance(message, Mapping):
        raise ValueError(f"an on-failure message is a JSON object, not {type(message).__name__}")
    if "KinesisBatchInfo" in message or depth >= 3:
        return message
    for carrier in ("Body", "body", "Message"):  # an SQS message, an SNS notification
        if isinstance(message.get(carrier), str):
            return _unwrap(message[carrier], depth + 1)
    sns = message.get("Sns")  # an SNS record of a Lambda event
    if isinstance(sns, Mapping) and isinstance(sns.get("Message"), str):
        return _unwrap(sns["Message"], depth + 1)
    return message


def _decimal(value: object) -> TypeGuard[str]:
    return isinstance(value, str) and value.isascii() and value.isdigit()


# -- reading the batch back ------------------------------------------------------------------------


class _RangeReader:
    """The batch's Kinesis records the shard still holds, in order."""

    def __init__(
        self, kinesis: KinesisReadClient, info: BatchInfo, max_reads: int, sleep: Callable[[float], None]
    ) -> None:
        self.kinesis, self.info, self.max_reads, self.sleep = kinesis, info, max_reads, sleep
        self.records: list[Mapping[str, Any]] = []
        self.origin: tuple[str, ...] = ("AT_SEQUENCE_NUMBER", info.start)  # where reading began

    def read(self) -> tuple[list[Mapping[str, Any]], Missing | None, bool]:
        """(records, what is missing, whether reading reached the batch's end)."""
        info = self.info
        try:
            iterator: str | None = self._iterator(*self.origin)
        except ClientError as exc:
            if _code(exc) not in _NOT_HELD:
                raise
            try:  # the start is not there: what does the shard still hold?
                self.origin = ("TRIM_HORIZON",)
                iterator = self._iterator(*self.origin)
            except ClientError as again:
                if _code(again) not in _NOT_HELD:
                    raise
                return [], self._missing(None, f"the stream or the shard is gone ({_message(again)})"), True
        read_all = self._pages(iterator)
        if not read_all:
            return self.records, None, False
        if not self.records:
            return [], self._missing(None, "no longer in the stream (past its retention period)"), True
        first = str(self.records[0]["SequenceNumber"])
        if int(first) != int(info.start):
            return (
                self.records,
                self._missing(first, "no longer in the stream (past its retention period)"),
                True,
            )
        return self.records, None, True

    def _pages(self, iterator: str | None) -> bool:
        info, records = self.info, self.records
        start, end = int(info.start), int(info.end) if info.end is not None else None
        last: str | None = None
        for _ in range(self.max_reads):
            if iterator is None:
                return True  # a closed shard, read to its end
            try:
                page = self._call(
                    self.kinesis.get_records,
                    ShardIterator=iterator,
                    Limit=_GET_RECORDS_LIMIT,
                    StreamARN=info.stream_arn,
                )
            except ClientError as exc:
                if _code(exc) != "ExpiredIteratorException":
                    raise
                iterator = self._iterator(*(("AFTER_SEQUENCE_NUMBER", last) if last else self.origin))
                continue
            for record in page.get("Records", ()):
                sequence = int(record["SequenceNumber"])
                if (end is not None and sequence > end) or (end is None and len(records) >= (info.size or 0)):
                    return True
                last = str(record["SequenceNumber"])  # an expired iterator resumes after it
                if sequence >= start:
                    records.append(record)
            if end is None and len(records) >= (info.size or 0):
                return True
            if not page.get("Records") and not page.get("MillisBehindLatest"):
                return True  # the tip of the shard
            iterator = page.get("NextShardIterator")
        logger.warning(
            "redrive of %s/%s: stopped after %d GetRecords", info.stream, info.shard_id, self.max_reads
        )
        return False

    def _iterator(self, kind: str, sequence: str | None = None) -> str:
        params: dict[str, Any] = {
            "StreamARN": self.info.stream_arn,
            "ShardId": self.info.shard_id,
            "ShardIteratorType": kind,
        }
        if sequence is not None:
            params["StartingSequenceNumber"] = sequence
        return str(self._call(self.kinesis.get_shard_iterator, **params)["ShardIterator"])

    def _call(self, operation: Callable[..., Mapping[str, Any]], **params: Any) -> Mapping[str, Any]:
        """`operation(**params)`, again after a throttle, with jittered exponential backoff (bounded)."""
        for attempt in range(_CALL_ATTEMPTS):
            try:
                return operation(**params)
            except ClientError as exc:
                if _code(exc) not in _THROTTLED or attempt == _CALL_ATTEMPTS - 1:
                    raise
                self.sleep(random.uniform(0.5, 1.0) * min(_BACKOFF_CAP_S, _BACKOFF_S * 2**attempt))
        raise AssertionError("unreachable")

    def _missing(self, held_from: str | None, reason: str) -> Missing:
        return Missing(self.info.start, self.info.end, held_from, reason)


# -- the event and the deliveries --------------------------------------------------------------


def _event_record(info: BatchInfo, record: Mapping[str, Any]) -> dict[str, Any]:
    """A Lambda Kinesis event record (as the event-source mapping builds it) of a GetRecords record."""
    arrival = record.get("ApproximateArrivalTimestamp")
    seconds = arrival.timestamp() if isinstance(arrival, datetime) else float(arrival or 0.0)
    sequence = str(record["SequenceNumber"])
    return {
        "kinesis": {
            "kinesisSchemaVersion": "1.0",
            "partitionKey": record["PartitionKey"],
            "sequenceNumber": sequence,
            "data": base64.b64encode(record["Data"]).decode("ascii"),
            "approximateArrivalTimestamp": round(seconds, 3),
        },
        "eventSource": "aws:kinesis",
        "eventVersion": "1.0",
        "eventID": f"{info.shard_id}:{sequence}",
        "eventName": "aws:kinesis:record",
        "awsRegion": info.stream_arn.split(":")[3],
        "eventSourceARN": info.stream_arn,
    }


def _from(event_records: list[dict[str, Any]], sequence: str) -> list[dict[str, Any]]:
    """The event records from `sequence` on (all of them if it is not one of theirs)."""
    for index, record in enumerate(event_records):
        if record["kinesis"]["sequenceNumber"] == sequence:
            return event_records[index:]
    return event_records


def _out_of_time(context: LambdaContext | None, margin_s: float) -> bool:
    remaining_ms = getattr(context, "get_remaining_time_in_millis", None)
    return remaining_ms is not None and remaining_ms() < margin_s * 1000.0


def _delta(before: Mapping[str, Any], after: Mapping[str, Any], name: str) -> int:
    return int(after.get(name) or 0) - int(before.get(name) or 0)


def _code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def _message(exc: ClientError) -> str:
    error = exc.response.get("Error", {})
    return f"{error.get('Code', '')}: {error.get('Message', '')}"
