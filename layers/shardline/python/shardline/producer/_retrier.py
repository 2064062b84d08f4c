"""Retrier: classifies every PutRecords outcome, per aggregate, as the C++ KPL's retrier does — with
identity instead of blind copies.

Every Kinesis record is an aggregate with an id (`_lanes`). An outcome is *unknown* when the
aggregate may have landed without Kinesis saying where; the aggregate is then *sealed*: its
members are only ever sent again inside it, identical (same id, same bytes), so a consumer that
applied one copy skips the other. A definitive refusal of an aggregate that is not sealed
releases its members, to be aggregated afresh (its counter is settled: it never went in).

| outcome                                                   | action                                        |
|-----------------------------------------------------------|-----------------------------------------------|
| no reply (timeout, reset, closed connection), or a 5xx    | unknown: seal, resend identical (backoff)     |
| response record count differs from the request            | unknown: seal each, resend identical          |
| a success entry without `ShardId` or `SequenceNumber`     | unknown (`MalformedResponse`): seal, resend   |
| request-level error, throttled and `fail_if_throttled`    | fail every user record with that code         |
| request-level error with a permanent code (config)        | fail every user record (no retry helps)       |
| any other request-level error (a 4xx: nothing written)    | refused: release the members to retry         |
| per-record error, throttled and `fail_if_throttled`       | fail the aggregate's user records             |
| throttled, every attempt for `throttled_give_up` s or more | fail the aggregate's user records             |
| any other per-record error                                | refused: release the members to retry         |
| success: members whose hash key the landing shard holds   | done, with that shard and sequence number     |
| success: members it does not hold (a reshard)             | `Wrong Shard`: resend it, re-routed (below)   |

"Release" and "fail" act on a sealed aggregate differently: it is resent whole rather than
released, and its failed members report `unconfirmed=True` when a copy may be in the stream.
A member counts as confirmed only in a shard that holds its hash key: the shard Kinesis routed
the aggregate to by that very key, the shard the member itself was predicted for, or one whose
range the shard map knows to hold it.
Re-routed, not split: the same aggregate (same id, same bytes) goes again with its explicit hash
key set to the first unconfirmed member's, so it lands in that member's shard; each shardline
consumer applies only the members its own shard's range holds, so each is applied once.

The shard map is invalidated once per Kinesis record, not once per user record, and never
refreshed here: a success in a shard the map does not know yet is handed to `park` (as `Landed`)
and decided by `handle_landed` once the producer has refreshed the map (off the caller's clock).

What it decides goes to its `Outcomes` (the dispatcher): `finish` a record with its result,
`retry` a released record, `resend` a sealed aggregate whole, and — for an `Outcomes` that parks
(`ParkingOutcomes`) — `park` a landing to decide later. Unlike the
KPL, every retry waits: exponential backoff with full jitter, bounded by the records' TTLs and
deadlines, and a sealed aggregate's by `RESEND_HORIZON_S` after its first send.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import NamedTuple, Protocol, runtime_checkable

from shardline.errors import (
    COUNT_MISMATCH,
    EXPIRED,
    MALFORMED_RESPONSE,
    THROTTLE_ERROR_CODES,
    WRONG_SHARD,
)
from shardline.kinesis._shard_map import ShardMap
from shardline.producer._buffered import BufferedRecord, KinesisRecord
from shardline.producer._collector import PutRecordsBatch
from shardline.producer._config import RESEND_HORIZON_S, ProducerConfig
from shardline.producer._lanes import Lanes
from shardline.producer._metrics import ProducerMetrics
from shardline.producer._result import Attempt, RecordResult
from shardline.producer._sender import Accepted, Malformed, Refused, SendOutcome

#: A per-record throttle: the shard's limit, not a failure of the service.
THROTTLED_RECORD = "ProvisionedThroughputExceededException"


class Landed(NamedTuple):
    """A success whose shard the map does not know yet: decided by `Retrier.handle_landed` later."""

    kinesis_record: KinesisRecord
    outcome: SendOutcome
    accepted: Accepted


class Outcomes(Protocol):
    """Where the retrier's decisions go."""

    def finish(self, record: BufferedRecord, result: RecordResult) -> None:
        """`record` is done: `result` is final."""

    def retry(self, record: BufferedRecord, at: float) -> None:
        """Send released `record` again, in a new aggregate, no earlier than clock time `at`."""

    def resend(self, kinesis_record: KinesisRecord, at: float) -> None:
        """Send sealed `kinesis_record` again whole, identical, no earlier than clock time `at`."""


