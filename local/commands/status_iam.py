"""`status`'s IAM part: whether the endpoint authorizes, what it cannot evaluate, and each principal's
denials — the action, the resource, and the statement that would allow it — read from the
endpoint's `GET /_shardline/iam` (`local.iam.enforcer`)."""

from __future__ import annotations

import json
from typing import Any

from rich.console import Console
from rich.table import Table

__all__ = ["denials_by_principal", "render_iam"]


def denials_by_principal(iam: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """The recent denials grouped by what ran (`function x`, `mapping of x`, `worker group g`), one
    entry per (action, resource) with its count, newest message kept."""
    grouped: dict[str, dict[tuple[str, str], dict[str, Any]]] = {}
    for denial in iam.get("denials", {}).get("recent", []):
        entries = grouped.setdefault(denial["who"], {})
        key = (denial["action"], denial["resource"])
        entry = entries.setdefault(key, {**denial, "count": 0})
        entry.update({**denial, "count": entry["count"] + 1})
    return {who: list(entries.values()) for who, entries in grouped.items()}


def render_iam(report: dict[str, Any], console: Console) -> None:
    iam = report.get("iam") or {}
    if not iam.get("enforcing"):
        console.print(
            "[yellow]IAM is not enforced[/] (`up --no-iam`): every local call is allowed; deployed, it is not"
        )
        return
    total = iam.get("denials", {}).get("total", 0)
    if total:
        table = Table(title=f"access denied: {total:,} request(s)", title_justify="left")
        for column in ("principal", "action", "resource", "n", "would allow it"):
            table.add_column(column, overflow="fold")
        for who, entries in denials_by_principal(iam).items():
            for entry in entries:
                table.add_row(
                    who,
                    entry["action"],
                    entry["resource"],
                    f"{entry['count']:,}",
                    json.dumps(entry["would_allow"]),
                )
        console.print(table)
    else:
        console.print("[green]IAM[/]: every request authorized as its own principal; none denied")
    for item in iam.get("not_evaluated", []):
        console.print(f"  [yellow]not evaluated[/]: {item}")
