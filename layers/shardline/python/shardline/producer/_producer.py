"""Producer: lands user records in Kinesis, aggregated per predicted shard, with a result each.

    producer = Producer(boto3.client("kinesis"), "events")
    results = producer.put_many(records, deadline=context.get_remaining_time_in_millis() / 1000 - 1)

Pipeline (one module per stage): partitioner -> ShardMap.predict -> Reducer (per-shard KPL
aggregates) -> Collector (PutRecords requests) -> ShardLimiter (per-shard token buckets) ->
sender (concurrent requests) -> Retrier (classify; retry with backoff or finish).

Built for Lambda: `put()` only buffers; `flush()` drives the pipeline in the caller's thread
(requests run on a small thread pool) and returns when every buffered record has a result.
Nothing must run between invocations. Order is kept per shard: a shard never has two requests
in flight, so records with the same partition key put one after another arrive in order (a
record that has to be retried can land after later ones, as with the KPL).
"""

from __future__ import annotations

import heapq
import itertools
import random
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import TYPE_CHECKING

from shardline.errors import PARTITIONER_ERROR
from shardline.kinesis._records import UserRecord, validate
from shardline.kinesis._shard_map import ShardMap
from shardline.producer._buffered import BufferedRecord
from shardline.producer._collector import PutRecordsBatch
from shardline.producer._config import ProducerConfig
from shardline.producer._limiter import ShardLimiter
from shardline.producer._metrics import ProducerMetrics
from shardline.producer._partitioning import ByPartitionKey, Partitioner
from shardline.producer._reducer import Reducer
from shardline.producer._result import RecordResult
from shardline.producer._retrier import Retrier
from shardline.producer._sender import SendOutcome, send

if TYPE_CHECKING:  # annotations only: the Protocols cost nothing at import
    from shardline.protocols import KinesisClient, LambdaContext

_NEVER = float("inf")
#: A shard held back by its token buckets is looked at again no sooner than this: it then
#: sends a batch's worth rather than one record per refill (and the loop does not spin).
_LIMITER_TICK = 0.05


def deadline_from_context(context: LambdaContext, margin: float = 1.0) -> float:
    """Seconds a Lambda invocation can spend flushing: its remaining time minus `margin`."""
    return max(0.0, context.get_remaining_time_in_millis() / 1000.0 - margin)


