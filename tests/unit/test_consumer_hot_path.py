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


@pytest.mark.parametrize("disarm", DISARMINGS)
def test_property_6_the_time_budget_is_restored_after_a_handler_that_disarms_it(disarm: str) -> None:
    consumer, _table, _sqs = setup(time_margin=1.0)
    previous = signal.getsignal(signal.SIGALRM)

    def handle(record: ConsumedRecord) -> list[dict[str, Any]]:
        if record_id(record) in ("r0", "r2"):
            DISARMINGS[disarm]()
        if record_id(record) == "r3":
            time.sleep(5)  # hangs past the budget: interrupted all the same
        return [effect(record)]

    consumer.handler(handle)
    ends = time.monotonic() + 1.5  # a 0.5 s budget before the 1 s margin
    context = FakeLambdaContext(lambda: int((ends - time.monotonic()) * 1000))
    started = time.monotonic()
    try:
        consumer.process(kinesis_event(records(4)), context)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert time.monotonic() - started < 4, "r3 was interrupted, not left to sleep 5 s"
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
