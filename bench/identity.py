"""What identity costs: bytes and PUT payload units per record, DynamoDB writes per record.

    python -m bench.identity [--quick] [--seed N]      # this section alone; `python -m bench` runs it too

Kinesis side — the same 100-byte records (1,000 partition keys, 4 even shards), three ways:

- (a) shardline: the real `Producer` (every Kinesis record an aggregate carrying its aggregate id,
  the producer-retry identity), against `units.FakeKinesis`, which meters every entry;
- (b) the same with a client id per record (a UUID, 36 characters, in each record's `sl.id` tag);
- (a') and (b'): (a) and (b) written for a caller, as the producer function stamps an API caller
  (`CALLER`, a 61-character assumed-role ARN, in each aggregate's `sl.c` tag): what scoping ids
  by caller costs (issue 39); it must cost at most 2 % more units than (a) without client ids;
- (c) the KPL's aggregation without ids: per shard, records in order packed by
  `shardline.kpl.encode` without any id into aggregates of at most the same cap (51,200 bytes as
  Kinesis meters them, partition key "a"); a lone record goes as a plain record, as the KPL sends it.

Bytes per record are the metered bytes (data plus partition key) over the user records; PUT units
are 25 KiB units per entry, per 1M records. Producer-retry dedup must cost at most 1 % more units
than (c).

DynamoDB side — the example sinks' real handlers (`functions/event_sink`, `functions/key_counter`)
run through `KinesisConsumer` on the Kinesis records (a) or (b) produced, delivered as the
event-source mapping does (`shardline.testing.MappingReplay`, batches of 100) with the testing
kit's in-memory lease table, whose every write is counted here: items per record (the sink's own
items, the `once` guards, the lease row), and write capacity units as DynamoDB bills them (1 WCU per
KB of item, twice that for an item written in a transaction; a cancelled transaction bills too).
Client-id dedup costs the counter one guard item per record in its checkpoint transaction, and
the event sink nothing (its item is keyed by the id: an idempotent put, 1 WCU a KB, no transaction);
producer-retry dedup costs no write (its state rides in the lease row the checkpoint writes anyway).

The lane bound (`bench.lane_bound`): how many producer lanes a shard's dedup state holds against its
size, up to its bound (`MAX_STATE_BYTES`), past which lanes are evicted.
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import random
import sys
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from types import ModuleType
from typing import Any

from bench import lane_bound, units
from bench.inputs import AGGREGATE_PARTITION_KEY, KPL_AGGREGATION_MAX_SIZE, partition_keys
from bench.report import Report, Row, Target, render
from shardline.consumer import KinesisConsumer
from shardline.kinesis import UserRecord, hash_key, put_payload_units, record_size
from shardline.kpl import encode
from shardline.testing import InMemoryLeaseTable, LeaseWrite, MappingReplay
from shardline.testing._events import event_record

SHARDS = 4
DATA_BYTES = 100
KEYS = 1000
ID_LENGTH = 36  # a UUID
#: Producer-retry dedup (aggregate ids) may add this much to the KPL's PUT units, no more.
UNITS_TARGET = Target("ratio", "<=", 1.01)
#: The caller's tag may add this much to today's units without client ids, no more (issue 39).
CALLER_UNITS_TARGET = Target("ratio", "<=", 1.02)
#: An API caller as the producer function stamps it: an IAM role session's ARN (61 characters).
CALLER = "arn:aws:sts::123456789012:assumed-role/orders-writer/producer"
BATCH_SIZE = 100  # the event-source mapping's default
FUNCTIONS = Path(__file__).resolve().parents[1] / "functions"
KB = 1024


# -- Kinesis: bytes and PUT units ------------------------------------------------------------------


class MeteredKinesis(units.FakeKinesis):
    """`units.FakeKinesis` that also sums the metered bytes and keeps what each shard took."""

    def __init__(self, shard_count: int) -> None:
        super().__init__(shard_count)
        self.bytes = 0
        self.shards: dict[str, list[dict[str, Any]]] = defaultdict(list)

    def put_records(self, **request: Any) -> dict[str, Any]:
        answer = super().put_records(**request)
        entries: Sequence[Mapping[str, Any]] = request["Records"]
        arrival = datetime.now(UTC)
        with self._lock:
            for entry, landed in zip(entries, answer["Records"], strict=True):
                self.bytes += len(entry["Data"]) + len(entry["PartitionKey"].encode("utf-8"))
                self.shards[landed["ShardId"]].append(
                    {
                        "SequenceNumber": landed["SequenceNumber"],
                        "Data": entry["Data"],
                        "PartitionKey": entry["PartitionKey"],
                        "ApproximateArrivalTimestamp": arrival,
                    }
                )
        return answer


@dataclass(frozen=True, slots=True)
class Sent:
    """What one way of sending cost: Kinesis records, metered bytes and PUT units."""

    label: str
    user_records: int
    kinesis_records: int
    bytes: int
    units: int
    failed: int = 0
    problem: str | None = None

    @property
    def bytes_per_record(self) -> float:
        return self.bytes / self.user_records

    @property
    def units_per_million(self) -> float:
        return self.units * 1_000_000 / self.user_records


def send_with_producer(label: str, records: Sequence[UserRecord]) -> tuple[Sent, MeteredKinesis]:
    """(a) or (b): shardline's Producer, one bulk `put_many`, sleeps skipped; in a thread with a limit."""
    client = MeteredKinesis(SHARDS)
    clock = units.SkippingClock()
    outcome: dict[str, Any] = {"failed": 0}

    def drive() -> None:
        try:
            outcome["failed"] = units.send_all(client, clock, records, len(records))
        except Exception as exc:  # reported, not raised: a benchmark reports
            outcome["error"] = f"{type(exc).__name__}: {exc}"

    thread = threading.Thread(target=drive, name="bench-identity", daemon=True)
    thread.start()
    thread.join(units.PRODUCER_TIME_LIMIT)
    problem = outcome.get("error")
    if thread.is_alive():
        problem = f"the producer did not finish within {units.PRODUCER_TIME_LIMIT:.0f} s (abandoned)"
    sent = Sent(
        label, len(records), client.kinesis_records, client.bytes, client.units, outcome["failed"], problem
    )
    return sent, client


