"""Reading one shard for a worker: GetRecords within the shard's read limits, into a bounded queue.

    reader = ShardReader(kinesis, "orders", "shardId-000000000001", start, out, generation=1)
    reader.start()      # a daemon thread: Batch(...) items, then one End(...) when the shard closes
    reader.stop()

A shard serves at most 5 GetRecords calls and 2 MiB per second to all its readers. A reader waits
`min_interval` (0.2 s) between calls, longer after a large answer (its bytes at 2 MiB/s) and
`idle_interval` after an empty one at the tip of the shard; a throttled call
(`ProvisionedThroughputExceededException`) or any other refused call backs off with jitter,
doubling up to `max_backoff`, without end — the shard's lease is the worker's, nothing is lost by
waiting, and the worker's renewals and metrics say it is stuck. An iterator that expired (5
minutes unused: the handler was slow) is fetched again after the last record read, so nothing is
skipped or read twice.

The queue is the flow control: at most `max_pending` batches of a shard wait for the handler (a
semaphore released as each is processed), so a slow handler slows the reads, not the memory.
A reader starts at the lease's checkpoint: AT_SEQUENCE_NUMBER of its Kinesis record (the
consumer core skips the user records at or below the checkpoint — the rest of an aggregate
partly processed), TRIM_HORIZON or LATEST as the row says. When GetRecords answers without a
next iterator the shard is closed and read to its end: `End` follows the last batch.
"""

from __future__ import annotations

import logging
import queue
import random
import threading
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from botocore.exceptions import BotoCoreError, ClientError

from shardline.consumer._deaggregation import KinesisRecord
from shardline.kinesis._positions import LATEST, TRIM_HORIZON, Position

if TYPE_CHECKING:
    from shardline.protocols import KinesisReadClient

__all__ = ["Batch", "End", "ShardReader", "error_code"]

logger = logging.getLogger(__name__)

#: A shard's read limits: 5 GetRecords calls and 2 MiB per second, shared by its readers.
READ_BYTES_PER_S = 2 * 1024 * 1024
MIN_INTERVAL_S = 0.2
#: GetRecords' limit on records per call.
MAX_RECORDS_PER_CALL = 10_000


@dataclass(frozen=True, slots=True)
class Batch:
    """Records read from a shard, in order, and how far behind its tip the read was."""

    key: str  # the lease key
    generation: int  # which reader of the shard read it (a restart starts a new one)
    records: list[KinesisRecord]
    millis_behind: int


@dataclass(frozen=True, slots=True)
class End:
    """The shard is closed and every record was read (after the last `Batch`)."""

    key: str
    generation: int


class ShardReader(threading.Thread):
    """One shard's reads, on a daemon thread, into `out` (see the module docstring)."""

    def __init__(
        self,
        kinesis: KinesisReadClient,
        stream: str,
        shard_id: str,
        key: str,
        start: Position,
        out: queue.Queue[Batch | End],
        *,
        generation: int,
        limit: int = MAX_RECORDS_PER_CALL,
        max_pending: int = 2,
        min_interval: float = MIN_INTERVAL_S,
        idle_interval: float = 1.0,
        max_backoff: float = 5.0,
    ) -> None:
        super().__init__(name=f"shardline-reader-{shard_id}", daemon=True)
        self.kinesis = kinesis
        self.stream, self.shard_id, self.key, self.start_at = stream, shard_id, key, start
        self.out = out
        self.generation = generation
        self.limit = min(max(1, limit), MAX_RECORDS_PER_CALL)
        self.pending = threading.Semaphore(max_pending)
        self.min_interval, self.idle_interval, self.max_backoff = min_interval, idle_interval, max_backoff
        self.stopped = threading.Event()
        self.last_read: str | None = None  # sequence number of the last record handed on
        self.calls = 0

    def stop(self) -> None:
        self.stopped.set()
        self.pending.release()  # a reader waiting for room wakes up and sees it is stopped

    def processed(self) -> None:
        """The worker processed one of this reader's batches: room for one more."""
        self.pending.release()

    def run(self) -> None:
        iterator: str | None = None
        failures = 0
        while not self.stopped.is_set():
            try:
                if iterator is None:
                    iterator = self._iterator()
                answer = self.kinesis.get_records(ShardIterator=iterator, Limit=self.limit)
                self.calls += 1
                failures = 0
            except (ClientError, BotoCoreError) as error:
                code = error_code(error)
                if code == "ExpiredIteratorException":
                    iterator = None  # fetched again after the last record read
                    continue
                failures += 1
                wait = min(self.max_backoff, self.min_interval * 2**failures)
                logger.warning("shard %s: GetRecords refused (%s), again in %.1fs", self.shard_id, code, wait)
                self.stopped.wait(wait * random.uniform(0.5, 1.0))
                continue
            records = [self._record(raw) for raw in answer.get("Records", ())]
            behind = int(answer.get("MillisBehindLatest", 0))
            if records:
                if not self._hand_on(Batch(self.key, self.generation, records, behind)):
                    return
                self.last_read = records[-1].sequence_number
            iterator = answer.get("NextShardIterator")
            if iterator is None:  # closed, and read to its end
                self._hand_on(End(self.key, self.generation))
                return
            size = sum(len(record.data) for record in records)
            idle = self.idle_interval if not records and not behind else 0.0
            self.stopped.wait(max(self.min_interval, size / READ_BYTES_PER_S, idle))

    def _hand_on(self, item: Batch | End) -> bool:
        """Put `item` on the queue once there is room; False if stopped meanwhile."""
        self.pending.acquire()
        if self.stopped.is_set():
            return False
        self.out.put(item)
        return True

    def _iterator(self) -> str:
        request: dict[str, Any] = {"StreamName": self.stream, "ShardId": self.shard_id}
        if self.last_read is not None:
            request.update(ShardIteratorType="AFTER_SEQUENCE_NUMBER", StartingSequenceNumber=self.last_read)
        elif self.start_at.sequence in (TRIM_HORIZON, LATEST):
            request["ShardIteratorType"] = self.start_at.sequence
        else:
            request.update(
                ShardIteratorType="AT_SEQUENCE_NUMBER", StartingSequenceNumber=self.start_at.sequence
            )
        return str(self.kinesis.get_shard_iterator(**request)["ShardIterator"])

    def _record(self, raw: Any) -> KinesisRecord:
        arrival = raw.get("ApproximateArrivalTimestamp")
        return KinesisRecord(
            stream=self.stream,
            shard_id=self.shard_id,
            sequence_number=raw["SequenceNumber"],
            partition_key=raw["PartitionKey"],
            explicit_hash_key=None,
            data=bytes(raw["Data"]),
            approximate_arrival=arrival.timestamp() if isinstance(arrival, datetime) else float(arrival or 0),
        )


def error_code(error: ClientError | BotoCoreError) -> str:
    """A refused call's error code (a connection failure has none: its class name)."""
    if isinstance(error, ClientError):
        return str(error.response.get("Error", {}).get("Code", "")) or "ClientError"
    return type(error).__name__
