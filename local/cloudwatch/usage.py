"""The usage ledger: the billable operations of the app the runtime runs, counted where they are served.

    usage = Usage()
    usage.add("kinesis", "events", put_records_calls=1, records_written=500, put_payload_units=500)
    usage.snapshot()   # {"since": ..., "seconds": ..., "services": {"kinesis": {"events": {...}}}}
    usage.reset()      # counts from zero (what a resource *is*, e.g. a function's memory, stays)

A cost benchmark reads it before and after its load (`GET /_shardline/usage` on the API port,
`?reset=1` or POST to zero it; `python -m local usage`), and prices what it counted. Two ledgers
make one reading: the endpoint's (Kinesis, DynamoDB, SQS, PutMetricData: `local.endpoint.metering`,
in the endpoint's process) and the runtime's own (Lambda, API Gateway, logs and EMF);
`Runtime.usage` merges them (`merge`).

Counters, per service and resource, and how each is metered (the AWS page that defines it):

- `apigateway` / REST API name: `requests`, every request that reached the stage, whatever its
  status (throttled and refused ones included: API Gateway bills each API call received).
  https://aws.amazon.com/api-gateway/pricing/
- `lambda` / function name: `invocations`; `billed_ms`, each invocation's duration rounded up to
  the next 1 ms (`billed_ms()`); `memory_mb` from the template; `gb_seconds` = Σ billed ms / 1000 ×
  memory MB / 1024 (derived at the reading); `inits` and `init_billed_ms`, the init phases, apart
  (a duration measured on this machine is this machine's: a bench converts both apps alike).
  https://aws.amazon.com/lambda/pricing/ ("Duration is calculated from the time your code begins
  executing until it returns or otherwise terminates, rounded up to the nearest 1 ms")
- `kinesis` / stream name: `put_record_calls`, `put_records_calls` (every call); of the records
  written (refused ones are not): `records_written`, `bytes_written` (data + partition key, as
  Kinesis meters a record), `put_payload_units` (provisioned mode), each record's size in 25 KiB
  chunks rounded up (`payload_units()`: 5 KB is 1, 45 KB 2, 1,000 KiB 40 — AWS's "a 1MB record
  contains 40": a whole MiB is 41), and `kib_written` (on-demand mode's data in: each record
  rounded up to 1 KiB, "the nearest 1 KB (1,024 bytes)"); `get_records_calls`, `records_read`,
  `bytes_read` of the shared-throughput reads served (a throttled GetRecords is not).
  https://aws.amazon.com/kinesis/data-streams/pricing/ ("A PUT Payload Unit is counted in 25KB
  payload chunks that comprise a record")
- `kinesis_consumers` / `stream/consumer`: a registered consumer's reads (enhanced fan-out, billed
  per GB retrieved): `get_records_calls` (the local mappings' reads named as the consumer's),
  `subscriptions` (SubscribeToShard calls made), `records_read`, `bytes_read` (pushed ones too).
- `dynamodb` / table name: `write_units` and `read_units` as on-demand bills them (`write_units()`,
  `read_units()`): a write costs ceil(item size / 1 KB) per item, the larger of the item before
  and after (PutItem, UpdateItem), the item deleted (DeleteItem; 1 if there was none), at least 1
  for a write whose condition failed (the size of the item it found); a transactional write
  (TransactWriteItems) costs 2 per KB per item; a read ceil(size / 4 KB), half when eventually
  consistent, summed over the items of a Query or Scan before rounding (per call), per item for
  BatchGetItem, 2× for TransactGetItems, and a ConditionCheck in a transaction is metered as a
  transactional read of the item it checks (2 × ceil(size / 4 KB)); `items` and `bytes_stored`
  at the reading (storage; DynamoDB adds 100 bytes of overhead per item, left to the pricer).
  Item size as DynamoDB computes it: names plus values (`local.endpoint.metering.item_size`).
  https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/read-write-operations.html
  https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/transaction-apis.html#transaction-capacity-handling
  https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/CapacityUnitCalculations.html
- `sqs` / queue name: `requests`, every API call naming the queue, a call's payload counted per
  64 KB chunk (`sqs_requests()`: a 256 KB SendMessage is 4 requests; the payload of a send is its
  messages' bodies and attributes, of a receive the messages it returned); `messages_sent`.
  https://aws.amazon.com/sqs/pricing/ ("Each 64 KB chunk of a payload is billed as 1 request")
- `logs` / log group: `events` and `bytes` (UTF-8, the line without its newline) of the functions'
  output as Lambda ships it, START/END/REPORT and INIT lines included (the runtime's own notes
  about a function are not). The API's access logs are not written by the runtime, so not counted.
  https://aws.amazon.com/cloudwatch/pricing/ (Logs: data ingested)
- `emf` / log group: `documents`, the EMF lines; `metrics`, the distinct metrics they define
  (namespace, name and dimensions with their values: CloudWatch's custom metric), since the reset.
- `cloudwatch` / namespace: `put_metric_data_calls`, and `metrics` distinct as above.
  https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/CloudWatch_Embedded_Metric_Format.html

Counting stays cheap (a soak counts a million records): one lock and a few integer adds per
operation; sets only for the distinct metrics.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Hashable, Iterable
from typing import Any

__all__ = [
    "Usage",
    "billed_ms",
    "gb_seconds",
    "merge",
    "payload_units",
    "read_units",
    "sqs_requests",
    "write_units",
]

KiB = 1024
PAYLOAD_UNIT_BYTES = 25 * KiB
WRITE_UNIT_BYTES = 1 * KiB
READ_UNIT_BYTES = 4 * KiB
SQS_CHUNK_BYTES = 64 * KiB


def _chunks(size: int, chunk: int) -> int:
    """`size` in `chunk`s rounded up, at least one (an empty record or item still costs a unit)."""
    return max(1, -(-size // chunk))


def payload_units(record_bytes: int) -> int:
    """Kinesis PUT payload units of one record (data + partition key): 25 KiB chunks, rounded up."""
    return _chunks(record_bytes, PAYLOAD_UNIT_BYTES)


def write_units(item_bytes: int) -> int:
    """DynamoDB write request units of writing one item of `item_bytes` (1 KB each, rounded up)."""
    return _chunks(item_bytes, WRITE_UNIT_BYTES)


def read_units(read_bytes: int, *, consistent: bool) -> float:
    """DynamoDB read request units of one read of `read_bytes` (4 KB each, rounded up; half if eventual)."""
    units = _chunks(read_bytes, READ_UNIT_BYTES)
    return units if consistent else units / 2


def sqs_requests(payload_bytes: int) -> int:
    """SQS billed requests of one API call with `payload_bytes` of payload (64 KB chunks, at least 1)."""
    return _chunks(payload_bytes, SQS_CHUNK_BYTES)


def billed_ms(duration_ms: float) -> int:
    """Lambda's billed duration: rounded up to the next millisecond, at least 1."""
    return max(1, math.ceil(duration_ms))


