"""The time budget's stand-in for a timer a handler cleared: SIGALRM sent at the deadline by a thread.

`HandlerDeadline` arms a SIGALRM timer for the invocation's budget. A handler can clear that
timer (`setitimer(ITIMER_REAL, 0)`, `alarm(0)`) without a trace but the timer's own state, and
asking the timer is a system call (`getitimer`, ~0.4 µs: more than a no-op handler costs). So
a loop of fast handler calls asks it only now and then (`HandlerDeadline.watch`). If a call
cleared it in between and a later one hangs, the budget must still interrupt it: at the
deadline (and a grace after it, so that the timer, when it runs, fires first) this thread sends
SIGALRM to the thread that armed the budget, unless the budget already expired or its timer
still runs (one that fired reloads: its SIGALRM may still be on its way to a busy thread). It is the same
signal the timer sends, into the same handler, so what follows is the same.

One daemon thread per process, started with the first armed budget (starting a thread costs
about a millisecond on a busy machine: not once per invocation); between budgets it waits,
without a timeout, for the next.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from typing import Protocol

#: The watchdog fires this long after the deadline: a running timer fires first.
GRACE_S = 0.01


class _Budget(Protocol):
    expired: bool
    stood_in: bool  # set when the watchdog sent the SIGALRM its timer did not

    def timer_stopped(self) -> bool: ...


class BudgetWatchdog:
    """Sends SIGALRM to a budget's arming thread when its deadline passes unexpired. Budgets may
    nest (a handler that processes an event of its own): each armed one is watched."""

    def __init__(self) -> None:
        self._changed = threading.Condition(threading.Lock())
        self._budgets: dict[_Budget, tuple[float, int]] = {}  # budget: (fires at, its thread)
        self._thread: threading.Thread | None = None

    def arm(self, budget: _Budget, ends_at: float) -> None:
        """Watch `budget` until `disarm`: it expires at `ends_at` (`time.monotonic`)."""
        with self._changed:
            self._budgets[budget] = (ends_at + GRACE_S, threading.get_ident())
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
            self._budgets.pop(budget, None)  # no notify: the thread finds out when it wakes

    def _run(self) -> None:
        with self._changed:
            while True:
                if not self._budgets:
                    self._changed.wait()
                    continue
                budget, (fires_at, target) = min(self._budgets.items(), key=lambda item: item[1][0])
                left = fires_at - time.monotonic()
                if left > 0:
                    self._changed.wait(left)
                    continue
                del self._budgets[budget]
                # Not expired and its timer stopped: a handler cleared it. (A timer that fired
                # reloads, so a SIGALRM still on its way to a busy thread is not taken for that.)
                if not budget.expired and budget.timer_stopped():
                    budget.stood_in = True
                    signal.pthread_kill(target, signal.SIGALRM)

    def _after_fork(self) -> None:
        """In a forked child: the thread is gone and its lock may have been held at the fork."""
        self._changed = threading.Condition(threading.Lock())
        self._budgets = {}
        self._thread = None


WATCHDOG = BudgetWatchdog()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=WATCHDOG._after_fork)
