"""`python -m local status`: what the running app holds, read over the wire like any client would.

Streams and shards from the endpoint's Kinesis counters (`GET /_shardline/kinesis`), each consumer
group's lease rows from its lease table, DLQ and on-failure queue depths from SQS, and the
functions, API and mappings from the `up` process (`GET /_shardline/runtime` on the API port).

A lease row tells what holds its shard back, and `render` puts it first, in red: a stalled shard
(`stalledSince`, `stalledCause`, `stalledSequence`, `stalls`: the environment failed, nothing is
counted against a record and nothing is lost while the stream holds the records), batches the mapping
discarded while the shard was stalled (`skippedByMapping`: a redrive is owed), and a record that keeps
failing (`failedSequenceNumber`, `failedAttempts`, `lastError`).
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from .. import home
from ..app import environments, model
from ..app.provision import client
from .status_iam import render_iam


def _get_json(url: str) -> Any:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return json.load(response)
    except (urllib.error.URLError, OSError, ValueError) as error:
        return {"error": f"{url}: {error}"}


def function_errors(api_base: str) -> dict[str, int]:
    """Each function's errors so far, as the running app counts them; empty when no app answers there."""
    functions = _get_json(f"{api_base}/_shardline/runtime").get("functions", {})
    return {name: int(stats.get("errors", 0)) for name, stats in functions.items()}


def consumer_groups(app: model.LocalApp) -> list[dict[str, str]]:
    """The consumer functions (a consumer's environment, `shardline.aws_lambda`'s contract) and their
    tables and queues."""
    groups = []
    for function in app.functions:
        env = environments.consumer(function)
        if env is None:
            continue
        mapping = next((m for m in app.mappings if m.function_name == function.name), None)
        groups.append(
            {
                "group": env.group,
                "function": function.name,
                "lease_table": env.lease_table,
                "sink_table": env.sink_table or "",
                "dlq_url": env.dlq_url or "",
                "on_failure_arn": (mapping.on_failure_arn or "") if mapping else "",
            }
        )
    for service in app.workers:  # a worker group: its tasks take the leases themselves (local.ecs)
        env = environments.consumer_of(service.environment)
        if env is not None:
            groups.append(
                {
                    "group": env.group,
                    "function": "",
                    "workers": service.name,
                    "lease_table": env.lease_table,
                    "sink_table": env.sink_table or "",
                    "dlq_url": env.dlq_url or "",
                    "on_failure_arn": "",
                }
            )
    return groups


def collect(app: model.LocalApp, *, endpoint_url: str, api_base: str) -> dict[str, Any]:
    """Everything `status` shows, as JSON-able data (no groups when the endpoint does not answer)."""
    kinesis = _get_json(f"{endpoint_url}/_shardline/kinesis")
    dynamodb = client("dynamodb", endpoint_url, retries={"max_attempts": 2})
    sqs = client("sqs", endpoint_url, retries={"max_attempts": 2})
    groups: list[dict[str, Any]] = []
    for group in consumer_groups(app) if "error" not in kinesis else []:
        leases: list[dict[str, Any]] = []
        for page in dynamodb.get_paginator("scan").paginate(TableName=group["lease_table"]):
            # Only lease rows: a group not built on shardline's consumer may name another table.
            leases += [lease_of(item) for item in page["Items"] if "leaseKey" in item]
        depths: dict[str, int] = {}
        for label, url in (
            ("dlq", group["dlq_url"]),
            ("on_failure", _queue_url(endpoint_url, group["on_failure_arn"])),
        ):
            if url:
                depth = "ApproximateNumberOfMessages"
                attributes = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=[depth])
                depths[label] = int(attributes["Attributes"][depth])
        groups.append({**group, "leases": sorted(leases, key=lambda lease: lease["shard"]), "depths": depths})
    return {
        "kinesis": kinesis,
        "chaos": _get_json(f"{endpoint_url}/_shardline/chaos"),
        "iam": _get_json(f"{endpoint_url}/_shardline/iam"),
        "groups": groups,
        "runtime": _get_json(f"{api_base}/_shardline/runtime"),
        "not_emulated": [
            {"resource": entry.logical_id, "property": entry.property, "difference": entry.difference}
            for entry in app.not_emulated
        ],
    }


