"""Every id applied exactly once, whatever interleaving of sends, lost replies, retries, re-POSTs,
reshards and consumer crashes hypothesis draws.

The real `Producer` sends to a stream held in memory (`SimStream`: shards with hash ranges,
Kinesis-shaped sequence numbers, splits that close a parent and open two children) that loses
replies before or after the write, answers 503, throttles entries, and lands slow writes after the
client gave up (the retry first). The real `KinesisConsumer` reads each shard the way the
event-source mapping does (`MappingReplay`, parents before children) with the testing kit's
`InMemoryLeaseTable`, whose faults crash deliveries before and after their commits. The sink
counts applications per identity with `ADD`, so a second application shows as a count of 2.

Wire-level behaviour (botocore, moto server, the local endpoint) is tested elsewhere; this test is
about the interleavings, which only a fast in-memory stream can explore by the thousand.
"""

from __future__ import annotations

import itertools
from typing import Any

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from shardline.kinesis import UserRecord
from tests.support.identity_model import (
    FAULTS,
    Pipeline,
    SimStream,
    operations,
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(operations, st.lists(st.sampled_from(FAULTS), max_size=40), st.integers(1, 3), st.integers(1, 7))
def test_every_id_is_applied_exactly_once_whatever_the_interleaving(ops, faults, shard_count, batch_size):
    stream = SimStream(shard_count, faults)
    pipeline = Pipeline(stream, batch_size)
    try:
        run(pipeline, stream, ops)
    finally:
        pipeline.producer.close()
    applied = pipeline.applied()
    metrics = pipeline.consumer.metrics.snapshot()
    for name in ("AggregateCopiesSkipped", "ClientIdDuplicatesSkipped", "OutOfRangeRecordsSkipped"):
        event(f"{name} > 0: {metrics[name] > 0}")
    event(f"shards at the end: {len(stream.shards)}")
    assert pipeline.client.reads == 0, "the producer read the stream"
    assert all(count == 1 for count in applied.values()), {k: v for k, v in applied.items() if v != 1}
    assert pipeline.confirmed <= set(applied), sorted(pipeline.confirmed - set(applied))[:5]
    assert set(applied) <= pipeline.sent


def run(pipeline: Pipeline, stream: SimStream, ops: list[tuple[str, int, Any]]) -> None:
    serial = itertools.count()
    for op, number, option in ops:
        if op == "send":
            with_ids = bool(option)
            batch = [
                UserRecord(f"key-{n % 5}", f"r{n}".encode(), None, f"id-{n}" if with_ids else None)
                for n in (next(serial) for _ in range(number))
            ]
            pipeline.send(batch)
        elif op == "repost":
            with_ids = [request for request in pipeline.requests if request[0].id is not None]
            if with_ids:
                pipeline.send(with_ids[number % len(with_ids)])
        elif op == "split":
            stream.split(number)
        else:
            shards = stream.in_lineage_order()
            pipeline.consume(shards[number % len(shards)].shard_id, int(option))
    # The client re-POSTs every request with ids until each of its records is confirmed.
    stream.faults.clear()
    for request in [r for r in pipeline.requests if r[0].id is not None]:
        if any(record.id not in pipeline.confirmed for record in request):
            pipeline.send(request)
    pipeline.crash_at = None
    for shard in stream.in_lineage_order():
        pipeline.consume(shard.shard_id, 0)
