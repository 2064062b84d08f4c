"""Property 7 of issue 42: `send` shows its progress — rich bars on a terminal (sent, accepted,
applied per group), plain lines otherwise, nothing with `--json` (`local.commands.send_progress`)."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from local.commands.send_progress import BarDisplay, LineDisplay, QuietDisplay, display_for
from local.commands.verify_verdict import RECORDS, Group, GroupResult
from tests.support.send import StubApi, _send

pytestmark = pytest.mark.integration


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _result(name: str, applied: int, dead: int, expected: int = 10) -> GroupResult:
    group = Group(name, f"fn-{name}", RECORDS, "sink", "stream", "dlq")
    return GroupResult(group, expected=expected, applied=applied, dlq_depth=dead)


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_7_progress_is_plain_lines_without_a_terminal_at_most_one_per_interval() -> None:
    out, clock = io.StringIO(), Clock()
    display = LineDisplay(out, interval=5.0, clock=clock)
    display.sending(100, 10, 5, 0)
    clock.now += 1
    display.sending(100, 20, 15, 0)  # too soon: not printed
    clock.now += 5
    display.sending(100, 60, 50, 1)
    display.sending(100, 100, 99, 1, final=True)  # a phase's last line always
    display.applying([_result("event-sink", 7, 2)], 3.0, final=True)
    assert out.getvalue().splitlines() == [
        "send: sent 10/100, accepted 5, refused 0",
        "send: sent 60/100, accepted 50, refused 1",
        "send: sent 100/100, accepted 99, refused 1",
        "waiting for the consumers (3 s): event-sink applied 7/10, dead-lettered 2",
    ]


def test_7_progress_is_bars_on_a_terminal() -> None:
    out = io.StringIO()
    display = BarDisplay(Console(file=out, force_terminal=True, width=120))
    display.sending(10, 10, 9, 1)
    display.applying([_result("event-sink", 7, 2), _result("key-counter", 9, 0)], 1.0)
    display.stop()
    drawn = out.getvalue()
    for expected in ("sent", "10/10", "accepted", "9/10", "refused 1", "applied event-sink", "7/10",
                     "dead-lettered 2", "applied key-counter"):  # fmt: skip
        assert expected in drawn, drawn
    assert "━" in drawn  # a bar


def test_7_the_display_is_bars_on_a_terminal_lines_otherwise_and_nothing_with_json() -> None:
    assert isinstance(display_for(json_output=False, stream=Terminal()), BarDisplay)
    assert isinstance(display_for(json_output=False, stream=io.StringIO()), LineDisplay)
    assert isinstance(display_for(json_output=True, stream=Terminal()), QuietDisplay)


def test_7_send_tells_its_display_what_it_sent_and_what_was_accepted(stub_api: StubApi) -> None:
    out = io.StringIO()
    stub_api.script = [("207", [0, 1])]  # two records posted twice: sent counts records, not posts
    _send(stub_api, 12, batch=4, concurrency=1, display=LineDisplay(out, interval=3600))
    lines = out.getvalue().splitlines()
    assert lines[-1] == "send: sent 12/12, accepted 12, refused 0"
