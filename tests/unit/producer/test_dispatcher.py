"""The dispatcher alone, driven as the producer drives it (its lock, `step`, `take_resolved`) over
`InMemoryKinesis`: records are sent and resolved with typed results, a throttle is retried, the
flush deadline expires its owner's unsent records and starts no request after it."""

from __future__ import annotations

import random
import threading

from shardline.errors import EXPIRED
from shardline.kinesis import ShardMap, UserRecord
from shardline.producer import ByPartitionKey, ProducerConfig, ProducerMetrics
from shardline.producer._buffered import BufferedRecord
from shardline.producer._dispatch import Dispatcher
from shardline.testing import Fault, InMemoryKinesis
from tests.support.fakes import Clock

OWNER = 7


class Harness:
    def __init__(self, shard_count: int = 2, **config) -> None:  # type: ignore[no-untyped-def]
        self.clock = Clock()
        self.kinesis = InMemoryKinesis("events", shard_count, clock=self.clock)
        self.config = ProducerConfig(**config)
        self.condition = threading.Condition(threading.RLock())
        self.dispatcher = Dispatcher(
            client=self.kinesis,
            stream_name="events",
            config=self.config,
            shard_map=ShardMap(self.kinesis.list_shards, stream_name="events", clock=self.clock),
            partitioner=ByPartitionKey(),
            metrics=ProducerMetrics(),
            clock=self.clock,
            rng=random.Random(1),
            condition=self.condition,
        )
        self._sequence = 0

    def add(self, count: int) -> list[BufferedRecord]:
        now = self.clock.now
        records = [
            BufferedRecord(UserRecord(f"k{i}", b"x"), None, self._sequence + i, now, now + 30.0, OWNER)
            for i in range(count)
        ]
        self._sequence += count
        with self.condition:
            self.dispatcher.add(records)
        return records

    def flush(self, stop: float = float("inf"), steps: int = 1000) -> list[BufferedRecord]:
        """Step until every record added has a result (or `steps` ran out); returns the resolved."""
        dispatcher, resolved = self.dispatcher, []
        with self.condition:
            outer = dispatcher.begin_flush(OWNER, stop)
            try:
                for _ in range(steps):
                    wake_at = dispatcher.step()
                    resolved += dispatcher.take_resolved()
                    if dispatcher.done_through(self._sequence - 1):
                        break
                    if not dispatcher.news:
                        if wake_at > self.clock.now and not dispatcher.busy:
                            self.clock.now = min(wake_at, self.clock.now + 1.0)  # the backoff passes
                        self.condition.wait(0.05)
            finally:
                dispatcher.end_flush(OWNER, outer)
        return resolved


def test_records_are_sent_and_resolved_once_each():
    h = Harness()
    added = h.add(30)
    resolved = h.flush()
    assert sorted(r.sequence for r in resolved) == list(range(30))
    assert all(r.result is not None and r.result.success for r in added)
    assert h.dispatcher.buffered_records == 0 and h.dispatcher.buffered_bytes == 0
    assert not h.dispatcher.owns_unresolved(OWNER)
    assert sum(len(h.kinesis.user_records(s)) for s in h.kinesis.shard_ids()) == 30
    h.dispatcher.close()


def test_a_throttle_is_retried_to_a_success():
    h = Harness(shard_count=1)
    h.kinesis.fail_next(Fault.THROTTLE)
    [record] = h.add(1)
    h.flush()
    assert record.result is not None and record.result.success
    assert [a.error_code for a in record.result.attempts] == ["ProvisionedThroughputExceededException", None]
    h.dispatcher.close()


def test_a_passed_flush_deadline_expires_the_owners_records_and_sends_nothing():
    h = Harness()
    added = h.add(5)
    h.flush(stop=h.clock.now)
    assert all(r.result is not None and r.result.error_code == EXPIRED for r in added)
    assert h.kinesis.calls["PutRecords"] == 0 and h.kinesis.calls["ListShards"] == 0
    assert h.dispatcher.buffered_records == 0


def test_expire_fails_records_at_once():
    h = Harness()
    added = h.add(2)
    with h.condition:
        h.dispatcher.expire(added, "never buffered")
        resolved = h.dispatcher.take_resolved()
    assert resolved == added and all(r.result and r.result.error_code == EXPIRED for r in added)
    assert h.dispatcher.done_through(1)


def test_a_nested_flush_keeps_the_earlier_deadline_and_gives_it_back():
    h = Harness()
    dispatcher = h.dispatcher
    outer = h.clock.now + 10.0
    assert dispatcher.begin_flush(OWNER, outer) is None
    assert dispatcher.begin_flush(OWNER, outer + 10.0) == outer
    added = h.add(1)
    h.clock.now += 15.0  # past the outer deadline, before the nested one
    dispatcher.step()
    assert added[0].result is not None and added[0].result.error_code == EXPIRED
    dispatcher.end_flush(OWNER, outer)
    dispatcher.end_flush(OWNER, None)
    more = h.add(1)
    dispatcher.step()  # no flush: no deadline expires anything
    assert more[0].result is None
    dispatcher.close()
