"""Kinesis PUT payload units per million user records: shardline's real Producer against the KPL defaults.

shardline's `Producer` runs unchanged against `FakeKinesis`, an in-process client that meters
every entry it is sent (25 KiB PUT payload units of data + partition key) and answers with the
shard the entry's hash key really lands in. Sleeps are skipped (`SkippingClock`), so the
producer's per-shard rate limiter paces without making the benchmark wait.

The KPL side is a model: aiokpl's aggregator only exists as an anyio-driven async API (no
synchronous entry point), so the KPL defaults are modelled with `shardline.kpl.
AggregateBuilder`: per predicted shard, records in order packed into aggregates of at most
AggregationMaxSize = 51,200 bytes (as Kinesis meters them, with partition key "a"); an aggregate
of one record goes as a plain record with its own keys.
"""

from __future__ import annotations

import bisect
import itertools
import random
import threading
import time
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from bench.inputs import AGGREGATE_PARTITION_KEY, KPL_AGGREGATION_MAX_SIZE, partition_keys, user_records
from bench.report import Row, Target
from shardline.kinesis import UserRecord, hash_key, md5_hash_key, put_payload_units, record_size
from shardline.kpl import AggregateBuilder
from shardline.producer import Producer

HASH_SPACE = 2**128
MAX_ENTRIES_PER_REQUEST = 500
MAX_REQUEST_BYTES = 5 * 1024 * 1024
MAX_RECORD_BYTES = 1024 * 1024
UNITS_TARGET = Target("ratio", "<=", 1.0)


#: Seconds a bulk `put_many` may take in the producer's (skipping) time before records expire.
PRODUCER_DEADLINE = 600.0
#: Wall-clock seconds after which a producer run is abandoned and reported (a benchmark must not hang).
PRODUCER_TIME_LIMIT = 90.0


class SkippingClock:
    """Real monotonic time in which every sleep is skipped: the clock jumps ahead instead.

    Time keeps flowing between reads, as it does for a real producer, so nothing can wait on a
    clock that never moves; `skipped` is the total the producer would have slept.
    """

    def __init__(self) -> None:
        self.skipped = 0.0

    def __call__(self) -> float:
        return time.perf_counter() + self.skipped

    def sleep(self, seconds: float) -> None:
        self.skipped += max(seconds, 0.0)


