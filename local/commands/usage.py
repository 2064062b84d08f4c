"""`python -m local usage [--json] [--reset]`: the billable operations of the running app, per component.

Read from the `up` process (`GET /_shardline/usage` on the API port; `--reset` POSTs, which answers
the reading and zeroes it), which merges its own ledger with the endpoint's. What each counter means
and how it is rounded: `local.cloudwatch.usage`.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

__all__ = ["fetch", "render"]

#: Per service: its title, what its resources are, and its counters in order, with their column labels.
COLUMNS: dict[str, tuple[str, str, tuple[tuple[str, str], ...]]] = {
    "apigateway": ("API Gateway", "REST API", (("requests", "requests"),)),
    "lambda": ("Lambda", "function", (
        ("invocations", "invocations"), ("billed_ms", "billed ms"), ("memory_mb", "memory MB"),
        ("gb_seconds", "GB-s"), ("inits", "inits"), ("init_billed_ms", "init ms"),
    )),
    "kinesis": ("Kinesis", "stream", (
        ("put_records_calls", "PutRecords"), ("put_record_calls", "PutRecord"),
        ("records_written", "records"), ("bytes_written", "bytes"),
        ("put_payload_units", "PUT payload units"), ("kib_written", "KiB (on-demand)"),
        ("get_records_calls", "GetRecords"), ("records_read", "records read"), ("bytes_read", "bytes read"),
    )),
    "kinesis_consumers": ("Kinesis enhanced fan-out", "stream/consumer", (
        ("get_records_calls", "reads"), ("subscriptions", "subscriptions"), ("records_read", "records"),
        ("bytes_read", "bytes"),
    )),
    "dynamodb": ("DynamoDB", "table", (
        ("write_units", "write units"), ("read_units", "read units"),
        ("items", "items"), ("bytes_stored", "bytes stored"),
    )),
    "sqs": ("SQS", "queue", (("requests", "requests"), ("messages_sent", "messages sent"))),
    "logs": ("CloudWatch Logs", "log group", (("events", "events"), ("bytes", "bytes ingested"))),
    "emf": ("CloudWatch EMF", "log group", (("documents", "EMF documents"), ("metrics", "distinct metrics"))),
    "cloudwatch": ("CloudWatch PutMetricData", "namespace", (
        ("put_metric_data_calls", "calls"), ("metrics", "distinct metrics"),
    )),
}  # fmt: skip


def fetch(api_base: str, *, reset: bool = False) -> dict[str, Any]:
    """The running app's reading (`reset`: zeroed as it is read); {"error": ...} when none answers."""
    request = urllib.request.Request(f"{api_base}/_shardline/usage", method="POST" if reset else "GET")
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            answer: dict[str, Any] = json.load(response)
            return answer
    except (urllib.error.URLError, OSError, ValueError) as error:
        return {"error": f"{api_base}/_shardline/usage: {error}"}


def render(reading: dict[str, Any], console: Console) -> None:
    """A table per component, a row per resource; services the runtime does not know, as they come."""
    if "error" in reading:
        console.print(
            f"[red]runtime not answering[/]: {reading['error']} (is `up` running, with a REST API?)"
        )
        return
    console.print(f"usage over the last {reading.get('seconds', 0):,.1f} s")
    services = reading.get("services", {})
    for service in [*COLUMNS, *sorted(set(services) - set(COLUMNS))]:
        resources = services.get(service)
        if not resources:
            continue
        title, kind, columns = COLUMNS.get(service, (service, "resource", ()))
        if not columns:
            names = sorted({name for counts in resources.values() for name in counts})
            columns = tuple((name, name) for name in names)
        table = Table(title=title, title_justify="left")
        table.add_column(kind)
        for _, label in columns:
            table.add_column(label, justify="right")
        for resource, counts in sorted(resources.items()):
            table.add_row(escape(resource), *(_number(counts.get(name)) for name, _ in columns))
        console.print(table)


def _number(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float) and not value.is_integer():
        return f"{value:,.3f}".rstrip("0")
    return f"{int(value):,}"
