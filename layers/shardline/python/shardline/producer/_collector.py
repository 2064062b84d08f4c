"""Collector: the records waiting to be sent, queued per target, and the loop that packs them into
PutRecords requests.

    collector.place(records)                     # partition, predict, queue per target
    requests, wake_at = collector.pack(now, in_flight, slots, more_coming=False)

A target is a predicted shard, or a lane of unpredicted keys (`_queues`). `pack` visits every idle
target once and takes its next Kinesis records in put() order — a sealed aggregate due to go again
whole, or an aggregate the reducer builds from the queue's head — into requests within the count and
byte caps, as the shard's token buckets (`_limiter`) allow. Several targets share one request; one
target's records never go in two requests of one pass. What it cannot send now it leaves queued and
says, as `wake_at`, when the earliest of those becomes due.

Order: no target is packed while a request for any target whose hash range overlaps it (the same
shard, its parent before a reshard, or a lane) is in flight, so records of one key land in order.

The collector decides nothing about outcomes: a record whose partitioner fails, whose TTL passed
while queued, or a sealed aggregate no longer due is handed to its `Verdicts` (the retrier).
"""

from __future__ import annotations

from collections.abc import Collection
from typing import TYPE_CHECKING, Protocol

from shardline.errors import PARTITIONER_ERROR
from shardline.kinesis._shard_map import HashRange, ShardMap
from shardline.producer._buffered import BufferedRecord, KinesisRecord
from shardline.producer._config import ProducerConfig
from shardline.producer._lanes import Lanes, hash_lane, shard_lane
from shardline.producer._limiter import ShardLimiter
from shardline.producer._metrics import ProducerMetrics
from shardline.producer._partitioning import Partitioner
from shardline.producer._queues import ShardQueue, lane_of, lane_range, overlaps
from shardline.producer._reducer import Reducer

if TYPE_CHECKING:
    from collections.abc import Callable

Target = str | int  # a shard id, or the number of a lane of unpredicted records
#: (shard-map version, lane): hash ranges of one kind never overlap.
Kind = tuple[int, bool]

NEVER = float("inf")
#: A shard held back by its token buckets is looked at again no sooner than this: it then
#: sends a batch's worth rather than one record per refill (and the loop does not spin).
LIMITER_TICK = 0.05


class PutRecordsBatch:
    """The Kinesis records of one PutRecords request, and the shards they were predicted for."""

    __slots__ = ("max_count", "max_size", "records", "shards", "size")

    def __init__(self, max_count: int, max_size: int) -> None:
        self.max_count = max_count
        self.max_size = max_size
        self.records: list[KinesisRecord] = []
        self.size = 0
        self.shards: set[str | None] = set()

    def fits(self, kinesis_record: KinesisRecord) -> bool:
        return len(self.records) < self.max_count and self.size + kinesis_record.size <= self.max_size

    def add(self, kinesis_record: KinesisRecord) -> None:
        self.records.append(kinesis_record)
        self.size += kinesis_record.size
        self.shards.add(kinesis_record.predicted_shard)

    @property
    def full(self) -> bool:
        return len(self.records) >= self.max_count

    @property
    def user_record_count(self) -> int:
        return sum(len(record.members) for record in self.records)


class Request:
    """One PutRecords request in the making or in flight, and the targets whose records it carries."""

    __slots__ = ("batch", "kind", "ranges", "targets")  # plain class: a NamedTuple costs import time

    def __init__(self, batch: PutRecordsBatch, kind: Kind) -> None:
        self.batch = batch
        self.targets: list[Target] = []
        self.ranges: list[HashRange] = []
        self.kind = kind


class Verdicts(Protocol):
    """What the collector hands on instead of deciding: the retrier satisfies it."""

    def fail(self, record: BufferedRecord, code: str, message: str) -> None:
        """Fail `record` without sending it (its partitioner raised)."""

    def expire(self, record: BufferedRecord, message: str) -> None:
        """Fail `record` as `Expired` (its TTL passed while it was queued)."""

    def resend_due(self, kinesis_record: KinesisRecord, now: float) -> bool:
        """Whether a sealed aggregate due now still goes (False: none of its members is left)."""


class _Pass:
    """One `pack` call: the requests built so far, the hash ranges taken, the earliest wake time."""

    __slots__ = ("now", "ranges", "requests", "slots", "wake_at")

    def __init__(self, now: float, slots: int, ranges: dict[Kind, list[HashRange]]) -> None:
        self.now = now
        self.slots = slots
        self.ranges = ranges
        self.requests: list[Request] = []
        self.wake_at = NEVER

    def hold(self, waiting: float) -> None:
        """A target's buckets hold its next record back `waiting` seconds."""
        self.wake_at = min(self.wake_at, self.now + max(waiting, LIMITER_TICK))

    def room(self, request: Request | None, kinesis_record: KinesisRecord, taken: bool) -> bool:
        """Whether `kinesis_record` goes in this pass: in the target's request, or in a new one when
        the target has none yet and a request slot is free."""
        if request is not None and request.batch.fits(kinesis_record):
            return True
        return not taken and len(self.requests) < self.slots