@runtime_checkable
class ParkingOutcomes(Outcomes, Protocol):
    """`Outcomes` that can hold a landing until the shard map is refreshed (off the caller's
    clock). Without it the retrier refreshes the map inline when a prediction proves wrong."""

    def park(self, landed: Landed) -> bool:
        """Take `landed` to decide once the map is refreshed; False: the map is current, decide now."""


class Retrier:
    """Turns outcomes into finished results or scheduled retries, told to `outcomes`.

    `lanes` settles aggregates.
    """

    def __init__(
        self,
        *,
        shard_map: ShardMap,
        config: ProducerConfig,
        clock: Callable[[], float],
        rng: random.Random,
        metrics: ProducerMetrics,
        lanes: Lanes,
        outcomes: Outcomes,
    ) -> None:
        self._shard_map = shard_map
        self._config = config
        self._clock = clock
        self._rng = rng
        self._metrics = metrics
        self._lanes = lanes
        self._finish = outcomes.finish
        self._retry = outcomes.retry
        self._resend = outcomes.resend
        self._park = outcomes.park if isinstance(outcomes, ParkingOutcomes) else None

    def handle(self, batch: PutRecordsBatch, outcome: SendOutcome) -> None:
        """Classify the outcome of sending `batch`."""
        self._metrics.observe("RequestTime", outcome.duration * 1000.0)
        if outcome.error_code is not None:
            code, message = outcome.error_code, outcome.error_message or ""
            for kinesis_record in batch.records:
                if outcome.unanswered:
                    self._unknown(kinesis_record, outcome, code, message)
                else:
                    permanent = code in self._config.permanent_error_codes
                    self._refused(kinesis_record, outcome, code, message, give_up=permanent)
            return
        if len(outcome.entries) != len(batch.records):
            message = f"sent {len(batch.records)} records, the response holds {len(outcome.entries)}"
            for kinesis_record in batch.records:
                self._unknown(kinesis_record, outcome, COUNT_MISMATCH, message)
            return
        for kinesis_record, entry in zip(batch.records, outcome.entries, strict=True):
            if isinstance(entry, Refused):
                self._refused(kinesis_record, outcome, entry.error_code, entry.error_message, give_up=False)
            elif isinstance(entry, Malformed):
                self._unknown(kinesis_record, outcome, MALFORMED_RESPONSE, entry.message)
            else:
                self._succeeded(kinesis_record, outcome, entry)

    def handle_landed(self, landed: Landed) -> None:
        """Decide a parked success now that the shard map was refreshed (or could not be, or the
        deadline came first): members whose shard is still unknown are not confirmed there."""
        self._succeeded(landed.kinesis_record, landed.outcome, landed.accepted, may_park=False)

    def expire(self, record: BufferedRecord, message: str) -> None:
        """Fail `record` as `Expired` (TTL or deadline passed before it could be sent or confirmed)."""
        self._metrics.count("UserRecordExpired")
        self.fail(record, EXPIRED, message)

    def fail(self, record: BufferedRecord, code: str, message: str) -> None:
        """Fail `record` without sending it now (one attempt that never reached Kinesis)."""
        record.attempts.append(Attempt(self._clock(), 0.0, False, code, message))
        self._metrics.error(code)
        self._finish_failed(record, code, message)

    def resend_due(self, kinesis_record: KinesisRecord, now: float) -> bool:
        """Whether a sealed aggregate due now still goes: its members past their TTL fail, and past
        `RESEND_HORIZON_S` since its first send all do; False (and retired) when none is left."""
        if now >= kinesis_record.first_sent + RESEND_HORIZON_S:
            for member in kinesis_record.members:
                if member.result is None:
                    self.expire(member, f"not confirmed within {RESEND_HORIZON_S:g} s of its first send")
        else:
            for member in kinesis_record.members:
                if member.result is None and now >= member.expires:
                    self.expire(member, self._ttl_message("before Kinesis confirmed it"))
        if any(member.result is None for member in kinesis_record.members):
            return True
        self.retire(kinesis_record)
        return False

    def retire(self, kinesis_record: KinesisRecord) -> None:
        """`kinesis_record` will never be sent again: settle its counter — now, or, when a copy may
        still be unaccounted for, `RESEND_HORIZON_S` after its last send."""
        if kinesis_record.retired:
            return
        kinesis_record.retired = True
        aggregate_id = kinesis_record.aggregate_id
        if aggregate_id is None:
            return
        confirmed = all(
            member.result is not None and member.result.success for member in kinesis_record.members
        )
        if kinesis_record.maybe_landed and not confirmed:
            self._lanes.settle_at(aggregate_id, kinesis_record.last_sent + RESEND_HORIZON_S)
        else:
            self._lanes.settle(aggregate_id)

    # -- outcomes --------------------------------------------------------------------------

    def _unknown(self, kinesis_record: KinesisRecord, outcome: SendOutcome, code: str, message: str) -> None:
        """It may have landed: seal it and resend it identical."""
        kinesis_record.maybe_landed = True
        if not kinesis_record.sealed:
            self._seal(kinesis_record)
            self._metrics.count("AggregatesSealed")
        self._record_failure(kinesis_record, outcome, code, message)
        self._resend_later(kinesis_record)

    def _refused(
        self, kinesis_record: KinesisRecord, outcome: SendOutcome, code: str, message: str, *, give_up: bool
    ) -> None:
        """Kinesis refused this copy: it is not in the stream."""
        give_up = give_up or (self._config.fail_if_throttled and code in THROTTLE_ERROR_CODES)
        self._record_failure(kinesis_record, outcome, code, message)
        if code in THROTTLE_ERROR_CODES and not give_up:
            now = outcome.started + outcome.duration
            pending = [member for member in kinesis_record.members if member.result is None]
            give_up = bool(pending) and all(self._throttled_out(member, now) for member in pending)
        if kinesis_record.sealed:
            if give_up:
                for member in kinesis_record.members:
                    if member.result is None:
                        self._finish_failed(member, code, message)
                self.retire(kinesis_record)
            else:
                self._resend_later(kinesis_record)
            return
        self.retire(kinesis_record)  # released: its members go again in new aggregates
        for member in kinesis_record.members:
            if give_up:
                self._finish_failed(member, code, message)
            else:
                self._schedule_retry(member)

    def _throttled_out(self, record: BufferedRecord, now: float) -> bool:
        """Whether `record` has been refused for its shard's write limit, every attempt since the
        first of this run, for `throttled_give_up` seconds or more by `now`."""
        limit = self._config.throttled_give_up
        if limit is None:
            return False
        started = now
        for attempt in reversed(record.attempts):
            if attempt.error_code not in THROTTLE_ERROR_CODES:
                break
            started = attempt.started
        return now - started >= limit

    def _record_failure(
        self, kinesis_record: KinesisRecord, outcome: SendOutcome, code: str, message: str
    ) -> None:
        failed = Attempt(outcome.started, outcome.duration, False, code, message)
        for member in kinesis_record.members:
            if member.result is None:
                member.attempts.append(failed)
                self._metrics.error(code)

    def _seal(self, kinesis_record: KinesisRecord) -> None:
        kinesis_record.sealed = True
        for member in kinesis_record.members:
            member.sealed_in = kinesis_record

    def _succeeded(
        self,
        kinesis_record: KinesisRecord,
        outcome: SendOutcome,
        accepted: Accepted,
        *,
        may_park: bool = True,
    ) -> None:
        actual, sequence_number = accepted
        predicted = kinesis_record.predicted_shard
        route_key = kinesis_record.route_key
        members = kinesis_record.members
        if predicted is not None and predicted != actual:
            # Once per Kinesis record: the actual shard may be a child born in a split.
            self._shard_map.invalidate(outcome.started, predicted, refresh=self._park is None)

        def routed_there(member: BufferedRecord) -> bool:
            """Kinesis routed the copy by this member's hash key, or the member was predicted for
            the very shard it landed in (a shard's hash range never changes)."""
            return member.hash_key == route_key or member.predicted_shard == actual

        actual_range = None
        if any(member.result is None and not routed_there(member) for member in members):
            actual_range = self._shard_map.hash_range(actual)
            parked = actual_range is None and predicted is not None and may_park and self._park is not None
            if parked and self._park(Landed(kinesis_record, outcome, accepted)):  # type: ignore[misc]
                return
        metrics = self._metrics
        metrics.count("KinesisRecordsPut")
        metrics.count("KinesisRecordsDataPut", kinesis_record.size)
        metrics.observe("UserRecordsPerKinesisRecord", len(members))
        retries: list[float] = []
        data_put = 0
        landed = Attempt(outcome.started, outcome.duration, True)  # immutable: one for all members
        first_try = (landed,)
        first_wrong: BufferedRecord | None = None
        for index, member in enumerate(members):
            if member.result is not None:
                continue  # confirmed by an earlier copy, or given up
            holds = routed_there(member) or (actual_range is not None and member.hash_key in actual_range)
            if not holds:
                where = (
                    "whose hash range does not hold the record"
                    if actual_range
                    else "a shard the map cannot place"
                )
                message = f"landed in {actual}, {where} (predicted {predicted})"
                member.attempts.append(
                    Attempt(outcome.started, outcome.duration, False, WRONG_SHARD, message)
                )
                metrics.error(WRONG_SHARD)
                if first_wrong is None:
                    first_wrong = member
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
                    index,
                    None,
                    None,
                    first_try if len(attempts) == 1 else tuple(attempts),
                ),
            )
        metrics.count("UserRecordsPut", len(retries))
        metrics.count("UserRecordsDataPut", data_put)
        metrics.observe_many("RetriesPerRecord", retries)
        if first_wrong is None:
            self.retire(kinesis_record)
            return
        # Re-route, not split: the same aggregate goes again, routed by the first member not
        # confirmed; each consumer applies only the members of its own shard's range.
        if actual_range is None:
            kinesis_record.maybe_landed = True  # landed where its members' shard is not known
        if not kinesis_record.sealed:
            self._seal(kinesis_record)
        kinesis_record.reroute(first_wrong.hash_key)
        metrics.count("AggregatesRerouted")
        self._resend_later(kinesis_record)

    def _resend_later(self, kinesis_record: KinesisRecord) -> None:
        """Schedule a sealed aggregate to go again, after a backoff, if it may still go."""
        now = self._clock()
        if not self.resend_due(kinesis_record, now):
            return
        alive = [member for member in kinesis_record.members if member.result is None]
        self._resend(kinesis_record, now + self._rng.uniform(0.0, self._ceiling(alive[0])))

    def _schedule_retry(self, record: BufferedRecord) -> None:
        now = self._clock()
        if now >= record.expires:
            self.expire(record, self._ttl_message("while retrying"))
            return
        self._retry(record, now + self._rng.uniform(0.0, self._ceiling(record)))

    def _ceiling(self, record: BufferedRecord) -> float:
        last = record.attempts[-1].error_code
        if last == THROTTLED_RECORD:
            # The shard's token bucket already paces what goes next; a growing backoff would only
            # leave the shard idle when its next second opens (the KPL re-queues at once).
            return self._config.retry_base_delay
        failures = sum(1 for attempt in record.attempts if not attempt.success)
        return min(self._config.retry_max_delay, self._config.retry_base_delay * 2.0 ** (failures - 1))

    def _ttl_message(self, when: str) -> str:
        return f"record TTL of {self._config.record_ttl:g} s passed {when}"

    def _finish_failed(self, record: BufferedRecord, code: str, message: str) -> None:
        metrics = self._metrics
        metrics.observe("RetriesPerRecord", max(0, len(record.attempts) - 1))
        metrics.count("UserRecordsNotLanded")
        sealed_in = record.sealed_in
        unconfirmed = sealed_in is not None and sealed_in.maybe_landed
        if unconfirmed:
            message += "; a copy may be in the stream (a request carrying it went unanswered)"
        self._finish(
            record,
            RecordResult(
                success=False,
                error_code=code,
                error_message=message,
                attempts=tuple(record.attempts),
                unconfirmed=unconfirmed,
            ),
        )
