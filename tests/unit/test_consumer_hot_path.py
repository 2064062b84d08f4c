"""The consumer's hot path (issue 41, property 6): per-record work only where a record needs it,
every guarantee kept. The rate itself is measured by `python -m bench` (never a timed test); these
tests hold the guarantees the fast path could have dropped: the time budget restored after each
way a handler can disarm it (its SIGALRM handler replaced, its timer cleared, both), counted once
per disarming, and the per-record asks that only matter after a failure or a crash still asked."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from typing import Any

import pytest

from shardline.consumer import ConsumedRecord
from shardline.consumer._handler_deadline import FULL_CHECKS, TIMER_CHECK_S, HandlerDeadline, HandlerTimedOut
from shardline.testing import FakeLambdaContext, kinesis_event
from tests.support.consumer import effect, record_id, records, setup


def _replace_handler() -> None:
    signal.signal(signal.SIGALRM, lambda *_: None)  # a library of the handler's own


def _clear_timer() -> None:
    signal.setitimer(signal.ITIMER_REAL, 0)


def _alarm_off() -> None:
    signal.alarm(0)


def _both() -> None:
    _replace_handler()
    _clear_timer()


DISARMINGS: dict[str, Callable[[], None]] = {
    "its SIGALRM handler replaced": _replace_handler,
    "its timer cleared by setitimer": _clear_timer,
    "its timer cleared by alarm(0)": _alarm_off,
    "both": _both,
}


def _run_short_of_time(consumer: Any, handle: Callable[[ConsumedRecord], Any], count: int) -> float:
    """`count` records through `handle` with a 0.5 s budget before the 1 s margin; the seconds it
    took. The process's SIGALRM handler and timer are put back as they were, whatever happens."""
    previous = signal.getsignal(signal.SIGALRM)
    consumer.handler(handle)
    ends = time.monotonic() + 1.5
    context = FakeLambdaContext(lambda: int((ends - time.monotonic()) * 1000))
    started = time.monotonic()
    try:
        consumer.process(kinesis_event(records(count)), context)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    return time.monotonic() - started


@pytest.mark.parametrize("disarm", DISARMINGS)
def test_property_6_the_time_budget_is_restored_after_a_handler_that_disarms_it(disarm: str) -> None:
    consumer, _table, _sqs = setup(time_margin=1.0)

    def handle(record: ConsumedRecord) -> list[dict[str, Any]]:
        if record_id(record) in ("r0", "r2"):
            DISARMINGS[disarm]()
        if record_id(record) == "r3":
            time.sleep(5)  # hangs past the budget: interrupted all the same
        return [effect(record)]

    assert _run_short_of_time(consumer, handle, 4) < 4, "r3 was interrupted, not left to sleep 5 s"
    snapshot = consumer.metrics.snapshot()
    assert snapshot["TimeBudgetDisarmed"] == 2, "counted once per disarming handler call (r0, r2)"
    assert snapshot["HandlerTimeouts"] == 1


def test_property_6_an_untouched_budget_is_never_counted_as_disarmed() -> None:
    consumer, _table, _sqs = setup(time_margin=1.0)
    consumer.handler(lambda record: [effect(record)])
    context = FakeLambdaContext(60_000)
    consumer.process(kinesis_event(records(50)), context)
    snapshot = consumer.metrics.snapshot()
    assert snapshot["TimeBudgetDisarmed"] == 0 and snapshot["RecordsProcessed"] == 50


# -- the timer asked now and then in a fast run (HandlerDeadline.due/check, _budget_watchdog) ----


def test_property_6_a_fast_run_that_clears_the_timer_past_its_first_calls_is_counted_and_rearmed() -> None:
    consumer, _table, _sqs = setup(time_margin=1.0)
    previous = signal.getsignal(signal.SIGALRM)
    armed_after: list[bool] = []

    def handle(record: ConsumedRecord) -> list[dict[str, Any]]:
        number = int(record_id(record)[1:])
        if number == 40:  # past the first calls, which are asked in full
            _clear_timer()
        if number == 41:
            time.sleep(0.003)  # the next ask is due after it
        if number == 42:
            armed_after.append(signal.getitimer(signal.ITIMER_REAL)[0] > 0)
        return [effect(record)]

    consumer.handler(handle)
    try:
        consumer.process(kinesis_event(records(60)), FakeLambdaContext(60_000))
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    snapshot = consumer.metrics.snapshot()
    assert armed_after == [True], "the timer was put back before r42 ran"
    assert snapshot["TimeBudgetDisarmed"] == 1 and snapshot["RecordsProcessed"] == 60
    assert signal.getsignal(signal.SIGALRM) is previous


