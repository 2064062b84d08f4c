"""Dispatcher: the producer's pipeline state, moved forward one step at a time.

It holds every unresolved record — incoming, queued per target, waiting for a retry, in flight
— and every sealed aggregate waiting to be sent again, and `step()` moves them on: outcomes are
classified, the shard map is refreshed on the request pool, due retries, due resends and new
records are placed in one batch each, expired records are failed, and ready records of idle
targets are packed (each aggregate numbered in its target's lane, `_lanes`) and sent. The
producer calls every method with its lock held; requests and ListShards run on the pool and only
report back through `condition`.

Contracts:
- Cost: every step is O(records it touches + targets + requests in flight), never O(backlog)
  (`_queues` explains how); only a new shard map re-sorts the queues, once per reshard.
- Order: no request starts for a target while a request for any target whose hash range
  overlaps it is in flight — the same shard, its parent before a reshard, or a lane of
  unpredicted keys — so records of one key put one after another land in order.
- Deadlines: `deadlines` holds each flushing thread's deadline. A record is expired only by the
  deadline of the thread that put it (or its TTL); no request, ListShards included, starts
  after the latest deadline of the flushes in progress. A record in flight is never expired: a
  flush returns at most one request (the client's read timeout) after its deadline.
- Sealed aggregates go again whole, through their target's queue in their first member's put()
  order, paced by the limiter like any other; a member past its deadline or TTL fails
  `unconfirmed` while the others still get the aggregate resent.
- Results: records are resolved here, but their futures are set by the producer after it
  releases its lock (`take_resolved`), so a callback may call `put`/`flush`.
"""

from __future__ import annotations

import heapq
import threading
from collections import deque
from collections.abc import Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from shardline.errors import PARTITIONER_ERROR
from shardline.kinesis._shard_map import HashRange, ShardMap
from shardline.kpl._identity import new_producer_id
from shardline.producer._buffered import BufferedRecord, KinesisRecord
from shardline.producer._collector import PutRecordsBatch
from shardline.producer._config import ProducerConfig
from shardline.producer._lanes import Lanes, hash_lane, shard_lane
from shardline.producer._limiter import ShardLimiter
from shardline.producer._metrics import ProducerMetrics
from shardline.producer._partitioning import Partitioner
from shardline.producer._queues import ShardQueue, lane_of, lane_range, overlaps
from shardline.producer._reducer import Reducer
from shardline.producer._result import RecordResult
from shardline.producer._retrier import Retrier
from shardline.producer._sender import SendOutcome, send

if TYPE_CHECKING:
    from collections.abc import Callable

    Target = str | int  # a shard id, or the number of a lane of unpredicted records
    #: A success whose shard the map does not know yet: (Kinesis record, outcome, response entry).
    Parked = tuple[KinesisRecord, SendOutcome, Mapping[str, Any]]

    from shardline.protocols import KinesisClient

NEVER = float("inf")
#: New records placed per step: a large backlog starts sending after its first slice, and the
#: rest is placed while those requests are in flight.
PLACE_PER_STEP = 10_000
#: A shard held back by its token buckets is looked at again no sooner than this: it then
#: sends a batch's worth rather than one record per refill (and the loop does not spin).
LIMITER_TICK = 0.05


class _Request:
    """One PutRecords request in the making or in flight, and the targets whose records it carries."""

    __slots__ = ("batch", "kind", "ranges", "targets")  # plain class: a NamedTuple costs import time

    def __init__(self, batch: PutRecordsBatch, kind: tuple[int, bool]) -> None:
        self.batch = batch
        self.targets: list[Target] = []
        self.ranges: list[HashRange] = []
        self.kind = kind  # (shard-map version, lane): ranges of one kind never overlap