class Collector:
    """The queued records of one producer, per target, and the packing of them into requests."""

    def __init__(
        self,
        *,
        config: ProducerConfig,
        shard_map: ShardMap,
        partitioner: Partitioner,
        lanes: Lanes,
        metrics: ProducerMetrics,
        verdicts: Verdicts,
        clock: Callable[[], float],
    ) -> None:
        self._config = config
        self._shard_map = shard_map
        self._partitioner = partitioner
        self._lanes = lanes
        self._metrics = metrics
        self._verdicts = verdicts
        self._clock = clock
        self._lane_count = config.max_concurrency
        self._limiter = ShardLimiter(rate_limit=config.rate_limit, limits=config.limits, clock=clock)
        self._reducer = Reducer(
            lanes=lanes,
            max_size=config.aggregation_max_size,
            max_count=config.aggregation_max_count,
            enabled=config.aggregation_enabled,
        )
        self._queues: dict[Target, ShardQueue] = {}
        self._map_version = -1

    # -- placing ------------------------------------------------------------------------------

    def place(self, records: list[BufferedRecord]) -> None:
        """Queue each unresolved record on the target the shard map predicts for it now."""
        shard_map = self._shard_map
        for record in records:
            if record.result is not None:
                continue  # expired while it waited
            if not record.assigned:
                try:
                    record.assign(self._partitioner.assign(record.record, shard_map))
                except Exception as exc:  # a user strategy failed on this record: fail it, not the batch
                    self._verdicts.fail(record, PARTITIONER_ERROR, f"{type(exc).__name__}: {exc}")
                    continue
            shard = shard_map.predict(record.hash_key)
            record.predicted_shard = shard
            self._queue(shard if shard is not None else lane_of(record.hash_key, self._lane_count)).push(
                record
            )

    def place_sealed(self, kinesis_record: KinesisRecord, now: float) -> None:
        """Queue a sealed aggregate due to go again, on the target its route key predicts now."""
        if not self._verdicts.resend_due(kinesis_record, now):
            return
        shard = self._shard_map.predict(kinesis_record.route_key)
        kinesis_record.predicted_shard = shard
        target = shard if shard is not None else lane_of(kinesis_record.route_key, self._lane_count)
        self._queue(target).push_sealed(kinesis_record)

    def follow_map(self) -> bool:
        """When the shard map changed since the last call, re-place every queued record (predictions
        made against the old map are void), in put() order, and drop closed shards' buckets."""
        if self._shard_map.refresh_count == self._map_version:
            return False
        self._map_version = self._shard_map.refresh_count
        self._limiter.keep_only(self._shard_map.open_shards())
        queues = self._queues.values()
        queued = [record for queue in queues for record in queue.drain()]
        sealed = [kinesis_record for queue in queues for kinesis_record in queue.drain_sealed()]
        self._queues.clear()
        queued.sort(key=_put_order)
        self.place(queued)
        now = self._clock()
        for kinesis_record in sealed:
            self.place_sealed(kinesis_record, now)
        return True

    def expire_heads(self, now: float, message: str) -> None:
        """Expire the records at the head of each queue whose TTL has passed."""
        for queue in self._queues.values():
            while (head := queue.peek()) is not None and head.expires <= now:
                self._verdicts.expire(queue.pop(), message)

    def give_back(self, batch: PutRecordsBatch) -> None:
        """Kinesis took nothing of `batch`: its tokens are free again."""
        for kinesis_record in batch.records:
            self._limiter.give_back(kinesis_record.predicted_shard, 1, kinesis_record.size)

    def _queue(self, target: Target) -> ShardQueue:
        queue = self._queues.get(target)
        if queue is None:
            if isinstance(target, int):
                queue = ShardQueue(lane_range(target, self._lane_count), lane=True)
            else:
                hash_range = self._shard_map.hash_range(target)
                assert hash_range is not None, "a predicted shard is in the map"
                queue = ShardQueue(hash_range)
            self._queues[target] = queue
        return queue

    # -- packing --------------------------------------------------------------------------------

    def pack(
        self, now: float, in_flight: Collection[Request], slots: int, *, more_coming: bool
    ) -> tuple[list[Request], float]:
        """Pack ready records of idle targets into at most `slots` new requests.

        `in_flight` are the requests still out; `more_coming` says records are still being placed
        (a target then sends full aggregates only, not a slice's tail). Returns the requests and the
        clock time the earliest target held back by its buckets becomes due (`NEVER`: none is).
        """
        if slots <= 0:
            return [], NEVER
        busy = {target for flying in in_flight for target in flying.targets}
        ranges: dict[Kind, list[HashRange]] = {}
        for flying in in_flight:
            ranges.setdefault(flying.kind, []).extend(flying.ranges)
        work = _Pass(now, slots, ranges)
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
            self._pack_target(work, target, queue, kind, more_coming)
        return work.requests, work.wake_at

    def _pack_target(
        self, work: _Pass, target: Target, queue: ShardQueue, kind: Kind, more_coming: bool
    ) -> None:
        """Take `target`'s next Kinesis records into the pass's last request, or one new request."""
        shard = None if queue.lane else str(target)
        lane = hash_lane(target) if isinstance(target, int) else shard_lane(target)
        request = work.requests[-1] if work.requests else None  # several targets may share one request
        taken = False
        while (
            kinesis_record := self._next(work, queue, shard, lane, request, taken, more_coming)
        ) is not None:
            if request is None or not request.batch.fits(kinesis_record):
                config = self._config
                batch = PutRecordsBatch(config.collection_max_count, config.collection_max_size)
                request = Request(batch, kind)
                work.requests.append(request)
            if not taken:
                request.targets.append(target)
                request.ranges.append(queue.hash_range)
                work.ranges.setdefault(kind, []).append(queue.hash_range)
                taken = True
            self._limiter.try_take(shard, kinesis_record.size)
            request.batch.add(kinesis_record)
            now = work.now
            self._metrics.observe_many(
                "BufferingTime",
                [(now - m.arrived) * 1000.0 for m in kinesis_record.members if not m.attempts],
            )

    def _next(
        self,
        work: _Pass,
        queue: ShardQueue,
        shard: str | None,
        lane: str,
        request: Request | None,
        taken: bool,
        more_coming: bool,
    ) -> KinesisRecord | None:
        """The target's next Kinesis record for this pass, taken off its queue; None when it has
        nothing more to send now."""
        while True:
            head, sealed = queue.peek(), queue.peek_sealed()
            if sealed is not None and (head is None or sealed.order < head.sequence):
                if not self._verdicts.resend_due(sealed, work.now):
                    queue.pop_sealed()
                    continue
                return self._next_sealed(work, queue, sealed, shard, request, taken)
            if head is None:
                return None
            return self._next_built(work, queue, shard, lane, request, taken, more_coming)

    def _next_sealed(
        self,
        work: _Pass,
        queue: ShardQueue,
        sealed: KinesisRecord,
        shard: str | None,
        request: Request | None,
        taken: bool,
    ) -> KinesisRecord | None:
        """A sealed aggregate goes again whole, identical, when its buckets and the pass allow."""
        waiting = self._limiter.wait_time(shard, sealed.size)
        if waiting > 0:
            work.hold(waiting)
            return None
        if not work.room(request, sealed, taken):
            return None  # the target's next request waits
        return queue.pop_sealed()

    def _next_built(
        self,
        work: _Pass,
        queue: ShardQueue,
        shard: str | None,
        lane: str,
        request: Request | None,
        taken: bool,
        more_coming: bool,
    ) -> KinesisRecord | None:
        """An aggregate built from the queue's head, when its buckets and the pass allow."""
        if more_coming and queue.bytes < self._config.aggregation_max_size:
            return None  # more records are being placed: send full aggregates, not a slice's tail
        # Wait for a full aggregate's tokens (or all that is queued): smaller aggregates cost more
        # PUT units, and one built now only to be given back is wasted work.
        limiter = self._limiter
        wanted = min(self._reducer.size_bound(queue), limiter.bytes_capacity)
        allowance = limiter.allowance(shard)
        if allowance < wanted:
            work.hold(limiter.wait_time(shard, wanted))
            return None
        kinesis_record = self._reducer.take(queue, shard, lane, allowance)
        waiting = limiter.wait_time(shard, kinesis_record.size)
        if waiting > 0:
            self._unbuild(queue, kinesis_record)
            work.hold(waiting)
            return None
        if not work.room(request, kinesis_record, taken):
            self._unbuild(queue, kinesis_record)  # the target's next request waits
            return None
        return kinesis_record

    def _unbuild(self, queue: ShardQueue, kinesis_record: KinesisRecord) -> None:
        """An aggregate built but not sent: its members go back, its counter is handed out again."""
        queue.give_back(kinesis_record.members)
        kinesis_record.retired = True
        if kinesis_record.aggregate_id is not None:
            self._lanes.retract(kinesis_record.aggregate_id)


def _put_order(record: BufferedRecord) -> int:
    return record.sequence
