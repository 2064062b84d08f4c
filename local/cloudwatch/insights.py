"""The part of CloudWatch Logs Insights that a dashboard's log widget needs, on the captured logs.

    query = parse("SOURCE 'g' | fields @timestamp, level, message | filter level = 'ERROR' "
                  "| sort @timestamp desc | limit 50")
    rows = query.run(collector.log_events)     # [{"@timestamp": ..., "level": ..., "message": ...}]

Commands: `SOURCE '<log group>'` (a dashboard's way to name them), `fields`, `filter` (comparisons
`= != < <= > >=` of a field with a quoted string or a number, `like /regex/`, joined by `and`),
`sort <field> [asc|desc]`, `limit N`. Fields: `@timestamp`, `@log`, `@message`, and the members of
a JSON line (nested ones with dots). Anything else raises `InsightsError` naming the command, and
the widget shows that instead of rows.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from ..app import model
from .sources import LogEvent

__all__ = ["InsightsError", "Query", "parse"]

DEFAULT_LIMIT = 1000
_COMPARE: dict[str, Callable[[Any, Any], bool]] = {
    "=": operator.eq, "!=": operator.ne, "<": operator.lt,
    "<=": operator.le, ">": operator.gt, ">=": operator.ge,
}  # fmt: skip
_CONDITION = re.compile(
    r"""^\s*(?P<field>[@\w.]+)\s*(?:(?P<op>!=|<=|>=|=|<|>)\s*(?P<value>'[^']*'|"[^"]*"|-?\d+(?:\.\d+)?)"""
    r"""|\s+like\s+/(?P<regex>[^/]*)/)\s*$"""
)


class InsightsError(ValueError):
    """A query this subset does not run; the message names the command."""


@dataclass
class Query:
    sources: list[str] = field(default_factory=list)
    fields: list[str] = field(default_factory=list)
    filters: list[Callable[[dict[str, Any]], bool]] = field(default_factory=list)
    sort: tuple[str, bool] | None = None  # (field, descending)
    limit: int = DEFAULT_LIMIT

    def run(self, events: Iterable[LogEvent]) -> list[dict[str, Any]]:
        """Rows of the events of the query's log groups (every group without SOURCE), projected on
        `fields` (every field without `fields`)."""
        rows = [_row(event) for event in events if not self.sources or event.log_group in self.sources]
        rows = [row for row in rows if all(match(row) for match in self.filters)]
        if self.sort is not None:
            name, descending = self.sort
            rows.sort(key=lambda row: _sortable(row.get(name)), reverse=descending)
        rows = rows[: self.limit]
        for row in rows:
            row["@timestamp"] = _iso(row["@timestamp"])
        if self.fields:
            rows = [{name: row.get(name) for name in self.fields} for row in rows]
        return rows


def parse(text: str) -> Query:
    query = Query()
    for command in _split(text):
        word, _, rest = command.strip().partition(" ")
        rest = rest.strip()
        keyword = word.lower()
        if keyword == "source":
            query.sources.append(_unquote(rest, command))
        elif keyword == "fields":
            query.fields += [name.strip() for name in rest.split(",") if name.strip()]
        elif keyword == "filter":
            query.filters += [_condition(part, command) for part in re.split(r"\s+and\s+", rest)]
        elif keyword == "sort":
            name, _, direction = rest.partition(" ")
            if direction.strip().lower() not in ("", "asc", "desc"):
                raise InsightsError(f"sort: expected asc or desc, got {direction.strip()!r}")
            query.sort = (name, direction.strip().lower() != "asc")
        elif keyword == "limit":
            if not rest.isdigit() or not 1 <= int(rest) <= 10_000:
                raise InsightsError(f"limit: expected 1 to 10000, got {rest!r}")
            query.limit = int(rest)
        elif command.strip():
            raise InsightsError(f"{word!r}: this Logs Insights command is not run locally")
    return query


def _split(text: str) -> list[str]:
    """The commands of `text`, split on `|` outside quotes and regexes."""
    parts: list[str] = []
    current: list[str] = []
    quote = ""
    for char in text:
        if quote:
            quote = "" if char == quote else quote
        elif char in "'\"/":
            quote = char
        elif char == "|":
            parts.append("".join(current))
            current = []
            continue
        current.append(char)
    parts.append("".join(current))
    return [part.replace("\n", " ") for part in parts]


def _unquote(text: str, command: str) -> str:
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1]
    raise InsightsError(f"SOURCE: expected a quoted log group name ({command.strip()!r})")


def _condition(text: str, command: str) -> Callable[[dict[str, Any]], bool]:
    match = _CONDITION.match(text)
    if match is None:
        raise InsightsError(f"filter: {text.strip()!r} is not a comparison run locally ({command.strip()!r})")
    name = match["field"]
    if match["regex"] is not None:
        pattern = re.compile(match["regex"])
        return lambda row: row.get(name) is not None and bool(pattern.search(str(row.get(name))))
    raw, compare = match["value"], _COMPARE[match["op"]]
    value: Any = raw[1:-1] if raw[0] in "'\"" else float(raw)

    def test(row: dict[str, Any]) -> bool:
        have = row.get(name)
        if have is None:
            return False
        try:
            return compare(float(have) if isinstance(value, float) else str(have), value)
        except (TypeError, ValueError):
            return False

    return test


def _row(event: LogEvent) -> dict[str, Any]:
    row = dict(_flatten(event.fields))
    row.update({"@timestamp": event.timestamp, "@log": f"{model.ACCOUNT}:{event.log_group}",
                "@message": event.message})  # fmt: skip
    return row


def _flatten(fields: dict[str, Any], prefix: str = "") -> Iterable[tuple[str, Any]]:
    for key, value in fields.items():
        if isinstance(value, dict):
            yield from _flatten(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}", value


def _sortable(value: Any) -> tuple[int, Any]:
    """Missing first (last when descending), then numbers, then text."""
    if value is None:
        return (0, 0)
    return (1, value) if isinstance(value, int | float) else (2, str(value))


def _iso(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp, UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
