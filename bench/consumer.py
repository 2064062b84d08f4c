"""The consumer path: `KinesisConsumer.process` on a Lambda event of KPL aggregates, vs Powertools.

The event is what the Kinesis event-source mapping hands a Lambda function: 25 Kinesis records,
each a real KPL aggregate made with `shardline.kpl.encode` and holding 400 user records
of 100 bytes (10,000 in all, partition keys drawn from 1,000). shardline's consumer runs
unchanged against `InMemoryLeaseTable`, an in-process lease table with the semantics of
`shardline.consumer._leases.LeaseTable` (`begin` takes the lease and marks the delivery in flight
in one write; every other write is fenced by `leaseCounter`, increments it and sets the owner;
checkpoints are forward-only compare-and-swap) that counts its reads and writes. No Kinesis
client is given, so there are no parent-shard or hash-range look-ups. The record handler does nothing.

Two shardline figures: *fresh* (the row is put back at TRIM_HORIZON before every call, so every
user record reaches the handler and the checkpoint moves) and *replay* (the row is put back at
the last user record, so every record is skipped as a duplicate). Either way the row exists, as
a previous invocation left it, so no call creates it. Resetting the row is one
in-memory assignment inside the timed call.

The peer, Powertools' `BatchProcessor(EventType.KinesisDataStreams)`, is not like for like: it
does not de-aggregate, so its no-op handler sees 25 Kinesis records, not 10,000 user records.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib.metadata import version
from typing import Any, cast

from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.batch.exceptions import BatchProcessingError
from aws_lambda_powertools.utilities.data_classes.kinesis_stream_event import KinesisStreamRecord

from bench import lambda_event
from bench.inputs import partition_keys, user_records
from bench.profiling import profile_call
from bench.report import Row, Target
from bench.timing import best_of
from shardline import kpl
from shardline.consumer import ConsumedRecord, KinesisConsumer
from shardline.kinesis import TRIM_HORIZON, Position, UserRecord
from shardline.testing import FakeLambdaContext, InMemoryLeaseTable, LeaseWrite

SHARD_ID = "shardId-000000000000"

USER_RECORDS = 10_000
DATA_SIZE = 100
KEY_COUNT = 1_000
RECORDS_PER_AGGREGATE = 400

GROUP = "bench"
PREVIOUS_CHECKPOINT_EVERY = 500  # the consumer's default before checkpoint_every became None
SHARDLINE_FRESH = "shardline fresh"
SHARDLINE_REPLAY = "shardline replay"
POWERTOOLS = "Powertools BatchProcessor"

PROCESS_TARGET = Target("value", ">=", 500_000.0)  # issue 41: the hot path restored
#: Without crash detection, a successful batch on an existing row makes one DynamoDB write: its
#: checkpoint, at the end (the lease is held by reading the row; the checkpoint claims it).
WRITES_TARGET = Target("value", "<=", 1.0)
#: With it (the default), one more: `begin` marks the delivery in flight (and replaces the read).
DETECTING_WRITES_TARGET = Target("value", "<=", 2.0)

WRITE_KINDS = tuple(LeaseWrite)  # the lease table's counters, by kind of DynamoDB write
CREATE, CHECKPOINT = LeaseWrite.CREATE, LeaseWrite.CHECKPOINT
BEGIN, RELEASE = LeaseWrite.BEGIN, LeaseWrite.RELEASE
CHECKPOINT_KINDS = (CHECKPOINT, LeaseWrite.TRANSACTION)


# -- the event --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ConsumerWorkload:
    """The user records, the aggregates they were packed into, and the Lambda event carrying them."""

    records: list[UserRecord]
    payloads: list[bytes]
    event: dict[str, Any]

    @property
    def last_position(self) -> Position:
        """The position of the event's last user record (its aggregate's sequence, its index in it)."""
        last = self.event["Records"][-1]["kinesis"]["sequenceNumber"]
        return Position(last, len(self.records) - (len(self.payloads) - 1) * RECORDS_PER_AGGREGATE - 1)

    def describe(self) -> dict[str, Any]:
        sizes = [len(payload) for payload in self.payloads]
        return {
            "kinesis_records": len(self.payloads),
            "user_records": len(self.records),
            "records_per_aggregate": RECORDS_PER_AGGREGATE,
            "data_bytes": DATA_SIZE,
            "partition_keys": KEY_COUNT,
            "aggregate_bytes_min": min(sizes),
            "aggregate_bytes_max": max(sizes),
            "event_bytes_approx": sum(len(r["kinesis"]["data"]) + 600 for r in self.event["Records"]),
        }


def kinesis_event(payloads: Sequence[bytes]) -> dict[str, Any]:
    """A Lambda Kinesis event, one record per payload (the same builder the codec section uses)."""
    return lambda_event.lambda_event(payloads)


def make_workload(seed: int) -> ConsumerWorkload:
    """10,000 user records of 100 bytes (1,000 keys), 400 per aggregate, in one Lambda event."""
    rng = random.Random(seed)
    records = user_records(rng, partition_keys(rng, KEY_COUNT), USER_RECORDS, DATA_SIZE)
    payloads = [
        kpl.encode(records[start : start + RECORDS_PER_AGGREGATE])
        for start in range(0, len(records), RECORDS_PER_AGGREGATE)
    ]
    return ConsumerWorkload(records, payloads, kinesis_event(payloads))


#: One invocation's context, reused by every call: 900 s left (Lambda's maximum), so the consumer
#: never stops early for time, and a fixed request id (the lease owner the sanity checks expect).
CONTEXT = FakeLambdaContext(
    900_000, function_name="bench-consumer", memory_limit_in_mb=1024, aws_request_id="bench-request-0000"
)


# -- contenders ---------------------------------------------------------------------------------


def bench_consumer(
    table: InMemoryLeaseTable, handle: Callable[[ConsumedRecord], None] | None = None, **options: Any
) -> KinesisConsumer:
    """`KinesisConsumer("bench", table)` with a no-op record handler (or `handle`); defaults otherwise."""
    consumer = KinesisConsumer(GROUP, table, **options)

    if handle is None:

        @consumer.handler
        def noop(record: ConsumedRecord) -> None:
            return None

    else:
        consumer.handler(handle)
    return consumer


def powertools_noop(record: KinesisStreamRecord) -> None:
    return None


def contenders(
    workload: ConsumerWorkload, consumer: KinesisConsumer, table: InMemoryLeaseTable
) -> dict[str, Callable[[], object]]:
    """The timed calls: shardline fresh and replay (row reset inside the call), and Powertools."""
    event, context, last = workload.event, CONTEXT, workload.last_position
    start = Position(TRIM_HORIZON)
    processor = BatchProcessor(event_type=EventType.KinesisDataStreams)

    def shardline_fresh() -> object:
        table.place(SHARD_ID, start)
        return consumer.process(event, context)

    def shardline_replay() -> object:
        table.place(SHARD_ID, last)
        return consumer.process(event, context)

    def powertools() -> object:
        return process_partial_response(
            event=event, record_handler=powertools_noop, processor=processor, context=cast(Any, context)
        )

    return {SHARDLINE_FRESH: shardline_fresh, SHARDLINE_REPLAY: shardline_replay, POWERTOOLS: powertools}


# -- one call, counted (outside timing) ----------------------------------------------------------


def one_call(
    workload: ConsumerWorkload, consumer: KinesisConsumer, table: InMemoryLeaseTable, start: Position | None
) -> dict[str, Any]:
    """Place the row at `start` (None: leave the table as it is), process the event once; what it
    answered and wrote, and the counters."""
    if start is not None:
        table.place(SHARD_ID, start)
    before_row = table.row(SHARD_ID)
    reads, writes = table.reads, table.writes.copy()
    before = consumer.metrics.snapshot()
    response = consumer.process(workload.event, CONTEXT)
    after = consumer.metrics.snapshot()
    written = table.writes - writes
    row = table.row(SHARD_ID)
    return {
        "response": response,
        "reads": table.reads - reads,
        "writes": {kind: written[kind] for kind in WRITE_KINDS},
        "total_writes": sum(written[kind] for kind in WRITE_KINDS),
        "checkpoint_writes": sum(written[kind] for kind in CHECKPOINT_KINDS),
        "checkpoint_after": repr(row.checkpoint) if row else None,
        "counter_before": before_row.counter if before_row else None,
        "counter_after": row.counter if row else None,
        "owner_after": row.owner if row else None,
        "metrics": {
            name: after[name] - before[name]
            for name in ("RecordsProcessed", "DuplicatesSkipped", "CheckpointsWritten", "UserRecords")
        },
    }


def sanity(workload: ConsumerWorkload) -> tuple[list[str], dict[str, Any]]:  # noqa: C901 -- over the gate before it existed; issue 26 cuts it
    """Outside timing: what each contender does with the event; problems found, and the counts.

    The bench consumer (no-op handler, default options) runs once fresh and once as a replay;
    a consumer with a collecting handler checks that the handler sees every user record, in
    order; Powertools' handler is counted. Reports problems instead of raising.
    """
    problems: list[str] = []
    last = workload.last_position
    table = InMemoryLeaseTable()
    consumer = bench_consumer(table)
    fresh = one_call(workload, consumer, table, Position(TRIM_HORIZON))
    replay = one_call(workload, consumer, table, last)
    for name, call, processed, skipped in (
        ("fresh", fresh, USER_RECORDS, 0),
        ("replay", replay, 0, USER_RECORDS),
    ):
        if call["response"] != {"batchItemFailures": []}:
            problems.append(f"consumer {name}: answered {call['response']}")
        counted = call["metrics"]
        if (counted["RecordsProcessed"], counted["DuplicatesSkipped"]) != (processed, skipped):
            problems.append(
                f"consumer {name}: {counted['RecordsProcessed']} processed and "
                f"{counted['DuplicatesSkipped']} skipped, expected {processed} and {skipped}"
            )
        if call["reads"] != 0:
            problems.append(f"consumer {name}: {call['reads']} GetItem reads, expected none (begin)")
        if call["checkpoint_after"] != repr(last):
            problems.append(f"consumer {name}: checkpoint left at {call['checkpoint_after']}, not {last!r}")
    # The row exists (as a previous invocation left it): begin takes it and marks the delivery,
    # the checkpoint takes the mark away (counter + 2, owner set).
    if fresh["writes"] != {**dict.fromkeys(WRITE_KINDS, 0), BEGIN: 1, CHECKPOINT: 1}:
        problems.append(
            f"consumer: a successful batch of {USER_RECORDS:,} user records on an existing row made "
            f"writes {fresh['writes']}, expected exactly 2 (begin, checkpoint)"
        )
    if (fresh["counter_after"], fresh["owner_after"]) != (
        (fresh["counter_before"] or 0) + 2,
        CONTEXT.aws_request_id,
    ):
        problems.append(
            f"consumer fresh: row left with counter {fresh['counter_after']} and owner "
            f"{fresh['owner_after']!r}, expected {(fresh['counter_before'] or 0) + 2} and "
            f"{CONTEXT.aws_request_id!r} (begin and the checkpoint)"
        )
    if replay["writes"] != {**dict.fromkeys(WRITE_KINDS, 0), BEGIN: 1, RELEASE: 1}:
        problems.append(f"consumer replay: writes {replay['writes']}, expected begin and release")

    # Without crash detection: the hold reads the row, the checkpoint is the one write.
    plain_table = InMemoryLeaseTable()
    plain = one_call(
        workload, bench_consumer(plain_table, detect_crashes=False), plain_table, Position(TRIM_HORIZON)
    )
    if (plain["writes"], plain["reads"]) != ({**dict.fromkeys(WRITE_KINDS, 0), CHECKPOINT: 1}, 1):
        problems.append(
            f"consumer without crash detection: writes {plain['writes']} and {plain['reads']} reads, "
            "expected 1 checkpoint and 1 read"
        )

    # A first invocation (no row yet), with a handler that collects what it sees.
    seen: list[tuple[str, bytes]] = []
    first_table = InMemoryLeaseTable()
    first = one_call(
        workload,
        bench_consumer(first_table, lambda record: seen.append((record.partition_key, record.data))),
        first_table,
        None,
    )
    if seen != [(record.partition_key, record.data) for record in workload.records]:
        problems.append(f"consumer: the handler saw {len(seen):,} records, not the event's user records")
    if first["writes"] != {**dict.fromkeys(WRITE_KINDS, 0), BEGIN: 1, CHECKPOINT: 1}:
        problems.append(
            f"consumer first call (no row): writes {first['writes']}, expected begin (it creates the row) "
            "+ 1 checkpoint"
        )

    # How many checkpoints the same batch makes with the previous default, checkpoint_every=500.
    every_table = InMemoryLeaseTable()
    every = one_call(
        workload,
        bench_consumer(every_table, checkpoint_every=PREVIOUS_CHECKPOINT_EVERY),
        every_table,
        Position(TRIM_HORIZON),
    )

    handled: list[KinesisStreamRecord] = []

    def collect(record: KinesisStreamRecord) -> None:  # Powertools passes it as `record=`
        handled.append(record)

    try:
        answer: Any = process_partial_response(
            event=workload.event,
            record_handler=collect,
            processor=BatchProcessor(event_type=EventType.KinesisDataStreams),
            context=cast(Any, CONTEXT),
        )
    except BatchProcessingError as exc:
        answer = f"BatchProcessingError ({exc.msg})"
    if answer != {"batchItemFailures": []} or len(handled) != len(workload.payloads):
        problems.append(f"Powertools: answered {answer} after {len(handled)} records")
    return problems, {
        "fresh": fresh,
        "replay": replay,
        "without_crash_detection": plain,
        "first_call": first,
        "checkpoint_every_500": every,
        "powertools_handler_calls": len(handled),
    }


# -- measurement -------------------------------------------------------------------------------


def measure(workload: ConsumerWorkload, repeats: int) -> tuple[list[Row], dict[str, Any], list[str]]:
    """Rows (rates, ratios, DynamoDB writes per batch), details, and sanity problems."""
    problems, counts = sanity(workload)
    table = InMemoryLeaseTable()
    seconds = best_of(contenders(workload, bench_consumer(table), table), repeats)
    users, kinesis = len(workload.records), len(workload.payloads)
    fresh, replay = users / seconds[SHARDLINE_FRESH], users / seconds[SHARDLINE_REPLAY]
    powertools_kinesis = kinesis / seconds[POWERTOOLS]
    powertools_users = users / seconds[POWERTOOLS]
    label = f"{users:,} user records in {kinesis} aggregates"
    unlike = "not like for like: Powertools does not de-aggregate"
    rows = [
        Row(f"Consumer process, {label}, fresh (all handled)", "rec/s", fresh, target=PROCESS_TARGET),
        Row(f"Consumer process, {label}, replay (all skipped as duplicates)", "rec/s", replay),
        Row(
            f"Consumer user rec/s vs Powertools Kinesis rec/s ({unlike}: it sees {kinesis} records)",
            "rec/s",
            fresh,
            f"{POWERTOOLS}, Kinesis records",
            powertools_kinesis,
        ),
        Row(
            f"Consumer user rec/s vs Powertools user-record equivalent ({unlike}: "
            f"{RECORDS_PER_AGGREGATE} per Kinesis record, never decoded)",
            "rec/s",
            fresh,
            f"{POWERTOOLS}, user-record equivalent",
            powertools_users,
        ),
        Row(
            "Consumer DynamoDB writes per successful batch (default: crash detection marks the delivery)",
            "count",
            counts["fresh"]["total_writes"],
            target=DETECTING_WRITES_TARGET,
        ),
        Row(
            "Consumer DynamoDB writes per successful batch, detect_crashes=False (the checkpoint claims it)",
            "count",
            counts["without_crash_detection"]["total_writes"],
            target=WRITES_TARGET,
        ),
        Row(
            "Consumer DynamoDB reads per batch (default: none; detect_crashes=False: one, the hold)",
            "count",
            counts["fresh"]["reads"],
        ),
    ]
    details = {
        "workload": workload.describe(),
        "powertools": version("aws-lambda-powertools"),
        "seconds": seconds,
        "user_records_per_s": {
            SHARDLINE_FRESH: fresh,
            SHARDLINE_REPLAY: replay,
            POWERTOOLS: powertools_users,
        },
        "powertools_kinesis_records_per_s": powertools_kinesis,
        **counts,
    }
    return rows, details, problems


def notes(details: dict[str, Any]) -> list[str]:
    """The consumer section's notes: inputs, method, and DynamoDB calls per batch."""
    w, fresh, replay = details["workload"], details["fresh"], details["replay"]
    plain = details["without_crash_detection"]
    first, every = details["first_call"], details["checkpoint_every_500"]
    return [
        f"Consumer: KinesisConsumer.process (default options, no-op handler, no Kinesis client) on one "
        f"Lambda event of {w['kinesis_records']} KPL aggregates (~{w['event_bytes_approx'] / 1e6:.1f} MB) "
        f"holding {w['user_records']:,} user records of {w['data_bytes']} B; the lease table is an "
        f"in-process fake with LeaseTable's semantics, its row put back at TRIM_HORIZON (fresh) or at the "
        f"last record (replay) inside each timed call. Powertools {details['powertools']} "
        f"BatchProcessor(KinesisDataStreams) with a no-op handler on the same event is not like for "
        f"like: it does not de-aggregate, so its handler runs {details['powertools_handler_calls']} "
        f"times; its user-record equivalent is {RECORDS_PER_AGGREGATE} × its Kinesis records/s.",
        f"DynamoDB writes per successful batch: {fresh['writes'][BEGIN]} (begin: the lease taken and "
        f"the delivery marked in flight, so that a delivery whose process dies is counted against its "
        f"record) + {fresh['checkpoint_writes']} (checkpoint, which takes the mark away), with the row "
        f"already existing as after a previous invocation, and {fresh['reads']} reads; replay: "
        f"{replay['total_writes']} writes (begin, release), {replay['reads']} reads. With "
        f"detect_crashes=False: {plain['total_writes']} write (checkpoint) and {plain['reads']} read (the "
        f"GetItem of the lease hold). A first invocation (no row yet): {first['writes'][BEGIN]} (begin "
        f"creates the row) + {first['checkpoint_writes']} (checkpoint). With checkpoint_every="
        f"{PREVIOUS_CHECKPOINT_EVERY} (the previous default) the same batch makes "
        f"{every['checkpoint_writes']} checkpoint writes.",
    ]


# -- profile -------------------------------------------------------------------------------------


def profile(workload: ConsumerWorkload, top: int = 10, rounds: int = 20) -> str:
    """cProfile tables (by own time) of `process` on the event: fresh, then replay."""
    table = InMemoryLeaseTable()
    consumer = bench_consumer(table)
    context = CONTEXT
    sections = []
    for title, start in (("fresh", Position(TRIM_HORIZON)), ("replay", workload.last_position)):

        def run(start: Position = start) -> None:
            for _ in range(rounds):
                table.place(SHARD_ID, start)
                consumer.process(workload.event, context)

        run()  # warm-up, untimed
        sections.append(
            profile_call(
                f"KinesisConsumer.process, {title}, {USER_RECORDS:,} user records (x{rounds})", run, top
            )
        )
    return "\n\n".join(sections)
