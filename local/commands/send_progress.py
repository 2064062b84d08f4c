"""How `send` shows its progress: a bar on a terminal, plain lines otherwise, nothing for `--json`.

    display = display_for(json_output=args.json)        # on stderr: stdout is the verdict's
    report = send(..., display=display)                  # sent and accepted, as they go
    verdict = wait_and_verify(..., display=display)      # applied (and dead-lettered), per group
    display.stop()

`BarDisplay` draws rich progress bars (records sent, accepted, and each consumer group's applied
records with its dead letters of the run); `LineDisplay` prints one plain line at most every
`LINE_INTERVAL_S` seconds, and the last one of each phase, for a log or a CI job; `QuietDisplay`
prints nothing, so that `--json` writes the verdict alone.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence
from typing import Protocol, TextIO

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

__all__ = ["BarDisplay", "Display", "LineDisplay", "QuietDisplay", "display_for"]

#: Seconds between two plain progress lines, at least.
LINE_INTERVAL_S = 5.0


class _Named(Protocol):
    @property
    def name(self) -> str: ...


class GroupResult(Protocol):
    """What a display reads of a group's result (`verify_verdict.GroupResult`, which imports `send`,
    which shows its progress here: named by its shape, not imported, so the two stay acyclic)."""

    @property
    def group(self) -> _Named: ...
    @property
    def applied(self) -> int: ...
    @property
    def expected(self) -> int: ...
    @property
    def dlq_depth(self) -> int: ...


class Display(Protocol):
    """What `send` and `wait_and_verify` tell of their progress."""

    def sending(self, total: int, sent: int, accepted: int, refused: int, *, final: bool = False) -> None:
        """Records POSTed for the first time (`sent`), accepted and refused, of `total`."""
        ...

    def applying(self, results: Sequence[GroupResult], elapsed: float, *, final: bool = False) -> None:
        """Each group's applied records and the run's dead letters, `elapsed` seconds into the wait."""
        ...

    def stop(self) -> None:
        """The display ends (a bar is left drawn)."""
        ...


class QuietDisplay:
    """Nothing at all (`--json`: the verdict alone on stdout, nothing on stderr)."""

    def sending(self, total: int, sent: int, accepted: int, refused: int, *, final: bool = False) -> None:
        pass

    def applying(self, results: Sequence[GroupResult], elapsed: float, *, final: bool = False) -> None:
        pass

    def stop(self) -> None:
        pass


class LineDisplay:
    """Plain lines on `out`, at most one every `interval` seconds per phase, and each phase's last."""

    def __init__(
        self,
        out: TextIO | None = None,
        *,
        interval: float = LINE_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._out, self._interval, self._clock = out or sys.stderr, interval, clock
        self._last: dict[str, float] = {}

    def _due(self, phase: str, final: bool) -> bool:
        now = self._clock()
        if not final and now - self._last.get(phase, -self._interval) < self._interval:
            return False
        self._last[phase] = now
        return True

    def sending(self, total: int, sent: int, accepted: int, refused: int, *, final: bool = False) -> None:
        if self._due("send", final):
            print(
                f"send: sent {sent:,}/{total:,}, accepted {accepted:,}, refused {refused:,}", file=self._out
            )

    def applying(self, results: Sequence[GroupResult], elapsed: float, *, final: bool = False) -> None:
        if self._due("apply", final):
            parts = [
                f"{r.group.name} applied {r.applied:,}/{r.expected:,}"
                + (f", dead-lettered {r.dlq_depth:,}" if r.dlq_depth else "")
                for r in results
            ]
            print(f"waiting for the consumers ({elapsed:,.0f} s): {'; '.join(parts)}", file=self._out)

    def stop(self) -> None:
        self._out.flush()


class BarDisplay:
    """rich progress bars on `console` (a terminal's stderr): sent, accepted, applied per group."""

    def __init__(self, console: Console | None = None) -> None:
        self.progress = Progress(
            TextColumn("{task.description:<28}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[note]}"),
            TimeElapsedColumn(),
            console=console or Console(stderr=True),
            refresh_per_second=4,
        )
        self._tasks: dict[str, TaskID] = {}
        self._started = False

    def _task(self, name: str, total: int) -> TaskID:
        if not self._started:
            self.progress.start()
            self._started = True
        if name not in self._tasks:
            self._tasks[name] = self.progress.add_task(name, total=total, note="")
        return self._tasks[name]

    def sending(self, total: int, sent: int, accepted: int, refused: int, *, final: bool = False) -> None:
        self.progress.update(self._task("sent", total), completed=sent)
        note = f"refused {refused:,}" if refused else ""
        self.progress.update(self._task("accepted", total), completed=accepted, note=note)

    def applying(self, results: Sequence[GroupResult], elapsed: float, *, final: bool = False) -> None:
        for r in results:
            note = f"dead-lettered {r.dlq_depth:,}" if r.dlq_depth else ""
            task = self._task(f"applied {r.group.name}"[:28], r.expected)
            self.progress.update(task, completed=r.applied, note=note)

    def stop(self) -> None:
        if self._started:
            self.progress.stop()
            self._started = False


def display_for(*, json_output: bool, stream: TextIO | None = None) -> Display:
    """The display `send` uses: none with `--json`, bars on a terminal, plain lines otherwise."""
    stream = stream or sys.stderr
    if json_output:
        return QuietDisplay()
    if stream.isatty():
        return BarDisplay(Console(file=stream))
    return LineDisplay(stream)
