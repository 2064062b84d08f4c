"""`python -m bench.worker`: a worker group on the limit-enforcing local endpoint, beside async-kinesis.

    python -m bench.worker            # 40,000 records of 1 KiB on 1 shard; fail-over from 4 shards
    python -m bench.worker --quick    # 5,000 records

Three figures, each measured in this run:

1. **Records/s per shard, one worker.** The records are written with the endpoint's write limits
   off (a backlog, not a trickle), then read with the read limits on: 5 GetRecords calls and
   2 MiB a second per shard. One `Worker` (in this process, on a thread of its own) consumes them
   with a handler that does nothing, then with one that applies each record in the checkpoint's
   transaction (an `ADD` per record, as a sink would); its bytes/s over the shard's 2 MiB/s says
   whether the shard's read limit or the worker is the bound.
2. **The same backlog consumed by async-kinesis's `Consumer`** (no checkpoints: its in-memory
   checkpointer) on the same endpoint and stream, read from TRIM_HORIZON: records/s, and the
   ratio worker / async-kinesis.
3. **Fail-over after a kill.** Two `shardline worker` processes share 4 shards; one is killed
   (SIGKILL); the seconds until the other holds all 4 leases, polled every 20 ms, against the goal
   lease duration + one renewal interval.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

from shardline.consumer import ConsumedRecord, KinesisConsumer, LeaseTable, Worker

RECORD_SIZE = 1024
READ_LIMIT = 2 * 1024 * 1024
LEASE_S = 6.0
RENEW_S = 2.0


def _log(message: str) -> None:
    print(f"[worker] {message}", file=sys.stderr, flush=True)


def _limits(endpoint: str, **switches: bool) -> None:
    request = urllib.request.Request(
        f"{endpoint}/_shardline/limits", data=json.dumps(switches).encode(), method="PUT"
    )
    urllib.request.urlopen(request, timeout=10).read()


def _backlog(group: Any, records: int) -> None:
    """`records` records of RECORD_SIZE bytes with unique ids, written with write limits off."""
    _limits(group.endpoint, writes=False)
    pad = "x" * (RECORD_SIZE - 40)
    ids = [f"r-{n}" for n in range(records)]
    for start in range(0, records, 500):
        entries = [
            {"Data": json.dumps({"id": rid, "pad": pad}).encode(), "PartitionKey": rid}
            for rid in ids[start : start + 500]
        ]
        answer = group.kinesis.put_records(StreamName=group.stream, Records=entries)
        assert answer["FailedRecordCount"] == 0
    group.sent += ids
    _limits(group.endpoint, writes=True)


def worker_rate(group: Any, records: int, *, transactional: bool) -> dict[str, float]:
    """One in-process `Worker` over the group's backlog: records/s and bytes/s per shard."""
    table = LeaseTable(group.dynamodb, group.leases)
    for row in table.leases():  # a fresh start at TRIM_HORIZON for each handler
        group.dynamodb.delete_item(TableName=group.leases, Key={"leaseKey": {"S": row.key}})
    consumer = KinesisConsumer(group.name, table, kinesis=group.kinesis, checkpoint_interval=5.0)
    sink = group.sink

    def apply(record: ConsumedRecord) -> list[dict[str, Any]]:
        return [{"Update": {
            "TableName": sink,
            "Key": {"pk": {"S": record.partition_key}},
            "UpdateExpression": "ADD applied :one",
            "ExpressionAttributeValues": {":one": {"N": "1"}},
        }}]  # fmt: skip

    consumer.handler(apply if transactional else (lambda record: None))
    worker = Worker(consumer, group.kinesis, group.stream, lease_duration=LEASE_S, idle_interval=0.2)
    thread = threading.Thread(target=worker.run, daemon=True)
    started = time.monotonic()
    thread.start()
    while consumer.metrics.snapshot()["RecordsProcessed"] < records:
        time.sleep(0.05)
        if time.monotonic() - started > 600:
            raise TimeoutError("the worker did not finish in 10 minutes")
    elapsed = time.monotonic() - started
    worker.stop()
    thread.join(timeout=60)
    rate = records / elapsed
    return {"records_per_s": rate, "bytes_per_s": rate * RECORD_SIZE, "seconds": elapsed}


