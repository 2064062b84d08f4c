"""The time budget's stand-in for a timer a handler cleared: SIGALRM sent at the deadline by a thread.

`HandlerDeadline` arms a SIGALRM timer for the invocation's budget. A handler can clear that
timer (`setitimer(ITIMER_REAL, 0)`, `alarm(0)`) without a trace but the timer's own state, and
asking the timer is a system call (`getitimer`, ~0.4 µs: more than a no-op handler costs). So
a loop of fast handler calls asks it only now and then (`HandlerDeadline.watch`). If a call
cleared it in between and a later one hangs, the budget must still interrupt it: at the
deadline (and a grace after it, so that the timer, when it runs, fires first) this thread sends
SIGALRM to the thread that armed the budget, unless the budget already expired. It is the same
signal the timer sends, into the same handler, so what follows is the same.

One daemon thread per process, started with the first armed budget (starting a thread costs
about a millisecond on a busy machine: not once per invocation); between budgets it waits,
without a timeout, for the next.
"""

from __future__ import annotations

import signal
import threading
import time
from typing import Protocol

#: The watchdog fires this long after the deadline: a running timer fires first.
GRACE_S = 0.01


class _Budget(Protocol):
    expired: bool
    stood_in: bool  # set when the watchdog sent the SIGALRM its timer did not


class BudgetWatchdog:
    """Sends SIGALRM to the arming thread when the armed budget's deadline passes unexpired."""

    def __init__(self) -> None:
        self._changed = threading.Condition(threading.Lock())
        self._budget: _Budget | None = None
        self._ends_at = 0.0
        self._target = 0
        self._thread: threading.Thread | None = None

    def arm(self, budget: _Budget, ends_at: float) -> None:
        """Watch `budget` until `disarm`: it expires at `ends_at` (`time.monotonic`)."""
        with self._changed:
            self._budget, self._ends_at, self._target = budget, ends_at + GRACE_S, threading.get_ident()
            if self._thread is None or not self._thread.is_alive():  # the first budget, or after a fork
                self._thread = threading.Thread(target=self._run, name="shardline-budget", daemon=True)
                self._thread.start()
            else:
                self._changed.notify()

    def disarm(self, budget: _Budget) -> None:
        """Stop watching `budget`: no SIGALRM is sent for it once this returns. One sent before
        reaches its thread by that thread's next system call at the latest, so the caller puts
        the previous SIGALRM handler back only after one (`HandlerDeadline.__exit__`)."""
        with self._changed:
            if self._budget is budget:
                self._budget = None  # no notify: the thread finds out when it wakes

    def _run(self) -> None:
        with self._changed:
            while True:
                budget = self._budget
                if budget is None:
                    self._changed.wait()
                    continue
                left = self._ends_at - time.monotonic()
                if left > 0:
                    self._changed.wait(left)
                    continue
                self._budget = None
                if not budget.expired:  # the timer did not fire: a handler cleared it
                    budget.stood_in = True
                    signal.pthread_kill(self._target, signal.SIGALRM)


WATCHDOG = BudgetWatchdog()
