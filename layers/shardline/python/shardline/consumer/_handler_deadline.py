"""Interrupting a user handler still running when the invocation's time budget runs out.

Lambda runs a Python handler in the process's main thread, so a `SIGALRM` timer can interrupt
it: the handler sees `HandlerTimedOut` raised where it was (a blocking call returns early), and
the consumer counts the record as failed while there is still time to write that down. The
timer is armed once per invocation, and fires only into a handler: outside one (shardline's own
writes) it merely notes that time is up, so a DynamoDB call is never cut in half.

A handler that installs its own SIGALRM handler or timer disarms the budget; after each handler
call `rearm()` finds that, puts shardline's back for the time that is left, and says so (the
consumer counts `TimeBudgetDisarmed` and logs it). Handlers must not use SIGALRM.

Whether the timer still runs is a system call to ask (`getitimer`, ~0.4 µs: more than a no-op
handler costs), so the common run of a record handler (`HandlerLoop`) asks as `due` and `check`
say: the SIGALRM handler after every call (no system call), the timer after each of the run's
first `FULL_CHECKS` calls and of the `FULL_CHECKS` after one that disarmed it, and otherwise
once `TIMER_CHECK_S` passed since it last did — after every call of a handler slower than that,
as `rearm` is asked after every call in the other runs. A call that clears the timer between two
asks is found at the next one or at the end of the run (`settle`), and several such calls
between two asks count once; meanwhile a call that hangs is interrupted all the same:
`_budget_watchdog` sends SIGALRM at the deadline if the timer did not (that counts once too).

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

from shardline.consumer._budget_watchdog import WATCHDOG

# `signal.getsignal` turns each answer into a `signal.Handlers` member where it can, through a failed
# enum look-up that costs microseconds; `rearm` asks after every record, and only compares the
# answer with its own handler, so it asks the C function `signal.getsignal` wraps.
getsignal: Callable[[int], object] = getattr(
    importlib.import_module("_signal"), "getsignal", signal.getsignal
)
SIGALRM = int(getattr(signal, "SIGALRM", 14))  # a plain int: no enum conversion per call
_ITIMER_REAL = getattr(signal, "ITIMER_REAL", 0)

#: A loop of handler calls asks the timer after each of its first FULL_CHECKS calls (and of the
#: FULL_CHECKS calls after one that disarmed it), then once TIMER_CHECK_S passed since it last did.
FULL_CHECKS = 16
TIMER_CHECK_S = 0.001
#: The timer reloads with this after it fires (and never fires again within an invocation): a
#: timer that fired still reads as running, so the watchdog can tell it from one a handler cleared.
_RELOAD_S = 86_400.0


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
        self.stood_in = False  # the watchdog sent the SIGALRM of a timer a handler had cleared
        self._armed = False
        self._previous: Any = None
        self._installed: Callable[[int, FrameType | None], None] | None = None
        self._ends_at = 0.0
        #: When `check` must next ask the timer (`time.monotonic`): 0.0, after the next call.
        self.timer_due = 0.0
        self._full_checks = FULL_CHECKS

    def __enter__(self) -> HandlerDeadline:
        usable = hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()
        if self.seconds is None or not usable:
            return self
        if self.seconds <= 0:
            self.expired = True
            return self
        self._installed = self._fire  # the very object `signal` holds: compared by identity
        self._previous = signal.signal(signal.SIGALRM, self._installed)
        signal.setitimer(signal.ITIMER_REAL, self.seconds, _RELOAD_S)
        self._ends_at = time.monotonic() + self.seconds
        self._armed = True
        WATCHDOG.arm(self, self._ends_at)
        return self

    @property
    def installed(self) -> object:
        """The SIGALRM handler the budget installed, while it is armed (None when it is not): a
        loop compares `_signal.getsignal(SIGALRM)` with it after each call (`due`)."""
        return self._installed if self._armed else None

    def due(self, now: float, installed: object) -> bool:
        """Must `check` run after a handler call at `now`? Yes when the SIGALRM handler is not
        `installed` or the timer is due to be asked. (Inlined by `HandlerLoop`.)"""
        return now >= self.timer_due or getsignal(SIGALRM) is not installed

    def check(self, now: float) -> bool:
        """`rearm`, after a call `due` said so; and when the timer is next asked: after the next
        call while in the first or post-disarm `FULL_CHECKS`, else `TIMER_CHECK_S` from `now`."""
        disarmed = self.rearm()
        if disarmed:
            self._full_checks = FULL_CHECKS
        elif self._full_checks:
            self._full_checks -= 1
        self.timer_due = now if self._full_checks else now + TIMER_CHECK_S
        return disarmed

    def rearm(self) -> bool:
        """Put the timer back if a handler replaced its signal handler or cleared it; True if it
        had to (the time that was left is kept). Asked after every handler call: two system
        calls when nothing changed."""
        if not self._armed or self.expired:
            return False
        if getsignal(SIGALRM) is self._installed and signal.getitimer(_ITIMER_REAL)[0] > 0:
            return False
        self._installed = self._fire
        signal.signal(signal.SIGALRM, self._installed)
        left = self._ends_at - time.monotonic()
        if left <= 0:
            self.expired = True
        else:
            signal.setitimer(signal.ITIMER_REAL, left, _RELOAD_S)
        return True

    def timer_stopped(self) -> bool:
        """Is the timer not running — cleared by a handler (a timer that fired reloads)? Asked by
        the watchdog, from its thread: the timer is the process's."""
        return signal.getitimer(_ITIMER_REAL)[0] == 0

    def settle(self) -> bool:
        """At the end of a loop of handler calls: was the budget disarmed in a way no check saw —
        the timer cleared since it was last asked (it is put back), or the watchdog stood in for
        it? (Counted once, as a disarming.)"""
        return self.stood_in or self.rearm()

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        if self._armed:
            WATCHDOG.disarm(self)
            signal.setitimer(signal.ITIMER_REAL, 0)  # a system call: a watchdog's SIGALRM lands by now
            signal.signal(signal.SIGALRM, self._previous)
            self._armed = False

    def _fire(self, signum: int, frame: FrameType | None) -> None:
        self.expired = True
        if self.in_handler:
            self.in_handler = False  # once: the code that handles it is shardline's
            raise HandlerTimedOut(f"the handler was still running {self.seconds:.1f} s into the time budget")


class OutOfTime:
    """Must the invocation stop before the next record? Its budget expired, or the Lambda context
    (`remaining_ms`, None without one) has less than `margin_ms` left. A callable; the common run
    of a record handler reads its parts and asks them itself (`HandlerLoop`): no call per record."""

    __slots__ = ("deadline", "margin_ms", "remaining_ms")

    def __init__(
        self, deadline: HandlerDeadline, remaining_ms: Callable[[], float] | None, margin_ms: float
    ) -> None:
        self.deadline = deadline
        self.remaining_ms = remaining_ms
        self.margin_ms = margin_ms

    def __call__(self) -> bool:
        remaining_ms = self.remaining_ms
        return self.deadline.expired or (remaining_ms is not None and remaining_ms() < self.margin_ms)
