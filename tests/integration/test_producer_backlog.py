"""Issue 9: the producer under a backlog, with deadlines, threads and reshards, on real servers.

Every test talks to moto server (or kinesis-mock for resharding) on loopback; what no emulator
does — Kinesis's per-shard limits, a slow or lost response, a malformed answer — is injected by
a wrapper around the real client. Time bounds are either on a fake clock or loose against the
behaviour (a 0.5 s deadline against a 5 s ListShards), never tight wall-clock figures.
"""

from __future__ import annotations

import threading
import time
from collections import Counter

import pytest

from local.chaos.faults import ShardLimitedKinesis, client_error
from shardline.errors import EXPIRED, MALFORMED_RESPONSE, BufferFull
from shardline.kinesis import UserRecord, hash_key
from shardline.producer import Producer, ProducerConfig
from tests.support.fakes import FakeClock
from tests.support.identity import read_copies
from tests.support.integration import (
    create_stream,
    kinesis_client,
    numbered_records,
    open_shards,
    position,
    read_stream,
    unique_stream_name,
    wait_active,
)

FAST_RETRIES = ProducerConfig(retry_base_delay=0.001, retry_max_delay=0.01)


class Wrapped:
    """A Kinesis client passing every call to `client`; subclasses change one call."""

    def __init__(self, client) -> None:
        self._client = client
        self.lock = threading.Lock()

    def __getattr__(self, name):
        return getattr(self._client, name)


class RequestLog(Wrapped):
    """Notes each PutRecords: start, end (monotonic) and entries; optionally slows them down."""

    def __init__(self, client, delay: float = 0.0, clock=None, advance: float = 0.0) -> None:
        super().__init__(client)
        self.delay = delay
        self.clock = clock
        self.advance = advance
        self.requests: list[tuple[float, float, int]] = []
        self.running = 0
        self.most_at_once = 0

    def put_records(self, **kwargs):
        started = self.clock.now if self.clock else time.monotonic()
        with self.lock:
            self.running += 1
            self.most_at_once = max(self.most_at_once, self.running)
        try:
            time.sleep(self.delay)
            if self.clock:
                self.clock.now += self.advance
            return self._client.put_records(**kwargs)
        finally:
            with self.lock:
                self.running -= 1
                ended = self.clock.now if self.clock else time.monotonic()
                self.requests.append((started, ended, len(kwargs["Records"])))


@pytest.fixture
def stream(moto_server):
    client = kinesis_client(moto_server)
    name = unique_stream_name("backlog")
    create_stream(client, name, shard_count=2)
    return client, name


def test_a_200000_record_backlog_on_2_limited_shards_flushes_with_no_expired_record(stream):
    client, name = stream
    limited = ShardLimitedKinesis(client)
    producer = Producer(limited, name, config=ProducerConfig(max_buffered_records=200_000))
    records = [UserRecord(f"k{i % 1000}", b"x" * 100) for i in range(200_000)]

    results = producer.put_many(records)

    assert Counter(r.error_code for r in results) == {None: 200_000}
    assert sum(limited.admitted_records.values()) < 2_000, "aggregated: far fewer Kinesis records"
    assert producer.pending == 0 and producer.buffered_bytes == 0


def test_a_backlog_through_the_shard_limits_on_kinesis_mock(kinesis_mock):
    client = kinesis_client(kinesis_mock)
    name = unique_stream_name("backlog")
    create_stream(client, name, shard_count=2)
    limited = ShardLimitedKinesis(client)
    records = [UserRecord(f"k{i % 1000}", b"x" * 100) for i in range(20_000)]  # kinesis-mock is slow

    results = Producer(limited, name).put_many(records)

    assert Counter(r.error_code for r in results) == {None: 20_000}
    landed = sum(len(entries) for entries in read_stream(client, name).values())
    assert landed == 20_000, "each record once: throttled entries were never written, then resent"


class LosesOneLargeResponse(Wrapped):
    """The first request over 1 MiB (several aggregates) lands, then its answer is lost (a read timeout).

    1 MiB, not 5: how the producer cuts 10 MiB into requests depends on the threads' timing."""

    lost = 0
    lost_bytes = 0

    def put_records(self, **kwargs):
        response = self._client.put_records(**kwargs)
        size = sum(len(e["Data"]) + len(e["PartitionKey"]) for e in kwargs["Records"])
        with self.lock:
            lose = size > 2**20 and not self.lost
            self.lost += lose
            self.lost_bytes += size if lose else 0
        if lose:
            raise TimeoutError("Read timeout on endpoint URL (injected: the request landed)")
        return response


