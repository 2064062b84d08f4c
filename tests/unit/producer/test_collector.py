"""The collector alone: records placed per predicted shard (the map over `InMemoryKinesis`), packed
into aggregates and PutRecords requests within the caps, the token buckets and the free slots.
Its `Verdicts` are recorded: they stand for the retrier, which is not under test here."""

from __future__ import annotations

from shardline.errors import PARTITIONER_ERROR
from shardline.kinesis import MAX_HASH_KEY, ShardMap, UserRecord, hash_key
from shardline.kpl._decode import decode
from shardline.producer import ByPartitionKey, ProducerConfig, ProducerMetrics
from shardline.producer._buffered import BufferedRecord, KinesisRecord
from shardline.producer._collector import NEVER, Collector
from shardline.producer._lanes import Lanes
from shardline.testing import InMemoryKinesis
from tests.support.fakes import Clock


class Recorded:
    """The collector's verdicts, written down."""

    def __init__(self) -> None:
        self.failed: list[tuple[BufferedRecord, str]] = []
        self.expired: list[BufferedRecord] = []

    def fail(self, record: BufferedRecord, code: str, message: str) -> None:
        self.failed.append((record, code))

    def expire(self, record: BufferedRecord, message: str) -> None:
        self.expired.append(record)

    def resend_due(self, kinesis_record: KinesisRecord, now: float) -> bool:
        return True


class Broken(ByPartitionKey):
    def assign(self, record, shard_map):  # type: ignore[no-untyped-def]
        if record.partition_key == "bad":
            raise RuntimeError("no")
        return super().assign(record, shard_map)


class Harness:
    def __init__(self, shard_count: int = 4, partitioner=None, **config) -> None:  # type: ignore[no-untyped-def]
        self.clock = Clock()
        self.kinesis = InMemoryKinesis("events", shard_count)
        self.shard_map = ShardMap(self.kinesis.list_shards, stream_name="events", clock=self.clock)
        self.shard_map.refresh()
        self.verdicts = Recorded()
        self.config = ProducerConfig(**config)
        self.collector = Collector(
            config=self.config,
            shard_map=self.shard_map,
            partitioner=partitioner or ByPartitionKey(),
            lanes=Lanes("p", self.clock),
            metrics=ProducerMetrics(),
            verdicts=self.verdicts,
            clock=self.clock,
        )
        self.collector.follow_map()
        self._sequence = 0

    def place(self, records: list[UserRecord]) -> list[BufferedRecord]:
        buffered = []
        for record in records:
            now = self.clock.now
            buffered.append(BufferedRecord(record, None, self._sequence, now, now + self.config.record_ttl))
            self._sequence += 1
        self.collector.place(buffered)
        return buffered


def keyed(shard_count: int, per_shard: int, size: int = 10) -> list[UserRecord]:
    """`per_shard` records for each of `shard_count` even shards, by explicit hash key."""
    width = (MAX_HASH_KEY + 1) // shard_count
    return [
        UserRecord(f"k{s}-{i}", bytes(size), str(s * width + i))
        for s in range(shard_count)
        for i in range(per_shard)
    ]


def test_records_of_a_shard_are_packed_into_one_aggregate_and_shards_share_a_request():
    h = Harness(shard_count=4)
    placed = h.place(keyed(4, 3))
    requests, wake_at = h.collector.pack(h.clock.now, [], slots=8, more_coming=False)
    [request] = requests
    assert wake_at == NEVER
    assert sorted(request.targets) == sorted(h.kinesis.shard_ids())
    batch = request.batch
    assert [len(k.members) for k in batch.records] == [3, 3, 3, 3]
    for kinesis_record in batch.records:
        shard = kinesis_record.predicted_shard
        assert shard is not None and all(
            h.kinesis.shard_of(m.hash_key) == shard for m in kinesis_record.members
        )
        assert [u.partition_key for u in decode(kinesis_record.data)] == [
            m.record.partition_key for m in kinesis_record.members
        ]
    assert {m.sequence for k in batch.records for m in k.members} == {r.sequence for r in placed}


