"""The local runtime in tests: on free ports, started from a cloud assembly."""

from __future__ import annotations

import socket
from pathlib import Path

from local.runtime import Runtime, Settings


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def start_runtime(cdk_out: Path, log_dir: Path, **settings: object) -> Runtime:
    """`make local`'s runtime on free ports, started (stop it)."""
    return Runtime(
        Settings(
            cdk_out=cdk_out, endpoint_port=free_port(), api_port=free_port(), log_dir=log_dir, **settings
        )
    ).start()
