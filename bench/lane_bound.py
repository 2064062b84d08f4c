"""How many producer lanes a shard's applied-aggregate state holds, against its size (issue 39, 8).

The state rides in the shard's lease row (`appliedAggregates`, `shardline.consumer._dedup`): one
entry per producer lane seen in the last `DEDUP_HORIZON_S` (10 minutes) of arrivals. Past
`MAX_STATE_BYTES` the lanes that wrote least recently are evicted (`DedupLanesEvicted`). Measured
here, not estimated: states built with the real `AppliedAggregates.fold` from lanes as the producer
numbers them — a 16-character producer id (`new_producer_id`), the shard's lane, a counter, the
arrival time — then cut to each size by the real `bounded`, which says how many lanes it kept.
Three kinds of lane (`PROFILES`):

- young: a producer's first aggregates on shard 0 (counter 1, lane "0"): the smallest entry;
- long-lived: ~100,000 aggregates sent to shard 12 (counter 123,456), every one settled: `[w, t]`;
- one gap: the same with one unsettled aggregate (a resend in flight while later ones applied):
  a range `a, b` after `w`, until the producer's floor passes it (at most `RESEND_HORIZON_S` later);
- young, API caller: a young lane of records an API caller sent (its 16-character caller scope in
  the key instead of the library's "-").
"""

from __future__ import annotations

from dataclasses import dataclass

from bench.report import Row
from shardline.consumer._dedup import DEDUP_HORIZON_S, MAX_STATE_BYTES, AppliedAggregates
from shardline.consumer._dedup_run import scoped
from shardline.kpl._identity import AggregateId, new_producer_id

#: State sizes printed (bytes), up to the bound.
SIZES = (8_192, 32_768, 100_000, MAX_STATE_BYTES)
ARRIVAL = 1_800_000_000
#: An API caller, as the producer function stamps it (its lanes are keyed by its 16-character scope).
API_CALLER = "arn:aws:iam::123456789012:role/orders-service"
#: kind of lane -> (its counter, its lane name, one unsettled aggregate below the newest, its caller).
PROFILES: dict[str, tuple[int, str, bool, str | None]] = {
    "young": (1, "0", False, None),
    "long-lived": (123_456, "12", False, None),
    "one gap": (123_456, "12", True, None),
    "young, API caller": (1, "0", False, API_CALLER),
}


@dataclass(frozen=True, slots=True)
class LaneBound:
    """Lanes of one kind (`profile`) a state of `size` bytes holds, and the bytes each costs."""

    profile: str
    size: int
    lanes: int
    bytes_per_lane: float


def state_of(lanes: int, profile: str) -> AppliedAggregates:
    """`lanes` producers, one lane each on this shard, all within the dedup horizon."""
    counter, lane, gap, caller = PROFILES[profile]
    state = AppliedAggregates()
    for n in range(lanes):
        producer = new_producer_id()
        arrival = ARRIVAL + n * (DEDUP_HORIZON_S - 1) / lanes
        # keyed as the consumer keys them: `<caller scope>.<producer>.<lane>` (`_dedup_run.scoped`)
        state.fold(scoped(AggregateId(producer, lane, counter, counter), caller), arrival)
        if gap:  # counter + 1 still in flight (its copy may land); counter + 2 applied above it
            state.fold(scoped(AggregateId(producer, lane, counter + 2, counter + 1), caller), arrival)
    return state


def measure(lanes: int = 4_500) -> list[LaneBound]:
    """For each kind of lane and size, how many of `lanes` the real `bounded` keeps."""
    bounds = []
    for profile in PROFILES:
        for size in SIZES:
            state = state_of(lanes, profile)
            text, evicted = state.bounded(size)
            kept = len(state.lanes)
            assert len(text) <= size and evicted == lanes - kept > 0, (profile, size)
            bounds.append(LaneBound(profile, size, kept, len(text) / kept))
    return bounds


def rows(bounds: list[LaneBound]) -> list[Row]:
    """One row per size: the long-lived lanes it holds; the young and one-gap figures in its text."""
    by = {(bound.profile, bound.size): bound for bound in bounds}
    out = []
    for size in SIZES:
        young, lived, gap, caller = (by[(profile, size)] for profile in PROFILES)
        bound = " (the bound, MAX_STATE_BYTES)" if size == MAX_STATE_BYTES else ""
        out.append(
            Row(
                f"producer lanes per shard in a {size:,}-byte dedup state{bound}: long-lived "
                f"({lived.bytes_per_lane:.1f} B a lane); young: {young.lanes:,} "
                f"({young.bytes_per_lane:.1f} B), one gap: {gap.lanes:,} ({gap.bytes_per_lane:.1f} B), "
                f"young of an API caller: {caller.lanes:,} ({caller.bytes_per_lane:.1f} B)",
                "count",
                lived.lanes,
            )
        )
    return out


def note(bounds: list[LaneBound]) -> str:
    at = {bound.profile: bound for bound in bounds if bound.size == MAX_STATE_BYTES}
    figures = ", ".join(f"{at[p].lanes:,} {p} lanes ({at[p].bytes_per_lane:.1f} B each)" for p in PROFILES)
    return (
        f"Lane bound: a shard's dedup state holds {figures} in its {MAX_STATE_BYTES:,}-byte bound: "
        f"lanes seen in the last {DEDUP_HORIZON_S // 60} minutes of arrivals, one per producer "
        "incarnation writing to the shard. Past it the lanes that wrote least recently are evicted "
        "(DedupLanesEvicted, alarmed): a late copy of theirs may be applied twice. Measured with the "
        "real fold and bounded on 16-character producer ids."
    )
