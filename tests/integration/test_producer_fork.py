"""Issue 39, property 1, through the real wire: forked producers sending to moto server, read back
by the real `KinesisConsumer`, every confirmed record applied exactly once.

The README's module-level pattern: the Kinesis client and the `Producer` are created at import
(and, in one case, used) before the process forks, as `gunicorn --preload`, `multiprocessing` or
Celery's prefork pool do. Two children and the parent then each send 500 records to a two-shard
stream on moto server. The consumer group (the testing kit: `MappingReplay` over each shard as the
event-source mapping delivers it, `InMemoryLeaseTable` as lease table and sink) reads every shard,
and counts each record's applications in its sink.
"""

from __future__ import annotations

from collections import Counter
from functools import partial
from typing import Any

import pytest

from shardline.consumer import KinesisConsumer
from shardline.kinesis import UserRecord
from shardline.producer import Producer
from shardline.testing import InMemoryLeaseTable, MappingReplay, read_shard
from tests.support.consumer_identity import applied, counting_sink
from tests.support.forks import in_child
from tests.support.integration import create_stream, kinesis_client, unique_stream_name

PER_PROCESS = 500


def records(prefix: str, count: int) -> list[UserRecord]:
    return [
        UserRecord(f"user-{i % 13}", f"{prefix}-{i:05d}|".encode().ljust(100, b".")) for i in range(count)
    ]


def send(producer: Producer, prefix: str) -> list[str]:
    """Send PER_PROCESS records; the ones Kinesis confirmed (their data)."""
    batch = records(prefix, PER_PROCESS)
    results = producer.put_many(batch, deadline=60)
    return [record.data.decode() for record, result in zip(batch, results, strict=True) if result.success]


def consume(client: Any, stream: str) -> tuple[dict[str, int], dict[str, Any]]:
    """Every shard through the real consumer: {record data: times applied}, and its metrics."""
    leases = InMemoryLeaseTable()
    consumer = KinesisConsumer("fork-group", leases, kinesis=client)
    consumer.handler(counting_sink())
    for shard in client.list_shards(StreamName=stream)["Shards"]:
        MappingReplay(read_shard(client, stream, shard["ShardId"]), batch_size=100).drain(consumer.process)
    return applied(leases), consumer.metrics.snapshot()


@pytest.mark.parametrize("used_before_the_fork", [False, True], ids=["created-at-import", "created-and-used"])
def test_property_1_producer_id_never_live_in_two_processes_every_confirmed_record_applied_once(
    moto_server: str, used_before_the_fork: bool
) -> None:
    raw = kinesis_client(moto_server)
    stream = unique_stream_name("forked")
    create_stream(raw, stream, shard_count=2)
    # At import: the application's client and producer, as the README's module-level pattern has them.
    producer = Producer(kinesis_client(moto_server), stream)
    confirmed: list[str] = send(producer, "before") if used_before_the_fork else []

    children = [in_child(partial(send, producer, p)) for p in ("child1", "child2")]
    confirmed += send(producer, "parent")  # the parent keeps sending
    for child in children:
        confirmed += child.result(timeout=120)

    counts, metrics = consume(raw, stream)
    applied_once = sum(1 for data in confirmed if counts.get(data) == 1)
    print(
        f"confirmed {len(confirmed)}, applied once {applied_once}, never applied "
        f"{sum(1 for data in confirmed if data not in counts)}, copies skipped "
        f"{metrics.get('AggregateCopiesSkipped')}"
    )
    expected = PER_PROCESS * (4 if used_before_the_fork else 3)
    assert len(confirmed) == expected, "every record confirmed"
    assert Counter(counts.get(data, 0) for data in confirmed) == Counter({1: expected})
    assert set(counts) == set(confirmed), "nothing applied that was not confirmed"
