"""Process incarnations: a producer's id is drawn per process incarnation, never shared by two.

An incarnation is one copy of a process's memory that runs on its own: the process itself, each
child `os.fork` makes of it (gunicorn --preload, multiprocessing, Celery's prefork pool), and each
execution environment Lambda SnapStart restores from one snapshot. Copies of one producer would
send aggregates under one producer id with the same lane counters, and consumers would skip one
copy's aggregates as copies of the other's. So each producer remembers the incarnation it drew its
id in, `current()`, and renews its id and lanes before it sends in another (`Producer._renew`).

How a new incarnation is noticed, three ways:
- a fork: an `os.register_at_fork(after_in_child=...)` callback, run in the child before anything
  else, makes every live producer's locks usable again (a thread that held one did not survive
  the fork) and moves `current()` on;
- a snapshot restore: the callback registered with `snapshot_restore_py.register_after_restore`
  (Lambda's Python runtime ships that module; `install_snapshot_hooks` registers it when it can be
  imported) moves `current()` on; before the snapshot, every live producer is flushed and its
  request threads stopped, so the image holds no buffered record (each restore would otherwise
  hold a copy of it) and no request pool;
- the guard: `current()` includes the process id, so a fork that runs no Python callback (a C
  extension's fork(), a restore that changes the pid) is noticed at the next send all the same.
  A SnapStart restore keeps the pid: there, the after-restore hook is the line that matters.

Producer ids are 80 random bits from `os.urandom` (`kpl._identity.new_producer_id`), drawn again
in every incarnation: never reused across a restart or by another incarnation (a collision among a
billion incarnations has odds below 1 in 10^6).
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Callable
from typing import Any, Protocol

__all__ = [
    "Incarnated",
    "after_restore",
    "current",
    "getpid",
    "install_snapshot_hooks",
    "reinit_lock",
    "renewal_lock",
    "track",
]

Register = Callable[..., Any]  # snapshot_restore_py's register_before_snapshot / register_after_restore


class Incarnated(Protocol):
    """What this module asks of a producer."""

    def _after_fork_in_child(self) -> None:
        """Make its locks usable in a forked child (called with no other thread running)."""

    def _before_snapshot(self) -> None:
        """Send everything buffered and stop its request threads: the snapshot must not hold
        records every restore would send."""


#: The process id, read each time (glibc caches nothing since 2.25). A module attribute so that a
#: test simulating a snapshot restore can keep the snapshot's pid, as a restore does.
getpid: Callable[[], int] = os.getpid

_live: weakref.WeakSet[Incarnated] = weakref.WeakSet()
_generation = 0  # moved on by each fork's child callback and each restore
_renewal_locks: dict[int, threading.Lock] = {}
_hooks_installed = False


def current() -> tuple[int, int]:
    """The incarnation running now: (process id, generation)."""
    return getpid(), _generation


def track(producer: Incarnated) -> tuple[int, int]:
    """Follow `producer` through forks and restores; returns the incarnation it is created in."""
    if not _hooks_installed:
        install_snapshot_hooks()
    _live.add(producer)
    return current()


def renewal_lock() -> threading.Lock:
    """A lock of this process's own, for renewing producers: made afresh in each process, so no
    thread of another incarnation can be holding it (dict.setdefault is atomic under the GIL)."""
    pid = os.getpid()
    lock = _renewal_locks.get(pid)
    if lock is None:
        lock = _renewal_locks.setdefault(pid, threading.Lock())
    return lock


def after_restore() -> None:
    """A snapshot was restored: every producer draws a new id before its next send."""
    global _generation
    _generation += 1


def install_snapshot_hooks(
    register_before_snapshot: Register | None = None, register_after_restore: Register | None = None
) -> bool:
    """Register the SnapStart runtime hooks: `snapshot_restore_py`'s registration functions, when
    that module can be imported (Lambda's Python runtimes ship it), or the ones given. Returns
    whether hooks were registered. The producer calls it once, when the first one is created."""
    global _hooks_installed
    _hooks_installed = True
    if register_before_snapshot is None or register_after_restore is None:
        try:
            import snapshot_restore_py  # type: ignore[import-not-found]  # Lambda's runtime only
        except ImportError:
            return False
        register_before_snapshot = snapshot_restore_py.register_before_snapshot
        register_after_restore = snapshot_restore_py.register_after_restore
    register_before_snapshot(_flush_before_snapshot)
    register_after_restore(after_restore)
    return True


def reinit_lock(lock: Any) -> None:
    """Make a lock (or a condition) inherited through a fork free again, in place, so every holder
    of a reference keeps it: what CPython does for its own locks after a fork."""
    lock._at_fork_reinit()


def _flush_before_snapshot() -> None:
    for producer in list(_live):
        producer._before_snapshot()


def _after_fork_in_child() -> None:
    global _generation
    _generation += 1
    _renewal_locks.clear()
    for producer in list(_live):
        producer._after_fork_in_child()


os.register_at_fork(after_in_child=_after_fork_in_child)
