"""The producer under a backlog, against Kinesis's per-shard write limits (issue 9).

A moto server on loopback stands in for Kinesis, behind `local.chaos.faults.ShardLimitedKinesis`,
which enforces 1,000 records/s and 1 MiB/s per shard as Kinesis does (one-second buckets,
partition-key bytes counted, per-record ProvisionedThroughputExceededException). Each scenario
puts a whole backlog with one `put_many` and reports, over the send phase (first request to
last answer): user records per second per shard, the share of the shard's byte limit the
admitted bytes reach, and how many records expired. aiokpl is driven on the same wrapper (its
aiobotocore client swapped for an adapter) where the scenario is its home ground.

A second measurement takes the server out — an in-process Kinesis that answers at once — to
time the producer's own work per record at 60,000, 200,000 and 1,000,000 buffered records:
it stays flat when no step costs more with a larger backlog.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from collections.abc import Iterator
from typing import Any

import boto3

from local.chaos.faults import ShardLimitedKinesis
from shardline.kinesis import UserRecord
from shardline.producer import Producer, ProducerConfig

MiB = 1024 * 1024


@contextlib.contextmanager
def moto_server() -> Iterator[str]:
    """A moto server on a free loopback port, for the duration of the block."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    endpoint = f"http://127.0.0.1:{port}"
    try:
        for _ in range(200):
            with contextlib.suppress(OSError):
                urllib.request.urlopen(endpoint + "/", timeout=1)
                break
            time.sleep(0.05)
        yield endpoint
    finally:
        server.terminate()
        server.wait(10)


def _client(endpoint: str) -> Any:
    return boto3.client(
        "kinesis",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id="test",
        aws_secret_access_key="test",
    )