def test_one_lost_multi_mib_response_does_not_stall_the_rest(stream):
    client, name = stream
    lossy = LosesOneLargeResponse(client)
    config = ProducerConfig(record_ttl=10.0, rate_limit=10_000, retry_base_delay=0.01, retry_max_delay=0.1)
    producer = Producer(lossy, name, config=config)
    records = [UserRecord(f"k{i % 100}", b"y" * 1024) for i in range(10_000)]  # 10 MiB

    results = producer.put_many(records)

    assert lossy.lost == 1 and lossy.lost_bytes > 2**20
    assert Counter(r.error_code for r in results) == {None: 10_000}, "none expired"
    # The unanswered request's aggregates were resent identical: Kinesis holds two copies of
    # each, with one id, and a consumer applies one. Nothing was read back.
    metrics = producer.metrics.snapshot()
    assert metrics["AggregatesSealed"] == metrics["SealedAggregatesResent"] >= 2
    copies = read_copies(client, name)
    assert {(c.shard_id, c.sequence_number) for c in copies} >= {
        (r.shard_id, r.sequence_number) for r in results
    }
    by_id = Counter(copy.aggregate_id for copy in copies)
    assert set(by_id.values()) == {1, 2} and sum(by_id.values()) - len(by_id) == metrics["AggregatesSealed"]
    distinct = {copy.aggregate_id: len(copy.records) for copy in copies}
    assert sum(distinct.values()) == 10_000, "each record in one aggregate"


def test_no_request_starts_after_the_deadline_on_a_fake_clock(stream):
    client, name = stream
    clock = FakeClock()
    slow = RequestLog(client, clock=clock, advance=0.4)  # every request takes 0.4 s of fake time
    config = ProducerConfig(aggregation_enabled=False, rate_limit=10_000)
    producer = Producer(slow, name, config=config, clock=clock, sleep=clock.sleep)
    records = [UserRecord("one-key", b"z") for _ in range(5_000)]  # one shard: 10 requests in a row

    results = producer.put_many(records, deadline=1.0)

    assert all(started < 1.0 for started, _, _ in slow.requests), slow.requests
    assert clock.now <= 1.0 + 0.4, "back by the deadline plus the request in flight at it"
    sent = sum(count for _, _, count in slow.requests)
    assert all(r.success for r in results[:sent])
    assert all(r.error_code == EXPIRED and "deadline" in r.error_message for r in results[sent:])
    assert 0 < sent < 5_000


class SlowListShards(Wrapped):
    def __init__(self, client) -> None:
        super().__init__(client)
        self.release = threading.Event()
        self.put_calls = 0

    def list_shards(self, **kwargs):
        self.release.wait(5.0)
        return self._client.list_shards(**kwargs)

    def put_records(self, **kwargs):
        self.put_calls += 1
        return self._client.put_records(**kwargs)


def test_a_slow_list_shards_does_not_hold_the_deadline(stream):
    client, name = stream
    slow = SlowListShards(client)
    producer = Producer(slow, name)
    try:
        started = time.monotonic()
        results = producer.put_many(numbered_records(100, 10), deadline=0.5)
        took = time.monotonic() - started
    finally:
        slow.release.set()

    assert took < 2.5, f"ListShards takes 5 s; the 0.5 s deadline returned after {took:.2f} s"
    assert all(r.error_code == EXPIRED for r in results) and slow.put_calls == 0
    producer.close()


def test_two_threads_keep_their_own_deadlines(stream):
    client, name = stream
    slow = RequestLog(client, delay=0.3)
    producer = Producer(slow, name, config=ProducerConfig(aggregation_enabled=False, rate_limit=10_000))
    producer.shard_map.refresh()
    same_shard = [UserRecord("hot", str(i).encode()) for i in range(3_000)]  # 6 requests in a row
    long_results: list = []
    long_flush = threading.Thread(
        target=lambda: long_results.extend(producer.put_many(same_shard, deadline=30))
    )
    long_flush.start()
    time.sleep(0.1)  # the long flush is driving

    started = time.monotonic()
    short = [producer.put(UserRecord("hot", b"late")) for _ in range(10)]
    producer.flush(0.3)
    short_took = time.monotonic() - started
    long_flush.join(30)

    assert short_took < 1.5, f"flush(0.3) waited {short_took:.2f} s behind the other thread's flush"
    assert all(f.result(0).error_code == EXPIRED for f in short), "queued behind 3,000 records"
    assert len(long_results) == 3_000 and all(r.success for r in long_results), "not expired by flush(0.3)"


def test_a_cancelled_future_does_not_break_flush(stream):
    client, name = stream
    producer = Producer(client, name)
    futures = [producer.put(UserRecord("same-key", str(i).encode())) for i in range(3)]
    assert futures[1].cancel()

    producer.flush()

    assert futures[1].cancelled()
    assert futures[0].result(0).success and futures[2].result(0).success
    assert futures[0].result(0).sequence_number == futures[2].result(0).sequence_number, "one aggregate"