def test_the_count_cap_opens_new_requests_and_the_free_slots_bound_them():
    h = Harness(shard_count=4, collection_max_count=2)
    h.place(keyed(4, 1))
    requests, _ = h.collector.pack(h.clock.now, [], slots=8, more_coming=False)
    assert [len(r.batch.records) for r in requests] == [2, 2]
    h = Harness(shard_count=4, collection_max_count=2)
    h.place(keyed(4, 1))
    [only], _ = h.collector.pack(h.clock.now, [], slots=1, more_coming=False)
    assert len(only.batch.records) == 2, "one slot: the other targets wait"
    assert h.collector.pack(h.clock.now, [], slots=0, more_coming=False) == ([], NEVER)


def test_a_target_with_a_request_in_flight_waits_for_it():
    h = Harness(shard_count=1)
    h.place(keyed(1, 1))
    [flying], _ = h.collector.pack(h.clock.now, [], slots=8, more_coming=False)
    h.place(keyed(1, 1))
    assert h.collector.pack(h.clock.now, [flying], slots=7, more_coming=False)[0] == []
    [after], _ = h.collector.pack(h.clock.now, [], slots=8, more_coming=False)
    assert len(after.batch.records) == 1


def test_while_more_records_are_coming_only_full_aggregates_go():
    h = Harness(shard_count=1)
    h.place(keyed(1, 5))
    assert h.collector.pack(h.clock.now, [], slots=8, more_coming=True)[0] == []
    [request], _ = h.collector.pack(h.clock.now, [], slots=8, more_coming=False)
    assert request.batch.user_record_count == 5


def test_a_shards_token_buckets_hold_records_back_and_say_when():
    h = Harness(shard_count=1)
    h.place(keyed(1, 40, size=50 * 1024))  # 2 MB for a shard whose bucket holds 1 MiB
    requests, wake_at = h.collector.pack(h.clock.now, [], slots=8, more_coming=False)
    sent = sum(r.batch.size for r in requests)
    assert 900 * 1024 < sent <= 1024 * 1024, "one second of the shard's bytes"
    assert h.clock.now < wake_at < NEVER
    h.clock.now = wake_at + 1.0
    more, _ = h.collector.pack(h.clock.now, [], slots=8, more_coming=False)
    assert more, "refilled"


def test_a_failing_partitioner_fails_its_record_only():
    h = Harness(shard_count=1, partitioner=Broken())
    good, bad = h.place([UserRecord("good", b"x"), UserRecord("bad", b"y")])
    assert h.verdicts.failed == [(bad, PARTITIONER_ERROR)]
    [request], _ = h.collector.pack(h.clock.now, [], slots=8, more_coming=False)
    assert [m for k in request.batch.records for m in k.members] == [good]


def test_records_past_their_ttl_are_expired_at_the_head_of_their_queue():
    h = Harness(shard_count=1, record_ttl=5.0)
    placed = h.place(keyed(1, 2))
    h.collector.expire_heads(h.clock.now + 5.0, "too late")
    assert h.verdicts.expired == placed


def test_a_new_shard_map_re_places_queued_records_on_the_children():
    h = Harness(shard_count=1)
    [parent] = h.kinesis.shard_ids()
    h.place([UserRecord(f"k{i}", b"x") for i in range(20)])
    low, high = h.kinesis.split_shard(parent, 2**127)
    h.shard_map.invalidate(h.clock.now + 1, parent)
    assert h.collector.follow_map() and not h.collector.follow_map()
    [request], _ = h.collector.pack(h.clock.now, [], slots=8, more_coming=False)
    assert sorted(request.targets) == sorted([low, high])
    for kinesis_record in request.batch.records:
        assert all(
            h.kinesis.shard_of(hash_key(m.record)) == kinesis_record.predicted_shard
            for m in kinesis_record.members
        )