def lease_of(item: dict[str, Any]) -> dict[str, Any]:
    """A lease row (DynamoDB's attribute values) as `status` shows it: the position, and what holds the
    shard back (absent attributes read as None, 0 or [])."""

    def text(name: str) -> str | None:
        value = item.get(name, {}).get("S")
        return None if value is None else str(value)

    def number(name: str) -> float | None:
        value = item.get(name, {}).get("N")
        return None if value is None else float(value)

    skipped_json = text("skippedByMapping")
    try:
        skipped = json.loads(skipped_json) if skipped_json else []
    except ValueError:
        skipped = [{"unreadable": skipped_json}]  # shown as it is: still a redrive owed
    failed_sub = number("failedSubSequenceNumber")
    return {
        "shard": item["leaseKey"]["S"],
        "owner": text("leaseOwner") or "",
        "checkpoint": text("checkpoint") or "",
        "counter": int(number("leaseCounter") or 0),
        "stalled_since": number("stalledSince"),
        "stalled_cause": text("stalledCause"),
        "stalled_sequence": text("stalledSequence"),
        "stalls": int(number("stalls") or 0),
        "skipped_by_mapping": skipped if isinstance(skipped, list) else [skipped],
        "failed_sequence": text("failedSequenceNumber"),
        "failed_sub_sequence": None if failed_sub is None else int(failed_sub),
        "failed_attempts": int(number("failedAttempts") or 0),
        "last_error": text("lastError"),
    }


def age(seconds: float) -> str:
    """`age(4000)` -> `1 h 6 min`: how long ago, as an operator reads it."""
    seconds = max(0, int(seconds))
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60} s"
    if seconds < 86400:
        return f"{seconds // 3600} h {seconds % 3600 // 60} min"
    return f"{seconds // 86400} d {seconds % 86400 // 3600} h"


def _deliveries(stalls: int) -> str:
    return f"{stalls} stalled deliver{'y' if stalls == 1 else 'ies'}"


def lease_health(lease: dict[str, Any], now: float) -> str:
    """The lease's cell in the `health` column (rich markup): stalled and skipped first, then failing."""
    parts = []
    if lease.get("stalled_since") is not None:
        stalls = lease.get("stalls", 0)
        parts.append(
            f"[bold white on red] STALLED [/] [bold red]{age(now - lease['stalled_since'])}, "
            f"{stalls} stall{'' if stalls == 1 else 's'}[/]"
        )
    skipped = len(lease.get("skipped_by_mapping") or [])
    if skipped:
        parts.append(f"[bold red]{skipped} skipped by the mapping: redrive[/]")
    if lease.get("failed_attempts"):
        attempts = lease["failed_attempts"]
        parts.append(f"[yellow]a record failed {attempts} time{'' if attempts == 1 else 's'}[/]")
    return "; ".join(parts) or "[green]ok[/]"


def _render_lease_problems(group: dict[str, Any], console: Console, now: float) -> None:
    """Under a group's table, one paragraph per lease held back: the cause in full, what to do."""
    for lease in group["leases"]:
        shard = escape(lease["shard"])
        if lease.get("stalled_since") is not None:
            since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(lease["stalled_since"]))
            console.print(
                f"  [bold white on red] STALLED [/] [bold]{shard}[/] for "
                f"[bold red]{age(now - lease['stalled_since'])}[/] (since {since}, "
                f"{_deliveries(lease.get('stalls', 0))}), retrying from "
                f"{escape(lease.get('stalled_sequence') or 'its checkpoint')}"
            )
            console.print(f"    cause: [bold red]{escape(lease.get('stalled_cause') or 'not recorded')}[/]")
            console.print(
                "    nothing is dead-lettered and nothing is lost while the stream holds the records: fix "
                "the cause and the shard goes on by itself (before the mapping's record age discards the "
                "batch)"
            )
        skipped = lease.get("skipped_by_mapping") or []
        if skipped:
            console.print(
                f"  [bold red]REDRIVE NEEDED[/] [bold]{shard}[/]: the mapping discarded {len(skipped)} "
                f"stalled batch{'' if len(skipped) == 1 else 'es'} this group never applied; redrive "
                "them from the on-failure queue while the stream holds them: "
                f"`python -m local redrive {escape(group['group'])}` (README: Redriving what the mapping "
                "discarded)"
            )
            for entry in skipped:
                if not isinstance(entry, dict) or "unreadable" in entry:
                    raw = entry.get("unreadable") if isinstance(entry, dict) else entry
                    console.print(f"    skippedByMapping (not as expected): {escape(str(raw))}")
                    continue
                detected = entry.get("detectedAt")
                when = age(now - float(detected)) + " ago" if isinstance(detected, int | float) else "?"
                console.print(
                    f"    from {escape(str(entry.get('start', '?')))} (checkpoint "
                    f"{escape(str(entry.get('checkpoint', '?')))}/{entry.get('checkpointSub', 0)}), "
                    f"detected {when}"
                )
        if lease.get("failed_attempts"):
            where = lease.get("failed_sequence") or "?"
            if lease.get("failed_sub_sequence"):
                where += f"/{lease['failed_sub_sequence']}"
            error = escape(lease.get("last_error") or "no error recorded")
            console.print(
                f"  [yellow]FAILING[/] [bold]{shard}[/]: record {escape(where)} failed "
                f"{lease['failed_attempts']} time(s): {error}"
            )


