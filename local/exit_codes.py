"""The exit status of every `shardline local` (`python -m local`) command: one table, the same for all.

0    ok: the command did its work (send: the verdict holds; up: stopped by Ctrl-C or SIGTERM)
1    failed: send's verdict failed (records missing, applied twice, dead-lettered, miscounted),
     redrive left messages in the queue, up could not start
2    usage or bad input: an option, a payload template or file, an app folder with no synthesized
     app, ports another app holds, several apps up and none chosen
3    the app is not running, or does not answer on its ports
130  interrupted (Ctrl-C) before the command finished (up: while it was starting)
"""

from __future__ import annotations

__all__ = ["FAILED", "INTERRUPTED", "NOT_RUNNING", "OK", "TABLE", "USAGE", "UsageError", "epilog"]

OK = 0
FAILED = 1
USAGE = 2
NOT_RUNNING = 3
INTERRUPTED = 130

#: (status, meaning), as `--help` and the README show them.
TABLE = (
    (OK, "ok (send: the verdict holds; up: stopped by Ctrl-C)"),
    (
        FAILED,
        "failed (send: records missing, duplicated, dead-lettered or miscounted; redrive: messages "
        "left; up: could not start)",
    ),
    (USAGE, "usage or bad input (an option, a payload file, no synthesized app, ports taken)"),
    (NOT_RUNNING, "the app is not running or does not answer"),
    (INTERRUPTED, "interrupted (Ctrl-C)"),
)


class UsageError(Exception):
    """Bad input to a command: its message says which option or file, and the status is `USAGE`."""


def epilog() -> str:
    """The table, for `--help`."""
    return "exit status: " + "; ".join(f"{code} {meaning}" for code, meaning in TABLE)