def kpl_without_ids(records: Sequence[UserRecord]) -> Sent:
    """(c): the KPL's aggregation of the same records with no id at all, the same cap, per shard."""
    endings = units.shard_endings(SHARDS)
    cap = KPL_AGGREGATION_MAX_SIZE - len(AGGREGATE_PARTITION_KEY)
    by_shard: dict[int, list[UserRecord]] = defaultdict(list)
    for record in records:
        by_shard[units.shard_index(endings, hash_key(record))].append(record._replace(id=None))
    kinesis_records = total_bytes = total_units = 0
    for shard_records in by_shard.values():
        for aggregate in units.pack_aggregates(shard_records, cap):
            if len(aggregate) == 1:
                size = record_size(aggregate[0])
            else:
                size = len(encode(aggregate)) + len(AGGREGATE_PARTITION_KEY)
            kinesis_records += 1
            total_bytes += size
            total_units += put_payload_units(size)
    return Sent("KPL aggregation, no ids", len(records), kinesis_records, total_bytes, total_units)


# -- DynamoDB: writes per record ----------------------------------------------------------------


def attribute_size(value: Mapping[str, Any]) -> int:
    """Bytes of one DynamoDB attribute value, as DynamoDB sizes items."""
    (kind, content), *_ = value.items()
    if kind == "S":
        return len(str(content).encode("utf-8"))
    if kind == "B":
        return len(content)
    if kind == "N":
        digits = len(str(content).lstrip("-").replace(".", "").lstrip("0")) or 1
        return math.ceil(digits / 2) + 1
    if kind in ("BOOL", "NULL"):
        return 1
    return len(str(content))


def item_size(item: Mapping[str, Mapping[str, Any]]) -> int:
    return sum(len(name.encode("utf-8")) + attribute_size(value) for name, value in item.items())


def lease_row_size(table: InMemoryLeaseTable, key: str) -> int:
    """The lease row as `LeaseTable` stores it (its KCL attributes and the dedup state)."""
    row = table.row(key)
    if row is None:
        return 0
    attributes = {
        "leaseKey": {"S": row.key},
        "leaseOwner": {"S": row.owner},
        "leaseCounter": {"N": str(row.counter)},
        "checkpoint": {"S": row.checkpoint.sequence},
        "checkpointSubSequenceNumber": {"N": str(row.checkpoint.sub_sequence)},
        "ownerSwitchesSinceCheckpoint": {"N": str(row.owner_switches)},
    }
    if row.applied_aggregates is not None:
        attributes["appliedAggregates"] = {"S": row.applied_aggregates}
    return item_size(attributes)


