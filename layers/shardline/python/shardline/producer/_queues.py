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

Unpredicted records (no shard map) are spread over `lanes` lanes by hash key, each lane a
contiguous slice of the hash-key space, so several requests can be in flight while one key
still has only one.
"""

from __future__ import annotations

import heapq
from collections import deque

from shardline.kinesis._limits import MAX_HASH_KEY
from shardline.kinesis._shard_map import HashRange
from shardline.producer._buffered import BufferedRecord

_HASH_SPACE = MAX_HASH_KEY + 1


class ShardQueue:
    """The unsent records of one target, next record first. `hash_range` is the target's range."""

    __slots__ = ("_fresh", "_front", "_older", "bytes", "hash_range", "lane")

    def __init__(self, hash_range: HashRange, *, lane: bool = False) -> None:
        self.hash_range = hash_range
        self.lane = lane
        self._fresh: deque[BufferedRecord] = deque()
        self._older: list[tuple[int, BufferedRecord]] = []
        self._front: list[BufferedRecord] = []  # a stack: the next one last
        # Bytes queued, as the buffer bound counts them; an upper bound, since a record resolved
        # while queued counts until it is reached.
        self.bytes = 0

    def push(self, record: BufferedRecord) -> None:
        """Queue `record` in put() order (cheapest when records come in that order)."""
        self.bytes += record.size
        fresh = self._fresh
        if not fresh or fresh[-1].sequence < record.sequence:
            fresh.append(record)
        else:
            heapq.heappush(self._older, (record.sequence, record))

    def give_back(self, members: list[BufferedRecord]) -> None:
        """Put back records just taken, unsent, in front of the queue (order kept)."""
        self._front.extend(reversed(members))
        self.bytes += sum(member.size for member in members)

    def peek(self) -> BufferedRecord | None:
        """The next record to send, or None."""
        front, fresh, older = self._front, self._fresh, self._older
        while front and front[-1].result is not None:
            self.bytes -= front.pop().size
        while fresh and fresh[0].result is not None:
            self.bytes -= fresh.popleft().size
        while older and older[0][1].result is not None:
            self.bytes -= heapq.heappop(older)[1].size
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
        self.bytes -= record.size
        return record

    def drain(self) -> list[BufferedRecord]:
        """Every unresolved record, emptying the queue (in no particular order)."""
        records = [r for r in (*self._front, *self._fresh) if r.result is None]
        records += [r for _, r in self._older if r.result is None]
        self._front, self._fresh, self._older = [], deque(), []
        self.bytes = 0
        return records

    def __bool__(self) -> bool:
        return self.peek() is not None

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