class Producer:
    """Buffers user records and sends them to `stream_name` on `flush()`.

    `clock`/`sleep`/`rng` are injectable so tests control time and jitter. `shard_map` defaults to
    one over `kinesis_client.list_shards`; pass your own to share it between producers.
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
        sleep: Callable[[float], None] = time.sleep,
        rng: random.Random | None = None,
    ) -> None:
        self.config = config or ProducerConfig()
        self.stream_name = stream_name
        self.metrics = ProducerMetrics()
        self.shard_map = shard_map or ShardMap(
            kinesis_client.list_shards, stream_name=stream_name, clock=clock
        )
        self._client = kinesis_client
        self._partitioner = partitioner or ByPartitionKey()
        self._clock = clock
        self._sleep = sleep
        self._limiter = ShardLimiter(
            rate_limit=self.config.rate_limit, limits=self.config.limits, clock=clock
        )
        self._reducer = Reducer(
            max_size=self.config.aggregation_max_size,
            max_count=self.config.aggregation_max_count,
            enabled=self.config.aggregation_enabled,
        )
        self._retrier = Retrier(
            shard_map=self.shard_map,
            config=self.config,
            clock=clock,
            rng=rng or random.Random(),
            metrics=self.metrics,
            finish=self._finish,
            retry=self._schedule_retry,
        )
        self._sequence = itertools.count()
        self._put_lock = threading.Lock()
        self._flush_lock = threading.Lock()
        self._incoming: list[BufferedRecord] = []
        self._queues: dict[str | None, list[BufferedRecord]] = {}  # per predicted shard; next record last
        self._retries: list[tuple[float, int, BufferedRecord]] = []  # heap of (ready at, sequence, record)
        self._in_flight: dict[Future[SendOutcome], PutRecordsBatch] = {}
        self._busy_shards: set[str | None] = set()
        self._map_version = -1
        self._stop_at = _NEVER
        self._executor: ThreadPoolExecutor | None = None

    # -- public API ------------------------------------------------------------------------

    def put(self, record: UserRecord) -> Future[RecordResult]:
        """Validate and buffer one record; its future resolves during a later `flush()`."""
        validate([record], self.config.limits)
        future: Future[RecordResult] = Future()
        self._enqueue([record], future)
        return future

    def put_many(self, records: Iterable[UserRecord], deadline: float | None = None) -> list[RecordResult]:
        """Validate every record (nothing is sent if one is invalid), send all, return results in order."""
        buffered = self._enqueue(validate(records, self.config.limits))
        self.flush(deadline)
        return [record.result for record in buffered]  # type: ignore[misc]  # flush set every result

    def flush(self, deadline: float | None = None) -> None:
        """Send everything buffered and return when each record has a result.

        `deadline` is in seconds from now (a Lambda passes its remaining time, see
        `deadline_from_context`). Records not sent by then fail with `Expired`; a request
        already in flight is awaited (bound it with the client's read timeout).
        """
        with self._flush_lock:
            self._stop_at = _NEVER if deadline is None else self._clock() + deadline
            try:
                self._drive()
            finally:
                self._stop_at = _NEVER

    def close(self) -> None:
        """Flush, then stop the request threads."""
        self.flush()
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def pending(self) -> int:
        """User records buffered, queued, waiting to retry or in flight."""
        with self._put_lock:
            incoming = len(self._incoming)
        queued = sum(len(queue) for queue in self._queues.values())
        in_flight = sum(batch.user_record_count for batch in self._in_flight.values())
        return incoming + queued + len(self._retries) + in_flight

    # -- the loop --------------------------------------------------------------------------

    def _enqueue(
        self, records: list[UserRecord], future: Future[RecordResult] | None = None
    ) -> list[BufferedRecord]:
        now = self._clock()
        expires = now + self.config.record_ttl
        sequence = self._sequence
        buffered = [BufferedRecord(record, future, next(sequence), now, expires) for record in records]
        with self._put_lock:
            self._incoming.extend(buffered)
        self.metrics.count("UserRecordsReceived", len(buffered))
        return buffered

    def _drive(self) -> None:
        while True:
            now = self._clock()
            wake_at = self._step(now)
            if not (self._in_flight or self._retries or any(self._queues.values()) or self._incoming):
                return
            if now >= self._stop_at:
                timeout = None  # everything unsent has expired: only in-flight requests are left
            else:
                wake_at = min(wake_at, self._stop_at)
                timeout = None if wake_at == _NEVER else max(0.0, wake_at - now)
            if self._in_flight:
                done, _ = wait(list(self._in_flight), timeout=timeout, return_when=FIRST_COMPLETED)
                for future in done:
                    batch = self._in_flight.pop(future)
                    self._busy_shards.difference_update(batch.shards)
                    self._retrier.handle(batch, future.result())
            elif timeout:
                self._sleep(timeout)

    def _step(self, now: float) -> float:
        """Move records forward once; return the clock time when waiting work becomes due."""
        self.shard_map.refresh_if_due()
        if self.shard_map.refresh_count != self._map_version:
            self._map_version = self.shard_map.refresh_count
            self._requeue_all()  # predictions made against the old map are void
        while self._retries and self._retries[0][0] <= now:
            self._place([heapq.heappop(self._retries)[2]])
        with self._put_lock:
            incoming, self._incoming = self._incoming, []
        self._place(incoming)
        self._expire_due(now)
        wake_at = self._assemble_and_send(now)
        if self._retries:
            wake_at = min(wake_at, self._retries[0][0])
        return wake_at

    def _place(self, records: list[BufferedRecord]) -> None:
        touched: set[str | None] = set()
        for buffered in records:
            if not buffered.assigned:
                try:
                    buffered.assign(self._partitioner.assign(buffered.record, self.shard_map))
                except Exception as exc:  # a user strategy failed on this record: fail it, not the batch
                    self._retrier.fail(buffered, PARTITIONER_ERROR, f"{type(exc).__name__}: {exc}")
                    continue
            shard = self.shard_map.predict(buffered.hash_key)
            buffered.predicted_shard = shard
            self._queues.setdefault(shard, []).append(buffered)
            touched.add(shard)
        for shard in touched:
            self._queues[shard].sort(key=_newest_first)

    def _requeue_all(self) -> None:
        queued = [buffered for queue in self._queues.values() for buffered in queue]
        self._queues.clear()
        self._place(queued)

    def _expire_due(self, now: float) -> None:
        past_deadline = now >= self._stop_at
        for shard, queue in self._queues.items():
            if past_deadline:
                expired, self._queues[shard] = queue, []
            elif queue and min(buffered.expires for buffered in queue) <= now:
                expired = [buffered for buffered in queue if buffered.expires <= now]
                self._queues[shard] = [buffered for buffered in queue if buffered.expires > now]
            else:
                continue
            for buffered in expired:
                self._expire(buffered, past_deadline)
        if past_deadline:
            retries, self._retries = self._retries, []
            for _, _, buffered in retries:
                self._expire(buffered, past_deadline=True)

    def _expire(self, buffered: BufferedRecord, past_deadline: bool) -> None:
        if past_deadline:
            message = "the flush deadline passed before the record could be sent"
        else:
            message = f"record TTL of {self.config.record_ttl:g} s passed before the record could be sent"
        self._retrier.expire(buffered, message)

    def _assemble_and_send(self, now: float) -> float:
        """Pack ready records of idle shards into requests and send them. Returns the next wake time."""
        wake_at = _NEVER
        slots = self.config.max_concurrency - len(self._in_flight)
        batches: list[PutRecordsBatch] = []
        for shard, queue in self._queues.items():
            if not queue or shard in self._busy_shards:
                continue
            batch = batches[-1] if batches else None
            while queue:
                kinesis_record = self._reducer.take(queue, shard)
                waiting = self._limiter.wait_time(shard, kinesis_record.size)
                if waiting > 0:
                    self._reducer.give_back(queue, kinesis_record)
                    wake_at = min(wake_at, now + max(waiting, _LIMITER_TICK))
                    break
                if batch is None or not batch.fits(kinesis_record):
                    if (batch is not None and shard in batch.shards) or len(batches) >= slots:
                        self._reducer.give_back(queue, kinesis_record)  # the shard's next request waits
                        break
                    batch = PutRecordsBatch(self.config.collection_max_count, self.config.collection_max_size)
                    batches.append(batch)
                self._limiter.try_take(shard, kinesis_record.size)
                batch.add(kinesis_record)
                self.metrics.observe_many(
                    "BufferingTime",
                    [
                        (now - member.arrived) * 1000.0
                        for member in kinesis_record.members
                        if not member.attempts
                    ],
                )
        for batch in batches:
            self._submit(batch)
        return wake_at

    def _submit(self, batch: PutRecordsBatch) -> None:
        if self._executor is None:
            self._executor = ThreadPoolExecutor(
                self.config.max_concurrency, thread_name_prefix="shardline-put"
            )
        self._busy_shards.update(batch.shards)
        self.metrics.count("RequestsSent")
        future = self._executor.submit(send, self._client, self.stream_name, batch, self._clock)
        self._in_flight[future] = batch

    # -- retrier callbacks -----------------------------------------------------------------

    def _schedule_retry(self, buffered: BufferedRecord, at: float) -> None:
        if at >= self._stop_at:
            self._expire(buffered, past_deadline=True)
        else:
            heapq.heappush(self._retries, (at, buffered.sequence, buffered))

    @staticmethod
    def _finish(buffered: BufferedRecord, result: RecordResult) -> None:
        buffered.result = result
        if buffered.future is not None:
            buffered.future.set_result(result)


def _newest_first(buffered: BufferedRecord) -> int:
    return -buffered.sequence