def injected_faults(report: dict[str, Any]) -> dict[str, int]:
    """Every fault injected so far, by type: the endpoint's, then the workers' (`workers.<kind>`)."""
    faults = dict(report.get("chaos", {}).get("injected", {}))
    functions = report.get("runtime", {}).get("functions", {})
    for stats in functions.values():
        for kind, count in (stats.get("chaos") or {}).items():
            faults[f"workers.{kind}"] = faults.get(f"workers.{kind}", 0) + count
    return {kind: count for kind, count in sorted(faults.items()) if count}


def groups_line(app: model.LocalApp, *, endpoint_url: str, api_base: str) -> str:
    """One line on the consumer groups, for `send`'s live display: per group the records its
    mapping processed, its lag (the largest iterator age of its shards, Lambda's IteratorAge: how old
    a batch's last record was when the batch ended) and its DLQ depth."""
    mappings = _get_json(f"{api_base}/_shardline/runtime").get("mappings", {})
    sqs = client("sqs", endpoint_url, retries={"max_attempts": 1})
    parts = []
    for group in consumer_groups(app):
        shards = mappings.get(group["function"], {}).values()
        processed = sum(shard.get("records", 0) for shard in shards)
        lag = max((shard.get("iterator_age_ms") or 0 for shard in shards), default=0)
        depth = "?"
        if group["dlq_url"]:
            name = "ApproximateNumberOfMessages"
            attributes = sqs.get_queue_attributes(QueueUrl=group["dlq_url"], AttributeNames=[name])
            depth = attributes["Attributes"][name]
        parts.append(f"{group['group']}: {processed:,} processed, lag {lag / 1000:,.1f} s, DLQ {depth}")
    return "  ".join(parts)


def _queue_url(endpoint_url: str, arn: str) -> str:
    return model.queue_url(endpoint_url, arn.rsplit(":", 1)[-1]) if arn else ""


def render(report: dict[str, Any], console: Console, *, now: float | None = None) -> None:  # noqa: C901 -- over the gate before it existed; issue 26 cuts it
    """The report as tables; `now` (epoch s) dates the stalls."""
    now = time.time() if now is None else now
    kinesis = report["kinesis"]
    if "error" in kinesis:
        console.print(f"[red]endpoint not answering[/]: {kinesis['error']} (is `{home.UP_COMMAND}` running?)")
    else:
        for stream, summary in kinesis.get("streams", {}).items():
            table = Table(title=f"stream {stream} ({summary.get('status', '?')})", title_justify="left")
            for column in (
                "shard",
                "state",
                "parents",
                "records",
                "bytes",
                "write throttles",
                "read throttles",
            ):
                table.add_column(column, justify="left" if column in ("shard", "parents") else "right")
            for shard_id, shard in summary.get("shards", {}).items():
                table.add_row(
                    shard_id,
                    "open" if shard.get("open") else "closed",
                    ", ".join(shard.get("parents", [])),
                    f"{shard.get('records_written', 0):,}",
                    f"{shard.get('bytes_written', 0):,}",
                    f"{shard.get('write_throttles', 0):,}",
                    f"{shard.get('read_throttles', 0):,}",
                )
            console.print(table)
    mappings = report["runtime"].get("mappings", {}) if "error" not in report["runtime"] else {}
    for group in report["groups"]:
        stalled = sum(1 for lease in group["leases"] if lease.get("stalled_since") is not None)
        skipped = sum(len(lease.get("skipped_by_mapping") or []) for lease in group["leases"])
        title = f"consumer group {group['group']}"
        if stalled:
            title += f" [bold white on red] {stalled} shard{'' if stalled == 1 else 's'} STALLED [/]"
        if skipped:
            title += f" [bold red]{skipped} batch{'' if skipped == 1 else 'es'} to redrive[/]"
        table = Table(title=title, title_justify="left")
        for column in (
            "lease",
            "owner",
            "checkpoint",
            "health",
            "mapping",
            # what the mapping delivered: Kinesis records (aggregates count one), for a Lambda group
            "Kinesis records",
            "iterator age (ms)",
            "errors",
        ):
            # The shard id is what an operator looks up, and the health what they look for: never cut.
            table.add_column(column, no_wrap=column in ("lease", "health"))
        shards = mappings.get(group["function"], {})
        leases = {lease["shard"]: lease for lease in group["leases"]}
        for shard_id in sorted(set(leases) | set(shards)):
            lease, shard = leases.get(shard_id, {}), shards.get(shard_id, {})
            held_back = lease.get("stalled_since") is not None or lease.get("skipped_by_mapping")
            table.add_row(
                escape(shard_id),
                escape(lease.get("owner", "")),
                lease.get("checkpoint", "")[-24:],
                lease_health(lease, now) if lease else "",
                shard.get("state", ""),
                f"{shard['records']:,}" if shard else "",  # no mapping: a worker group's shard
                f"{shard.get('iterator_age_ms') or 0:,.0f}" if shard else "",
                str(shard.get("function_errors", 0)) if shard else "",
                style="red" if held_back else None,
            )
        console.print(table)
        if group.get("workers"):
            _render_workers(group, report["runtime"].get("workers", {}).get(group["workers"], {}), console)
        _render_lease_problems(group, console, now)
        depths = ", ".join(f"{name} {depth}" for name, depth in group["depths"].items())
        console.print(f"  queues: {depths or 'none'}")
    runtime = report["runtime"]
    if "error" in runtime:
        console.print(f"[yellow]runtime not answering[/]: {runtime['error']}")
        return
    table = Table(title="functions", title_justify="left")
    columns = "function|invocations|errors|timeouts|crashes|OOM|workers|p50 ms|p99 ms"
    for column in columns.split("|"):
        table.add_column(column)
    for name, stats in runtime.get("functions", {}).items():
        table.add_row(
            name,
            str(stats.get("invocations", 0)),
            str(stats.get("errors", 0)),
            str(stats.get("timeouts", 0)),
            str(stats.get("crashes", 0)),
            str(stats.get("out_of_memory", 0)),
            str(stats.get("workers", 0)),
            f"{stats.get('p50_ms') or 0:.1f}",
            f"{stats.get('p99_ms') or 0:.1f}",
        )
    console.print(table)
    for name, stats in runtime.get("functions", {}).items():
        if stats.get("not_as_deployed"):
            console.print(f"[red]not as deployed[/] {name}: {stats['not_as_deployed']}")
    _render_chaos(report, console)
    render_iam(report, console)
    _render_not_emulated(report, console)
    api = runtime.get("api", {})
    console.print(
        f"REST API: {api.get('requests', 0)} requests, {api.get('status_4xx', 0)} 4XX, "
        f"{api.get('status_5xx', 0)} 5XX, {api.get('throttled', 0)} throttled, "
        f"p99 {api.get('latency_p99_ms', 0):.0f} ms"
    )