def test_property_6_a_call_that_hangs_right_after_an_unseen_clear_is_interrupted_all_the_same() -> None:
    consumer, _table, _sqs = setup(time_margin=1.0)

    def handle(record: ConsumedRecord) -> list[dict[str, Any]]:
        number = int(record_id(record)[1:])
        if number == 40:
            _clear_timer()  # between two asks of the timer: nothing sees it before r41 runs
        if number == 41:
            time.sleep(5)  # hangs past the budget: the watchdog sends the SIGALRM the timer does not
        return [effect(record)]

    assert _run_short_of_time(consumer, handle, 60) < 4, "r41 was interrupted, not left to sleep 5 s"
    snapshot = consumer.metrics.snapshot()
    assert snapshot["HandlerTimeouts"] == 1 and snapshot["RecordsProcessed"] == 41
    assert snapshot["TimeBudgetDisarmed"] == 1, "the clear is counted once, though no ask saw it"


def test_the_watchdog_stands_in_for_a_cleared_timer_and_only_for_one() -> None:
    previous = signal.getsignal(signal.SIGALRM)
    with HandlerDeadline(0.2) as deadline:
        _clear_timer()
        deadline.in_handler = True
        with pytest.raises(HandlerTimedOut):
            time.sleep(3)
    assert deadline.expired and deadline.stood_in and deadline.settle()
    with HandlerDeadline(0.05) as running:
        running.in_handler = True
        with pytest.raises(HandlerTimedOut):
            time.sleep(3)
    assert running.expired and not running.stood_in, "a running timer fires first: no stand-in"
    assert signal.getsignal(signal.SIGALRM) is previous


def test_a_budget_nested_in_a_handler_leaves_the_outer_one_watched() -> None:
    previous = signal.getsignal(signal.SIGALRM)
    with HandlerDeadline(0.3) as outer:
        with HandlerDeadline(30):  # a handler processing an event of its own; its exit clears the timer
            pass
        outer.in_handler = True
        with pytest.raises(HandlerTimedOut):
            time.sleep(3)
    assert outer.stood_in and signal.getsignal(signal.SIGALRM) is previous


def test_the_watchdog_sends_nothing_once_the_budget_is_over() -> None:
    previous = signal.getsignal(signal.SIGALRM)
    received: list[int] = []
    signal.signal(signal.SIGALRM, lambda signum, _frame: received.append(signum))
    try:
        with HandlerDeadline(0.05) as deadline:
            _clear_timer()
        time.sleep(0.3)  # past its deadline and the watchdog's grace
    finally:
        signal.signal(signal.SIGALRM, previous)
    assert received == [] and not deadline.stood_in and not deadline.expired


def test_the_timer_is_asked_after_each_first_call_and_after_a_disarming_then_now_and_then() -> None:
    previous = signal.getsignal(signal.SIGALRM)
    try:
        with HandlerDeadline(60) as deadline:
            assert not deadline.settle(), "an untouched budget settles to nothing"
            assert deadline.due(time.monotonic(), deadline.installed), "the first call is asked"
            for _ in range(FULL_CHECKS - 1):
                now = time.monotonic()
                assert not deadline.check(now) and deadline.timer_due == now
            now = time.monotonic()
            assert not deadline.check(now) and deadline.timer_due == now + TIMER_CHECK_S
            assert not deadline.due(now, deadline.installed), "then only once TIMER_CHECK_S passed"
            _replace_handler()
            assert deadline.due(now, deadline.installed), "a replaced SIGALRM handler: at once"
            assert deadline.check(now) and deadline.timer_due == now, "after a disarming: every call again"
            assert signal.getitimer(signal.ITIMER_REAL)[0] > 0
        with HandlerDeadline(None) as unarmed:
            assert unarmed.installed is None and not unarmed.settle()
    finally:
        signal.signal(signal.SIGALRM, previous)