class _Timed:
    """Notes when the first request started and the last one ended, and the bytes each shard
    admitted in each one-second window of the wrapper's clock (time.monotonic)."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self.first = float("inf")
        self.last = 0.0
        self.windows: Counter[tuple[int, str]] = Counter()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    def put_records(self, **kwargs: Any) -> Any:
        self.first = min(self.first, time.perf_counter())
        window = int(time.monotonic())  # the window ShardLimitedKinesis charged (same clock)
        try:
            response = self._client.put_records(**kwargs)
        finally:
            self.last = max(self.last, time.perf_counter())
        for entry, answer in zip(kwargs["Records"], response["Records"], strict=True):
            if "ShardId" in answer:
                self.windows[window, answer["ShardId"]] += len(entry["Data"]) + len(
                    entry["PartitionKey"].encode()
                )
        return response

    def steady_share(self, shards: int) -> float | None:
        """Admitted bytes ÷ the limit in the median whole second (the first and last are partial)."""
        per_second: Counter[int] = Counter()
        for (window, _), admitted in self.windows.items():
            per_second[window] += admitted
        whole = sorted(per_second[window] for window in sorted(per_second)[1:-1])
        return statistics.median(whole) / (shards * MiB) if whole else None


def _records(count: int, data_size: int) -> list[UserRecord]:
    payload = b"x" * data_size
    return [UserRecord(f"key-{i % 1000}", payload) for i in range(count)]


def _new_stream(client: Any, shards: int) -> str:
    name = f"bench-{os.urandom(4).hex()}"
    client.create_stream(StreamName=name, ShardCount=shards)
    client.get_waiter("stream_exists").wait(StreamName=name, WaiterConfig={"Delay": 0.1})
    return name


def _figures(
    records: list[UserRecord], errors: Counter[str | None], shards: int, limited: Any, timed: _Timed
) -> dict[str, Any]:
    send_phase = max(timed.last - timed.first, 1e-9)
    admitted = sum(limited.admitted_bytes.values())
    return {
        "records_per_shard_per_s": len(records) / send_phase / shards,
        "byte_limit_share": admitted / send_phase / shards / MiB,
        "steady_byte_limit_share": timed.steady_share(shards),
        "expired": errors.get("Expired", 0),
        "failed": sum(n for code, n in errors.items() if code is not None),
        "throttled_entries": sum(limited.throttled.values()),
        "send_phase_s": send_phase,
    }


def run_shardline(endpoint: str, shards: int, count: int, data_size: int) -> dict[str, Any]:
    client = _client(endpoint)
    name = _new_stream(client, shards)
    limited = ShardLimitedKinesis(client)
    timed = _Timed(limited)
    records = _records(count, data_size)
    # A backlog longer than the TTL must expire; give it twice the time the shard limits need.
    ttl = max(30.0, 2 * count * (data_size + 10) / (shards * MiB))
    config = ProducerConfig(max_buffered_records=max(count, 100_000), record_ttl=ttl)
    producer = Producer(timed, name, config=config)
    started = time.perf_counter()
    results = producer.put_many(records)
    figures = _figures(records, Counter(r.error_code for r in results), shards, limited, timed)
    producer.close()
    return figures | {"total_s": time.perf_counter() - started}


class _AsyncAdapter:
    """aiokpl awaits an aiobotocore client; this one runs the same wrapped boto3 calls in a thread."""

    def __init__(self, client: Any) -> None:
        self._client = client

    async def list_shards(self, **kwargs: Any) -> Any:
        import anyio

        return await anyio.to_thread.run_sync(lambda: self._client.list_shards(**kwargs))

    async def put_records(self, **kwargs: Any) -> Any:
        import anyio

        return await anyio.to_thread.run_sync(lambda: self._client.put_records(**kwargs))


def run_aiokpl(endpoint: str, shards: int, count: int, data_size: int) -> dict[str, Any]:
    import anyio
    from aiokpl.config import Config
    from aiokpl.producer import Producer as AioProducer

    client = _client(endpoint)
    name = _new_stream(client, shards)
    limited = ShardLimitedKinesis(client)
    timed = _Timed(limited)
    records = _records(count, data_size)

    async def main() -> Counter[str | None]:
        config = Config(
            region="us-east-1",
            endpoint_url=endpoint,
            aws_access_key_id="test",
            aws_secret_access_key="test",
            record_ttl_ms=1000 * max(30.0, 2 * count * (data_size + 10) / (shards * MiB)),
        )
        async with AioProducer(config) as producer:
            producer._kinesis_client = _AsyncAdapter(timed)  # the same wrapper shardline talks to
            outcomes = [
                await producer.put_record(stream=name, partition_key=r.partition_key, data=r.data)
                for r in records
            ]
            await producer.flush()
            results = [await outcome.wait() for outcome in outcomes]
        return Counter(
            None if r.success else (r.attempts[-1].error_code if r.attempts else "failed") for r in results
        )

    started = time.perf_counter()
    errors = anyio.run(main)
    return _figures(records, errors, shards, limited, timed) | {"total_s": time.perf_counter() - started}


class InstantKinesis:
    """An in-process Kinesis that answers every request at once: only the producer's work is timed."""

    def __init__(self, shards: int) -> None:
        step = 2**128 // shards
        self._shards = [(f"shardId-{i:012d}", i * step, (i + 1) * step - 1) for i in range(shards)]
        self._sequence = 0

    def list_shards(self, **_kwargs: Any) -> dict[str, Any]:
        return {
            "Shards": [
                {
                    "ShardId": shard_id,
                    "HashKeyRange": {"StartingHashKey": str(start), "EndingHashKey": str(end)},
                    "SequenceNumberRange": {"StartingSequenceNumber": "0"},
                }
                for shard_id, start, end in self._shards
            ]
        }

    def put_records(self, **kwargs: Any) -> dict[str, Any]:
        answers = []
        for entry in kwargs["Records"]:
            key = entry.get("ExplicitHashKey")
            hash_key = (
                int(key) if key else int.from_bytes(hashlib.md5(entry["PartitionKey"].encode()).digest())
            )
            shard_id = next(s for s, start, end in self._shards if start <= hash_key <= end)
            self._sequence += 1
            answers.append({"ShardId": shard_id, "SequenceNumber": str(self._sequence)})
        return {"FailedRecordCount": 0, "Records": answers}


def microseconds_per_record(count: int, shards: int = 4) -> float:
    """The producer's own time per 100-byte record for a backlog of `count`, no limits, no server."""
    # Work per record, not expiry: on a loaded machine a million records can outlive the default
    # 30 s `record_ttl` before the last is sent, which would fail them and measure nothing.
    config = ProducerConfig(rate_limit=1e9, max_buffered_records=count, record_ttl=3600.0)
    producer = Producer(InstantKinesis(shards), "instant", config=config)
    records = _records(count, 100)
    started = time.perf_counter()
    results = producer.put_many(records)
    took = time.perf_counter() - started
    failed = [r for r in results if not r.success]
    assert not failed, f"{len(failed):,} of {count:,} records failed: {failed[0]!r:.300}"
    producer.close()
    return took / count * 1e6
