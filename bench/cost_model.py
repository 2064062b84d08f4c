"""From what an app did for a measured load to what a million records cost, component by component.

    app = Measured.from_usage(ledger_json, records=100_000)
    bill = price(app, rate=10_000)           # {component: Line(usd per million records, quantity)}
    total(bill)

`Measured` holds counts the local runtime took (`shardline local usage`), never estimates from the
code. `price` scales them to a million records and prices each component with `bench.cost_prices`,
as the app is deployed: Kinesis provisioned (the shards the sustained rate needs), DynamoDB on
demand. `price(..., kinesis="on-demand", dynamodb="provisioned")` gives the other modes.

Two conversions are the model's own, the same for every app:

- **Lambda's duration from this machine's.** A worker runs on a whole core here; Lambda gives a
  function CPU in proportion to its memory, a whole vCPU at 1,769 MB. So a duration measured here
  becomes `local × max(1, 1769 / memory MB)` in Lambda, and its GB-seconds `local s × max(memory,
  1769) / 1024` — for work bound by CPU, the memory size below 1,769 MB changes the duration, not
  the cost. (Time spent waiting on a call does not stretch so; the model treats all of it as CPU,
  which overstates waits the same way for both apps.)
- **Shards from the rate.** A stream needs `ceil(max(Kinesis records/s ÷ 1,000, bytes/s ÷ 1 MiB,
  groups × bytes/s ÷ 2 MiB))` shards to carry the rate within the per-shard write limits and the
  shared read limit (every group reads every byte; enhanced fan-out aside); a million records at
  `rate` take `10⁶ ÷ rate` seconds of those shard-hours. A monthly price (a custom metric) is
  prorated over the same hours.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from bench.cost_prices import HOURS_PER_MONTH, PRICES

__all__ = [
    "FULL_VCPU_MB",
    "FunctionUse",
    "Line",
    "Measured",
    "lambda_gb_seconds",
    "price",
    "shards_needed",
    "total",
]

FULL_VCPU_MB = 1769  # Lambda's memory size with one whole vCPU
WRITE_RECORDS_PER_SHARD = 1000
WRITE_BYTES_PER_SHARD = 1 << 20
READ_BYTES_PER_SHARD = 2 << 20
MILLION = 1_000_000
#: Bytes CloudWatch Logs adds to each event's message when it meters ingestion.
LOG_EVENT_OVERHEAD = 26


@dataclass(frozen=True)
class FunctionUse:
    """One function's invocations and billed milliseconds, measured here, and its memory size."""

    invocations: int
    billed_ms: float
    memory_mb: int


@dataclass(frozen=True)
class Measured:
    """What one app did for `records` user records."""

    records: int
    api_requests: int = 0
    functions: Mapping[str, FunctionUse] = field(default_factory=dict)
    kinesis_records: int = 0  # Kinesis records written: one per aggregate, or per user record unaggregated
    kinesis_bytes: int = 0  # data + partition keys, as Kinesis meters them
    put_payload_units: int = 0
    kinesis_in_kib_rounded: int = 0  # each record rounded up to 1 KiB: on-demand's data-in
    reading_groups: int = 1
    dynamodb_wru: float = 0.0
    dynamodb_rru: float = 0.0
    dynamodb_bytes_stored: int = 0
    sqs_requests: int = 0
    sqs_fifo_requests: int = 0
    log_bytes: int = 0
    custom_metrics: int = 0

    @classmethod
    def from_usage(cls, usage: Mapping[str, Any], *, records: int, reading_groups: int = 1) -> Measured:
        """From a reading of the runtime's usage ledger (`shardline local usage --json`, or
        `GET /_shardline/usage`) taken over a load of `records` user records. A function's init
        phases are billed with its invocations (Lambda bills INIT); a log event costs its bytes and
        `LOG_EVENT_OVERHEAD` more, as CloudWatch Logs meters ingestion."""
        services = usage.get("services", usage)
        functions = {
            name: FunctionUse(
                int(f.get("invocations", 0)),
                float(f.get("billed_ms", 0)) + float(f.get("init_billed_ms", 0)),
                int(f.get("memory_mb", 0)),
            )
            for name, f in services.get("lambda", {}).items()
        }
        streams = services.get("kinesis", {}).values()
        tables = services.get("dynamodb", {}).values()
        queues = services.get("sqs", {}).items()
        return cls(
            records=records,
            api_requests=sum(int(api.get("requests", 0)) for api in services.get("apigateway", {}).values()),
            functions=functions,
            kinesis_records=sum(int(s.get("records_written", 0)) for s in streams),
            kinesis_bytes=sum(int(s.get("bytes_written", 0)) for s in streams),
            put_payload_units=sum(int(s.get("put_payload_units", 0)) for s in streams),
            kinesis_in_kib_rounded=sum(int(s.get("kib_written", 0)) for s in streams),
            reading_groups=max(1, reading_groups),
            dynamodb_wru=sum(float(t.get("write_units", 0)) for t in tables),
            dynamodb_rru=sum(float(t.get("read_units", 0)) for t in tables),
            dynamodb_bytes_stored=sum(int(t.get("bytes_stored", 0)) for t in tables),
            sqs_requests=sum(int(q.get("requests", 0)) for name, q in queues if not name.endswith(".fifo")),
            sqs_fifo_requests=sum(int(q.get("requests", 0)) for name, q in queues if name.endswith(".fifo")),
            log_bytes=sum(
                int(g.get("bytes", 0)) + LOG_EVENT_OVERHEAD * int(g.get("events", 0))
                for g in services.get("logs", {}).values()
            ),
            custom_metrics=int(services.get("emf", {}).get("metrics", 0))
            + int(services.get("cloudwatch", {}).get("metrics", 0)),
        )


