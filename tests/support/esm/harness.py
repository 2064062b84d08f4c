"""The mapping runner as every event-source-mapping test module sets it up: one function, one role.

Retry backoffs are shortened through the runner's settings (`FAST_RETRIES`); Lambda's numbers stay
its defaults.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Iterator
from typing import Any

from local.app import model
from local.app.model import EventSourceMapping
from local.lambda_.esm.runner import MappingRunner

FUNCTION = "esm-test-function"
ROLE_ARN = f"arn:aws:iam::{model.ACCOUNT}:role/esm-test-role"
FAST_RETRIES = {"retry_base_delay": 0.05, "retry_max_delay": 0.2}
ONLY_SHARD = "shardId-000000000000"  # a one-shard stream's shard


def mapping(stream: str, function_name: str = FUNCTION, **settings: Any) -> EventSourceMapping:
    """A mapping with Lambda's defaults but TRIM_HORIZON (records written before it are read)."""
    settings.setdefault("starting_position", "TRIM_HORIZON")
    return EventSourceMapping(
        logical_id="Mapping",
        uuid=str(uuid.uuid4()),
        function_name=function_name,
        stream_name=stream,
        **settings,
    )


@contextlib.contextmanager
def running(
    endpoint: str, esm: EventSourceMapping, invoker: model.Invoker, **options: Any
) -> Iterator[MappingRunner]:
    """A started runner, stopped on the way out whatever happens."""
    runner = MappingRunner(esm, invoker, endpoint_url=endpoint, function_role_arn=ROLE_ARN, **options)
    runner.start()
    try:
        yield runner
    finally:
        runner.stop()


def settle(runner: MappingRunner, shard_id: str = ONLY_SHARD, polls: int = 2, timeout: float = 30.0) -> None:
    """Waits until the shard's poller has read `polls` more times: what it had to deliver, it has.

    A test that says "nothing more came" waits on this rather than on a fixed sleep, so a loaded
    machine only makes it slower.
    """
    start = runner.stats()[shard_id]["get_records"]
    deadline = time.monotonic() + timeout
    while runner.stats()[shard_id]["get_records"] < start + polls:
        if time.monotonic() > deadline:
            raise AssertionError(f"{shard_id} was not polled {polls} more times within {timeout} s")
        time.sleep(0.05)
