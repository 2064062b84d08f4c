"""`status`'s IAM part: whether the endpoint authorizes, what it cannot evaluate, and each principal's
denials — the action, the resource, and the statement that would allow it — read from the
endpoint's `GET /_shardline/iam` (`local.iam.enforcer`)."""

from __future__ import annotations

import json
from typing import Any

from rich.console import Console
from rich.table import Table

__all__ = ["render_iam"]


def render_iam(report: dict[str, Any], console: Console) -> None:
    iam = report.get("iam") or {}
    if not iam.get("enforcing"):
        console.print(
            "[yellow]IAM is not enforced[/] (`up --no-iam`): every local call is allowed; deployed, it is not"
        )
        return
    denials = iam.get("denials", {})
    if denials.get("total"):
        table = Table(title=f"access denied: {denials['total']:,} request(s)", title_justify="left")
        for column in ("principal", "action", "resource", "n", "would allow it"):
            table.add_column(column, overflow="fold")
        # One row per (principal, action, resource), as the endpoint counts them.
        for entry in denials.get("grouped", []):
            row = (entry["who"], entry["action"], entry["resource"], f"{entry['count']:,}")
            table.add_row(*row, json.dumps(entry["would_allow"]))
        console.print(table)
    else:
        console.print("[green]IAM[/]: every request authorized as its own principal; none denied")
    for item in iam.get("not_evaluated", []):
        console.print(f"  [yellow]not evaluated[/]: {item}")
