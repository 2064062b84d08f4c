"""Retrier: classifies every PutRecords outcome, as the C++ KPL's retrier does.

| outcome                                                   | action                                   |
|-----------------------------------------------------------|------------------------------------------|
| request-level error, throttled and `fail_if_throttled`    | fail every user record with that code    |
| request-level error with a permanent code (config)        | fail every user record (no retry helps)  |
| no reply, or a 5xx: read back first (`_reconciler`)       | per record, as the rows below            |
| any other request-level error                             | retry every user record                  |
| response record count differs from the request            | fail every user record                   |
| a success entry without `ShardId` or `SequenceNumber`     | fail its user records (`MalformedResponse`) |
| per-record error, throttled and `fail_if_throttled`       | fail the record's user records           |
| per-record `OutcomeUnknown` (a read-back that could not tell) | fail its user records (never retried) |
| any other per-record error                                | retry them                               |
| success in the predicted shard (or nothing was predicted) | done                                     |
| success elsewhere, hash key inside the actual shard       | done + invalidate the shard map          |
| success elsewhere, hash key outside the actual shard      | retry as `Wrong Shard` + invalidate      |

The shard map is invalidated once per Kinesis record, not once per user record, and never
refreshed here: a success in a shard the map does not know yet is handed to `park` and decided
by `handle_landed` once the producer has refreshed the map (off the caller's clock). Unlike the
KPL, every retry waits: exponential backoff with full jitter, bounded by the record's TTL.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from shardline.errors import (
    COUNT_MISMATCH,
    EXPIRED,
    MALFORMED_RESPONSE,
    OUTCOME_UNKNOWN,
    THROTTLE_ERROR_CODES,
    WRONG_SHARD,
)
from shardline.kinesis._shard_map import ShardMap
from shardline.producer._buffered import BufferedRecord, KinesisRecord
from shardline.producer._collector import PutRecordsBatch
from shardline.producer._config import ProducerConfig
from shardline.producer._metrics import ProducerMetrics
from shardline.producer._result import Attempt, RecordResult
from shardline.producer._sender import SendOutcome

#: A per-record throttle: the shard's limit, not a failure of the service.
THROTTLED_RECORD = "ProvisionedThroughputExceededException"


class Retrier:
    """Turns outcomes into finished results or scheduled retries.

    `finish(record, result)` resolves a record; `retry(record, at)` re-queues it to be sent
    again no earlier than clock time `at`; `park(kinesis_record, outcome, entry)` returns True
    when it takes a success whose shard the map cannot place yet (see `handle_landed`).
    """

    def __init__(
        self,
        *,
        shard_map: ShardMap,
        config: ProducerConfig,
        clock: Callable[[], float],
        rng: random.Random,
        metrics: ProducerMetrics,
        finish: Callable[[BufferedRecord, RecordResult], None],
        retry: Callable[[BufferedRecord, float], None],
        park: Callable[[KinesisRecord, SendOutcome, Mapping[str, Any]], bool] | None = None,
    ) -> None:
        self._shard_map = shard_map
        self._config = config
        self._clock = clock
        self._rng = rng
        self._metrics = metrics
        self._finish = finish
        self._retry = retry
        self._park = park

    def handle(self, batch: PutRecordsBatch, outcome: SendOutcome) -> None:
        """Classify the outcome of sending `batch`."""
        self._metrics.observe("RequestTime", outcome.duration * 1000.0)
        if outcome.error_code is not None:
            code, message = outcome.error_code, outcome.error_message or ""
            permanent = code in self._config.permanent_error_codes
            for kinesis_record in batch.records:
                self._failed(kinesis_record, outcome, code, message, give_up=permanent)
            return
        if len(outcome.entries) != len(batch.records):
            message = f"sent {len(batch.records)} records, the response holds {len(outcome.entries)}"
            for kinesis_record in batch.records:
                self._failed(kinesis_record, outcome, COUNT_MISMATCH, message, give_up=True)
            return
        if outcome.reconciled:
            self._count_read_back(outcome.entries)
        for kinesis_record, entry in zip(batch.records, outcome.entries, strict=True):
            entry_code = entry.get("ErrorCode")
            if entry_code:
                entry_message = entry.get("ErrorMessage") or ""
                unknown = entry_code == OUTCOME_UNKNOWN  # may have landed: a retry could copy it
                self._failed(kinesis_record, outcome, entry_code, entry_message, give_up=unknown)
            elif not (isinstance(entry.get("ShardId"), str) and isinstance(entry.get("SequenceNumber"), str)):
                message = f"a success entry without ShardId or SequenceNumber: {sorted(entry)}"
                self._failed(kinesis_record, outcome, MALFORMED_RESPONSE, message, give_up=True)
            else:
                self._succeeded(kinesis_record, outcome, entry)

    def _count_read_back(self, entries: Sequence[Mapping[str, Any]]) -> None:
        metrics = self._metrics
        metrics.count("UnansweredRequestsReadBack")
        codes = [entry.get("ErrorCode") for entry in entries]
        metrics.count("ReadBackFoundLanded", codes.count(None))
        metrics.count("ReadBackUnknown", codes.count(OUTCOME_UNKNOWN))
        metrics.count("ReadBackNotLanded", len(codes) - codes.count(None) - codes.count(OUTCOME_UNKNOWN))

    def handle_landed(
        self,
        kinesis_record: KinesisRecord,
        outcome: SendOutcome,
        entry: Mapping[str, Any],
        *,
        trust: bool = False,
    ) -> None:
        """Decide a parked success now that the shard map was refreshed (or could not be).

        With `trust` (the deadline came first) the records are done where Kinesis put them:
        they landed, and a retry could only add a copy.
        """
        self._succeeded(kinesis_record, outcome, entry, may_park=False, trust=trust)

    def expire(self, record: BufferedRecord, message: str) -> None:
        """Fail `record` as `Expired` (TTL or deadline passed before it could be sent)."""
        self._metrics.count("UserRecordExpired")
        self.fail(record, EXPIRED, message)

    def fail(self, record: BufferedRecord, code: str, message: str) -> None:
        """Fail `record` without sending it (one attempt that never reached Kinesis)."""
        record.attempts.append(Attempt(self._clock(), 0.0, False, code, message))
        self._metrics.error(code)
        self._finish_failed(record, code, message)

    # -- outcomes --------------------------------------------------------------------------

    def _failed(
        self, kinesis_record: KinesisRecord, outcome: SendOutcome, code: str, message: str, *, give_up: bool
    ) -> None:
        give_up = give_up or (self._config.fail_if_throttled and code in THROTTLE_ERROR_CODES)
        for member in kinesis_record.members:
            member.attempts.append(Attempt(outcome.started, outcome.duration, False, code, message))
            self._metrics.error(code)
            if give_up:
                self._finish_failed(member, code, message)
            else:
                self._schedule_retry(member)

    def _succeeded(
        self,
        kinesis_record: KinesisRecord,
        outcome: SendOutcome,
        entry: Mapping[str, Any],
        *,
        may_park: bool = True,
        trust: bool = False,
    ) -> None:
        actual = entry["ShardId"]
        sequence_number = entry["SequenceNumber"]
        predicted = kinesis_record.predicted_shard
        actual_range = None
        trust = trust or not self._config.retry_wrong_shard  # done where it landed, in range or not
        if predicted is not None and predicted != actual:
            # Once per Kinesis record: the actual shard may be a child born in a split.
            self._shard_map.invalidate(outcome.started, predicted, refresh=self._park is None)
            actual_range = self._shard_map.hash_range(actual)
            parked = actual_range is None and may_park and self._park is not None and not trust
            if parked and self._park(kinesis_record, outcome, entry):  # type: ignore[misc]
                return
        aggregated = kinesis_record.aggregated
        metrics = self._metrics
        metrics.count("KinesisRecordsPut")
        metrics.count("KinesisRecordsDataPut", kinesis_record.size)
        metrics.observe("UserRecordsPerKinesisRecord", len(kinesis_record.members))
        retries: list[float] = []
        data_put = 0
        landed = Attempt(outcome.started, outcome.duration, True)  # immutable: one for all members
        first_try = (landed,)
        for index, member in enumerate(kinesis_record.members):
            if (
                not trust
                and predicted is not None
                and predicted != actual
                and (actual_range is None or member.hash_key not in actual_range)
            ):
                message = (
                    f"landed in {actual}, whose hash range does not hold the record (predicted {predicted})"
                )
                member.attempts.append(
                    Attempt(outcome.started, outcome.duration, False, WRONG_SHARD, message)
                )
                self._metrics.error(WRONG_SHARD)
                self._schedule_retry(member)
                continue
            attempts = member.attempts
            attempts.append(landed)
            retries.append(len(attempts) - 1)
            data_put += len(member.record.data)
            self._finish(
                member,
                RecordResult(
                    True,
                    actual,
                    sequence_number,
                    index if aggregated else None,
                    None,
                    None,
                    first_try if len(attempts) == 1 else tuple(attempts),
                ),
            )
        metrics.count("UserRecordsPut", len(retries))
        metrics.count("UserRecordsDataPut", data_put)
        metrics.observe_many("RetriesPerRecord", retries)

    def _schedule_retry(self, record: BufferedRecord) -> None:
        now = self._clock()
        if now >= record.expires:
            self.expire(record, f"record TTL of {self._config.record_ttl:g} s passed while retrying")
            return
        last = record.attempts[-1].error_code
        if last == THROTTLED_RECORD:
            # The shard's token bucket already paces what goes next; a growing backoff would only
            # leave the shard idle when its next second opens (the KPL re-queues at once).
            ceiling = self._config.retry_base_delay
        else:
            failures = sum(1 for attempt in record.attempts if not attempt.success)
            ceiling = min(self._config.retry_max_delay, self._config.retry_base_delay * 2 ** (failures - 1))
        self._retry(record, now + self._rng.uniform(0.0, ceiling))

    def _finish_failed(self, record: BufferedRecord, code: str, message: str) -> None:
        self._metrics.observe("RetriesPerRecord", max(0, len(record.attempts) - 1))
        self._finish(
            record,
            RecordResult(
                success=False, error_code=code, error_message=message, attempts=tuple(record.attempts)
            ),
        )
