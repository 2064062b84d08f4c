"""The verdict of a `send` run for a person, with rich: a table per group, the stream, the oddities.

    print(render(verdict))

and, while `wait_and_verify` waits, the progress line it shows (`progress_line`).
"""

from __future__ import annotations

import io
from collections import Counter

from rich.console import Console
from rich.table import Table
from rich.text import Text

from .verify_verdict import LAG, GroupResult, StreamResult, Verdict


def render(verdict: Verdict) -> str:
    """The verdict as text: the groups' table, the summary, the stream, and where records went twice."""
    report = verdict.report
    title = (
        f"run {report.run_id}: {len(report.accepted):,} accepted, {len(report.failed):,} refused, "
        + (f"{len(report.unconfirmed):,} unconfirmed, " if report.unconfirmed else "")
        + f"{len(report.reposted):,} re-posted ({sum(report.whole_failures.values()):,} requests failed as "
        f"a whole, {report.replies_lost:,} replies lost), {report.accepted_per_second:,.0f}/s"
        + ("" if report.ids else " — without ids: at least once for re-posted records")
        + (f"; data: {report.payloads.describe()}" if report.payloads is not None else "")
    )
    table = Table()  # the title is a line of its own: a table's title wraps at the table's width
    columns = (
        "group|sink|applied|dead-lettered|missing|dup|counts|ids|poison in DLQ|latency p50/p99/max|drain|ok"
    )
    for column in columns.split("|"):
        table.add_column(column)
    for g in verdict.groups:
        lat = g.latency_s
        table.add_row(
            g.group.name,
            g.group.kind,
            f"{g.applied:,}/{g.expected:,}",
            f"{g.dlq_depth:,}" + (f" ({len(g.dead_lettered):,} not poison)" if g.dead_lettered else ""),
            f"{g.missing:,}",
            str(len(g.duplicated)),
            ("exact" if not g.wrong_counts else f"{len(g.wrong_counts)} wrong")
            if g.group.kind == "counter"
            else "-",
            ("ok" if not g.wrong_ids else f"{len(g.wrong_ids)} wrong")
            if g.group.kind == "records" and report.ids
            else "-",
            f"{g.poison_whole}/{g.poison_whole + len(g.poison_missing)}",
            f"{lat['p50']:.2f}/{lat['p99']:.2f}/{lat['max']:.2f} s" if lat else "-",
            f"{g.drain_s:.1f} s" if g.drain_s is not None else "not drained",
            "yes" if g.ok else "NO",
        )
    console = Console(width=170, record=True, file=io.StringIO())
    console.print(table)
    summary = (
        f"verdict: {verdict.lost:,} missing, {verdict.dead_lettered:,} dead-lettered (not sent as poison), "
        f"{verdict.duplicate_effects:,} duplicate effects, counts "
        f"{'exact' if not any(g.wrong_counts for g in verdict.groups) else 'WRONG'}"
        + (f", {report.echo_mismatches:,} answers echoing another id" if report.echo_mismatches else "")
    )
    note = f"latency: POST -> first poll that saw it in the sink (resolution {verdict.poll_interval_s} s)"
    lines = [title, console.export_text().rstrip(), summary, stream_line(verdict.stream), note]
    report = verdict.report
    if report.whole_failures:  # why, so that a slow or failing API is told from a consumer fault
        why = ", ".join(f"{reason} ×{n:,}" for reason, n in report.whole_failures.most_common(4))
        lines.append(f"requests failed as a whole: {why}")
    for why, n in Counter([*report.failed.values(), *report.unconfirmed.values()]).most_common(3):
        lines.append(f"  given up ×{n:,}: {why}")
    lines += [group_note(g) for g in verdict.groups if group_note(g)]
    for g in verdict.groups:
        lines += dead_letter_lines(g)
    for denial in verdict.access_denied[:10]:
        lines.append(f"  ACCESS DENIED ({denial['who']}): {denial['message']}")
    for g in verdict.groups:
        for seq, items in list(g.duplicated_at.items())[:10]:
            lines.append(f"  record {seq} in {g.group.name} {len(items)} times: {'; '.join(items)}")
    return "\n".join(lines) + ("\ntimed out" if verdict.timed_out else "")


def dead_letter_lines(g: GroupResult) -> list[str]:
    """A group's dead letters of the run by cause (count, a few ids), and what the queue holds besides."""
    lines = [
        f"  {g.group.name}: dead-lettered ×{cause.count:,} {text}"
        + (f" ({cause.poison:,} sent as poison)" if cause.poison else "")
        + f": {', '.join(cause.ids)}{' ...' if cause.count > len(cause.ids) else ''}"
        for text, cause in list(g.dead_letter_causes.items())[:5]
    ]
    earlier = g.dlq_queue_depth - g.dlq_depth
    if earlier > 0:
        lines.append(
            f"  {g.group.name}: its DLQ holds {earlier:,} more messages, not this run's (not judged)"
        )
    return lines


def group_note(g: GroupResult) -> str:
    """What a group checked by lag shows (it has no sink to count), and a guessed kind's reason."""
    if g.group.kind != LAG:
        guessed = g.group.source == "key schema"
        return (
            f"{g.group.name}: sink kind guessed from its key schema (declare it: SHARDLINE_SINKS)"
            if guessed
            else ""
        )
    errors = "unknown" if g.function_errors is None else f"{g.function_errors:,}"
    behind = "; ".join(f"{shard} {where}" for shard, where in sorted(g.behind.items())[:5])
    return (
        f"{g.group.name}: {g.group.source}; caught up with the stream: "
        f"{'yes' if not g.behind else f'NO ({len(g.behind)} shard(s) behind: {behind})'}; "
        f"function errors: {errors}; healthy records in its DLQ: {len(g.dead_lettered):,}; "
        f"on-failure messages of the run: {g.on_failure:,}"
    )


def stream_line(stream: StreamResult) -> str:
    """What the stream holds of the run: its duplicates, whether it backs every answer, odd records."""
    if not stream.read:
        return f"stream: not read ({stream.error})"
    return (
        f"Kinesis-level duplicates: {stream.duplicates:,} extra copies of user records in the stream — "
        f"{stream.aggregate_copies:,} aggregate copies ({stream.records_in_aggregate_copies:,} user records: "
        f"producer resends), {stream.reposted_records:,} records re-posted into the stream again "
        f"({stream.reposted_copies:,} copies); {stream.kinesis_records:,} Kinesis records, "
        f"{stream.user_records:,} user records in all\n"
        f"stream: every accepted record at the sequence number the API answered: "
        f"{'yes' if not stream.unbacked else f'NO ({len(stream.unbacked):,} not)'}; refused records in "
        f"the stream: {len(stream.refused_in_stream):,}; ids not as sent: {stream.wrong_ids:,}"
        + "".join(
            f"\n  record {seq} in the stream: {'; '.join(notes)}" for seq, notes in stream.where.items()
        )
    )


def progress_line(results: list[GroupResult], elapsed: float) -> Text:
    """Each group's progress while the verdict waits: applied of expected, the run's dead letters."""
    parts = [
        f"{r.group.name}: applied {r.applied:,}/{r.expected:,}"
        + (f", dead-lettered {r.dlq_depth:,}" if r.dlq_depth else "")
        for r in results
    ]
    return Text(f"waiting for the consumers: {'  '.join(parts)}  {elapsed:,.1f} s")
