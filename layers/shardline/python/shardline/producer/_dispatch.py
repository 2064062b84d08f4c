"""Dispatcher: the producer's pipeline state, moved forward one step at a time.

    dispatcher.add(records)
    previous = dispatcher.begin_flush(owner, stop)
    wake_at = dispatcher.step()          # until dispatcher.done_through(last)
    resolved = dispatcher.take_resolved()
    dispatcher.end_flush(owner, previous)

It holds every unresolved record — incoming, queued per target (in the collector, `_collector`),
waiting for a retry, in flight — and every sealed aggregate waiting to be sent again, and `step()`
moves them on: outcomes are classified (by the retrier, whose decisions come back through
`Outcomes`), the shard map is refreshed on the request pool, due retries, due resends and new
records are placed in one batch each, expired records are failed, and the collector packs ready
records of idle targets into requests, which are sent. The producer calls every method with its
lock held; requests and ListShards run on the pool and only report back through `condition`.

Contracts:
- Cost: every step is O(records it touches + targets + requests in flight), never O(backlog)
  (`_queues` explains how); only a new shard map re-sorts the queues, once per reshard.
- Order: no request starts for a target while a request for any target whose hash range
  overlaps it is in flight — the same shard, its parent before a reshard, or a lane of
  unpredicted keys — so records of one key put one after another land in order.
- Deadlines: each flushing thread's deadline, from `begin_flush` to `end_flush`. A record is
  expired only by the deadline of the thread that put it (or its TTL); no request, ListShards
  included, starts after the latest deadline of the flushes in progress. A record in flight is
  never expired: a flush returns at most one request (the client's read timeout) after its
  deadline.
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
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from shardline.kinesis._shard_map import ShardMap
from shardline.kpl._identity import new_producer_id
from shardline.producer._buffered import BufferedRecord, KinesisRecord
from shardline.producer._collector import NEVER, Collector, Request
from shardline.producer._config import ProducerConfig
from shardline.producer._lanes import Lanes
from shardline.producer._metrics import ProducerMetrics
from shardline.producer._partitioning import Partitioner
from shardline.producer._result import RecordResult
from shardline.producer._retrier import Landed, Retrier
from shardline.producer._sender import SendOutcome, send

if TYPE_CHECKING:
    from collections.abc import Callable

    from shardline.protocols import KinesisClient

#: New records placed per step: a large backlog starts sending after its first slice, and the
#: rest is placed while those requests are in flight.
PLACE_PER_STEP = 10_000


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
        self._metrics = metrics
        self._clock = clock
        self._condition = condition
        self._lanes = Lanes(new_producer_id(), clock)
        self._retrier = Retrier(
            shard_map=shard_map,
            config=config,
            clock=clock,
            rng=rng,
            metrics=metrics,
            lanes=self._lanes,
            outcomes=_Outcomes(self),
        )
        self._collector = Collector(
            config=config,
            shard_map=shard_map,
            partitioner=partitioner,
            lanes=self._lanes,
            metrics=metrics,
            verdicts=self._retrier,
            clock=clock,
        )
        self._incoming: deque[BufferedRecord] = deque()
        self._retries: list[tuple[float, int, BufferedRecord]] = []  # heap: (ready at, sequence, record)
        self._resends: list[tuple[float, int, KinesisRecord]] = []  # heap: (ready at, id, sealed aggregate)
        self._in_flight: dict[Future[SendOutcome], Request] = {}
        self._completed: list[Future[SendOutcome]] = []
        self._refresh: Future[bool] | None = None
        self._parked: list[Landed] = []
        self._outstanding: deque[BufferedRecord] = deque()  # every unresolved record, in put() order
        self._owned: dict[int, set[BufferedRecord]] = {}
        self._resolved: list[BufferedRecord] = []
        self._executor: ThreadPoolExecutor | None = None
        self._deadlines: dict[int, float] = {}  # thread -> clock time its flush must return by
        self._buffered_records = 0
        self._buffered_bytes = 0

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
            self._buffered_bytes += record.size
        self._buffered_records += len(records)

    def expire(self, records: list[BufferedRecord], message: str) -> None:
        """Fail `records` as `Expired` at once (they were never sent)."""
        for record in records:
            self._retrier.expire(record, message)

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
    def buffered_records(self) -> int:
        """Unresolved records: buffered, queued, waiting to retry or in flight."""
        return self._buffered_records

    @property
    def buffered_bytes(self) -> int:
        """Bytes (as the buffer bound counts them) of the records `buffered_records` counts."""
        return self._buffered_bytes

    @property
    def busy(self) -> bool:
        """True while a request or ListShards runs (its end will notify the condition)."""
        return bool(self._in_flight) or self._refresh is not None

    @property
    def news(self) -> bool:
        """True when a request or ListShards ended since the last step: step again before waiting."""
        return bool(self._completed) or (self._refresh is not None and self._refresh.done())

    def disown(self, *, forked: bool) -> list[BufferedRecord]:
        """This pipeline belongs to another process incarnation (the producer was forked or
        restored): return its unresolved records, none of which is sent from here, and let go of
        its request pool — `forked`: its threads did not survive the fork, so it is dropped, not
        shut down (its queue's lock may be held by one of them)."""
        unresolved = [record for record in self._outstanding if record.result is None]
        self._outstanding.clear()
        executor, self._executor = self._executor, None
        if executor is not None and not forked:
            executor.shutdown(wait=False)
        return unresolved

    def close(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None

    # -- flush deadlines ------------------------------------------------------------------------

    def begin_flush(self, owner: int, stop: float) -> float | None:
        """Thread `owner` flushes until clock time `stop` (within any deadline it already flushes
        by: a nested flush); returns that outer deadline, for `end_flush`."""
        outer = self._deadlines.get(owner)
        self._deadlines[owner] = stop if outer is None else min(stop, outer)
        return outer

    def end_flush(self, owner: int, outer: float | None) -> None:
        """Thread `owner`'s flush returned: its deadline is `outer` again (None: it flushes no more)."""
        if outer is None:
            del self._deadlines[owner]
        else:
            self._deadlines[owner] = outer

    # -- the step ---------------------------------------------------------------------------

    def step(self) -> float:
        """Move records forward once; return the clock time when waiting work becomes due."""
        self._handle_completed()
        self._handle_refresh()
        now = self._clock()  # read after the work above, and again below after placing
        stop = max(self._deadlines.values(), default=-NEVER)
        for owner, deadline in self._deadlines.items():
            if now >= deadline:
                self.expire_owner(owner)
        if self._refresh is None and now < stop and self._shard_map.refresh_due:
            self._refresh = self._pool().submit(self._shard_map.refresh)
            self._refresh.add_done_callback(self._notify)
        placing = self._refresh is None or self._shard_map.ready  # a first listing is worth waiting for
        if placing:
            self._place_due(now)
        now = self._clock()
        self._collector.expire_heads(now, self._ttl_message("before the record could be sent"))
        wake_at = self._send_ready(now) if now < stop else NEVER
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
                self._retrier.expire(record, "the flush deadline passed before the record could be sent")
        for landed in [p for p in self._parked if any(m.owner == owner for m in p.kinesis_record.members)]:
            # It landed; the map refresh that would place its shard is late. Members Kinesis routed
            # it by are confirmed; the others cannot be, and are re-routed or fail unconfirmed.
            self._parked.remove(landed)
            self._decide_landed(landed)

    def _place_due(self, now: float) -> None:
        """Queue due retries, due resends and a slice of the new records, in one batch each."""
        due: list[BufferedRecord] = []
        while self._retries and self._retries[0][0] <= now:
            due.append(heapq.heappop(self._retries)[2])
        collector, incoming = self._collector, self._incoming
        while self._resends and self._resends[0][0] <= now:
            collector.place_sealed(heapq.heappop(self._resends)[2], now)
        collector.place(due)
        collector.place([incoming.popleft() for _ in range(min(len(incoming), PLACE_PER_STEP))])

    def _send_ready(self, now: float) -> float:
        """Send what the collector packs now. Returns the next wake time."""
        slots = self._config.max_concurrency - len(self._in_flight)
        in_flight = self._in_flight.values()
        requests, wake_at = self._collector.pack(now, in_flight, slots, more_coming=bool(self._incoming))
        for request in requests:
            self._submit(request)
        return wake_at

    def _submit(self, request: Request) -> None:
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
                self._collector.give_back(request.batch)
            self._retrier.handle(request.batch, outcome)

    def _handle_refresh(self) -> None:
        """Take a finished ListShards, or a refresh someone else did on a shared map."""
        refreshed = self._refresh is not None and self._refresh.done()
        if refreshed:
            self._refresh = None
        if not self._collector.follow_map() and not refreshed:
            return
        parked, self._parked = self._parked, []
        for landed in parked:
            self._decide_landed(landed)

    def _decide_landed(self, landed: Landed) -> None:
        for member in landed.kinesis_record.members:
            member.in_flight = False
        self._retrier.handle_landed(landed)

    # -- the retrier's outcomes (through _Outcomes) ---------------------------------------------

    def _finish(self, record: BufferedRecord, result: RecordResult) -> None:
        record.result = result
        self._resolved.append(record)
        self._buffered_records -= 1
        self._buffered_bytes -= record.size
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
                if at >= self._deadlines.get(member.owner, NEVER):
                    self._retrier.expire(
                        member, "the flush deadline passed before Kinesis confirmed the record"
                    )
                else:
                    ready, alive = min(ready, member.expires), True
        if not alive:  # nobody is left to send it for
            self._retrier.retire(kinesis_record)
        else:  # never later than a TTL: its members expire on time rather than after the backoff
            heapq.heappush(self._resends, (ready, id(kinesis_record), kinesis_record))

    def _schedule_retry(self, record: BufferedRecord, at: float) -> None:
        if at >= self._deadlines.get(record.owner, NEVER):
            self._retrier.expire(record, "the flush deadline passed before the record could be sent again")
        else:  # never later than its TTL: it expires on time rather than after its backoff
            heapq.heappush(self._retries, (min(at, record.expires), record.sequence, record))

    def _park(self, landed: Landed) -> bool:
        if self._shard_map.ready:
            return False  # the map is current and does not know the shard: a wrong shard
        for member in landed.kinesis_record.members:
            member.in_flight = True  # landed, awaiting the map: not for the deadline to expire
        self._parked.append(landed)
        return True

    def _ttl_message(self, when: str) -> str:
        return f"record TTL of {self._config.record_ttl:g} s passed {when}"


class _Outcomes:
    """The retrier's `ParkingOutcomes`: its decisions, into the dispatcher's private state."""

    __slots__ = ("_dispatcher",)

    def __init__(self, dispatcher: Dispatcher) -> None:
        self._dispatcher = dispatcher

    def finish(self, record: BufferedRecord, result: RecordResult) -> None:
        self._dispatcher._finish(record, result)

    def retry(self, record: BufferedRecord, at: float) -> None:
        self._dispatcher._schedule_retry(record, at)

    def resend(self, kinesis_record: KinesisRecord, at: float) -> None:
        self._dispatcher._schedule_resend(kinesis_record, at)

    def park(self, landed: Landed) -> bool:
        return self._dispatcher._park(landed)