def shard_endings(shard_count: int) -> list[int]:
    """Ending hash keys of `shard_count` open shards splitting the hash space evenly."""
    return [(index + 1) * HASH_SPACE // shard_count - 1 for index in range(shard_count)]


def shard_index(endings: Sequence[int], key: int) -> int:
    """The shard (index into `endings`) whose hash range holds `key`."""
    return bisect.bisect_left(endings, key)


class FakeKinesis:
    """`list_shards` and `put_records` of a stream with evenly split open shards, metering what it is sent."""

    def __init__(self, shard_count: int) -> None:
        self._endings = shard_endings(shard_count)
        self._ids = [f"shardId-{index:012d}" for index in range(shard_count)]
        self._sequence = itertools.count(49_000_000_000_000_000_000)
        self._lock = threading.Lock()
        self.units = 0
        self.kinesis_records = 0
        self.requests = 0
        self.violations: list[str] = []

    def list_shards(self, **_: Any) -> dict[str, Any]:
        starts = [0, *(end + 1 for end in self._endings[:-1])]
        return {
            "Shards": [
                {
                    "ShardId": shard_id,
                    "HashKeyRange": {"StartingHashKey": str(start), "EndingHashKey": str(end)},
                    "SequenceNumberRange": {"StartingSequenceNumber": "49000000000000000000"},
                }
                for shard_id, start, end in zip(self._ids, starts, self._endings, strict=True)
            ]
        }

    def put_records(self, **request: Any) -> dict[str, Any]:
        entries: Sequence[Mapping[str, Any]] = request["Records"]
        answers = []
        request_bytes = 0
        units = 0
        for entry in entries:
            size = len(entry["Data"]) + len(entry["PartitionKey"].encode("utf-8"))
            request_bytes += size
            units += put_payload_units(size)
            if size > MAX_RECORD_BYTES:
                self._violation(f"a {size}-byte record exceeds the 1 MiB record limit")
            ehk = entry.get("ExplicitHashKey")
            key = int(ehk) if ehk is not None else md5_hash_key(entry["PartitionKey"])
            with self._lock:
                sequence = next(self._sequence)
            answers.append(
                {"ShardId": self._ids[shard_index(self._endings, key)], "SequenceNumber": str(sequence)}
            )
        if len(entries) > MAX_ENTRIES_PER_REQUEST:
            self._violation(f"a request of {len(entries)} records exceeds 500")
        if request_bytes > MAX_REQUEST_BYTES:
            self._violation(f"a request of {request_bytes} bytes exceeds 5 MiB")
        with self._lock:
            self.units += units
            self.kinesis_records += len(entries)
            self.requests += 1
        return {"FailedRecordCount": 0, "Records": answers}

    def _violation(self, message: str) -> None:
        with self._lock:
            self.violations.append(message)


@dataclass(frozen=True, slots=True)
class Packing:
    """How a run packed `user_records` user records into Kinesis records, and what that costs."""

    user_records: int
    kinesis_records: int
    units: int
    requests: int = 0
    failed: int = 0
    seconds: float = 0.0
    skipped_sleep_seconds: float = 0.0
    violations: tuple[str, ...] = ()
    problem: str | None = None  # the run did not complete (exception or time limit)

    @property
    def units_per_million(self) -> float:
        return self.units * 1_000_000 / self.user_records


def send_all(client: FakeKinesis, clock: SkippingClock, records: Sequence[UserRecord], per_call: int) -> int:
    """Put `records` with one Producer, `per_call` per `put_many`, then close it; returns how many failed."""
    producer = Producer(client, "bench", clock=clock, sleep=clock.sleep, rng=random.Random(0))
    failed = 0
    try:
        for start in range(0, len(records), per_call):
            results = producer.put_many(records[start : start + per_call], deadline=PRODUCER_DEADLINE)
            failed += sum(1 for result in results if not result.success)
    finally:
        producer.close()
    return failed


def run_producer(records: Sequence[UserRecord], shard_count: int, per_call: int) -> Packing:
    """Send `records` through shardline's Producer, `per_call` per `put_many`, and meter the stream.

    The producer runs in a daemon thread joined with `PRODUCER_TIME_LIMIT`: a run that does not
    finish is reported as a problem instead of hanging the benchmark.
    """
    client = FakeKinesis(shard_count)
    clock = SkippingClock()
    outcome: dict[str, Any] = {"failed": 0}

    def drive() -> None:
        try:
            outcome["failed"] = send_all(client, clock, records, per_call)
        except Exception as exc:  # reported, not raised: a benchmark reports
            outcome["error"] = f"{type(exc).__name__}: {exc}"

    thread = threading.Thread(target=drive, name="bench-producer", daemon=True)
    started = time.perf_counter()
    thread.start()
    thread.join(PRODUCER_TIME_LIMIT)
    seconds = time.perf_counter() - started
    problem = outcome.get("error")
    if thread.is_alive():
        problem = f"the producer did not finish within {PRODUCER_TIME_LIMIT:.0f} s (abandoned)"
    return Packing(
        user_records=len(records),
        kinesis_records=client.kinesis_records,
        units=client.units,
        requests=client.requests,
        failed=outcome["failed"],
        seconds=seconds,
        skipped_sleep_seconds=clock.skipped,
        violations=tuple(client.violations[:5]),
        problem=problem,
    )


def kpl_model(records: Sequence[UserRecord], shard_count: int, per_call: int) -> Packing:
    """KPL defaults, modelled: per predicted shard, aggregates of at most 51,200 metered bytes."""
    endings = shard_endings(shard_count)
    cap = KPL_AGGREGATION_MAX_SIZE - len(AGGREGATE_PARTITION_KEY)
    units = 0
    kinesis_records = 0
    for start in range(0, len(records), per_call):
        by_shard: dict[int, list[UserRecord]] = defaultdict(list)
        for record in records[start : start + per_call]:
            by_shard[shard_index(endings, hash_key(record))].append(record)
        for shard_records in by_shard.values():
            for aggregate in pack_aggregates(shard_records, cap):
                kinesis_records += 1
                if len(aggregate) == 1:
                    units += put_payload_units(record_size(aggregate[0]))
                else:
                    size = _encoded_size(aggregate) + len(AGGREGATE_PARTITION_KEY)
                    units += put_payload_units(size)
    return Packing(user_records=len(records), kinesis_records=kinesis_records, units=units)


def pack_aggregates(records: Sequence[UserRecord], cap: int) -> list[list[UserRecord]]:
    """`records` in order, cut into KPL aggregates of at most `cap` bytes (the KPL's packing)."""
    aggregates: list[list[UserRecord]] = []
    current: list[UserRecord] = []
    builder = AggregateBuilder()
    for record in records:
        if current and builder.size_with(record) > cap:
            aggregates.append(current)
            current, builder = [], AggregateBuilder()
        builder.add(record)
        current.append(record)
    if current:
        aggregates.append(current)
    return aggregates


def _encoded_size(records: Sequence[UserRecord]) -> int:
    builder = AggregateBuilder()
    for record in records:
        builder.add(record)
    return builder.size


def unaggregated(records: Sequence[UserRecord]) -> Packing:
    """Every user record sent as its own Kinesis record."""
    return Packing(
        user_records=len(records),
        kinesis_records=len(records),
        units=sum(put_payload_units(record_size(record)) for record in records),
    )


def measure(
    *, seed: int, record_count: int, per_request_records: int, shard_count: int = 4
) -> tuple[list[Row], dict[str, Any]]:
    """PUT units per million user records (100-byte records, 1,000 keys) in two ways of calling the producer.

    - bulk: one `put_many` of `record_count` records (the case the target is judged on);
    - per request: `put_many` of 500 records at a time, as an HTTP producer Lambda calls it
      (informational; the model is given the same 500-record batches).
    """
    rng = random.Random(seed)
    keys = partition_keys(rng, 1000)
    bulk_records = user_records(rng, keys, record_count, 100)
    small_records = bulk_records[:per_request_records]
    scenarios = {
        "bulk": (bulk_records, len(bulk_records)),
        "per_request_500": (small_records, 500),
    }
    details: dict[str, Any] = {
        "shards": shard_count,
        "model": "AggregateBuilder capped at 51,200 bytes per shard",
    }
    rows: list[Row] = []
    for name, (records, per_call) in scenarios.items():
        shardline_run = run_producer(records, shard_count, per_call)
        model = kpl_model(records, shard_count, per_call)
        baseline = unaggregated(records)
        details[name] = {
            "user_records": len(records),
            "per_put_many": per_call,
            "shardline": asdict(shardline_run) | {"units_per_million": shardline_run.units_per_million},
            "kpl_model": asdict(model) | {"units_per_million": model.units_per_million},
            "unaggregated": asdict(baseline) | {"units_per_million": baseline.units_per_million},
        }
        if name == "bulk":
            label = f"PUT units per 1M records, 100 B, {shard_count} shards, one put_many"
            rows.append(
                Row(
                    label,
                    "units/M",
                    shardline_run.units_per_million,
                    "KPL defaults (model)",
                    model.units_per_million,
                    UNITS_TARGET,
                )
            )
            rows.append(
                Row(
                    label,
                    "units/M",
                    shardline_run.units_per_million,
                    "unaggregated",
                    baseline.units_per_million,
                )
            )
        else:
            label = f"PUT units per 1M records, 100 B, {shard_count} shards, put_many of 500"
            rows.append(
                Row(
                    label,
                    "units/M",
                    shardline_run.units_per_million,
                    "KPL packing of the same 500 (model)",
                    model.units_per_million,
                )
            )
    return rows, details
