"""One shard of a Kinesis event-source mapping: its poller thread, batches and retries (see `runner`)."""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

from botocore.exceptions import BotoCoreError, ClientError

from ...app import model
from ...cloudwatch.metrics import Publish, no_metrics
from .batches import (
    FAILURE,
    PARTIAL,
    RECORD_AGE_EXCEEDED,
    RETRY_ATTEMPTS_EXHAUSTED,
    SUCCESS,
    StreamRecord,
    batch_length,
    event_record,
    judge,
    make_event,
    on_failure_message,
)
from .filters import RecordFilter

log = logging.getLogger("local.lambda_.esm.runner")

POLLING, WAITING_FOR_PARENT, DONE = "polling", "waiting-for-parent", "done"
GET_RECORDS_MAX = 10_000
THROTTLED = "ProvisionedThroughputExceededException"
EXPIRED = "ExpiredIteratorException"


@dataclass
class ShardStats:
    """What `stats()` reports for one shard."""

    shard_id: str
    parents: tuple[str, ...] = ()
    state: str = POLLING
    position: str | None = None  # the last checkpointed sequence number
    # Lambda's IteratorAge: the last record's age when its batch ended; 0 once a read at the tip
    # finds nothing more (not the drain's last value, kept for good)
    iterator_age_ms: float | None = None
    millis_behind_latest: int | None = None
    get_records: int = 0
    throttles: int = 0
    batches: int = 0  # invocations
    records: int = 0  # records checkpointed after a successful invocation
    function_errors: int = 0
    invalid_responses: int = 0  # partial batch responses that failed the whole batch
    retries: int = 0
    bisects: int = 0
    records_discarded: int = 0
    records_filtered_out: int = 0  # matched none of the mapping's filters: never delivered
    records_sent_to_on_failure: int = 0
    last_error: str | None = None


@dataclass
class _Part:
    """A batch, or a piece of one after a bisect or a partial response, with its history."""

    records: list[StreamRecord]
    invokes: int = 0  # invocations these records were in (the approximateInvokeCount)
    retries: int = 0
    request_id: str | None = None
    function_error: str | None = None


@dataclass
class MappingSettings:
    """What every shard of one mapping shares."""

    poll_interval: float
    retry_base_delay: float
    retry_max_delay: float
    max_record_age: float
    clock: Callable[[], float]
    stream_arn: str
    function_arn: str
    role_arn: str
    region: str = model.REGION
    stop: threading.Event = field(default_factory=threading.Event)
    publish: Publish = no_metrics  # Lambda's IteratorAge, per invocation
    record_filter: RecordFilter | None = None  # FilterCriteria: records matching none are dropped


class Runner(Protocol):
    """What a shard's poller needs of the mapping that runs it (`runner.MappingRunner` is one):
    its settings and clients, and the shard bookkeeping it shares with the other shards' pollers."""

    mapping: model.EventSourceMapping
    settings: MappingSettings
    invoker: model.Invoker
    kinesis: Any
    sqs: Any

    def parents_done(self, parents: tuple[str, ...]) -> bool: ...

    def shard_done(self, shard_id: str) -> None: ...

    def add_children(self, child_shards: list[dict[str, Any]]) -> None: ...

    def queue_url(self) -> str: ...