def test_a_callback_that_puts_and_flushes_does_not_deadlock(stream):
    client, name = stream
    producer = Producer(client, name)
    follow_ups = []

    def put_and_flush(_future) -> None:
        follow_ups.append(producer.put(UserRecord("follow-up", b"f")))
        producer.flush(5.0)

    producer.put(UserRecord("first", b"1")).add_done_callback(put_and_flush)
    flushing = threading.Thread(target=producer.flush)
    flushing.start()
    flushing.join(20)

    assert not flushing.is_alive(), "flush deadlocked on a callback"
    assert follow_ups and follow_ups[0].result(0).success


class AnswersWithoutShardId(Wrapped):
    """The first response's first entry has no ShardId (it landed: where, Kinesis did not say)."""

    answered = 0

    def put_records(self, **kwargs):
        response = self._client.put_records(**kwargs)
        if not self.answered:
            self.answered = 1
            del response["Records"][0]["ShardId"]
        return response


def test_a_success_entry_without_shard_id_is_resent_identical_and_confirmed_by_the_copy(stream):
    client, name = stream
    config = ProducerConfig(aggregation_enabled=False, retry_base_delay=0.001, retry_max_delay=0.01)
    producer = Producer(AnswersWithoutShardId(client), name, config=config)

    results = producer.put_many([UserRecord("a", b"1"), UserRecord("b", b"2")])

    assert [a.error_code for a in results[0].attempts] == [MALFORMED_RESPONSE, None]
    assert "ShardId" in results[0].attempts[0].error_message
    assert results[0].success and results[1].success and len(results[1].attempts) == 1
    copies = [copy for copy in read_copies(client, name) if copy.records[0].partition_key == "a"]
    assert len(copies) == 2 and copies[0].data == copies[1].data, "two identical copies, one id"
    assert (results[0].shard_id, results[0].sequence_number) == (
        copies[1].shard_id,
        copies[1].sequence_number,
    )


class DeniesListShards(RequestLog):
    def list_shards(self, **kwargs):
        raise client_error("AccessDeniedException", "not allowed (injected)", "ListShards")


def test_unpredicted_records_use_several_requests_at_once_and_keep_key_order(stream):
    client, name = stream
    denied = DeniesListShards(client, delay=0.2)
    producer = Producer(denied, name, config=ProducerConfig(max_concurrency=4, collection_max_count=50))
    records = numbered_records(2_000, 50)

    results = producer.put_many(records)

    assert all(r.success for r in results) and not producer.shard_map.ready
    assert denied.most_at_once > 1, "unpredicted records still use max_concurrency"
    for entries in read_stream(client, name).values():
        by_key: dict[str, list[int]] = {}
        for _, _, user in entries:
            by_key.setdefault(user.partition_key, []).append(position(user))
        assert all(ns == sorted(ns) for ns in by_key.values()), "per-key order kept"


def test_put_waits_for_room_at_the_bound_and_raise_mode_refuses(stream):
    client, name = stream
    waiting = Producer(client, name, config=ProducerConfig(max_buffered_records=1_000))
    peak = 0
    futures = []
    for i in range(3_000):
        futures.append(waiting.put(UserRecord(f"k{i % 10}", b"w")))
        peak = max(peak, waiting.pending)
    waiting.flush()
    assert peak <= 1_000 and all(f.result(0).success for f in futures)

    raising = Producer(
        client, name, config=ProducerConfig(max_buffered_records=1_000, when_buffer_full="raise")
    )
    for _ in range(1_000):
        raising.put(UserRecord("k", b"r"))
    with pytest.raises(BufferFull, match="1000 records"):
        raising.put(UserRecord("k", b"one too many"))
    assert raising.pending == 1_000
    raising.flush()
    assert raising.pending == 0


def test_memory_per_buffered_record(stream):
    import tracemalloc

    client, name = stream
    producer = Producer(client, name, config=ProducerConfig(max_buffered_records=1_000_000))
    records = [UserRecord(f"key-{i}", b"m" * 100) for i in range(50_000)]
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    futures = [producer.put(record) for record in records]
    per_record = (tracemalloc.get_traced_memory()[0] - before) / len(records)
    tracemalloc.stop()

    print(f"{per_record:.0f} bytes per buffered record with its future")
    assert per_record < 1_000, f"{per_record:.0f} bytes per buffered record (1,964 before RecordFuture)"
    assert producer.buffered_bytes == sum(len(r.data) + len(r.partition_key) for r in records)  # no ids
    producer.flush()
    assert all(f.result(0).success for f in futures)