class MeteredLeases(InMemoryLeaseTable):
    """The testing kit's lease table, counting every item written and the write capacity billed."""

    def __init__(self, table_name: str, *, key_schema: Mapping[str, Sequence[str]]) -> None:
        super().__init__(table_name, key_schema=key_schema)
        self.sink_items = 0
        self.guard_items = 0
        self.row_writes = 0
        self.transactions = 0
        self.cancelled = 0
        self.wcu = 0

    def checkpoint_with(
        self, lease: Any, position: Any, writes: Sequence[Mapping[str, Any]], **kwargs: Any
    ) -> Any:
        if not writes:
            return super().checkpoint_with(lease, position, writes, **kwargs)
        from shardline.consumer import is_once_guard

        self.transactions += 1
        try:
            result = super().checkpoint_with(lease, position, writes, **kwargs)
        except Exception:
            self.cancelled += 1
            raise
        finally:
            for write in writes:
                self.guard_items += int(is_once_guard(write))
                self.sink_items += int(not is_once_guard(write))
                self.wcu += 2 * math.ceil(max(1, _written_size(write)) / KB)
            self.row_writes += 1
            self.wcu += 2 * math.ceil(max(1, lease_row_size(self, lease.key)) / KB)
        return result

    def put_idempotent(self, puts: Sequence[Mapping[str, Any]]) -> int:
        """Idempotent puts (BatchWriteItem, or a conditional PutItem each when keyed by a client id;
        no transaction): 1 WCU a KB of each item."""
        calls = super().put_idempotent(puts)
        self.sink_items += len(puts)
        self.wcu += sum(math.ceil(max(1, item_size(put["IdempotentPut"]["Item"])) / KB) for put in puts)
        return calls

    def count_plain_writes(self) -> None:
        """Every other write (row creation, begin, release, plain checkpoints): 1 WCU a KB each."""
        plain = (
            self.total_writes - self.transactions - self.writes[LeaseWrite.IDEMPOTENT]
        )  # sink calls, not the row
        self.row_writes += plain
        size = max((lease_row_size(self, key) for key in self.rows()), default=1)
        self.wcu += plain * math.ceil(max(1, size) / KB)


def _written_size(write: Mapping[str, Any]) -> int:
    (kind, operation), *_ = write.items()
    if kind == "Put":
        return item_size(operation["Item"])
    if kind == "Update":  # the key and the counter it adds to
        return item_size(operation["Key"]) + len("count") + 3
    return item_size(operation.get("Key", {}))


