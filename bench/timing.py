"""Best-of-N wall-clock timing, with every contender of a measurement interleaved in the same loop."""

from __future__ import annotations

import gc
import time
from collections.abc import Callable, Mapping


def best_of(cases: Mapping[str, Callable[[], object]], repeats: int) -> dict[str, float]:
    """The minimum wall time, in seconds, of each case over `repeats` rounds.

    Each round runs every case once, in an order rotated from round to round, so that a noisy
    spell of the machine hits all contenders alike. One untimed warm-up call per case comes
    first (caches, lazily built tables). The garbage collector is paused inside each timed call,
    as `timeit` does, and a collection runs between calls.
    """
    names = list(cases)
    for name in names:
        cases[name]()
    best = dict.fromkeys(names, float("inf"))
    gc_was_enabled = gc.isenabled()
    try:
        for round_index in range(repeats):
            shift = round_index % len(names)
            for name in names[shift:] + names[:shift]:
                call = cases[name]
                gc.collect()
                gc.disable()
                started = time.perf_counter()
                call()
                elapsed = time.perf_counter() - started
                gc.enable()
                best[name] = min(best[name], elapsed)
    finally:
        if gc_was_enabled:
            gc.enable()
        else:
            gc.disable()
    return best
