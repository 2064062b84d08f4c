"""Consumer groups beyond Lambda: a long-running worker that takes its shards' leases itself.

    consumer = KinesisConsumer("orders", LeaseTable(dynamodb, "orders-leases"), kinesis=kinesis)
    consumer.handler(handle)
    Worker(consumer, kinesis, "orders-stream").run()      # until SIGTERM or SIGINT

The same core as the Lambda driver — de-aggregation, duplicate skip, the handler contract,
exactly-once sink writes in the checkpoint's transaction, failure counting and dead letters
(`ShardRun`) — with the shard assignment Lambda's event-source mapping would make done here:

- every `renew_interval` (default a third of `lease_duration`) a coordinator thread renews the
  leases held (a conditional write each: the heartbeat), lists the shards every
  `discovery_interval` (rows created for new ones, children after a reshard at TRIM_HORIZON),
  reads the lease table, and takes what `_lease_balance.plan` says — owned by no one or expired
  first, one steal from the most loaded worker when it holds more than its share;
- a reader thread per held shard (`_shard_reader`) fetches records within the shard's read
  limits into one bounded queue — or, with `consumer_arn` (a stream consumer registered for the
  group: enhanced fan-out), subscribes to it (`_shard_subscriber`), 2 MiB a second of its own;
- the handler runs on the calling thread (the main thread, for `run()`), one batch at a time, so
  a handler needs no locks, and a hung one is interrupted at `batch_timeout` like a Lambda
  handler at its timeout (SIGALRM). A batch that fails restarts its shard's reader at the record
  to retry from; a lease lost mid-batch fails the batch's commit (fencing), and the shard stops;
- a shard read to its end (closed by a reshard) is checkpointed at SHARD_END and handed back;
  a child is taken only once every parent is at SHARD_END (or gone from the stream);
- SIGTERM (or `stop()`) lets the batch in hand finish and commit, then hands every lease back
  (owned by no one, checkpoints kept), so the other workers take them at their next interval.

One worker processes its shards' batches one after another: scale by running more workers (each
takes its share), not threads. `snapshot()` says what it holds and how far behind it is.
"""

from __future__ import annotations

import logging
import os
import queue
import signal
import socket
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from shardline.consumer._lease_balance import LeaseObserver, plan
from shardline.consumer._lease_store import Lease
from shardline.consumer._shard_reader import Batch, End, ShardReader
from shardline.consumer._shard_subscriber import ShardSubscriber
from shardline.consumer._worker_leases import HeldLeases
from shardline.errors import LeaseLost
from shardline.kinesis._positions import SHARD_END, TRIM_HORIZON, Position

if TYPE_CHECKING:
    from shardline.consumer._consumer import KinesisConsumer
    from shardline.protocols import KinesisReadClient

__all__ = ["Worker"]

logger = logging.getLogger(__name__)


class _BatchBudget:
    """The time budget of one batch, in the shape of a Lambda context (what `ShardRun` reads)."""

    def __init__(self, owner: str, seconds: float) -> None:
        self.aws_request_id = owner
        self._ends = time.monotonic() + seconds

    def get_remaining_time_in_millis(self) -> int:
        return int(max(0.0, self._ends - time.monotonic()) * 1000)


