"""The e2e tests drive the local runtime, started from the synthesized app, over HTTP and the endpoint."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from local.runtime import Runtime
from tests.support.runtime import start_runtime


@pytest.fixture(scope="module")
def runtime(cdk_out: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Runtime]:
    """`make local`'s runtime on free ports, with the shard limits on; stopped after the module."""
    runtime = start_runtime(cdk_out, tmp_path_factory.mktemp("logs"))
    try:
        yield runtime
    finally:
        runtime.stop()
