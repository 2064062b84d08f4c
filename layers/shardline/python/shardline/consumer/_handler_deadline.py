"""Interrupting a user handler still running when the invocation's time budget runs out.

Lambda runs a Python handler in the process's main thread, so a `SIGALRM` timer can interrupt
it: the handler sees `HandlerTimedOut` raised where it was (a blocking call returns early), and
the consumer counts the record as failed while there is still time to write that down. The
timer is armed once per invocation, and fires only into a handler: outside one (shardline's own
writes) it merely notes that time is up, so a DynamoDB call is never cut in half.

A handler that installs its own SIGALRM handler or timer disarms the budget; after each handler
call `rearm()` finds that, puts shardline's back for the time that is left, and says so (the
consumer counts `TimeBudgetDisarmed` and logs it). Handlers must not use SIGALRM.

Where signals cannot be used (another thread, a platform without `SIGALRM`), nothing is armed;
a handler that runs past the function's timeout is then caught on redelivery instead, by the
lease's in-flight mark (`LeaseTable.begin`).
"""

from __future__ import annotations

import importlib
import signal
import threading
import time
from collections.abc import Callable
from types import FrameType, TracebackType
from typing import Any

# `signal.getsignal` turns each answer into a `signal.Handlers` member where it can, through a failed
# enum look-up that costs microseconds; `rearm` asks after every record, and only compares the
# answer with its own handler, so it asks the C function `signal.getsignal` wraps.
_raw_getsignal: Callable[[int], object] = getattr(
    importlib.import_module("_signal"), "getsignal", signal.getsignal
)
_SIGALRM = int(getattr(signal, "SIGALRM", 14))  # a plain int: no enum conversion per call
_ITIMER_REAL = getattr(signal, "ITIMER_REAL", 0)


class HandlerTimedOut(BaseException):
    """Raised inside a user handler at the time budget. A BaseException, so that a handler's own
    `except Exception` does not swallow it."""


class HandlerDeadline:
    """Arms a one-shot timer `seconds` from now for the span of a `with` block.

    Set `in_handler` around each handler call: the timer raises `HandlerTimedOut` only then.
    `expired` tells whether it fired.
    """

    def __init__(self, seconds: float | None) -> None:
        self.seconds = seconds
        self.in_handler = False
        self.expired = False
        self._armed = False
        self._previous: Any = None
        self._installed: Callable[[int, FrameType | None], None] | None = None
        self._ends_at = 0.0

    def __enter__(self) -> HandlerDeadline:
        usable = hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()
        if self.seconds is None or not usable:
            return self
        if self.seconds <= 0:
            self.expired = True
            return self
        self._installed = self._fire  # the very object `signal` holds: compared by identity
        self._previous = signal.signal(signal.SIGALRM, self._installed)
        signal.setitimer(signal.ITIMER_REAL, self.seconds)
        self._ends_at = time.monotonic() + self.seconds
        self._armed = True
        return self

    def rearm(self) -> bool:
        """Put the timer back if a handler replaced its signal handler or cleared it; True if it
        had to (the time that was left is kept). Asked after every handler call: two system
        calls when nothing changed."""
        if not self._armed or self.expired:
            return False
        if _raw_getsignal(_SIGALRM) is self._installed and signal.getitimer(_ITIMER_REAL)[0] > 0:
            return False
        self._installed = self._fire
        signal.signal(signal.SIGALRM, self._installed)
        left = self._ends_at - time.monotonic()
        if left <= 0:
            self.expired = True
        else:
            signal.setitimer(signal.ITIMER_REAL, left)
        return True

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        if self._armed:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, self._previous)
            self._armed = False

    def _fire(self, signum: int, frame: FrameType | None) -> None:
        self.expired = True
        if self.in_handler:
            self.in_handler = False  # once: the code that handles it is shardline's
            raise HandlerTimedOut(f"the handler was still running {self.seconds:.1f} s into the time budget")
