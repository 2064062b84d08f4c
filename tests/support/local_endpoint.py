"""Fixtures of the local runtime's and the conformance tests: the local AWS endpoint, as a child process
on a free port (a plugin, named in tests/conftest.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from local.endpoint.handle import Endpoint


def _endpoint(log: Path, *, limits: bool) -> Iterator[str]:
    with Endpoint(port=0, limits=limits, log_path=log) as endpoint:
        yield endpoint.url


@pytest.fixture(scope="session")
def local_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The endpoint's URL, Kinesis's per-shard limits on (as `make local` runs it)."""
    yield from _endpoint(tmp_path_factory.mktemp("endpoint") / "endpoint.log", limits=True)


@pytest.fixture(scope="session")
def local_endpoint_no_limits(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The endpoint's URL, started with --no-limits."""
    yield from _endpoint(tmp_path_factory.mktemp("endpoint") / "endpoint.log", limits=False)