def _wait_for_shards(client, name: str, count: int) -> None:
    wait_active(client, name)
    deadline = time.monotonic() + 30
    while len(open_shards(client, name)) != count and time.monotonic() < deadline:
        time.sleep(0.1)


class SlowFirstRequest(RequestLog):
    """The first PutRecords takes `delay`; every request's (start, end) is logged."""

    def put_records(self, **kwargs):
        with self.lock:
            first = not self.requests and not self.running
        self.delay = 1.0 if first else 0.0
        return super().put_records(**kwargs)


@pytest.mark.parametrize("reshard", ["split", "merge"])
def test_no_request_overtakes_one_in_flight_to_an_overlapping_shard(kinesis_mock, reshard):
    client = kinesis_client(kinesis_mock)
    name = unique_stream_name(reshard)
    create_stream(client, name, shard_count=2)
    log = SlowFirstRequest(client)
    producer = Producer(log, name, config=ProducerConfig(aggregation_enabled=False))
    first_record = UserRecord("key", b"1")
    first = producer.put(first_record)
    flushing = threading.Thread(target=producer.flush)
    flushing.start()
    while not log.running:
        time.sleep(0.01)
    shards = open_shards(client, name)
    if reshard == "split":
        parent = next(s for s in shards if hash_key(first_record) <= int(s["HashKeyRange"]["EndingHashKey"]))
        low, high = (int(parent["HashKeyRange"][k]) for k in ("StartingHashKey", "EndingHashKey"))
        client.split_shard(
            StreamName=name, ShardToSplit=parent["ShardId"], NewStartingHashKey=str((low + high) // 2)
        )
        _wait_for_shards(client, name, 3)
    else:
        client.merge_shards(
            StreamName=name, ShardToMerge=shards[0]["ShardId"], AdjacentShardToMerge=shards[1]["ShardId"]
        )
        _wait_for_shards(client, name, 1)
    assert producer.shard_map.refresh() and log.running, "the first request is still in flight"
    second = producer.put(UserRecord("key", b"2"))
    producer.flush(10)
    flushing.join(10)

    (_, first_end, _), (second_start, _, _) = sorted(log.requests)
    assert second_start >= first_end, "the request to the new shard waited for the one to its parent"
    assert first.result(0).success and second.result(0).success


def test_four_threads_putting_and_flushing_at_once_lose_nothing_and_keep_key_order(stream):
    client, name = stream
    producer = Producer(client, name, config=ProducerConfig(max_buffered_records=2_000))
    outcomes: dict[int, list] = {}
    errors: list[BaseException] = []

    def work(thread: int) -> None:
        try:
            futures = [producer.put(UserRecord(f"t{thread}-k{i % 7}", b"%d" % i)) for i in range(5_000)]
            producer.flush(30)
            outcomes[thread] = [f.result(0) for f in futures]  # set by the time flush returns
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)

    assert not errors and sorted(outcomes) == [0, 1, 2, 3], errors
    assert all(r.success for results in outcomes.values() for r in results)
    for results in outcomes.values():
        for key in range(7):
            landed = [(int(r.sequence_number), r.sub_sequence_number or 0) for r in results[key::7]]
            assert landed == sorted(landed), "one key's records land in put() order"


def test_the_tokens_of_a_request_that_failed_as_a_whole_are_given_back(stream):
    from local.chaos.faults import FaultyKinesis

    client, name = stream
    faulty = FaultyKinesis(client)
    faulty.fail_requests("InternalFailure", times=1)
    clock = FakeClock()
    config = ProducerConfig(rate_limit=100, aggregation_enabled=False, retry_base_delay=0.01)
    producer = Producer(faulty, name, config=config, clock=clock, sleep=clock.sleep)
    records = [UserRecord("one-shard", b"t" * (100 * 1024)) for _ in range(10)]  # ~1 MiB: the whole bucket

    results = producer.put_many(records)

    assert all(r.success and len(r.attempts) == 2 for r in results)
    assert clock.now < 0.1, f"resent at {clock.now:.2f} s: the failed request's tokens were not given back"


def test_aggregates_larger_than_a_shard_bucket_do_not_stall_the_producer(stream):
    from shardline.kinesis import Limits

    client, name = stream
    config = ProducerConfig(
        limits=Limits.for_max_record_size(4 * 2**20), aggregation_max_size=4 * 2**20, rate_limit=100
    )
    producer = Producer(client, name, config=config)

    results = producer.put_many([UserRecord(f"k{i % 10}", b"b" * 100) for i in range(20_000)], deadline=30)

    assert all(r.success for r in results), Counter(r.error_code for r in results)