class ShardPoller(threading.Thread):
    """Reads one shard in order and invokes the function with one batch at a time."""

    def __init__(self, runner: Runner, shard_id: str, parents: tuple[str, ...], position: str) -> None:
        super().__init__(name=f"esm-{runner.mapping.logical_id}-{shard_id}", daemon=True)
        self.runner, self.mapping, self.cfg = runner, runner.mapping, runner.settings
        self.shard_id = shard_id
        self.starting_position = position
        self.stats = ShardStats(shard_id, parents, WAITING_FOR_PARENT if parents else POLLING)
        self._iterator: str | None = None
        self._read_position: str | None = None  # the last sequence number read into the buffer
        self._passed_over: dict[str, str] = {}  # a buffered record -> the last filtered-out one after it
        self._buffer: list[StreamRecord] = []
        self._window_started = 0.0
        self._ended = False  # GetRecords gave no NextShardIterator: a closed shard, read to its end
        self._throttle_delay = 0.0

    # -- the loop --------------------------------------------------------------------------------

    def run(self) -> None:
        stop = self.cfg.stop
        while self.stats.parents and not self.runner.parents_done(self.stats.parents):
            if stop.wait(0.2):
                return
        self.stats.state = POLLING
        next_poll = 0.0
        while not stop.is_set():
            try:
                if (
                    not self._ended
                    and len(self._buffer) < self.mapping.batch_size
                    and time.monotonic() >= next_poll
                ):
                    wait = self._poll()  # from the answer on (the call itself may have taken a while)
                    next_poll = time.monotonic() + wait
                if self._batch_ready():
                    self._invoke_next_batch()
                    continue
                if self._ended and not self._buffer:
                    self.stats.state = DONE
                    self.runner.shard_done(self.shard_id)
                    return
                wake = next_poll
                if self._buffer and self.mapping.batching_window_seconds:
                    wake = min(wake, self._window_started + self.mapping.batching_window_seconds)
                stop.wait(max(0.0, wake - time.monotonic()))
            except Exception as exc:  # a bug or an endpoint gone: keep the shard alive, say why
                log.exception("%s: unexpected error", self.name)
                self.stats.last_error = repr(exc)
                stop.wait(1.0)

    def _batch_ready(self) -> bool:
        buffer = self._buffer
        if not buffer:
            return False
        if self._ended or len(buffer) >= self.mapping.batch_size or not self.mapping.batching_window_seconds:
            return True
        if batch_length(buffer, self.mapping.batch_size) < len(buffer):
            return True  # the 6 MB cut is reached
        return time.monotonic() >= self._window_started + self.mapping.batching_window_seconds

    # -- reading ---------------------------------------------------------------------------------

    def take_starting_iterator(self) -> None:
        try:
            self._iterator = self._new_iterator()
        except (ClientError, BotoCoreError) as exc:  # the loop will try again
            self.stats.last_error = f"GetShardIterator: {exc}"

    def _new_iterator(self) -> str:
        """From the last record read (so an expired iterator loses and repeats nothing), else the start."""
        args: dict[str, Any] = {"StreamName": self.mapping.stream_name, "ShardId": self.shard_id}
        if self._read_position is not None:
            args.update(ShardIteratorType="AFTER_SEQUENCE_NUMBER", StartingSequenceNumber=self._read_position)
        elif self.starting_position == "AT_TIMESTAMP":
            timestamp = self.mapping.starting_position_timestamp or 0.0
            args.update(ShardIteratorType="AT_TIMESTAMP", Timestamp=datetime.fromtimestamp(timestamp, UTC))
        else:
            args.update(ShardIteratorType=self.starting_position)
        iterator: str = self.runner.kinesis.get_shard_iterator(**args)["ShardIterator"]
        return iterator

    def _poll(self) -> float:
        """One GetRecords into the buffer; returns how long to wait before the next one.

        It asks for as much as GetRecords gives (not one batch): the shard's 5 calls a second are
        shared with every other consumer, and batches are cut from the buffer. It is only called
        while the buffer holds less than a batch.
        """
        started = time.monotonic()
        limit = GET_RECORDS_MAX - len(self._buffer)
        try:
            if self._iterator is None:
                self._iterator = self._new_iterator()
            self.stats.get_records += 1
            response = self.runner.kinesis.get_records(ShardIterator=self._iterator, Limit=limit)
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code")
            if code == EXPIRED:
                self._iterator = None
                return 0.0
            if code == THROTTLED:
                self.stats.throttles += 1
                self._throttle_delay = min(max(0.2, self._throttle_delay * 2), 5.0)
                return self._throttle_delay
            self.stats.last_error = f"GetRecords: {exc}"
            return self.cfg.poll_interval
        except BotoCoreError as exc:
            self.stats.last_error = f"GetRecords: {exc}"
            return self.cfg.poll_interval
        self._throttle_delay = 0.0
        records = [
            event_record(
                record,
                shard_id=self.shard_id,
                stream_arn=self.cfg.stream_arn,
                role_arn=self.cfg.role_arn,
                region=self.cfg.region,
            )
            for record in response.get("Records", [])
        ]
        if records:
            self._read_position = records[-1].sequence_number
            records = self._filtered(records)
        if records:
            if not self._buffer:
                self._window_started = time.monotonic()
            self._buffer += records
        behind_ms = response.get("MillisBehindLatest", 0)
        self.stats.millis_behind_latest = behind_ms
        if not records and not self._buffer and behind_ms == 0 and self.stats.iterator_age_ms:
            self.stats.iterator_age_ms = 0.0  # at the tip with nothing to deliver: behind by nothing
        self._iterator = response.get("NextShardIterator")
        if self._iterator is None:
            self._ended = True
            self.runner.add_children(response.get("ChildShards", []))
            return 0.0
        if behind_ms > 0 or len(records) >= limit:
            return 0.0  # behind: back to back
        return max(0.0, started + self.cfg.poll_interval - time.monotonic())

    def _filtered(self, records: list[StreamRecord]) -> list[StreamRecord]:
        """The records the mapping's filters let through. Lambda moves past the others unseen: the
        position passes a dropped record once what was read before it is done."""
        record_filter = self.cfg.record_filter
        if record_filter is None:
            return records
        kept: list[StreamRecord] = []
        for record in records:
            if record_filter.matches(record.event_record):
                kept.append(record)
                continue
            self.stats.records_filtered_out += 1
            before = kept[-1] if kept else (self._buffer[-1] if self._buffer else None)
            if before is None:
                self._checkpoint(record)  # nothing pending before it
            else:
                self._passed_over[before.sequence_number] = record.sequence_number
        return kept

    # -- invoking --------------------------------------------------------------------------------

    def _invoke_next_batch(self) -> None:
        count = batch_length(self._buffer, self.mapping.batch_size)
        if not self._process(list(self._buffer[:count])):
            return  # stopping
        del self._buffer[:count]
        # The next window begins when this invocation completes (with-kinesis, batching).
        self._window_started = time.monotonic()

    def _process(self, batch: list[StreamRecord]) -> bool:  # noqa: C901 -- over the gate before it existed; issue 26 cuts it
        """Until each record of `batch` is processed or discarded; False if stopped first."""
        parts = deque([_Part(batch)])
        service_failures = 0
        while parts:
            if self.cfg.stop.is_set():
                return False
            part = parts[0]
            expired = self._expired_prefix(part.records)
            if expired:
                self._discard(part.records[:expired], RECORD_AGE_EXCEEDED, part)
                part.records = part.records[expired:]
                if not part.records:
                    parts.popleft()
                continue
            function = {"FunctionName": self.mapping.function_name}
            age_ms = (self.cfg.clock() - part.records[-1].arrival) * 1000
            self.cfg.publish("AWS/Lambda", "IteratorAge", function, age_ms)
            try:
                result = self.runner.invoker.invoke(self.mapping.function_name, make_event(part.records))
            except Exception as exc:  # not a function error: retried until the records age out, uncounted
                service_failures += 1
                self.stats.last_error = f"invoke: {exc!r}"
                self._pause(service_failures)
                continue
            service_failures = 0
            part.invokes += 1
            part.request_id, part.function_error = result.request_id, result.function_error
            self.stats.batches += 1
            verdict = judge(
                result.payload, result.function_error, part.records, self.mapping.report_batch_item_failures
            )
            if verdict.outcome == SUCCESS:
                self._succeeded(part.records)
                parts.popleft()
                continue
            self.stats.last_error = verdict.reason
            if result.function_error:
                self.stats.function_errors += 1
            elif verdict.outcome == FAILURE:
                self.stats.invalid_responses += 1
            if verdict.outcome == PARTIAL and verdict.retry_from:
                # Checkpoint before the lowest reported record; with bisect, that is where the batch
                # splits (and a split is not a retry).
                self._succeeded(part.records[: verdict.retry_from])
                part.records = part.records[verdict.retry_from :]
                if self.mapping.bisect_on_error:
                    self.stats.bisects += 1
                    continue
            elif verdict.outcome == FAILURE and self.mapping.bisect_on_error and len(part.records) > 1:
                middle = len(part.records) // 2
                parts.popleft()
                parts.appendleft(
                    _Part(part.records[middle:], part.invokes, 0, part.request_id, part.function_error)
                )
                parts.appendleft(
                    _Part(part.records[:middle], part.invokes, 0, part.request_id, part.function_error)
                )
                self.stats.bisects += 1
                continue
            part.retries += 1
            limit = self.mapping.maximum_retry_attempts
            if limit != -1 and part.retries > limit:
                self._discard(part.records, RETRY_ATTEMPTS_EXHAUSTED, part)
                parts.popleft()
                continue
            self.stats.retries += 1
            self._pause(part.retries)
        return True

    def _pause(self, attempt: int) -> None:
        delay = self.cfg.retry_base_delay * 2 ** (attempt - 1)
        self.cfg.stop.wait(min(delay, self.cfg.retry_max_delay))

    def _expired_prefix(self, records: list[StreamRecord]) -> int:
        oldest_allowed = self.cfg.clock() - self.cfg.max_record_age
        count = 0
        for record in records:
            if record.arrival >= oldest_allowed:
                break
            count += 1
        return count

    def _checkpoint(self, record: StreamRecord) -> None:
        # Records the filters dropped right after this one are behind the position too.
        self.stats.position = self._passed_over.pop(record.sequence_number, record.sequence_number)

    def _succeeded(self, records: list[StreamRecord]) -> None:
        if not records:
            return
        self._checkpoint(records[-1])
        self.stats.records += len(records)
        self.stats.iterator_age_ms = round((self.cfg.clock() - records[-1].arrival) * 1000, 3)

    def _discard(self, records: list[StreamRecord], condition: str, part: _Part) -> None:
        """Lambda moves on past records it gives up on, telling the on-failure destination if there is one."""
        self._checkpoint(records[-1])
        self.stats.records_discarded += len(records)
        log.warning("%s: %d records discarded (%s)", self.name, len(records), condition)
        destination = self.mapping.on_failure_arn
        if not destination or not destination.startswith("arn:aws:sqs:"):
            return
        message = on_failure_message(
            request_id=part.request_id or str(uuid.uuid4()),
            function_arn=self.cfg.function_arn,
            condition=condition,
            invoke_count=part.invokes,
            function_error=part.function_error,
            invoked=part.invokes > 0,
            now=self.cfg.clock(),
            shard_id=self.shard_id,
            stream_arn=self.cfg.stream_arn,
            records=records,
        )
        try:
            self.runner.sqs.send_message(QueueUrl=self.runner.queue_url(), MessageBody=json.dumps(message))
        except (ClientError, BotoCoreError) as exc:  # as Lambda, once: the shard is not held up for it
            self.stats.last_error = f"on-failure destination {destination}: {exc}"
            log.warning("%s: %s", self.name, self.stats.last_error)
            return
        self.stats.records_sent_to_on_failure += len(records)
