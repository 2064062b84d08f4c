"""Producer-retry dedup: which shardline aggregates a shard has applied, kept in its lease row.

Kinesis has no idempotent producer: a PutRecords whose reply was lost is sent again, and the
shard may then hold two copies of an aggregate (the producer resends one whose outcome it does
not know only inside the identical aggregate, with the same `AggregateId`). The consumer applies
each aggregate once: a Kinesis record whose aggregate is already applied is skipped whole.

The state (`AppliedAggregates`), per lane — `<caller scope>.<producer>.<lane>` (`_dedup_run.scoped`:
the aggregate's `sl.c` caller scope, "-" for none, then `AggregateId.key`), so a lane's floor moves
only by aggregates of its own caller and producer: another caller forging the producer's id and a
high floor moves a lane of its own, never the victim's. A state written before lanes were scoped
stays readable: its unscoped keys are other lanes, pruned by the horizon — but a caller-less
aggregate (scope "-") is also looked up under its unscoped key, so a copy of one applied before
the upgrade is still skipped after it (those lanes only ever held caller-less aggregates).

- `w`: every counter <= w is applied here or settled (the producer will never send it again,
  and no copy of it can still land) — a copy at or below it is skipped;
- the counters above `w` applied here, as closed ranges;
- the newest arrival time (ApproximateArrivalTimestamp, epoch seconds) of an aggregate of the
  lane folded in.

An aggregate joins the state when the checkpoint *wholly passes* its Kinesis record (every user
record of it is done): its counter joins the ranges, `w = max(w, floor - 1)`, and ranges at or
next to `w` fold into it. A checkpoint inside an aggregate does not add it (after a crash the
rest of that copy must still run; the checkpoint's sub-sequence skips what was done). The state
written with a checkpoint at position P therefore holds exactly the aggregates wholly passed at
P, whatever crashes: the checkpoint and the state are one attribute set of one write
(`appliedAggregates`, in the same UpdateItem or transaction). Within a run, an aggregate seen
earlier in the same batch is also a copy (`DedupRun`, in `_dedup_run`).

Lanes whose newest arrival is more than `DEDUP_HORIZON_S` behind the newest arrival the state
has folded in are dropped: the producer never resends an aggregate more than `RESEND_HORIZON_S`
(120 s) after its first send, so a copy cannot arrive that late. A child shard starts from the
union of its parents' final states (`inherit`: w = max, ranges unioned; see partial aggregates;
a parent that received nothing hands down its own parents', `_resharding`).

Size. Serialized as compact JSON (`{"v":1,"t":<newest>,"k":{"<scope>.<producer>.<lane>":[w,t,a,b,...]}}`,
a, b the bounds of each range; `"p"` and `"q"` only when there are partial aggregates, below),
an active lane costs its key (the 16-character producer id, a lane of 1 to 3 characters, and the
scope: 2 characters "-." for no caller, 17 for a caller's 16-character scope and its dot; so ~21
characters, ~36 with a caller) plus w and t: about 41 bytes (~56 with a caller), and ~10 more per
gap (a range above w, from an aggregate still unsettled — in flight, or confirmed elsewhere —
while later ones are applied; it folds into w as the producer's floor passes it, at most
`RESEND_HORIZON_S` later). 50 producers (2 lanes each, restarting now
and then) writing 100,000 aggregates with lost, throttled and misrouted sends keep it under 8 KB
(tests/unit/test_consumer_identity.py measures it). The lease row must stay under DynamoDB's
400 KB item limit (and a checkpoint transaction under 4 MB), and each checkpoint write costs one
write unit per KB of the row: past `MAX_STATE_BYTES` (~3,600 active lanes without callers, ~2,650
with them: 150,000 / 41 or / 56 bytes) the lanes with the
oldest arrivals are dropped first (`DedupLanesEvicted`, logged) — the horizon shrinks for them;
a copy of one of their aggregates arriving later would be applied again, never lost.

Partial aggregates. An aggregate a shard applied only in part (members outside its hash range
skipped: built before a split the producer's shard map had not seen) is also listed, with its
arrival, under `p`. A child whose range its parent's covers (a split) needs nothing more: within
the child's range the parent applied every member. A child of a *merge* (`inherit`) covers more
than each parent: for an aggregate some parent applied only in part, the child keeps the hash
ranges its parents applied it in (`q`), and a copy landing in the child — the producer's
re-routed copy — applies only its members outside them. A further split clips those ranges to
each child's (`inherit` again): a child they cover whole has the aggregate applied, one they miss
entirely keeps the entry with no range (applied nowhere in it). Both lists are pruned by the horizon.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Sequence

from shardline.consumer._lane_ranges import add, clip, union
from shardline.kinesis._shard_map import HashRange
from shardline.kpl._identity import AggregateId

logger = logging.getLogger(__name__)

#: A lane unseen for this long (by arrival time, behind the newest arrival folded in) is dropped.
DEDUP_HORIZON_S = 600
#: The serialized state's bound: the lease row stays well under DynamoDB's 400 KB item limit, and
#: a checkpoint transaction within the headroom `_lease_store.MAX_TRANSACTION_BYTES` leaves under 4 MB.
MAX_STATE_BYTES = 150_000
_VERSION = 1
_NO_CALLER = "-."  # the scope of a lane whose aggregates name no caller (`_dedup_run.scoped`)


class AppliedAggregates:
    """The applied-aggregate state of one shard: see the module docstring.

    `lanes` maps a lane key to `[w, newest arrival, a1, b1, a2, b2, ...]` (ranges above w+1,
    sorted, disjoint, not adjacent): the serialized form, mutated in place. `partial` maps a
    lane key to `[counter, arrival, ...]`, the aggregates applied here only in part; `qualified`
    maps a lane key to {counter: [arrival, low, high, ...]}, aggregates applied only for the hash
    keys in those closed ranges (a merged child's inheritance)."""

    __slots__ = ("lanes", "newest", "partial", "qualified")

    def __init__(
        self,
        lanes: dict[str, list[int]] | None = None,
        newest: int = 0,
        partial: dict[str, list[int]] | None = None,
        qualified: dict[str, dict[int, list[int]]] | None = None,
    ) -> None:
        self.lanes: dict[str, list[int]] = lanes if lanes is not None else {}
        self.newest = newest
        self.partial: dict[str, list[int]] = partial if partial is not None else {}
        self.qualified: dict[str, dict[int, list[int]]] = qualified if qualified is not None else {}

    @classmethod
    def parse(cls, text: str | None) -> AppliedAggregates:
        """The state stored in a lease row (None or empty: no state). A value this version cannot
        read is logged and taken as empty (copies may then be applied again, never lost)."""
        if not text:
            return cls()
        try:
            value = json.loads(text)
            if not isinstance(value, dict) or value.get("v") != _VERSION:
                raise ValueError(f"version {value.get('v') if isinstance(value, dict) else None!r}")
            lanes = value["k"]
            newest = value["t"]
            if not isinstance(lanes, dict) or not isinstance(newest, int):
                raise ValueError("malformed")
            for key, lane in lanes.items():
                if (
                    not isinstance(key, str)
                    or not isinstance(lane, list)
                    or len(lane) < 2
                    or len(lane) % 2
                    or not all(isinstance(number, int) for number in lane)
                ):
                    raise ValueError(f"lane {key!r} is malformed")
            partial = value.get("p", {})
            if not isinstance(partial, dict) or not all(
                isinstance(entries, list)
                and len(entries) % 2 == 0
                and all(isinstance(n, int) for n in entries)
                for entries in partial.values()
            ):
                raise ValueError("partial aggregates are malformed")
            qualified: dict[str, dict[int, list[int]]] = {}
            for key, entries in value.get("q", {}).items():
                for entry in entries:
                    # [counter, arrival, low, high, ...]: no range at all is an aggregate applied
                    # nowhere in this shard's range (a merged child's, split again)
                    if len(entry) < 2 or len(entry) % 2 or not all(isinstance(n, int) for n in entry):
                        raise ValueError(f"qualified aggregates of {key!r} are malformed")
                    qualified.setdefault(key, {})[entry[0]] = entry[1:]
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            logger.error("appliedAggregates of a lease row is not readable (%s): starting empty", exc)
            return cls()
        return cls(lanes, newest, partial, qualified)

    def serialize(self) -> str:
        """Compact JSON for the lease row's `appliedAggregates` ("" when empty)."""
        if not self.lanes:
            return ""
        value: dict[str, object] = {"v": _VERSION, "t": self.newest, "k": self.lanes}
        if self.partial:
            value["p"] = self.partial
        if self.qualified:
            value["q"] = {
                key: [[counter, *entry] for counter, entry in entries.items()]
                for key, entries in self.qualified.items()
            }
        return json.dumps(value, separators=(",", ":"))

    def copy(self) -> AppliedAggregates:
        return AppliedAggregates(
            {key: list(lane) for key, lane in self.lanes.items()},
            self.newest,
            {key: list(entries) for key, entries in self.partial.items()},
            {key: {c: list(e) for c, e in entries.items()} for key, entries in self.qualified.items()},
        )

    def covered(self, aggregate: AggregateId) -> list[int] | None:
        """The hash-key ranges `[low, high, ...]` `aggregate` was applied in, if it was applied
        here only in those (inherited at a merge); None otherwise (see `applied`)."""
        entries = self.qualified.get(aggregate.key)
        entry = entries.get(aggregate.counter) if entries else None
        return entry[1:] if entry is not None else None

    def applied(self, aggregate: AggregateId) -> bool:
        """Is a copy of `aggregate` already applied (or settled) here, whole? (An aggregate
        applied only in some hash ranges is not: `covered`.)"""
        if aggregate.key in self.qualified and aggregate.counter in self.qualified[aggregate.key]:
            return False
        if self._in_lane(aggregate.key, aggregate.counter):
            return True
        # A state written before lanes were scoped keys a caller-less lane `<producer>.<lane>`:
        # a copy of an aggregate it applied, landing just after the upgrade, is still skipped.
        legacy = aggregate.key[2:] if aggregate.key.startswith(_NO_CALLER) else None
        return legacy is not None and legacy in self.lanes and self._in_lane(legacy, aggregate.counter)

    def _in_lane(self, key: str, counter: int) -> bool:
        lane = self.lanes.get(key)
        if lane is None:
            return False
        if counter <= lane[0]:
            return True
        for at in range(2, len(lane), 2):
            if counter < lane[at]:
                return False
            if counter <= lane[at + 1]:
                return True
        return False

    def fold(self, aggregate: AggregateId, arrival: float, partial: bool = False) -> None:
        """`aggregate`'s Kinesis record is wholly passed by the checkpoint: it is applied (with
        `partial`, only its members in this shard's range: others were outside it)."""
        seconds = int(arrival)
        key, counter = aggregate.key, aggregate.counter
        self.newest = max(self.newest, seconds)
        lane = self.lanes.get(key)
        if lane is None:
            lane = self.lanes[key] = [0, seconds]
        lane[1] = max(lane[1], seconds)
        lane[0] = max(lane[0], aggregate.floor - 1)
        add(lane, counter)
        qualified = self.qualified.get(key)
        if qualified is not None and qualified.pop(counter, None) is not None and not qualified:
            del self.qualified[key]
        if partial:
            _list_partial(self.partial, key, counter, seconds)

    def prune(self, horizon: float = DEDUP_HORIZON_S) -> None:
        """Drop the lanes (and partial or qualified aggregates) whose newest arrival is more
        than `horizon` seconds behind the newest."""
        oldest = self.newest - horizon
        stale = [key for key, lane in self.lanes.items() if lane[1] < oldest]
        for key in stale:
            del self.lanes[key]
        for key, entries in list(self.partial.items()):
            kept = [
                n
                for at in range(0, len(entries), 2)
                if entries[at + 1] >= oldest
                for n in entries[at : at + 2]
            ]
            if kept and key in self.lanes:
                self.partial[key] = kept
            else:
                del self.partial[key]
        for key, by_counter in list(self.qualified.items()):
            for counter in [c for c, entry in by_counter.items() if entry[0] < oldest]:
                del by_counter[counter]
            if not by_counter or key not in self.lanes:
                del self.qualified[key]

    def bounded(self, max_bytes: int = MAX_STATE_BYTES) -> tuple[str, int]:
        """The serialized state within `max_bytes`, and how many lanes were evicted for it.

        Whole lanes go (with their partial and qualified aggregates), by age: the lane whose newest
        arrival is oldest first. A producer that still writes to the shard keeps moving its lane's
        newest arrival; one that stopped (dead, restarted under a new id, or no longer writing
        here) does not, so its lanes are retired before any live one — whatever their counters or
        the order they were folded in. No more lanes go than the bound needs: each eviction's
        saving is counted exactly (`_cost`), its partial and qualified entries included."""
        text = self.serialize()
        if len(text) <= max_bytes:
            return text, 0
        size = len(text)
        evicted = 0
        for key in sorted(self.lanes, key=lambda key: self.lanes[key][1]):
            if size <= max_bytes:
                break
            size -= self._cost(key)
            self._evict(key)
            evicted += 1
        text = self.serialize()
        while len(text) > max_bytes and self.lanes:  # the count fell short: one at a time
            self._evict(min(self.lanes, key=lambda key: self.lanes[key][1]))
            evicted += 1
            text = self.serialize()
        return text, evicted

    def _cost(self, key: str) -> int:
        """The bytes the serialized state loses when lane `key` is evicted: its entry in `k`, and in
        `p` and `q` (each with the comma before it; the whole `,"p":{}` when it is the last there)."""
        cost = _entry_bytes(key, self.lanes[key])
        for section, entries in (("p", self.partial), ("q", self.qualified)):
            if key not in entries:
                continue
            value: object = entries[key]
            if section == "q":
                value = [[counter, *entry] for counter, entry in self.qualified[key].items()]
            cost += _entry_bytes(key, value) + (len(f',"{section}":{{}}') - 1 if len(entries) == 1 else 0)
        return cost

    def _evict(self, key: str) -> None:
        del self.lanes[key]
        self.partial.pop(key, None)
        self.qualified.pop(key, None)

    @classmethod
    def inherit(
        cls, parents: Sequence[tuple[AppliedAggregates, HashRange | None]], child: HashRange | None
    ) -> AppliedAggregates:
        """A child shard's start from its parents' final states and hash ranges: their union
        (`merge`), and for each aggregate some parent applied only in part, the hash ranges of
        the child it is applied in, unless those cover the child's whole range. Without the
        ranges, the plain union."""
        merged = cls.merge(state for state, _ in parents)  # partial ones stay listed: still suspects
        if child is None or any(hash_range is None for _, hash_range in parents):
            return merged
        suspects: dict[tuple[str, int], int] = {}  # (lane key, counter) -> newest arrival
        for state, _ in parents:
            for key, entries in state.partial.items():
                for at in range(0, len(entries), 2):
                    identity = (key, entries[at])
                    suspects[identity] = max(suspects.get(identity, 0), entries[at + 1])
            for key, by_counter in state.qualified.items():
                for counter, entry in by_counter.items():
                    suspects[(key, counter)] = max(suspects.get((key, counter), 0), entry[0])
        for (key, counter), arrival in suspects.items():
            coverage: list[tuple[int, int]] = []
            for state, hash_range in parents:
                assert hash_range is not None
                ranges = state.qualified.get(key, {}).get(counter)
                if ranges is not None:
                    coverage += [
                        (max(low, hash_range.start), min(high, hash_range.end))
                        for low, high in zip(ranges[1::2], ranges[2::2], strict=True)
                    ]
                elif state._in_lane(key, counter):
                    coverage.append((hash_range.start, hash_range.end))
            within = clip(union(coverage), child.start, child.end)
            if within != [(child.start, child.end)]:
                flat = [bound for pair in within for bound in pair]
                merged.qualified.setdefault(key, {})[counter] = [arrival, *flat]
        return merged

    @classmethod
    def merge(cls, states: Iterable[AppliedAggregates]) -> AppliedAggregates:
        """The union of parents' final states: w = max, ranges unioned (partial aggregates
        listed as in any parent; qualified ones dropped: see `inherit`)."""
        merged = cls()
        for state in states:
            for key, entries in state.partial.items():
                for at in range(0, len(entries), 2):
                    _list_partial(merged.partial, key, entries[at], entries[at + 1])
            merged.newest = max(merged.newest, state.newest)
            for key, lane in state.lanes.items():
                mine = merged.lanes.get(key)
                if mine is None:
                    merged.lanes[key] = list(lane)
                    continue
                mine[0] = max(mine[0], lane[0])
                mine[1] = max(mine[1], lane[1])
                for at in range(2, len(lane), 2):
                    add(mine, lane[at], lane[at + 1])
                add(mine, mine[0])  # fold the ranges the larger w reaches
        return merged


def _entry_bytes(key: str, value: object) -> int:
    """`"key":value` and its separating comma, as `serialize` writes them."""
    return len(json.dumps({key: value}, separators=(",", ":"))) - 1  # "{", "}" vs ","


def _list_partial(partial: dict[str, list[int]], key: str, counter: int, arrival: int) -> None:
    entries = partial.setdefault(key, [])
    for at in range(0, len(entries), 2):
        if entries[at] == counter:
            entries[at + 1] = max(entries[at + 1], arrival)
            return
    entries += (counter, arrival)
