"""Closed integer ranges of counters, as the applied-aggregate state (`_dedup`) keeps them.

A lane (`[w, newest arrival, a1, b1, a2, b2, ...]`) holds every counter <= w and the closed
ranges a..b above it, sorted, disjoint and not adjacent; `add` keeps it so. `union` and `clip`
work on lists of (low, high) pairs: the hash-key ranges a merged child inherits.
"""

from __future__ import annotations


def union(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Closed integer ranges merged: sorted, disjoint, not adjacent (empty ones dropped)."""
    out: list[tuple[int, int]] = []
    for low, high in sorted(r for r in ranges if r[0] <= r[1]):
        if out and low <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], high))
        else:
            out.append((low, high))
    return out


def clip(ranges: list[tuple[int, int]], low: int, high: int) -> list[tuple[int, int]]:
    return [(max(a, low), min(b, high)) for a, b in ranges if a <= high and b >= low]


def add(lane: list[int], low: int, high: int | None = None) -> None:
    """Add the counters `low`..`high` (default: `low` alone) to the lane's ranges, then fold
    what reaches `w` into it."""
    high = low if high is None else high
    if high > lane[0]:
        ranges = [(lane[at], lane[at + 1]) for at in range(2, len(lane), 2)]
        ranges.append((low, high))
        ranges.sort()
        merged: list[int] = []
        for start, end in ranges:
            if merged and start <= merged[-1] + 1:
                merged[-1] = max(merged[-1], end)
            else:
                merged += (start, end)
        lane[2:] = merged
    while len(lane) > 2 and lane[2] <= lane[0] + 1:
        lane[0] = max(lane[0], lane[3])
        del lane[2:4]
