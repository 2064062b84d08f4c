"""Producer: lands user records in Kinesis, aggregated per predicted shard, with a result each.

    producer = Producer(boto3.client("kinesis"), "events")
    results = producer.put_many(records, deadline=context.get_remaining_time_in_millis() / 1000 - 1)

Pipeline (one module per stage): partitioner -> ShardMap.predict -> Reducer (per-shard KPL
aggregates, each with an id from `_lanes`) -> Collector (PutRecords requests) -> ShardLimiter
(per-shard token buckets) -> sender (concurrent requests) -> Retrier (classify; retry with
backoff, resend a sealed aggregate identical, or finish). `_dispatch` holds the records between
the stages (the collector those queued per shard); this module is the public face and the
threading, and touches the dispatcher only through its methods.

A success is only ever Kinesis's word: the shard and sequence number a PutRecords returned for
the copy that confirmed the record. The producer never reads the stream (its role needs
PutRecords and ListShards only). A request whose reply is lost is resent as the identical
aggregate, and shardline's consumers apply one copy of an aggregate once.

Built for Lambda: `put()` only buffers; `flush()` drives the pipeline in the caller's thread
(requests and ListShards run on a small thread pool) and returns when every record buffered
before it has a result. Nothing runs between invocations.

Threads: any thread may `put` and `flush`. One flushing thread at a time drives the pipeline;
the others wait for it, or take over when it returns. A flush deadline belongs to the thread
that gave it: it expires that thread's unsent records only, and that flush returns by it even
while another thread's longer flush is running. Futures are resolved outside the producer's
lock, so a callback may call `put` or `flush`.
"""

from __future__ import annotations

import contextlib
import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from concurrent.futures import Future, InvalidStateError
from typing import TYPE_CHECKING

from shardline.errors import BufferFull
from shardline.kinesis._records import UserRecord, validate
from shardline.kinesis._shard_map import ShardMap
from shardline.producer._buffered import BufferedRecord, buffered_size
from shardline.producer._collector import LIMITER_TICK, NEVER
from shardline.producer._config import ProducerConfig
from shardline.producer._dispatch import Dispatcher
from shardline.producer._metrics import ProducerMetrics
from shardline.producer._partitioning import ByPartitionKey, Partitioner
from shardline.producer._result import RecordFuture, RecordResult

if TYPE_CHECKING:  # annotations only: the Protocols cost nothing at import
    from shardline.protocols import KinesisClient, LambdaContext


def deadline_from_context(context: LambdaContext, margin: float = 1.0) -> float:
    """Seconds a Lambda invocation can spend flushing: its remaining time minus `margin`."""
    return max(0.0, context.get_remaining_time_in_millis() / 1000.0 - margin)


