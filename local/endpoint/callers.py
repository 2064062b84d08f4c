"""Who is calling the endpoint: the process holding a connection's other end, and its environment (Linux).

The chaos middleware (`local.endpoint.chaos`) refuses a producer function's reads as its write-only
role would; the caller is found from /proc: the connection's socket inode (`socket_inode`, from
/proc/net/tcp), then the process holding that socket (`caller_environment`).
"""

from __future__ import annotations

import os
from typing import Any


def socket_inode(environ: dict[str, Any]) -> int | None:
    """The inode of the caller's end of this connection, from /proc/net/tcp (Linux), or None."""
    try:
        remote, local = int(environ["REMOTE_PORT"]), int(environ["SERVER_PORT"])
    except (KeyError, ValueError):
        return None
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as lines:
                next(lines, None)
                for line in lines:
                    fields = line.split()
                    if len(fields) < 10:
                        continue
                    own, peer = fields[1].rsplit(":", 1)[1], fields[2].rsplit(":", 1)[1]
                    if int(own, 16) == remote and int(peer, 16) == local and fields[9] != "0":
                        return int(fields[9])
        except OSError:
            continue
    return None


def caller_environment(inode: int) -> dict[str, str] | None:
    """The environment of the process holding socket `inode` (any of this user's processes), or None."""
    target = f"socket:[{inode}]"
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}") != target:
                    continue
                with open(f"/proc/{pid}/environ", "rb") as raw:
                    pairs = raw.read().split(b"\0")
            except OSError:
                continue
            return dict(pair.decode(errors="replace").split("=", 1) for pair in pairs if b"=" in pair)
    return None
