"""Real child processes for the fork and snapshot-restore tests: run a function in a forked child
and bring back what it returned (pickled through a pipe), or its traceback, or "it hung".

    child = in_child(lambda: producer.put_many(records))            # os.fork: Python's at-fork hooks run
    child = in_child(body, fork=fork_without_hooks)                  # libc's fork(): no hook runs
    results = child.result(timeout=60)

`fork_without_hooks` is a fork the way a C extension does it, or the way a snapshot restore looks
from inside: the process goes on with no `os.register_at_fork` callback run. The child always
leaves with `os._exit`, so nothing of pytest runs in it.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import pickle
import select
import signal
import time
import traceback
from collections.abc import Callable
from typing import Any

_LIBC = ctypes.PyDLL(None)  # PyDLL: the call keeps the GIL, as os.fork does
_running: list[Child] = []  # children not yet answered: killed if one of them fails the test


def fork_without_hooks() -> int:
    """libc's fork(): the child runs none of Python's at-fork callbacks."""
    pid = _LIBC.fork()
    if pid < 0:
        raise OSError(ctypes.get_errno(), "fork failed")
    return int(pid)


class Child:
    """A forked child running one function; `result()` is what the function returned."""

    def __init__(self, pid: int, reader: int) -> None:
        self.pid = pid
        self._reader = reader

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGKILL)

    def result(self, timeout: float = 60.0) -> Any:
        """What the child's function returned. Fails the test with the child's traceback if it
        raised, or with "hung" if it said nothing within `timeout` seconds (then it is killed)."""
        chunks: list[bytes] = []
        deadline = time.monotonic() + timeout
        _running.remove(self)
        try:
            while True:
                left = deadline - time.monotonic()
                ready, _, _ = select.select([self._reader], [], [], max(0.0, left))
                if not ready:
                    for child in (self, *_running):  # a hung child would outlive the test run
                        child.kill()
                    raise AssertionError(f"child {self.pid} hung: no answer within {timeout:g} s")
                chunk = os.read(self._reader, 1 << 16)
                if not chunk:
                    break
                chunks.append(chunk)
        finally:
            os.close(self._reader)
            os.waitpid(self.pid, 0)
        if not chunks:
            raise AssertionError(f"child {self.pid} died without an answer")
        status, value = pickle.loads(b"".join(chunks))
        if status == "error":
            raise AssertionError(f"child {self.pid} raised:\n{value}")
        return value


def in_child(body: Callable[[], Any], *, fork: Callable[[], int] = os.fork) -> Child:
    """Fork (with `fork`) and run `body` in the child; the parent gets a `Child` at once."""
    reader, writer = os.pipe()
    pid = fork()
    if pid == 0:  # the child: answer, then leave without running anything of the parent's
        code = 0
        try:
            os.close(reader)
            try:
                answer = pickle.dumps(("ok", body()))
            except BaseException:
                answer = pickle.dumps(("error", traceback.format_exc()))
            view = memoryview(answer)
            while view:
                view = view[os.write(writer, view) :]
        except BaseException:
            code = 1
        finally:
            os._exit(code)
    os.close(writer)
    child = Child(pid, reader)
    _running.append(child)
    return child
