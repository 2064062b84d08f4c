"""Lanes: the numbering of a producer's aggregates, which consumers deduplicate copies by.

Every Kinesis record the producer sends is a KPL aggregate carrying an `AggregateId` (see
`shardline.kpl._identity`): this producer's id, the lane it was numbered in, its counter in that
lane, and the lane's floor when it was built.

- A lane is the predicted shard's short name (the digits of `shardId-000000000012`: "12"), or
  `l<n>` for the n-th hash lane of records whose shard is unknown.
- Counters run 1, 2, 3 ... per lane, assigned when an aggregate is built.
- The floor is the smallest counter of the lane that is not settled when the aggregate is built
  (the aggregate's own counter when every earlier one is). Settled: the producer will never send
  it again and no copy of it can still land — every member confirmed, every copy refused, never
  sent at all, or, for an aggregate given up with a copy unanswered, `RESEND_HORIZON_S` after
  its last send (`settle_at`).

A consumer that has applied an aggregate's copy (or passed its floor) skips any later copy.
Every operation is O(1) amortized (a timed settlement O(log n)). An aggregate built and then not
sent (the limiter or the request cap held it back) is `retract`ed: its counter is handed out again
when it was the lane's last, so counters do not run ahead of what was sent.
"""

from __future__ import annotations

import heapq
import re
from collections import deque
from collections.abc import Callable

from shardline.kpl._identity import AggregateId

_DIGITS = re.compile(r"[0-9]+")
_UNSAFE = re.compile(r"[^0-9A-Za-z_-]")
#: A lane name's longest: an AWS shard id's 12 digits (the id's tag stays within the envelope).
_MAX_LANE = 12


def shard_lane(shard_id: str) -> str:
    """The lane of aggregates predicted for `shard_id`: the digits of its id, without leading zeros."""
    digits = _DIGITS.findall(shard_id)
    if digits:
        return str(int(digits[-1]))[-_MAX_LANE:]
    return (_UNSAFE.sub("_", shard_id) or "_")[-_MAX_LANE:]


def hash_lane(lane: int) -> str:
    """The lane of aggregates of unpredicted records in hash lane `lane`."""
    return f"l{lane}"


class _Lane:
    __slots__ = ("next", "settled", "unsettled")

    def __init__(self) -> None:
        self.next = 1
        self.unsettled: deque[int] = deque()  # counters handed out, ascending; settled ones leave lazily
        self.settled: set[int] = set()  # settled counters still in `unsettled`


class Lanes:
    """The counters and floors of one producer's lanes."""

    def __init__(self, producer: str, clock: Callable[[], float]) -> None:
        self.producer = producer
        self._clock = clock
        self._lanes: dict[str, _Lane] = {}
        self._timed: list[tuple[float, str, int]] = []  # heap: (settles at, lane, counter)

    def new_id(self, lane: str) -> AggregateId:
        """The id of the next aggregate built in `lane`."""
        self._settle_due()
        state = self._lanes.get(lane)
        if state is None:
            state = self._lanes[lane] = _Lane()
        counter = state.next
        state.next += 1
        state.unsettled.append(counter)
        return AggregateId(self.producer, lane, counter, self._floor(state))

    def retract(self, aggregate_id: AggregateId) -> None:
        """The aggregate was built but never sent: its counter is free again if it was the last
        handed out in its lane, else settled (a gap consumers step over with the floor)."""
        state = self._lanes.get(aggregate_id.lane)
        if state is None:
            return
        if (
            state.next - 1 == aggregate_id.counter
            and state.unsettled
            and state.unsettled[-1] == aggregate_id.counter
        ):
            state.unsettled.pop()
            state.settled.discard(aggregate_id.counter)
            state.next -= 1
        else:
            self.settle(aggregate_id)

    def floor(self, lane: str) -> int:
        """The lane's floor now: its smallest unsettled counter, or its next one."""
        self._settle_due()
        state = self._lanes.get(lane)
        return 1 if state is None else self._floor(state)

    def settle(self, aggregate_id: AggregateId) -> None:
        """The aggregate will never be sent again and no copy of it can still land."""
        state = self._lanes.get(aggregate_id.lane)
        if state is not None and aggregate_id.counter < state.next:
            state.settled.add(aggregate_id.counter)

    def settle_at(self, aggregate_id: AggregateId, at: float) -> None:
        """The aggregate will never be sent again; a copy could land until clock time `at`."""
        heapq.heappush(self._timed, (at, aggregate_id.lane, aggregate_id.counter))

    def _settle_due(self) -> None:
        timed = self._timed
        if timed and timed[0][0] <= self._clock():
            now = self._clock()
            while timed and timed[0][0] <= now:
                _, lane, counter = heapq.heappop(timed)
                self._lanes[lane].settled.add(counter)

    @staticmethod
    def _floor(state: _Lane) -> int:
        unsettled, settled = state.unsettled, state.settled
        while unsettled and unsettled[0] in settled:
            settled.discard(unsettled.popleft())
        return unsettled[0] if unsettled else state.next
