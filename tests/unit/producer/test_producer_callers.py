"""Issue 39, property 2 in the producer: an aggregate holds one caller's records, and every record
reaches the stream as its caller's — its own `UserRecord.caller`, else `ProducerConfig.caller`.

A real `Producer` on `shardline.testing.InMemoryKinesis` (what the test is about is the producer's
packing, not the service), with a fake clock it sleeps on.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shardline.errors import ConfigurationError, InvalidRecord
from shardline.kinesis import UserRecord
from shardline.kpl._decode import decode_aggregate
from shardline.producer import Producer, ProducerConfig
from shardline.testing import InMemoryKinesis
from tests.support.fakes import FakeClock

ALICE = "arn:aws:iam::000000000000:user/alice"
MALLORY = "arn:aws:iam::000000000000:user/mallory"


def build(shard_count: int = 2, **config) -> tuple[Producer, InMemoryKinesis]:
    clock = FakeClock()
    kinesis = InMemoryKinesis("events", shard_count, clock=clock)
    producer = Producer(kinesis, "events", config=ProducerConfig(**config), clock=clock, sleep=clock.sleep)
    return producer, kinesis


def stored_aggregates(kinesis: InMemoryKinesis) -> list[list[UserRecord]]:
    """Every Kinesis record of the stream, decoded: its members as a consumer reads them."""
    return [decode_aggregate(r.data)[0] for shard in kinesis.shard_ids() for r in kinesis.records(shard)]


@settings(deadline=None, max_examples=60, suppress_health_check=[HealthCheck.too_slow])
@given(
    callers=st.lists(st.sampled_from([None, "", ALICE, MALLORY]), min_size=1, max_size=120),
    own=st.sampled_from(["", "svc-orders"]),
    keys=st.integers(1, 4),
    max_size=st.sampled_from([600, 51_200]),
)
def test_property_2_an_aggregate_never_mixes_callers(callers, own, keys, max_size):
    producer, kinesis = build(caller=own, aggregation_max_size=max_size)
    sent = [
        UserRecord(f"key-{i % keys}", b"%d" % i, None, f"id-{i}", caller) for i, caller in enumerate(callers)
    ]
    results = producer.put_many(sent)
    assert all(result.success for result in results)
    aggregates = stored_aggregates(kinesis)
    for members in aggregates:
        assert len({m.caller for m in members}) == 1, "one caller per aggregate"
    # Each record reached the stream once, as its caller's (its own, else the producer's; "" is none).
    landed = {m.id: m.caller for members in aggregates for m in members}
    assert len(landed) == sum(len(members) for members in aggregates) == len(sent)
    for record in sent:
        caller = record.caller if record.caller is not None else own
        assert landed[record.id] == (caller or None)
    # Aggregation still happens: a run of one caller's records of one shard shares an aggregate.
    if max_size == 51_200 and len(set(callers)) == 1:
        assert len(aggregates) <= 2 * keys


def test_property_2_one_callers_records_still_aggregate_and_keep_put_order():
    producer, kinesis = build(shard_count=1)
    sent = [UserRecord("k", b"%d" % i, None, None, ALICE if i < 50 else MALLORY) for i in range(100)]
    producer.put_many(sent)
    aggregates = stored_aggregates(kinesis)
    assert [len(members) for members in aggregates] == [50, 50]
    assert [m.caller for m in aggregates[0]] == [ALICE] * 50
    assert [m.data for members in aggregates for m in members] == [r.data for r in sent], "put() order"


def test_property_2_a_producers_caller_is_configured_and_checked():
    with pytest.raises(ConfigurationError, match="caller must be at most 512 visible ASCII"):
        ProducerConfig(caller="x" * 513)
    with pytest.raises(ConfigurationError, match="caller must be at most 512 visible ASCII"):
        ProducerConfig(caller="svc orders")
    producer, kinesis = build()
    with pytest.raises(InvalidRecord) as raised:
        producer.put_many([UserRecord("k", b"ok"), UserRecord("k", b"x", None, None, "y" * 600)])
    [problem] = raised.value.problems
    assert (problem.index, problem.field) == (1, "caller")
    assert stored_aggregates(kinesis) == [], "nothing sent"