class Dispatcher:
    """Every unresolved record of one producer, and the step that moves them on."""

    def __init__(
        self,
        *,
        client: KinesisClient,
        stream_name: str,
        config: ProducerConfig,
        shard_map: ShardMap,
        partitioner: Partitioner,
        metrics: ProducerMetrics,
        clock: Callable[[], float],
        rng: Any,
        condition: threading.Condition,
    ) -> None:
        self._client = client
        self._stream_name = stream_name
        self._config = config
        self._shard_map = shard_map
        self._partitioner = partitioner
        self._metrics = metrics
        self._clock = clock
        self._condition = condition
        self._limiter = ShardLimiter(rate_limit=config.rate_limit, limits=config.limits, clock=clock)
        self.lanes = Lanes(new_producer_id(), clock)
        self._reducer = Reducer(
            lanes=self.lanes,
            max_size=config.aggregation_max_size,
            max_count=config.aggregation_max_count,
            enabled=config.aggregation_enabled,
        )
        self.retrier = Retrier(
            shard_map=shard_map,
            config=config,
            clock=clock,
            rng=rng,
            metrics=metrics,
            lanes=self.lanes,
            finish=self._finish,
            retry=self._schedule_retry,
            resend=self._schedule_resend,
            park=self._park,
        )
        self._lanes = config.max_concurrency
        self._incoming: deque[BufferedRecord] = deque()
        self._queues: dict[Target, ShardQueue] = {}
        self._retries: list[tuple[float, int, BufferedRecord]] = []  # heap: (ready at, sequence, record)
        self._resends: list[tuple[float, int, KinesisRecord]] = []  # heap: (ready at, id, sealed aggregate)
        self._in_flight: dict[Future[SendOutcome], _Request] = {}
        self._completed: list[Future[SendOutcome]] = []
        self._refresh: Future[bool] | None = None
        self._parked: list[Parked] = []
        self._map_version = -1
        self._outstanding: deque[BufferedRecord] = deque()  # every unresolved record, in put() order
        self._owned: dict[int, set[BufferedRecord]] = {}
        self._resolved: list[BufferedRecord] = []
        self._executor: ThreadPoolExecutor | None = None
        self.deadlines: dict[int, float] = {}  # thread -> clock time its flush must return by
        self.buffered_records = 0
        self.buffered_bytes = 0

    # -- records in and out -------------------------------------------------------------------

    def add(self, records: list[BufferedRecord]) -> None:
        """Take new records (in put() order)."""
        self._incoming.extend(records)
        self._outstanding.extend(records)
        for record in records:
            owned = self._owned.get(record.owner)
            if owned is None:
                owned = self._owned[record.owner] = set()
            owned.add(record)
            self.buffered_bytes += record.size
        self.buffered_records += len(records)

    def take_resolved(self) -> list[BufferedRecord]:
        """Records resolved since the last call, for the producer to set their futures."""
        resolved, self._resolved = self._resolved, []
        return resolved

    def done_through(self, sequence: int) -> bool:
        """True when every record up to `sequence` (in put() order) has a result."""
        outstanding = self._outstanding
        while outstanding and outstanding[0].result is not None:
            outstanding.popleft()
        return not outstanding or outstanding[0].sequence > sequence

    def owns_unresolved(self, owner: int) -> bool:
        return bool(self._owned.get(owner))

    @property
    def busy(self) -> bool:
        """True while a request or ListShards runs (its end will notify the condition)."""
        return bool(self._in_flight) or self._refresh is not None

    @property
    def news(self) -> bool:
        """True when a request or ListShards ended since the last step: step again before waiting."""
        return bool(self._completed) or (self._refresh is not None and self._refresh.done())

    def close(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None

    # -- the step ---------------------------------------------------------------------------

    def step(self) -> float:
        """Move records forward once; return the clock time when waiting work becomes due."""
        self._handle_completed()
        self._handle_refresh()
        now = self._clock()  # read after the work above, and again below after placing
        stop = max(self.deadlines.values(), default=-NEVER)
        for owner, deadline in self.deadlines.items():
            if now >= deadline:
                self.expire_owner(owner)
        if self._refresh is None and now < stop and self._shard_map.refresh_due:
            self._refresh = self._pool().submit(self._shard_map.refresh)
            self._refresh.add_done_callback(self._notify)
        placing = self._refresh is None or self._shard_map.ready  # a first listing is worth waiting for
        if placing:
            due: list[BufferedRecord] = []
            while self._retries and self._retries[0][0] <= now:
                due.append(heapq.heappop(self._retries)[2])
            incoming = self._incoming
            while self._resends and self._resends[0][0] <= now:
                self._place_sealed(heapq.heappop(self._resends)[2], now)
            self._place(due)
            self._place([incoming.popleft() for _ in range(min(len(incoming), PLACE_PER_STEP))])
        now = self._clock()
        for queue in self._queues.values():
            while (head := queue.peek()) is not None and head.expires <= now:
                self.retrier.expire(queue.pop(), self._ttl_message("before the record could be sent"))
        wake_at = self._assemble_and_send(now, stop) if now < stop else NEVER
        if placing and self._retries:  # (while not placing, the ListShards' end wakes the loop)
            wake_at = min(wake_at, self._retries[0][0])
        if placing and self._resends:
            wake_at = min(wake_at, self._resends[0][0])
        if placing and self._incoming:
            wake_at = now  # more new records to place: step again at once
        return wake_at

    def expire_owner(self, owner: int) -> None:
        """The flush deadline of `owner` passed: fail its records that are not in flight."""
        for record in list(self._owned.get(owner, ())):
            if not record.in_flight:
                self.retrier.expire(record, "the flush deadline passed before the record could be sent")
        for parked in [p for p in self._parked if any(m.owner == owner for m in p[0].members)]:
            # It landed; the map refresh that would place its shard is late. Members Kinesis routed
            # it by are confirmed; the others cannot be, and are re-routed or fail unconfirmed.
            self._parked.remove(parked)
            for member in parked[0].members:
                member.in_flight = False
            self.retrier.handle_landed(*parked)

    def _place(self, records: list[BufferedRecord]) -> None:
        shard_map = self._shard_map
        for record in records:
            if record.result is not None:
                continue  # expired while it waited
            if not record.assigned:
                try:
                    record.assign(self._partitioner.assign(record.record, shard_map))
                except Exception as exc:  # a user strategy failed on this record: fail it, not the batch
                    self.retrier.fail(record, PARTITIONER_ERROR, f"{type(exc).__name__}: {exc}")
                    continue
            shard = shard_map.predict(record.hash_key)
            record.predicted_shard = shard
            target: Target = shard if shard is not None else lane_of(record.hash_key, self._lanes)
            queue = self._queues.get(target)
            if queue is None:
                queue = self._queues[target] = self._new_queue(target)
            queue.push(record)

    def _place_sealed(self, kinesis_record: KinesisRecord, now: float) -> None:
        """Queue a sealed aggregate due to go again, on the target its route key predicts now."""
        if not self.retrier.resend_due(kinesis_record, now):
            return
        shard = self._shard_map.predict(kinesis_record.route_key)
        kinesis_record.predicted_shard = shard
        target: Target = shard if shard is not None else lane_of(kinesis_record.route_key, self._lanes)
        queue = self._queues.get(target)
        if queue is None:
            queue = self._queues[target] = self._new_queue(target)
        queue.push_sealed(kinesis_record)

    def _new_queue(self, target: Target) -> ShardQueue:
        if isinstance(target, int):
            return ShardQueue(lane_range(target, self._lanes), lane=True)
        hash_range = self._shard_map.hash_range(target)
        assert hash_range is not None, "a predicted shard is in the map"
        return ShardQueue(hash_range)

    def _assemble_and_send(self, now: float, stop: float) -> float:  # noqa: C901 -- over the gate before it existed; issue 26 cuts it
        """Pack ready records of idle targets into requests and send them. Returns the next wake time."""
        wake_at = NEVER
        slots = self._config.max_concurrency - len(self._in_flight)
        if slots <= 0:
            return wake_at
        busy = {target for flying in self._in_flight.values() for target in flying.targets}
        ranges: dict[tuple[int, bool], list[HashRange]] = {}
        for flying in self._in_flight.values():
            ranges.setdefault(flying.kind, []).extend(flying.ranges)
        requests: list[_Request] = []
        for target, queue in list(self._queues.items()):
            if target in busy:
                continue
            if not queue:
                del self._queues[target]
                continue
            kind = (self._map_version, queue.lane)
            if any(
                overlaps(queue.hash_range, other)
                for other_kind, others in ranges.items()
                if other_kind != kind
                for other in others
            ):
                continue  # a request to an overlapping target from before a reshard is in flight
            shard = None if queue.lane else str(target)
            lane = hash_lane(target) if isinstance(target, int) else shard_lane(target)
            request = requests[-1] if requests else None  # several targets may share one request
            taken = False
            while True:
                head, sealed = queue.peek(), queue.peek_sealed()
                if sealed is not None and (head is None or sealed.order < head.sequence):
                    if not self.retrier.resend_due(sealed, now):
                        queue.pop_sealed()
                        continue
                    kinesis_record = sealed  # goes again whole, identical
                    waiting = self._limiter.wait_time(shard, kinesis_record.size)
                    if waiting > 0:
                        wake_at = min(wake_at, now + max(waiting, LIMITER_TICK))
                        break
                    if (request is None or not request.batch.fits(kinesis_record)) and (
                        taken or len(requests) >= slots
                    ):
                        break  # the target's next request waits
                    queue.pop_sealed()
                elif head is None:
                    break
                else:
                    if self._incoming and queue.bytes < self._config.aggregation_max_size:
                        break  # more records are being placed: send full aggregates, not a slice's tail
                    # Wait for a full aggregate's tokens (or all that is queued): smaller aggregates
                    # cost more PUT units, and one built now only to be given back is wasted work.
                    wanted = min(self._reducer.size_bound(queue), self._limiter.bytes_capacity)
                    allowance = self._limiter.allowance(shard)
                    if allowance < wanted:
                        wake_at = min(
                            wake_at, now + max(self._limiter.wait_time(shard, wanted), LIMITER_TICK)
                        )
                        break
                    kinesis_record = self._reducer.take(queue, shard, lane, allowance)
                    waiting = self._limiter.wait_time(shard, kinesis_record.size)
                    if waiting > 0:
                        self._unbuild(queue, kinesis_record)
                        wake_at = min(wake_at, now + max(waiting, LIMITER_TICK))
                        break
                    if (request is None or not request.batch.fits(kinesis_record)) and (
                        taken or len(requests) >= slots
                    ):
                        self._unbuild(queue, kinesis_record)  # the target's next request waits
                        break
                if request is None or not request.batch.fits(kinesis_record):
                    config = self._config
                    batch = PutRecordsBatch(config.collection_max_count, config.collection_max_size)
                    requests.append(_Request(batch, kind))
                    request = requests[-1]
                if not taken:
                    request.targets.append(target)
                    request.ranges.append(queue.hash_range)
                    ranges.setdefault(kind, []).append(queue.hash_range)
                    taken = True
                self._limiter.try_take(shard, kinesis_record.size)
                request.batch.add(kinesis_record)
                self._metrics.observe_many(
                    "BufferingTime",
                    [(now - m.arrived) * 1000.0 for m in kinesis_record.members if not m.attempts],
                )
        for request in requests:
            self._submit(request)
        return wake_at

    def _unbuild(self, queue: ShardQueue, kinesis_record: KinesisRecord) -> None:
        """An aggregate built but not sent: its members go back, its counter is handed out again."""
        queue.give_back(kinesis_record.members)
        kinesis_record.retired = True
        if kinesis_record.aggregate_id is not None:
            self.lanes.retract(kinesis_record.aggregate_id)

    def _submit(self, request: _Request) -> None:
        now = self._clock()
        metrics = self._metrics
        for kinesis_record in request.batch.records:
            if kinesis_record.sends == 0:
                kinesis_record.first_sent = now
            elif kinesis_record.sealed:
                metrics.count("SealedAggregatesResent")
            kinesis_record.sends += 1
            kinesis_record.last_sent = now
            for member in kinesis_record.members:
                member.in_flight = True
        metrics.count("RequestsSent")
        future = self._pool().submit(send, self._client, self._stream_name, request.batch, self._clock)
        self._in_flight[future] = request
        future.add_done_callback(self._on_sent)

    def _pool(self) -> ThreadPoolExecutor:
        if self._executor is None:
            # One more thread than requests: a ListShards never waits behind PutRecords.
            self._executor = ThreadPoolExecutor(
                self._config.max_concurrency + 1, thread_name_prefix="shardline-put"
            )
        return self._executor

    def _on_sent(self, future: Future[SendOutcome]) -> None:
        with self._condition:
            self._completed.append(future)
            self._condition.notify_all()

    def _notify(self, _future: Future[Any]) -> None:
        with self._condition:
            self._condition.notify_all()

    # -- outcomes -------------------------------------------------------------------------------

    def _handle_completed(self) -> None:
        completed, self._completed = self._completed, []
        for future in completed:
            request = self._in_flight.pop(future)
            outcome = future.result()  # `send` never raises
            for kinesis_record in request.batch.records:
                for member in kinesis_record.members:
                    member.in_flight = False
            if outcome.error_code is not None:  # Kinesis took nothing: its tokens are free again
                for kinesis_record in request.batch.records:
                    self._limiter.give_back(kinesis_record.predicted_shard, 1, kinesis_record.size)
            self.retrier.handle(request.batch, outcome)

    def _handle_refresh(self) -> None:
        """Take a finished ListShards, or a refresh someone else did on a shared map."""
        refreshed = self._refresh is not None and self._refresh.done()
        if refreshed:
            self._refresh = None
        if self._shard_map.refresh_count != self._map_version:
            self._map_version = self._shard_map.refresh_count
            self._limiter.keep_only(self._shard_map.open_shards())
            # Predictions made against the old map are void: re-place, in put() order.
            queued = [record for queue in self._queues.values() for record in queue.drain()]
            sealed = [
                kinesis_record for queue in self._queues.values() for kinesis_record in queue.drain_sealed()
            ]
            self._queues.clear()
            queued.sort(key=_put_order)
            self._place(queued)
            now = self._clock()
            for kinesis_record in sealed:
                self._place_sealed(kinesis_record, now)
        elif not refreshed:
            return
        parked, self._parked = self._parked, []
        for item in parked:
            for member in item[0].members:
                member.in_flight = False
            self.retrier.handle_landed(*item)

    # -- retrier callbacks ----------------------------------------------------------------------

    def _finish(self, record: BufferedRecord, result: RecordResult) -> None:
        record.result = result
        self._resolved.append(record)
        self.buffered_records -= 1
        self.buffered_bytes -= record.size
        owned = self._owned.get(record.owner)
        if owned is not None:
            owned.discard(record)
            if not owned:
                del self._owned[record.owner]

    def _schedule_resend(self, kinesis_record: KinesisRecord, at: float) -> None:
        """A sealed aggregate goes again at `at`: members whose flush deadline comes first fail."""
        ready, alive = at, False
        for member in kinesis_record.members:
            if member.result is None:
                if at >= self.deadlines.get(member.owner, NEVER):
                    self.retrier.expire(
                        member, "the flush deadline passed before Kinesis confirmed the record"
                    )
                else:
                    ready, alive = min(ready, member.expires), True
        if not alive:  # nobody is left to send it for
            self.retrier.retire(kinesis_record)
        else:  # never later than a TTL: its members expire on time rather than after the backoff
            heapq.heappush(self._resends, (ready, id(kinesis_record), kinesis_record))

    def _schedule_retry(self, record: BufferedRecord, at: float) -> None:
        if at >= self.deadlines.get(record.owner, NEVER):
            self.retrier.expire(record, "the flush deadline passed before the record could be sent again")
        else:  # never later than its TTL: it expires on time rather than after its backoff
            heapq.heappush(self._retries, (min(at, record.expires), record.sequence, record))

    def _park(self, kinesis_record: KinesisRecord, outcome: SendOutcome, entry: Mapping[str, Any]) -> bool:
        if self._shard_map.ready:
            return False  # the map is current and does not know the shard: a wrong shard
        for member in kinesis_record.members:
            member.in_flight = True  # landed, awaiting the map: not for the deadline to expire
        self._parked.append((kinesis_record, outcome, entry))
        return True

    def _ttl_message(self, when: str) -> str:
        return f"record TTL of {self._config.record_ttl:g} s passed {when}"


def _put_order(record: BufferedRecord) -> int:
    return record.sequence