def _render_workers(group: dict[str, Any], service: dict[str, Any], console: Console) -> None:
    """A worker group's tasks and the open leases each holds (a lease owned by no task is waiting
    for one to take it: a worker that stopped, or a shard not taken yet)."""
    open_leases = [lease for lease in group["leases"] if lease.get("checkpoint") != "SHARD_END"]
    held: dict[str, int] = {}
    for lease in open_leases:
        owner = lease.get("owner") or "(no one)"
        held[owner] = held.get(owner, 0) + 1
    tasks = service.get("tasks", [])
    behind = service.get("behind_ms")
    lag = "not published yet (the tasks' EMF, every 60 s)" if behind is None else f"{behind:,.0f} ms"
    console.print(
        f"  workers: {service.get('running', 0)} running of {service.get('desired', '?')} "
        f"({service.get('replaced', 0)} replaced, {service.get('killed', 0)} killed by chaos); "
        f"behind: {lag}"
    )
    if service.get("not_as_deployed"):
        console.print(f"  [red]not as deployed[/]: {service['not_as_deployed']}")
    for task in tasks:
        state = "running" if task.get("alive") else "stopped"
        console.print(f"    {escape(task['task'])} ({state}): {held.pop(task['task'], 0)} leases")
    for owner, count in sorted(held.items()):
        console.print(f"    {escape(owner)}: {count} leases")


def _render_not_emulated(report: dict[str, Any], console: Console) -> None:
    """The template's properties the runtime does not act on: flagged, never silently dropped."""
    entries = report.get("not_emulated", [])
    if not entries:
        return
    table = Table(title="not emulated (the app runs without these)", title_justify="left")
    for column in ("resource", "property", "what differs"):
        table.add_column(column)
    for entry in entries:
        table.add_row(entry["resource"], entry["property"], entry["difference"])
    console.print(table)


def _render_chaos(report: dict[str, Any], console: Console) -> None:
    chaos = report.get("chaos", {})
    if not chaos.get("active"):
        return
    table = Table(title=f"chaos: profile {chaos.get('profile', '?')}", title_justify="left")
    table.add_column("fault")
    table.add_column("injected", justify="right")
    for kind, count in injected_faults(report).items():
        table.add_row(kind, f"{count:,}")
    for reshard in chaos.get("reshards", []):
        done = reshard.get("done_at")
        table.add_row(
            f"reshard.{reshard.get('action')} at {reshard.get('at_s')} s",
            "done" if done else "pending",
        )
    console.print(table)
