"""Integration-test fixtures: each Kinesis test runs against moto server and kinesis-mock."""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import pytest

HERE = Path(__file__).resolve().parent
BACKEND_FIXTURES = {"moto": "moto_server", "kinesis-mock": "kinesis_mock"}


class KinesisBackend(NamedTuple):
    name: str
    endpoint_url: str


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test under tests/integration as `integration`."""
    for item in items:
        if item.path.is_relative_to(HERE):
            item.add_marker(pytest.mark.integration)


@pytest.fixture(params=list(BACKEND_FIXTURES))
def kinesis_endpoint(request: pytest.FixtureRequest) -> KinesisBackend:
    """A Kinesis endpoint on loopback, once per backend (moto server, kinesis-mock)."""
    name = request.param
    return KinesisBackend(name, request.getfixturevalue(BACKEND_FIXTURES[name]))


@pytest.fixture
def pipeline(moto_server):
    """A one-shard stream of aggregated records, a lease table, a sink table and a DLQ (moto server)."""
    from tests.support.integration import Pipeline

    return Pipeline(moto_server)