def gb_seconds(billed: float, memory_mb: float) -> float:
    return billed / 1000 * memory_mb / 1024


Counts = dict[str, Any]


class Usage:
    """Counters per (service, resource); thread-safe. See the module for what each counter means."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._counts: dict[tuple[str, str], dict[str, float]] = {}
        self._distinct: dict[tuple[str, str, str], set[Hashable]] = {}
        self._described: dict[tuple[str, str], dict[str, Any]] = {}
        self.since = clock()

    def add(self, service: str, resource: str, **amounts: float) -> None:
        """Add each of `amounts` to the resource's counter of that name."""
        key = (service, resource)
        with self._lock:
            counts = self._counts.get(key)
            if counts is None:
                counts = self._counts[key] = {}
            for name, amount in amounts.items():
                counts[name] = counts.get(name, 0) + amount

    def distinct(self, service: str, resource: str, counter: str, keys: Iterable[Hashable]) -> None:
        """Count each of `keys` once in `counter` (e.g. the distinct metrics EMF lines define)."""
        with self._lock:
            seen = self._distinct.get((service, resource, counter))
            if seen is None:
                seen = self._distinct[(service, resource, counter)] = set()
            seen.update(keys)

    def describe(self, service: str, resource: str, **values: Any) -> None:
        """What the resource is (e.g. a function's `memory_mb`): shown with its counts, kept over a reset."""
        with self._lock:
            self._described.setdefault((service, resource), {}).update(values)

    def reset(self) -> None:
        self.snapshot(reset=True)

    def snapshot(self, *, reset: bool = False) -> dict[str, Any]:
        """{"since", "seconds", "services": {service: {resource: {counter: value}}}}, derived values
        included; `reset`: zeroed in the same step (nothing counted between a reading and its reset)."""
        now = self._clock()
        with self._lock:
            services: dict[str, dict[str, Counts]] = {}
            for (service, resource), values in self._described.items():
                services.setdefault(service, {}).setdefault(resource, {}).update(values)
            for (service, resource), counts in self._counts.items():
                services.setdefault(service, {}).setdefault(resource, {}).update(counts)
            for (service, resource, counter), seen in self._distinct.items():
                services.setdefault(service, {}).setdefault(resource, {})[counter] = len(seen)
            since = self.since
            if reset:
                self._counts.clear()
                self._distinct.clear()
                self.since = now
        derive(services)
        return {"since": since, "seconds": round(now - since, 3), "services": services}


def derive(services: dict[str, dict[str, Counts]]) -> None:
    """Values computed from the counters (in place): each function's GB-seconds."""
    for counts in services.get("lambda", {}).values():
        memory = counts.get("memory_mb")
        if memory is not None:
            counts["gb_seconds"] = round(gb_seconds(counts.get("billed_ms", 0), memory), 6)
            counts["init_gb_seconds"] = round(gb_seconds(counts.get("init_billed_ms", 0), memory), 6)


def merge(*snapshots: dict[str, Any]) -> dict[str, Any]:
    """One reading from several ledgers' snapshots (the runtime's and the endpoint's): services
    side by side (a service and resource in two of them: counters added); `since` the earliest."""
    services: dict[str, dict[str, Counts]] = {}
    for snapshot in snapshots:
        for service, resources in snapshot.get("services", {}).items():
            for resource, counts in resources.items():
                into = services.setdefault(service, {}).setdefault(resource, {})
                for name, value in counts.items():
                    into[name] = into.get(name, 0) + value if isinstance(value, int | float) else value
    derive(services)
    since = min((s["since"] for s in snapshots if "since" in s), default=time.time())
    seconds = max((s.get("seconds", 0) for s in snapshots), default=0)
    return {"since": since, "seconds": seconds, "services": services}