def function_module(name: str) -> ModuleType:
    """functions/<name>/app.py (a folder, not a package), imported under a name of its own."""
    import importlib.util

    module_name = f"bench_function_{name}"
    if module_name in sys.modules:
        return sys.modules[module_name]
    spec = importlib.util.spec_from_file_location(module_name, FUNCTIONS / name / "app.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return module


@dataclass(frozen=True, slots=True)
class SinkCost:
    """What one sink wrote for `user_records` records."""

    sink: str
    with_ids: bool
    user_records: int
    sink_items: int
    guard_items: int
    row_writes: int
    transactions: int
    cancelled: int
    wcu: int

    @property
    def writes_per_record(self) -> float:
        return (self.sink_items + self.guard_items + self.row_writes) / self.user_records

    @property
    def wcu_per_record(self) -> float:
        return self.wcu / self.user_records


def run_sink(
    sink: str, shards: Mapping[str, list[dict[str, Any]]], user_records: int, *, with_ids: bool
) -> SinkCost:
    """One example sink's handler over every shard's Kinesis records, through the consumer."""
    if sink == "event_sink":
        module, table, key = function_module("event_sink"), "events", ["pk", "sk"]
        handler: Callable[..., Any] = partial(module.to_sink, table)
    else:
        module, table, key = function_module("key_counter"), "counts", ["partitionKey"]
        handler = partial(module.count, table)
    leases = MeteredLeases("leases", key_schema={table: key})
    consumer = KinesisConsumer(f"bench-{sink}", leases)
    if sink == "key_counter":  # as the function registers it: a batch handler
        consumer.batch_handler(handler)
    else:
        consumer.handler(handler)
    for shard_id, records in shards.items():
        events = [event_record("bench", shard_id, record) for record in records]
        MappingReplay(events, batch_size=BATCH_SIZE).drain(consumer.process)
    leases.count_plain_writes()
    processed = consumer.metrics.snapshot()["RecordsProcessed"]
    if processed != user_records:
        raise AssertionError(f"{sink}: {processed} records processed of {user_records}")
    return SinkCost(
        sink,
        with_ids,
        user_records,
        leases.sink_items,
        leases.guard_items,
        leases.row_writes,
        leases.transactions,
        leases.cancelled,
        leases.wcu,
    )


# -- the section ----------------------------------------------------------------------------------


def make_records(seed: int, count: int) -> tuple[list[UserRecord], list[UserRecord]]:
    """`count` 100-byte records over 1,000 keys, and the same records with a UUID id each."""
    rng = random.Random(seed)
    keys = partition_keys(rng, KEYS)
    plain = [UserRecord(rng.choice(keys), rng.randbytes(DATA_BYTES)) for _ in range(count)]
    with_ids = [record._replace(id=str(uuid.UUID(int=rng.getrandbits(128), version=4))) for record in plain]
    return plain, with_ids


def for_caller(records: Sequence[UserRecord], caller: str = CALLER) -> list[UserRecord]:
    """The same records, each stamped with `caller` (as the producer function stamps an API caller)."""
    return [record._replace(caller=caller) for record in records]


def measure(
    *, seed: int, record_count: int, sink_records: int
) -> tuple[list[Row], dict[str, Any], list[str]]:
    """The rows, the details, and any problem found."""
    plain, with_ids = make_records(seed, record_count)
    problems: list[str] = []
    (a, _), (b, _) = (
        send_with_producer("shardline, aggregate ids", plain),
        send_with_producer("shardline, aggregate ids + client ids", with_ids),
    )
    (a_caller, _), (b_caller, _) = (
        send_with_producer("shardline, aggregate ids + caller", for_caller(plain)),
        send_with_producer("shardline, aggregate ids + caller + client ids", for_caller(with_ids)),
    )
    c = kpl_without_ids(plain)
    for sent in (a, b, a_caller, b_caller):
        if sent.failed or sent.problem:
            problems.append(f"identity ({sent.label}): {sent.failed} failed; {sent.problem or ''}".strip())
    label = f"per 1M {DATA_BYTES} B records, {SHARDS} shards"
    rows = [
        Row(f"PUT units {label}, aggregate ids (producer-retry dedup)", "units/M", a.units_per_million,
            "KPL aggregation, no ids", c.units_per_million, UNITS_TARGET),
        Row(f"PUT units {label}, aggregate ids + a {ID_LENGTH}-char client id per record", "units/M",
            b.units_per_million, "KPL aggregation, no ids", c.units_per_million),
        Row(f"bytes per {DATA_BYTES} B record, aggregate ids", "count", a.bytes_per_record,
            "KPL aggregation, no ids", c.bytes_per_record),
        Row(f"bytes per {DATA_BYTES} B record, aggregate ids + client ids", "count", b.bytes_per_record,
            "KPL aggregation, no ids", c.bytes_per_record),
        Row(f"PUT units {label}, aggregate ids + caller ({len(CALLER)}-char ARN), no client ids", "units/M",
            a_caller.units_per_million, "shardline without caller, no client ids", a.units_per_million,
            CALLER_UNITS_TARGET),
        Row(f"PUT units {label}, aggregate ids + caller + client ids", "units/M", b_caller.units_per_million,
            "shardline without caller, client ids", b.units_per_million),
        Row(f"bytes per {DATA_BYTES} B record, aggregate ids + caller", "count", a_caller.bytes_per_record,
            "shardline without caller, no client ids", a.bytes_per_record),
        Row(f"bytes per {DATA_BYTES} B record, aggregate ids + caller + client ids", "count",
            b_caller.bytes_per_record, "shardline without caller, client ids", b.bytes_per_record),
    ]  # fmt: skip

    # DynamoDB: the sinks over what the producer put in the stream (a smaller run: the consumer path).
    sink_plain, sink_ids = plain[:sink_records], with_ids[:sink_records]
    _, stream_plain = send_with_producer("sinks, no client ids", sink_plain)
    _, stream_ids = send_with_producer("sinks, client ids", sink_ids)
    costs: dict[str, SinkCost] = {}
    for sink in ("event_sink", "key_counter"):
        costs[f"{sink} without ids"] = run_sink(sink, stream_plain.shards, len(sink_plain), with_ids=False)
        costs[f"{sink} with ids"] = run_sink(sink, stream_ids.shards, len(sink_ids), with_ids=True)
        without, with_ = costs[f"{sink} without ids"], costs[f"{sink} with ids"]
        # The event sink keys an item by its id (an idempotent put, no guard); the counter guards each id.
        guards_expected = len(sink_ids) if sink == "key_counter" else 0
        if without.guard_items or with_.guard_items != guards_expected:
            problems.append(
                f"identity ({sink}): {with_.guard_items} guards for {len(sink_ids)} records with ids"
            )
        rows += [
            Row(f"DynamoDB items written per record, {sink}, client ids", "count", with_.writes_per_record,
                f"{sink} without ids", without.writes_per_record),
            Row(f"DynamoDB WCU per record, {sink}, client ids (2 per KB in a transaction, else 1)", "count",
                with_.wcu_per_record, f"{sink} without ids", without.wcu_per_record),
        ]  # fmt: skip
    kinesis_details = {
        sent.label: asdict(sent)
        | {"units_per_million": sent.units_per_million, "bytes_per_record": sent.bytes_per_record}
        for sent in (a, b, c, a_caller, b_caller)
    }
    dynamodb_details = {
        name: asdict(cost)
        | {"writes_per_record": cost.writes_per_record, "wcu_per_record": cost.wcu_per_record}
        for name, cost in costs.items()
    }
    bounds = lane_bound.measure()  # the dedup state's lanes per shard against its size
    rows += lane_bound.rows(bounds)
    details = {
        "records": record_count,
        "sink_records": sink_records,
        "shards": SHARDS,
        "kinesis": kinesis_details,
        "dynamodb": dynamodb_details,
        "lane_bound": [asdict(bound) for bound in bounds],
    }
    return rows, details, problems


def notes(details: Mapping[str, Any]) -> list[str]:
    """The method, in a sentence or two, for the report's notes."""
    kinesis = details["kinesis"]
    counts = ", ".join(
        f"{label}: {sent['kinesis_records']:,} Kinesis records" for label, sent in kinesis.items()
    )
    a, b, c, a_caller, b_caller = (sent["units_per_million"] for sent in kinesis.values())
    return [
        f"Identity, PUT units: aggregate ids add {(a / c - 1) * 100:+.2f} % to the KPL's units without ids "
        f"(target: at most +1 %); a {ID_LENGTH}-character client id per record adds "
        f"{(b / c - 1) * 100:+.1f} %.",
        f"Identity, the caller ({len(CALLER)}-character ARN, one sl.c tag per aggregate): "
        f"{(a_caller / a - 1) * 100:+.2f} % units without client ids (target: at most +2 %), "
        f"{(b_caller / b - 1) * 100:+.2f} % with them.",
        f"Identity: {details['records']:,} records of {DATA_BYTES} B over {KEYS:,} keys, {SHARDS} shards; "
        "shardline's real Producer (every Kinesis record an aggregate with its id; client ids are UUIDs) "
        "against the KPL's aggregation of the same records by shardline.kpl.encode without ids, the same "
        f"51,200-byte cap ({counts}). "
        f"DynamoDB: the example sinks' handlers through KinesisConsumer over {details['sink_records']:,} "
        "of those records as the producer put them, ESM batches of 100, every item of every write counted "
        "(the sink's items, the once guards, the lease row); WCU as billed (transactional writes twice).",
        lane_bound.note([lane_bound.LaneBound(**bound) for bound in details["lane_bound"]]),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.identity", description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer records (a smoke run)")
    parser.add_argument("--seed", type=int, default=20_240_601)
    args = parser.parse_args(argv)
    started = time.perf_counter()
    count, sink_count = (20_000, 5_000) if args.quick else (100_000, 20_000)
    rows, details, problems = measure(seed=args.seed + 9, record_count=count, sink_records=sink_count)
    from bench import peers

    meta = {
        "python": platform.python_version(),
        "platform": f"{platform.system()} {platform.machine()}",
        "cpus": len(os.sched_getaffinity(0)),
        "repeats": 1,
        "seed": args.seed,
        "quick": args.quick,
        **peers.versions(),
    }
    report = Report(meta=meta, rows=rows, notes=notes(details) + [f"PROBLEM: {p}" for p in problems])
    meta["seconds"] = time.perf_counter() - started
    print(render(report))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