def async_kinesis_rate(group: Any, records: int) -> dict[str, float]:
    """async-kinesis's `Consumer` over the same backlog, from TRIM_HORIZON."""
    from kinesis import Consumer, JsonProcessor, MemoryCheckPointer

    async def consume() -> float:
        started = time.monotonic()
        seen = 0
        async with Consumer(
            group.stream,
            endpoint_url=group.endpoint,
            region_name="us-east-1",
            iterator_type="TRIM_HORIZON",
            checkpointer=MemoryCheckPointer(),
            processor=JsonProcessor(),
            sleep_time_no_records=0.2,
            retry_limit=2,
        ) as consumer:
            while seen < records:
                async for _ in consumer:
                    seen += 1
                    if seen >= records:
                        break
                if time.monotonic() - started > 600:
                    raise TimeoutError("async-kinesis did not finish in 10 minutes")
        return time.monotonic() - started

    elapsed = asyncio.run(consume())
    rate = records / elapsed
    return {"records_per_s": rate, "bytes_per_s": rate * RECORD_SIZE, "seconds": elapsed}


def failover(endpoint: str, folder: Path) -> float:
    """Seconds from SIGKILL of one of two workers on 4 shards until the other holds all 4."""
    from tests.support.worker_group import WorkerGroup

    group = WorkerGroup(endpoint, folder, shards=4, lease_duration=LEASE_S)
    try:
        group.send(400)
        for name in ("w1", "w2"):
            group.start(name, "--renew-interval", str(RENEW_S))
        if not group.wait_for(lambda: sorted(group.owners().values()) == [2, 2], timeout=60):
            raise RuntimeError(f"the workers did not settle: {group.owners()}")
        group.signal("w1", signal.SIGKILL)
        killed = time.monotonic()
        if not group.wait_for(lambda: group.owners() == {"w2": 4}, timeout=60, interval=0.02):
            raise RuntimeError(f"no fail-over: {group.owners()}")
        return time.monotonic() - killed
    finally:
        group.stop_all()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.worker", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="5,000 records instead of 40,000")
    args = parser.parse_args(argv)
    from local.endpoint.handle import Endpoint
    from tests.support.worker_group import WorkerGroup

    records = 5_000 if args.quick else 40_000
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):  # the endpoint's conventions
        os.environ.setdefault(name, "test")
    with tempfile.TemporaryDirectory() as scratch, Endpoint(port=0, limits=True) as endpoint:
        group = WorkerGroup(endpoint.url, Path(scratch) / "rate", shards=1)
        _log(f"{records:,} records of {RECORD_SIZE} B on 1 shard, written with the write limits off")
        _backlog(group, records)
        results = {
            "no-op handler": worker_rate(group, records, transactional=False),
            "transactional ADD per record": worker_rate(group, records, transactional=True),
            "async-kinesis Consumer": async_kinesis_rate(group, records),
        }
        seconds = failover(endpoint.url, Path(scratch) / "failover")
    peer = results["async-kinesis Consumer"]["records_per_s"]
    print(f"\n{records:,} records of {RECORD_SIZE} B, 1 shard, read limits on (2 MiB/s, 5 calls/s)\n")
    print("| reader | records/s | share of the shard's 2 MiB/s | vs async-kinesis |")
    print("|---|---:|---:|---:|")
    for name, figures in results.items():
        rate, share = figures["records_per_s"], figures["bytes_per_s"] / READ_LIMIT
        print(f"| {name} | {rate:,.0f} | {share:.1%} | {rate / peer:.2f} |")
    goal = LEASE_S + RENEW_S
    verdict = "met" if seconds <= goal else "NOT met"
    print(
        f"\nfail-over after SIGKILL (2 workers, 4 shards): {seconds:.1f} s; goal <= {goal:.0f} s "
        f"(lease {LEASE_S:.0f} s + renewal interval {RENEW_S:.0f} s): {verdict}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
