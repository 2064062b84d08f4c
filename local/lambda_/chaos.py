"""Which invocations a chaos profile's worker faults strike (`chaos.profiles.WorkerFaults`), and their count.

    chaos = WorkerChaos(profile.workers, consumers={"orders-consumer"})
    fault = chaos.directive("orders-consumer")    # None, or the directive the worker carries out
    chaos.struck("orders-consumer", "kill_after_commit")

Every `kill_every`-th invocation of a chosen function is killed at the next point of `KILL_POINTS`
in turn; the turn is shared by every function, so a run reaches each point even when the kills
spread over several functions. Every `hang_every`-th hangs; every `oom_every`-th runs out of memory.
The worker (`local/lambda_/worker.py`) carries the directive out and says where a kill struck.
"""

from __future__ import annotations

import fnmatch
import threading
from collections import Counter
from collections.abc import Iterable
from typing import Any

from ..chaos.profiles import CONSUMERS, KILL_POINTS, WorkerFaults

#: Counter names, per function: "kill_<point>" for each KILL_POINTS entry, then these.
OTHER_FAULTS = ("kill_no_commit", "hang", "oom")


class WorkerChaos:
    def __init__(self, faults: WorkerFaults, consumers: Iterable[str] = ()) -> None:
        self.faults = faults
        self._consumers = frozenset(consumers)
        self._lock = threading.Lock()
        self._invocations: Counter[str] = Counter()
        self._turn = 0
        self.injected: dict[str, Counter[str]] = {}

    def chosen(self, function_name: str) -> bool:
        for pattern in self.faults.functions:
            if (
                function_name in self._consumers
                if pattern == CONSUMERS
                else fnmatch.fnmatchcase(function_name, pattern)
            ):
                return True
        return False

    def directive(self, function_name: str) -> dict[str, Any] | None:
        """The fault to inject into this invocation of `function_name`, or None (most of them)."""
        faults = self.faults
        if not faults.active or not self.chosen(function_name):
            return None
        with self._lock:
            self._invocations[function_name] += 1
            n = self._invocations[function_name]
            if faults.kill_every and n % faults.kill_every == 0:
                point = KILL_POINTS[self._turn % len(KILL_POINTS)]
                self._turn += 1
                return {"kind": "kill", "point": point, "operations": list(faults.commit_operations)}
            if faults.hang_every and n % faults.hang_every == 0:
                self._count(function_name, "hang")
                return {"kind": "hang"}
            if faults.oom_every and n % faults.oom_every == 0:
                self._count(function_name, "oom")
                return {"kind": "oom"}
        return None

    def struck(self, function_name: str, point: str) -> None:
        """An injected kill struck at `point` (told by the worker as it died)."""
        with self._lock:
            self._count(function_name, f"kill_{point}")

    def counts(self, function_name: str) -> dict[str, int]:
        with self._lock:
            counted = self.injected.get(function_name, Counter())
            names = [f"kill_{point}" for point in KILL_POINTS] + list(OTHER_FAULTS)
            return {name: counted[name] for name in names}

    def _count(self, function_name: str, kind: str) -> None:
        self.injected.setdefault(function_name, Counter())[kind] += 1