class Worker:
    """One worker of a consumer group: any number of shards of `stream`, leased from the group's table."""

    def __init__(
        self,
        consumer: KinesisConsumer,
        kinesis: KinesisReadClient,
        stream: str,
        *,
        owner: str | None = None,
        lease_duration: float = 10.0,
        renew_interval: float | None = None,
        discovery_interval: float = 10.0,
        max_leases: int | None = None,
        initial_position: str = TRIM_HORIZON,
        batch_limit: int = 10_000,
        batch_timeout: float = 120.0,
        idle_interval: float = 1.0,
        publish: Callable[[Mapping[str, Any]], None] | None = None,
        publish_interval: float = 60.0,
        consumer_arn: str | None = None,
    ) -> None:
        if renew_interval is None:
            renew_interval = lease_duration / 3
        if not 0 < renew_interval < lease_duration:
            raise ValueError("renew_interval must be positive and shorter than lease_duration")
        if initial_position not in (TRIM_HORIZON, "LATEST"):
            raise ValueError("initial_position is TRIM_HORIZON or LATEST")
        if max_leases is not None and max_leases < 1:
            raise ValueError("max_leases must be at least 1")
        self.consumer, self.kinesis, self.stream = consumer, kinesis, stream
        self.owner = owner or f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        self.held = HeldLeases(consumer.table, self.owner)
        self.observer = LeaseObserver(lease_duration)
        self.lease_duration, self.renew_interval = lease_duration, renew_interval
        self.discovery_interval, self.max_leases = discovery_interval, max_leases
        self.initial_position = initial_position
        self.batch_limit, self.batch_timeout, self.idle_interval = batch_limit, batch_timeout, idle_interval
        self._publish, self.publish_interval = publish, publish_interval
        self.consumer_arn = consumer_arn
        self.stopping = threading.Event()
        self._out: queue.Queue[Batch | End] = queue.Queue()
        self._readers: dict[str, ShardReader] = {}
        self._generations: dict[str, int] = {}
        self._shards: dict[str, tuple[str, tuple[str, ...]]] = {}  # lease key -> (shard id, parents)
        self._listed: set[str] = set()  # shard ids the last ListShards named
        self._discovered_at = -float("inf")
        self._behind: dict[str, int] = {}
        self._coordinator: threading.Thread | None = None
        self._shards_lock = threading.Lock()

    # -- running ---------------------------------------------------------------------------------

    def run(self) -> None:
        """Consume until `stop()`, SIGTERM or SIGINT; then hand every lease back."""
        previous = self._trap_signals()
        self._coordinator = threading.Thread(target=self._coordinate, name="shardline-leases", daemon=True)
        self._coordinator.start()
        published = time.monotonic()
        try:
            while not self.stopping.is_set():
                self._sync_readers()
                try:
                    item = self._out.get(timeout=0.2)
                except queue.Empty:
                    item = None
                if item is not None:
                    self._handle(item)
                if self._publish is not None and time.monotonic() - published >= self.publish_interval:
                    self._emit()
                    published = time.monotonic()
        finally:
            self.shutdown()
            if self._publish is not None:
                self._emit()
            for signum, handler in previous.items():
                signal.signal(signum, handler)

    def stop(self) -> None:
        """Finish the batch in hand, then stop (`run` hands the leases back)."""
        self.stopping.set()

    def shutdown(self) -> None:
        self.stopping.set()
        for reader in self._readers.values():
            reader.stop()
        self._readers.clear()
        if self._coordinator is not None:
            self._coordinator.join(timeout=self.renew_interval + 30)
        self.held.hand_back_all()

    def snapshot(self) -> dict[str, Any]:
        """The worker's state: the leases it holds, and how far behind each shard's reads were."""
        held = sorted(self.held.holding())
        return {
            "owner": self.owner,
            "LeasesHeld": len(held),
            "leases": held,
            "MillisBehindLatest": max((self._behind.get(key, 0) for key in held), default=0),
        }

    def _trap_signals(self) -> dict[int, Any]:
        if threading.current_thread() is not threading.main_thread():
            return {}
        previous: dict[int, Any] = {}
        for signum in (signal.SIGTERM, signal.SIGINT):
            previous[signum] = signal.signal(signum, lambda number, frame: self.stop())
        return previous

    def _emit(self) -> None:
        """Publish the consumer's counters and the worker's state (the publisher takes increases)."""
        assert self._publish is not None
        self._publish({**self.consumer.metrics.snapshot(), **self.snapshot()})

    # -- processing (the calling thread) ---------------------------------------------------------

    def _handle(self, item: Batch | End) -> None:
        reader = self._readers.get(item.key)
        if reader is None or reader.generation != item.generation:
            return  # read before a restart, or for a shard no longer held
        if isinstance(item, End):
            self._finish(item.key)
            return
        shard_id = self._shards[item.key][0]
        self._behind[item.key] = item.millis_behind
        budget = _BatchBudget(self.owner, self.batch_timeout)
        retry_from = self.consumer._run_shard(
            self.stream, shard_id, item.records, table=self.held, owner=self.owner, context=budget
        )
        reader.processed()
        if item.key not in self.held.holding():
            self._stop_reader(item.key)  # lost during the batch: its commit was refused
        elif retry_from is not None:
            self._restart_reader(item.key, Position(retry_from))

    def _finish(self, key: str) -> None:
        """The shard is closed and every record of it processed: SHARD_END, and hand it back."""
        self._stop_reader(key)
        lease = self.held.current(key)
        if lease is None:
            return
        if lease.checkpoint.sequence != SHARD_END and not self.held.store.mark_shard_end(lease):
            logger.warning("shard %s: its row moved before SHARD_END; leaving it to the next owner", key)
        self.held.hand_back(key)

    def _sync_readers(self) -> None:
        """A reader for each lease held, none for a lease no longer held."""
        held = self.held.holding()
        for key in [key for key in self._readers if key not in held]:
            self._stop_reader(key)
        for key in held - set(self._readers):
            lease = self.held.current(key)
            if lease is not None and lease.checkpoint.sequence != SHARD_END and key in self._shards:
                self._restart_reader(key, lease.checkpoint)

    def _restart_reader(self, key: str, start: Position) -> None:
        self._stop_reader(key)
        generation = self._generations[key] = self._generations.get(key, 0) + 1
        shard_id = self._shards[key][0]
        reader: ShardReader
        if self.consumer_arn is not None:
            reader = ShardSubscriber(
                self.kinesis,
                self.consumer_arn,
                self.stream,
                shard_id,
                key,
                start,
                self._out,
                generation=generation,
            )
        else:
            reader = ShardReader(
                self.kinesis,
                self.stream,
                shard_id,
                key,
                start,
                self._out,
                generation=generation,
                limit=self.batch_limit,
                idle_interval=self.idle_interval,
            )
        self._readers[key] = reader
        reader.start()

    def _stop_reader(self, key: str) -> None:
        reader = self._readers.pop(key, None)
        if reader is not None:
            reader.stop()

    # -- leases (the coordinator thread) ---------------------------------------------------------

    def _coordinate(self) -> None:
        while not self.stopping.is_set():
            try:
                self.tick()
            except Exception:  # DynamoDB or Kinesis out: try again next interval, loudly
                logger.exception("worker %s: lease coordination failed; retrying", self.owner)
            self.stopping.wait(self.renew_interval)

    def tick(self) -> None:
        """One interval: renew, discover shards when due, then take what the plan says."""
        for key in self.held.renew():
            self.consumer.metrics.count("LeaseLosses")
            logger.warning("worker %s: lease %s was taken by another worker", self.owner, key)
        rows = self.held.leases()
        if time.monotonic() - self._discovered_at >= self.discovery_interval and self._discover(rows):
            rows = self.held.leases()  # with the rows it created
        self.observer.observe(rows)
        if self.stopping.is_set():
            return
        choice = plan(
            rows,
            self.owner,
            self.observer,
            open_keys=self._open_keys(rows),
            held=self.held.holding(),
            max_leases=self.max_leases,
        )
        for row in (*choice.take, *([choice.steal] if choice.steal else [])):
            try:
                self.held.acquire(row)
                logger.info("worker %s: took lease %s from %r", self.owner, row.key, row.owner or None)
            except LeaseLost:
                pass  # another worker was faster, or its owner renewed it: next interval

    def _discover(self, rows: list[Lease]) -> bool:
        """List the stream's shards; create a row (owned by no one) for each shard without one in
        `rows`. Whether it created any."""
        shards: list[Mapping[str, Any]] = []
        request: dict[str, Any] = {"StreamName": self.stream}
        while True:
            answer = self.kinesis.list_shards(**request)
            shards += answer.get("Shards", [])
            token = answer.get("NextToken")
            if not token:
                break
            request = {"NextToken": token}
        listed = {shard["ShardId"] for shard in shards}
        found = {}
        for shard in shards:
            shard_id = shard["ShardId"]
            parents = tuple(p for p in (shard.get("ParentShardId"), shard.get("AdjacentParentShardId")) if p)
            found[self.consumer.settings.lease_key(self.stream, shard_id)] = (shard_id, parents)
        existing = {row.key for row in rows}
        created = False
        for key, (_, parents) in found.items():
            if key not in existing:
                start = TRIM_HORIZON if any(parent in listed for parent in parents) else self.initial_position
                created |= self.held.store.start_at(key, Position(start), parent_shard_ids=parents)
        with self._shards_lock:
            self._shards.update(found)
            self._listed = listed
        self._discovered_at = time.monotonic()
        return created

    def _open_keys(self, rows: list[Lease]) -> set[str]:
        """The leases that may be processed now: this stream's, not at SHARD_END, parents done."""
        by_key = {row.key: row for row in rows}
        lease_key = self.consumer.settings.lease_key
        with self._shards_lock:
            shards, listed = dict(self._shards), set(self._listed)
        open_keys = set()
        for key, (_, parents) in shards.items():
            row = by_key.get(key)
            if row is None or row.checkpoint.sequence == SHARD_END:
                continue
            if all(_finished(by_key.get(lease_key(self.stream, p)), p in listed) for p in parents):
                open_keys.add(key)
        return open_keys


def _finished(parent: Lease | None, listed: bool) -> bool:
    """Is a parent done: at SHARD_END, or gone from the stream (trimmed) with no row?"""
    if parent is None:
        return not listed
    return parent.checkpoint.sequence == SHARD_END