@dataclass(frozen=True)
class Line:
    """One component's dollars per million records, and the quantity priced (in `unit`s)."""

    usd: float
    quantity: float
    unit: str


def lambda_gb_seconds(use: FunctionUse) -> float:
    """GB-seconds Lambda would bill for `use` (the module's conversion of a duration measured here)."""
    return use.billed_ms / 1000 * max(use.memory_mb, FULL_VCPU_MB) / 1024


def shards_needed(app: Measured, rate: float) -> int:
    """Shards that carry `rate` user records/s of `app` within Kinesis's per-shard limits."""
    records_per_s = app.kinesis_records / app.records * rate
    bytes_per_s = app.kinesis_bytes / app.records * rate
    return max(
        1,
        math.ceil(records_per_s / WRITE_RECORDS_PER_SHARD),
        math.ceil(bytes_per_s / WRITE_BYTES_PER_SHARD),
        math.ceil(app.reading_groups * bytes_per_s / READ_BYTES_PER_SHARD),
    )


def price(
    app: Measured, rate: float, *, kinesis: str = "provisioned", dynamodb: str = "on-demand"
) -> dict[str, Line]:
    """Dollars per million records of `app` at `rate` user records/s sustained, per component."""
    if app.records <= 0 or rate <= 0:
        raise ValueError(f"records and rate must be positive, got {app.records} and {rate}")
    scale = MILLION / app.records
    hours = MILLION / rate / 3600  # how long a million records take at `rate`
    p = {name: item.usd for name, item in PRICES.items()}
    invocations = sum(f.invocations for f in app.functions.values()) * scale
    gb_seconds = sum(lambda_gb_seconds(f) for f in app.functions.values()) * scale
    bill = {
        "API Gateway requests": Line(
            app.api_requests * scale * p["apigateway.rest_request"], app.api_requests * scale, "requests"
        ),
        "Lambda requests": Line(invocations * p["lambda.request"], invocations, "invocations"),
        "Lambda duration": Line(gb_seconds * p["lambda.arm_gb_second"], gb_seconds, "GB-s"),
    }
    if kinesis == "provisioned":
        shard_hours = shards_needed(app, rate) * hours
        units = app.put_payload_units * scale
        bill["Kinesis shard-hours"] = Line(shard_hours * p["kinesis.shard_hour"], shard_hours, "shard-hours")
        bill["Kinesis PUT payload units"] = Line(units * p["kinesis.put_payload_unit"], units, "units")
    elif kinesis == "on-demand":
        gb_in = app.kinesis_in_kib_rounded * scale / (1 << 20)
        gb_out = app.reading_groups * app.kinesis_bytes * scale / (1 << 30)
        bill["Kinesis stream-hours"] = Line(hours * p["kinesis.on_demand_stream_hour"], hours, "stream-hours")
        bill["Kinesis data in"] = Line(gb_in * p["kinesis.on_demand_in_gb"], gb_in, "GB")
        bill["Kinesis data out"] = Line(gb_out * p["kinesis.on_demand_out_gb"], gb_out, "GB")
    else:
        raise ValueError(f"kinesis: provisioned or on-demand, got {kinesis!r}")
    wru, rru = app.dynamodb_wru * scale, app.dynamodb_rru * scale
    if dynamodb == "on-demand":
        bill["DynamoDB writes"] = Line(wru * p["dynamodb.wru"], wru, "WRU")
        bill["DynamoDB reads"] = Line(rru * p["dynamodb.rru"], rru, "RRU")
    elif dynamodb == "provisioned":  # exactly the capacity the rate needs, no headroom
        wcu, rcu = math.ceil(wru / MILLION * rate), math.ceil(rru / MILLION * rate)
        bill["DynamoDB writes"] = Line(wcu * hours * p["dynamodb.wcu_hour"], wcu * hours, "WCU-hours")
        bill["DynamoDB reads"] = Line(rcu * hours * p["dynamodb.rcu_hour"], rcu * hours, "RCU-hours")
    else:
        raise ValueError(f"dynamodb: on-demand or provisioned, got {dynamodb!r}")
    stored_gb = app.dynamodb_bytes_stored * scale / 1e9
    bill["DynamoDB storage (a month)"] = Line(
        stored_gb * p["dynamodb.storage_gb_month"], stored_gb, "GB-month"
    )
    sqs = app.sqs_requests * scale * p["sqs.request"] + app.sqs_fifo_requests * scale * p["sqs.fifo_request"]
    bill["SQS requests"] = Line(sqs, (app.sqs_requests + app.sqs_fifo_requests) * scale, "requests")
    log_gb = app.log_bytes * scale / 1e9
    bill["CloudWatch logs"] = Line(log_gb * p["logs.ingested_gb"], log_gb, "GB")
    metric_months = app.custom_metrics * hours / HOURS_PER_MONTH
    bill["CloudWatch custom metrics"] = Line(
        metric_months * p["cloudwatch.custom_metric_month"], metric_months, "metric-months"
    )
    return bill


def total(bill: Mapping[str, Line]) -> float:
    return sum(line.usd for line in bill.values())