class Producer:
    """Buffers user records and sends them to `stream_name` on `flush()`.

    `clock`/`rng` are injectable so tests control time and jitter; with `sleep` (for a fake
    clock) the producer waits for its token buckets and backoffs by calling it rather than on
    its condition. `shard_map` defaults to one over `kinesis_client.list_shards`; pass your own
    to share it between producers.
    """

    def __init__(
        self,
        kinesis_client: KinesisClient,
        stream_name: str,
        *,
        config: ProducerConfig | None = None,
        partitioner: Partitioner | None = None,
        shard_map: ShardMap | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.config = config or ProducerConfig()
        self.stream_name = stream_name
        self.metrics = ProducerMetrics()
        self.shard_map = shard_map or ShardMap(
            kinesis_client.list_shards, stream_name=stream_name, clock=clock
        )
        self._clock = clock
        self._sleep = sleep
        self._lock = threading.RLock()
        self._changed = threading.Condition(self._lock)
        self._futures = threading.Condition()  # shared by every future put() returns
        self._dispatch = Dispatcher(
            client=kinesis_client,
            stream_name=stream_name,
            config=self.config,
            shard_map=self.shard_map,
            partitioner=partitioner or ByPartitionKey(),
            metrics=self.metrics,
            clock=clock,
            rng=rng or random.Random(),
            condition=self._changed,
        )
        self._next_sequence = 0
        self._driver: int | None = None  # the thread driving the pipeline
        # Threads setting futures outside the lock right now: a flush whose records are resolved
        # returns only once their futures are set too (another thread may be setting them).
        self._resolving: Counter[int] = Counter()

    # -- public API ------------------------------------------------------------------------

    def put(self, record: UserRecord) -> Future[RecordResult]:
        """Validate and buffer one record; its future resolves during a later `flush()`. A record
        whose `caller` is None is written as `config.caller`'s.

        When the buffer bound is reached, `put` waits for room — sending buffered records in
        the meantime, as a flush would — or raises `BufferFull` (`when_buffer_full="raise"`).
        Cancelling the future does not withdraw the record.
        """
        if self.config.caller and _callerless(record):
            record = record._replace(caller=self.config.caller)
        validate([record], self.config.limits)
        future = RecordFuture(self._futures)
        self._admit([record], [future], NEVER, may_raise=True)
        return future

    def put_many(self, records: Iterable[UserRecord], deadline: float | None = None) -> list[RecordResult]:
        """Validate every record (nothing is sent if one is invalid), send all, return results in order.

        More records than the buffer bound are admitted as room is made; it never raises
        `BufferFull`. Records not admitted by the deadline fail with `Expired`. It returns by the
        deadline plus at most the requests in flight then (bound them with the client's read
        timeout); records whose request went unanswered fail with `unconfirmed=True`.
        """
        stop = self._stop_at(deadline)
        caller = self.config.caller
        if caller:  # the producer's caller on records that name none (its bytes count in validation)
            records = [r._replace(caller=caller) if _callerless(r) else r for r in records]
        buffered = self._admit(validate(records, self.config.limits), None, stop, may_raise=False)
        if buffered:
            last = buffered[-1].sequence
            self._wait_until(lambda: self._dispatch.done_through(last), stop)
        return [record.result for record in buffered]  # type: ignore[misc]  # every result is set

    def flush(self, deadline: float | None = None) -> None:
        """Send everything buffered and return when each of those records has a result.

        `deadline` is in seconds from now (a Lambda passes its remaining time, see
        `deadline_from_context`). No request — ListShards included — starts after it, and the
        calling thread's records not sent by then fail with `Expired`; other threads' records
        stay buffered for their own flush. Requests already in flight are awaited: bound them
        with the Kinesis client's connect and read timeouts.
        """
        stop = self._stop_at(deadline)
        with self._lock:
            last = self._next_sequence - 1
        self._wait_until(lambda: self._dispatch.done_through(last), stop)

    def close(self) -> None:
        """Flush, then stop the request threads."""
        self.flush()
        self._dispatch.close()  # not under the lock: the pool's last callbacks take it

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def pending(self) -> int:
        """User records buffered, queued, waiting to retry or in flight."""
        with self._lock:
            return self._dispatch.buffered_records

    @property
    def buffered_bytes(self) -> int:
        """Bytes (data plus partition keys) of the records `pending` counts."""
        with self._lock:
            return self._dispatch.buffered_bytes

    # -- admission and backpressure ----------------------------------------------------------

    def _stop_at(self, deadline: float | None) -> float:
        return NEVER if deadline is None else self._clock() + deadline

    def _admit(
        self,
        records: list[UserRecord],
        futures: list[Future[RecordResult]] | None,
        stop: float,
        *,
        may_raise: bool,
    ) -> list[BufferedRecord]:
        """Buffer `records` as room allows, waiting (or raising) at the bound; in put() order."""
        config, dispatch = self.config, self._dispatch
        owner = threading.get_ident()
        admitted: list[BufferedRecord] = []
        while True:
            with self._lock:
                now = self._clock()
                start = end = len(admitted)
                room_records = config.max_buffered_records - dispatch.buffered_records
                room_bytes = config.max_buffered_bytes - dispatch.buffered_bytes
                while end < len(records) and end - start < room_records:
                    room_bytes -= buffered_size(records[end])
                    if room_bytes < 0:
                        break
                    end += 1
                full = end == start < len(records)
                too_late = full and now >= stop
                if full and not too_late and may_raise and config.when_buffer_full == "raise":
                    raise BufferFull(
                        f"{dispatch.buffered_records} records ({dispatch.buffered_bytes} bytes) are "
                        f"buffered; the bound is {config.max_buffered_records} records or "
                        f"{config.max_buffered_bytes} bytes"
                    )
                if too_late:
                    end = len(records)
                chunk = [
                    BufferedRecord(
                        records[i],
                        futures[i] if futures is not None else None,
                        self._next_sequence + i - start,
                        now,
                        now + config.record_ttl,
                        owner,
                    )
                    for i in range(start, end)
                ]
                self._next_sequence += len(chunk)
                dispatch.add(chunk)
                self.metrics.count("UserRecordsReceived", len(chunk))
                if too_late:  # the deadline passed while waiting for room: these never go
                    dispatch.expire(chunk, "the flush deadline passed before it was buffered")
                admitted += chunk
                self._changed.notify_all()
            if len(admitted) == len(records):
                return admitted
            following = records[len(admitted)]
            size = buffered_size(following)
            self._wait_until(lambda size=size: self._has_room(size), stop)  # type: ignore[misc]

    def _has_room(self, size: int) -> bool:
        dispatch = self._dispatch
        return (
            dispatch.buffered_records < self.config.max_buffered_records
            and dispatch.buffered_bytes + size <= self.config.max_buffered_bytes
        )

    # -- driving -------------------------------------------------------------------------------

    def _wait_until(self, satisfied: Callable[[], bool], stop: float) -> None:
        """Drive the pipeline, or wait for the thread driving it, until `satisfied()` (called
        with the lock held) or until `stop` has passed and none of this thread's records is
        still in flight. Resolved futures are set outside the lock."""
        me = threading.get_ident()
        dispatch = self._dispatch
        with self._lock:
            nested = self._driver == me  # a future callback flushing: it drives from here
            outer_deadline = dispatch.begin_flush(me, stop)
        try:
            while True:
                sleep_for = 0.0
                with self._lock:
                    if self._driver is None:
                        self._driver = me
                    driving = self._driver == me
                    wake_at = dispatch.step() if driving else NEVER
                    now = self._clock()
                    if now >= stop:
                        dispatch.expire_owner(me)
                    resolved = dispatch.take_resolved()
                    finished = satisfied() or (now >= stop and not dispatch.owns_unresolved(me))
                    finished = finished and not any(n for t, n in self._resolving.items() if t != me)
                    if resolved:
                        self._resolving[me] += 1
                    elif not finished:
                        sleep_for = self._wait(driving, wake_at, stop, now)
                if resolved:
                    try:
                        _resolve(resolved)  # outside the lock: a callback may put or flush
                    finally:
                        with self._lock:
                            self._resolving[me] -= 1
                            self._changed.notify_all()
                if finished:
                    return
                if sleep_for > 0:  # (a fake clock's sleep, outside the lock)
                    self._sleep(sleep_for)  # type: ignore[misc]  # only with an injected sleep
        finally:
            with self._lock:
                dispatch.end_flush(me, outer_deadline)
                if not nested and self._driver == me:
                    self._driver = None
                    self._changed.notify_all()  # a waiting thread takes over

    def _wait(self, driving: bool, wake_at: float, stop: float, now: float) -> float:
        """Wait (lock held) until something changes or work is due; or return a time to sleep."""
        until = min(wake_at, stop) if now < stop else wake_at
        timeout = None if until == NEVER else max(0.0, until - now)
        dispatch = self._dispatch
        if driving and dispatch.news:
            return 0.0  # a callback fired while the lock was held (a fast failure): step again
        if driving and not dispatch.busy:
            if timeout is None:
                timeout = LIMITER_TICK  # nothing due and nothing running: look again shortly
            if self._sleep is not None:
                return timeout  # a fake clock moves only when slept on
        if timeout is None or timeout > 0:
            self._changed.wait(timeout)
        return 0.0


def _callerless(record: object) -> bool:
    """A record the producer's own caller applies to (anything else is left to validation)."""
    return isinstance(record, UserRecord) and record.caller is None


def _resolve(records: list[BufferedRecord]) -> None:
    for record in records:
        future = record.future
        if future is not None:
            # A cancelled future: the record still went, and nobody is waiting for it.
            with contextlib.suppress(InvalidStateError):
                future.set_result(record.result)  # type: ignore[arg-type]  # resolved records have one
