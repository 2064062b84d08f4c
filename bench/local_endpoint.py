"""The local AWS endpoint's figures: start-up time, and the Kinesis write throughput it carries.

`run(quick)` starts `local.endpoint` child processes and measures:
- start-up: seconds from spawning the endpoint to its first answer;
- the emulator's ceiling: MiB/s of PutRecords landed on 4 shards with the limits off (one writer
  thread per shard, each request 500 entries of ~2 KiB, the size of KPL aggregates: ~1 MiB);
- the same with the limits on, throttled entries resent: ~4 MiB/s (4 shards x 1 MiB/s) is right,
  and the ceiling must be above it for the limits, not the emulator, to be the bottleneck.

    python -m bench.local_endpoint [--quick]
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
from typing import Any

import boto3
import botocore.config

from local.endpoint.handle import Endpoint

MiB = 1024 * 1024
SHARDS = 4
ENTRIES = 500
ENTRY_BYTES = 2 * 1024  # data + partition key: 500 of them make a ~1 MiB request


def _client(url: str) -> Any:
    config = botocore.config.Config(
        retries={"max_attempts": 0}, max_pool_connections=SHARDS * 2, read_timeout=60
    )
    return boto3.client(
        "kinesis",
        endpoint_url=url,
        region_name="us-east-1",
        aws_access_key_id="test",
        aws_secret_access_key="test",
        config=config,
    )


def startup_seconds(repeats: int) -> tuple[float, float]:
    """Median seconds from spawning the endpoint to its first answer, and to first answers of the
    services `make local` provisions (Kinesis, DynamoDB, SQS), each app built on first use."""
    ready, services = [], []
    for _ in range(repeats):
        began = time.monotonic()
        endpoint = Endpoint(port=0).start()
        ready.append(endpoint.started_in)
        session = {"region_name": "us-east-1", "aws_access_key_id": "test", "aws_secret_access_key": "test"}
        boto3.client("kinesis", endpoint_url=endpoint.url, **session).list_streams()
        boto3.client("dynamodb", endpoint_url=endpoint.url, **session).list_tables()
        boto3.client("sqs", endpoint_url=endpoint.url, **session).list_queues()
        services.append(time.monotonic() - began)
        endpoint.stop()
    return statistics.median(ready), statistics.median(services)


def write_throughput(url: str, seconds: float) -> dict[str, float]:
    """MiB/s landed by one writer thread per shard for `seconds`, resending throttled entries."""
    client = _client(url)
    name = f"bench-{time.monotonic_ns()}"
    client.create_stream(StreamName=name, ShardCount=SHARDS)
    shards = client.list_shards(StreamName=name)["Shards"]
    landed = [0] * SHARDS
    throttled = [0] * SHARDS
    requests = [0] * SHARDS
    deadline = time.monotonic() + seconds

    def writer(index: int) -> None:
        own = _client(url)
        key = shards[index]["HashKeyRange"]["StartingHashKey"]
        pending = [
            {
                "Data": b"%08d" % i + b"a" * (ENTRY_BYTES - 8 - 4),
                "PartitionKey": "pkey",
                "ExplicitHashKey": key,
            }
            for i in range(ENTRIES)
        ]
        while time.monotonic() < deadline:
            answer = own.put_records(StreamName=name, Records=pending)
            requests[index] += 1
            # A producer with a backlog: the refused entries go again, in a full request.
            refused = answer["FailedRecordCount"]
            landed[index] += (len(pending) - refused) * ENTRY_BYTES
            throttled[index] += refused
            if refused == len(pending):
                time.sleep(0.05)  # nothing landed: the shard's second is spent

    began = time.monotonic()
    threads = [threading.Thread(target=writer, args=(i,)) for i in range(SHARDS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.monotonic() - began
    return {
        "mib_per_s": sum(landed) / MiB / elapsed,
        "requests_per_s": sum(requests) / elapsed,
        "throttled_entries": float(sum(throttled)),
    }


def _row(name: str, value: float, unit: str, note: str) -> dict[str, Any]:
    return {"name": name, "value": round(value, 2), "unit": unit, "note": note}


def run(quick: bool) -> list[dict[str, Any]]:
    seconds = 4.0 if quick else 10.0
    start, services = startup_seconds(1 if quick else 3)
    with Endpoint(port=0, limits=False) as endpoint:
        ceiling = write_throughput(endpoint.url, seconds)
    with Endpoint(port=0, limits=True) as endpoint:
        limited = write_throughput(endpoint.url, seconds)
    return [
        _row(
            "endpoint start-up", start, "s", "spawn of python -m local.endpoint to its first answer (median)"
        ),
        _row("start-up to Kinesis+DynamoDB+SQS", services, "s", "spawn to a first answer from each (median)"),
        _row(
            "Kinesis writes, 4 shards, limits off",
            ceiling["mib_per_s"],
            "MiB/s",
            f"the emulator's ceiling; {ceiling['requests_per_s']:.1f} PutRecords/s of 500 x 2 KiB",
        ),
        _row(
            "Kinesis writes, 4 shards, limits on",
            limited["mib_per_s"],
            "MiB/s",
            f"4 x 1 MiB/s, plus each shard's first second of burst over the {seconds:.0f} s run; "
            f"{limited['throttled_entries']:.0f} entries throttled and resent",
        ),
    ]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="the local endpoint's start-up and write throughput")
    parser.add_argument("--quick", action="store_true", help="shorter runs")
    args = parser.parse_args(argv)
    for row in run(args.quick):
        print(f"{row['name']:<40} {row['value']:>8} {row['unit']:<6} {row['note']}")


if __name__ == "__main__":
    main()
