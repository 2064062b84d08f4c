"""A mapping's `FilterCriteria`, checked as Lambda checks it at creation and applied as it applies it.

    record_filter = RecordFilter.from_criteria(properties.get("FilterCriteria"))  # FilterError if refused
    record_filter.matches(stream_record.event_record)                              # True: delivered

What Lambda does with a Kinesis mapping's filters (AWS docs, "Using event filtering with a Kinesis
event source" and "Control which events Lambda sends to your function"):

- A record is delivered when it matches any of the filters (at most 5 per mapping); a record that
  matches none is dropped: never delivered, and the mapping moves past it.
- Kinesis mappings filter on the `data` key only. `data` is the record's payload parsed as JSON
  when it is valid JSON (UTF-8); otherwise no pattern matches (not even `exists: false`) and the
  record is dropped.
- The rule syntax is EventBridge's subset Lambda lists: values (or, between them), `null`, `""`,
  `prefix`, `suffix`, `equals-ignore-case`, `anything-but`, `numeric`, `exists`; anything else
  (`$or`, `wildcard`, `cidr`, a misspelt operator) is refused when the mapping is created.
- A KPL aggregate is one Kinesis record whose data is the aggregate's bytes, never JSON: with a
  polling (standard) mapping, Lambda filters the aggregate, not its user records, so a filter on
  `data` drops every aggregate. Filter in the handler after de-aggregation instead.

The matching itself is moto's EventBridge pattern engine (`moto.events.models.EventPattern`),
which implements the same rule semantics; what is Lambda's own here is the refusal of what Lambda
does not accept and the view of a Kinesis record a filter sees.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    from moto.events.models import EventPattern

__all__ = ["MAX_FILTERS", "FilterError", "RecordFilter", "filter_view"]

#: Filters per mapping (Lambda's quota; AWS raises it on request, locally it is the default).
MAX_FILTERS = 5
#: Characters in one pattern (Lambda's limit on `Pattern`).
MAX_PATTERN_LENGTH = 4096
_OPERATORS = {"prefix", "suffix", "equals-ignore-case", "anything-but", "numeric", "exists"}
_NUMERIC_OPERATORS = {"<", "<=", "=", ">=", ">"}


class FilterError(ValueError):
    """A `FilterCriteria` Lambda would refuse at CreateEventSourceMapping, with the reason."""


@dataclass(frozen=True)
class RecordFilter:
    """The patterns of one mapping; a record is delivered when any of them matches."""

    patterns: tuple[EventPattern, ...]

    @classmethod
    def from_criteria(cls, criteria: Any) -> RecordFilter | None:
        """The filter of a template's `FilterCriteria` (None when it has no filters)."""
        if criteria in (None, {}):
            return None
        if not isinstance(criteria, dict) or not isinstance(criteria.get("Filters", []), list):
            raise FilterError("FilterCriteria must be an object with a Filters list")
        filters = criteria.get("Filters", [])
        if len(filters) > MAX_FILTERS:
            raise FilterError(f"{len(filters)} filters: a mapping takes at most {MAX_FILTERS}")
        patterns = tuple(_pattern(index, item) for index, item in enumerate(filters))
        return cls(patterns) if patterns else None

    def matches(self, event_record: dict[str, Any]) -> bool:
        """Whether Lambda delivers this event record (the shape `batches.event_record` builds)."""
        view = filter_view(event_record)
        # Every Kinesis pattern is on `data`: data that is not JSON matches none (even `exists: false`).
        return bool(view) and any(pattern.matches_event(cast(Any, view)) for pattern in self.patterns)


def filter_view(event_record: dict[str, Any]) -> dict[str, Any]:
    """What a Kinesis filter sees of a record: `data`, parsed as JSON when it is JSON, else nothing."""
    try:
        payload = base64.b64decode(event_record["kinesis"]["data"], validate=True)
        return {"data": json.loads(payload.decode("utf-8"))}
    except (binascii.Error, UnicodeDecodeError, ValueError):
        return {}  # not JSON: a pattern on `data` cannot match


def _pattern(index: int, item: Any) -> EventPattern:
    where = f"Filters[{index}].Pattern"
    raw = item.get("Pattern") if isinstance(item, dict) else None
    if not isinstance(raw, str):
        raise FilterError(f"{where}: missing (a JSON string)")
    if len(raw) > MAX_PATTERN_LENGTH:
        raise FilterError(f"{where}: {len(raw)} characters, over {MAX_PATTERN_LENGTH}")
    try:
        pattern = json.loads(raw)
    except ValueError as exc:
        raise FilterError(f"{where}: not valid JSON ({exc})") from exc
    if not isinstance(pattern, dict) or not pattern:
        raise FilterError(f"{where}: must be a non-empty JSON object")
    others = sorted(set(pattern) - {"data"})
    if others:
        raise FilterError(f"{where}: Kinesis mappings filter on the data key only, not {', '.join(others)}")
    _check_node(where, pattern)
    # Imported here: moto's events models take a third of a second to import, and most apps'
    # mappings have no filters.
    from moto.events.models import EventPattern

    return EventPattern(raw, pattern)


def _check_node(where: str, node: dict[str, Any]) -> None:
    for key, value in node.items():
        if key.startswith("$"):
            raise FilterError(f"{where}: {key!r} is not in Lambda's filter rule syntax")
        if isinstance(value, dict):
            if not value:
                raise FilterError(f"{where}: {key!r} is an empty object")
            _check_node(where, value)
        elif isinstance(value, list):
            if not value:
                raise FilterError(f"{where}: {key!r} is an empty list")
            for rule in value:
                _check_rule(where, key, rule)
        else:
            raise FilterError(f"{where}: {key!r} must be an object or a list of values and rules")


def _check_rule(where: str, key: str, rule: Any) -> None:
    if rule is None or isinstance(rule, str | int | float | bool):
        return
    if not isinstance(rule, dict) or len(rule) != 1:
        raise FilterError(f"{where}: {key!r}: each rule is a value or an object of one operator")
    ((operator, operand),) = rule.items()
    if operator not in _OPERATORS:
        raise FilterError(f"{where}: {key!r}: operator {operator!r} is not in Lambda's filter rule syntax")
    if operator == "numeric":
        _check_numeric(where, key, operand)
    elif operator == "exists" and not isinstance(operand, bool):
        raise FilterError(f"{where}: {key!r}: exists takes true or false")


def _check_numeric(where: str, key: str, operand: Any) -> None:
    if not isinstance(operand, list) or not operand or len(operand) % 2 or len(operand) > 4:
        raise FilterError(f"{where}: {key!r}: numeric takes one or two (operator, number) pairs")
    for operator, number in zip(operand[::2], operand[1::2], strict=True):
        if (
            operator not in _NUMERIC_OPERATORS
            or isinstance(number, bool)
            or not isinstance(number, int | float)
        ):
            raise FilterError(f"{where}: {key!r}: numeric pair ({operator!r}, {number!r}) is not valid")
