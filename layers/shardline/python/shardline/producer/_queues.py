"""Send queues: the records bound for one target (a predicted shard, or a lane of unpredicted keys).

A target's next record is always its oldest unsent one, in put() order, so records of one key
leave in the order they were put. Every operation is O(1) or O(log n) in the records it touches,
never O(queue length): a million buffered records do not make a step slower.

- Fresh records arrive in put() order and are appended to a deque.
- Records that come back — retries, which are older than any fresh record — go into a heap
  ordered by put() order.
- Members of a Kinesis record the limiter held back go onto a small stack in front; they were
  the oldest when taken.

The next record is the oldest of the three heads. A record resolved while queued (expired by its
caller's deadline) is not searched for: it stays where it is and is skipped when reached.

Sealed aggregates due to be sent again wait whole in a heap of their own, by their first member's
put() order; the dispatcher sends the older of the next sealed aggregate and the next record.

Unpredicted records (no shard map) are spread over `lanes` lanes by hash key, each lane a
contiguous slice of the hash-key space, so several requests can be in flight while one key
still has only one.
"""

from __future__ import annotations

import heapq
from collections import deque

from shardline.kinesis._limits import MAX_HASH_KEY
from shardline.kinesis._shard_map import HashRange
from shardline.producer._buffered import BufferedRecord, KinesisRecord

_HASH_SPACE = MAX_HASH_KEY + 1


class ShardQueue:
    """The unsent records of one target, next record first. `hash_range` is the target's range."""

    __slots__ = ("_fresh", "_front", "_older", "_sealed", "bytes", "hash_range", "lane", "wire")

    def __init__(self, hash_range: HashRange, *, lane: bool = False) -> None:
        self.hash_range = hash_range
        self.lane = lane
        self._fresh: deque[BufferedRecord] = deque()
        self._older: list[tuple[int, BufferedRecord]] = []
        self._front: list[BufferedRecord] = []  # a stack: the next one last
        self._sealed: list[tuple[int, int, KinesisRecord]] = []  # heap: (put() order, id, aggregate)
        # Bytes queued, as the buffer bound counts them; an upper bound, since a record resolved
        # while queued counts until it is reached. `wire`: the same records' bound inside an aggregate.
        self.bytes = 0
        self.wire = 0

    def push(self, record: BufferedRecord) -> None:
        """Queue `record` in put() order (cheapest when records come in that order)."""
        self.bytes += record.size
        self.wire += record.wire
        fresh = self._fresh
        if not fresh or fresh[-1].sequence < record.sequence:
            fresh.append(record)
        else:
            heapq.heappush(self._older, (record.sequence, record))

    def give_back(self, members: list[BufferedRecord]) -> None:
        """Put back records just taken, unsent, in front of the queue (order kept)."""
        self._front.extend(reversed(members))
        self.bytes += sum(member.size for member in members)
        self.wire += sum(member.wire for member in members)

    def peek(self) -> BufferedRecord | None:
        """The next record to send, or None."""
        front, fresh, older = self._front, self._fresh, self._older
        while front and front[-1].result is not None:
            self._drop(front.pop())
        while fresh and fresh[0].result is not None:
            self._drop(fresh.popleft())
        while older and older[0][1].result is not None:
            self._drop(heapq.heappop(older)[1])
        best: BufferedRecord | None = front[-1] if front else None
        if older and (best is None or older[0][0] < best.sequence):
            best = older[0][1]
        if fresh and (best is None or fresh[0].sequence < best.sequence):
            best = fresh[0]
        return best

    def pop(self) -> BufferedRecord:
        """Remove and return the next record (IndexError when there is none)."""
        record = self.peek()
        if record is None:
            raise IndexError("pop from an empty ShardQueue")
        if self._front and self._front[-1] is record:
            self._front.pop()
        elif self._older and self._older[0][1] is record:
            heapq.heappop(self._older)
        else:
            self._fresh.popleft()
        self._drop(record)
        return record

    def _drop(self, record: BufferedRecord) -> None:
        self.bytes -= record.size
        self.wire -= record.wire

    def push_sealed(self, kinesis_record: KinesisRecord) -> None:
        """Queue a sealed aggregate to be sent again, whole, in its first member's put() order."""
        heapq.heappush(self._sealed, (kinesis_record.order, id(kinesis_record), kinesis_record))

    def peek_sealed(self) -> KinesisRecord | None:
        """The next sealed aggregate (retired ones are dropped), or None."""
        sealed = self._sealed
        while sealed and sealed[0][2].retired:
            heapq.heappop(sealed)
        return sealed[0][2] if sealed else None

    def pop_sealed(self) -> KinesisRecord:
        return heapq.heappop(self._sealed)[2]

    def drain_sealed(self) -> list[KinesisRecord]:
        """Every sealed aggregate queued, emptying that heap (in no particular order)."""
        sealed = [item[2] for item in self._sealed if not item[2].retired]
        self._sealed = []
        return sealed

    def drain(self) -> list[BufferedRecord]:
        """Every unresolved record, emptying the queue (in no particular order)."""
        records = [r for r in (*self._front, *self._fresh) if r.result is None]
        records += [r for _, r in self._older if r.result is None]
        self._front, self._fresh, self._older = [], deque(), []
        self.bytes = self.wire = 0
        return records

    def __bool__(self) -> bool:
        return self.peek() is not None or self.peek_sealed() is not None

    def __len__(self) -> int:
        """Records queued; an upper bound, as `bytes` is."""
        return len(self._front) + len(self._fresh) + len(self._older)


def lane_of(hash_key: int, lanes: int) -> int:
    """The lane of an unpredicted record: its slice of the hash-key space."""
    return hash_key * lanes // _HASH_SPACE


def lane_range(lane: int, lanes: int) -> HashRange:
    """The hash keys lane `lane` of `lanes` holds."""
    return HashRange(lane * _HASH_SPACE // lanes, (lane + 1) * _HASH_SPACE // lanes - 1)


def overlaps(a: HashRange, b: HashRange) -> bool:
    return a.start <= b.end and b.start <= a.end
