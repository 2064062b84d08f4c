"""What `send` puts in each record's data when the user says: a JSON template, or a file of payloads.

    payloads = parse_template('{"order": "{id}", "tenant": "{i}", "at": "{now}"}')
    payloads = parse_template("@order.json")              # the template in a file
    payloads = load_payload_file(Path("orders.ndjson"))   # one payload per line, cycled
    payloads.payload(fields)                               # bytes: the record's data

A template is JSON whose *string values* hold placeholders, filled per record, `str.format`-like and
nothing more (no attribute, index or expression is ever evaluated; object keys are literal):

- `{id}` the record's id (`<run id>-<seq>`), `{seq}` its number in the run (0, 1, ...), `{run}` the
  run id, `{key}` its partition key, `{i}` its key's index (0 to --keys - 1: `seq` modulo --keys
  with the uniform skew, so "every fifth record" is `{i}` = 4 with --keys 5), `{now}` the time of
  its first POST (ISO 8601, UTC, milliseconds: `2026-11-29T12:00:00.123Z`).
- `{{` and `}}` are literal braces; a format spec is allowed (`{seq:06d}`), a conversion only `!s`.
- A string value that is exactly `"{seq}"` or `"{i}"` becomes a JSON *number*; `"{seq!s}"` keeps a
  string. Every other value is a string.

A payload file is ndjson: one JSON payload per line, used in order (record `seq` takes line
`seq % lines`), so a count over the lines cycles them; blank lines are skipped. Each payload is sent
compact (`json.dumps(..., separators=(",", ":"))`).

Everything is checked before anything is sent: a line that is not JSON, an unknown placeholder, a bad
format spec, a payload over a record's size — a `PayloadError` naming the file, the line and the
field.
"""

from __future__ import annotations

import datetime
import json
import string
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from .send_shapes import MAX_DATA_SIZE, ShapeError

__all__ = [
    "PLACEHOLDERS",
    "PayloadError",
    "PayloadFile",
    "Payloads",
    "Template",
    "iso_time",
    "load_payload_file",
    "parse_template",
]

#: The placeholders a template may name.
PLACEHOLDERS = ("id", "seq", "run", "key", "i", "now")
#: Those a whole string value turns into a JSON number.
NUMERIC = frozenset({"seq", "i"})
#: Room a placeholder may take once filled, at most, in the request-size estimate.
FILLED_ROOM = 128
_SAMPLE: dict[str, Any] = {"id": "run-0-0", "seq": 0, "run": "run", "key": "run-k0", "i": 0, "now": "t"}


class PayloadError(ShapeError):
    """A template or payload file `send` cannot use; the message names the file, line and field."""


class Payloads(Protocol):
    """A source of records' data."""

    def payload(self, fields: Mapping[str, Any]) -> bytes:
        """The data of the record these `fields` describe (the placeholders' values)."""
        ...

    def size_hint(self, seq: int) -> int:
        """Record `seq`'s data in bytes, at most (for the request-size budget)."""
        ...

    def describe(self) -> str:
        """What the payloads are, for the verdict (e.g. "template orders.json")."""
        ...


def iso_time(epoch: float) -> str:
    """`{now}`: epoch seconds as ISO 8601, UTC, to the millisecond."""
    moment = datetime.datetime.fromtimestamp(epoch, datetime.UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


# A compiled value: a function of the record's fields to a JSON value.
_Fill = Callable[[Mapping[str, Any]], Any]


def _compile_string(text: str, where: str, origin: str) -> _Fill:
    """A string value of the template as a function of the fields (checked now, filled later)."""
    try:
        parts = list(string.Formatter().parse(text))
    except ValueError as error:  # an unmatched brace
        raise PayloadError(
            f"{origin}: field {where}: {error} in {text!r} (write {{{{ or }}}} for a brace)"
        ) from None
    pieces: list[tuple[str, str | None, str, str | None]] = []
    for literal, name, spec, conversion in parts:
        if name is not None:
            if name not in PLACEHOLDERS:
                raise PayloadError(
                    f"{origin}: field {where}: unknown placeholder {{{name}}} in {text!r}; "
                    f"use {', '.join('{' + p + '}' for p in PLACEHOLDERS)}"
                )
            if conversion not in (None, "s"):
                raise PayloadError(f"{origin}: field {where}: conversion !{conversion} in {text!r}: only !s")
            if spec and ("{" in spec or "}" in spec):
                raise PayloadError(f"{origin}: field {where}: a placeholder inside a format spec in {text!r}")
            try:
                format(_SAMPLE[name], spec or "")
            except (ValueError, TypeError) as error:
                raise PayloadError(
                    f"{origin}: field {where}: bad format spec {{{name}:{spec}}}: {error}"
                ) from None
        pieces.append((literal, name, spec or "", conversion))
    if (
        len(pieces) == 1
        and not pieces[0][0]
        and pieces[0][1] in NUMERIC
        and not pieces[0][2]
        and not pieces[0][3]
    ):
        numeric = pieces[0][1]
        return lambda fields: fields[numeric]  # "{seq}" alone: a number
    if all(name is None for _, name, _, _ in pieces):
        constant = "".join(literal for literal, _, _, _ in pieces)
        return lambda fields: constant

    def fill(fields: Mapping[str, Any]) -> str:
        return "".join(
            literal + (format(fields[name], spec) if name is not None else "")
            for literal, name, spec, _ in pieces
        )

    return fill


def _compile(value: Any, where: str, origin: str) -> _Fill:
    if isinstance(value, str):
        return _compile_string(value, where, origin)
    if isinstance(value, list):
        items = [_compile(item, f"{where}[{n}]", origin) for n, item in enumerate(value)]
        return lambda fields: [item(fields) for item in items]
    if isinstance(value, dict):
        members = [(key, _compile(item, f"{where}.{key}", origin)) for key, item in value.items()]
        return lambda fields: {key: item(fields) for key, item in members}
    return lambda fields: value  # a number, true, false, null: as written


def _count_placeholders(value: Any) -> int:
    if isinstance(value, str):
        return sum(1 for _, name, _, _ in string.Formatter().parse(value) if name is not None)
    if isinstance(value, list):
        return sum(_count_placeholders(item) for item in value)
    if isinstance(value, dict):
        return sum(_count_placeholders(item) for item in value.values())
    return 0


def _compact(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


@dataclass(frozen=True)
class Template:
    """A JSON template (see the module): `payload(fields)` fills it for one record."""

    origin: str  # "--payload-template" or the file it came from
    fill: _Fill
    room: int  # its compact size plus FILLED_ROOM per placeholder: no filled payload is larger

    def payload(self, fields: Mapping[str, Any]) -> bytes:
        return _compact(self.fill(fields))

    def size_hint(self, seq: int) -> int:
        return self.room

    def describe(self) -> str:
        return f"template {self.origin}"


@dataclass(frozen=True)
class PayloadFile:
    """An ndjson file's payloads, compact, in order (record `seq` takes `lines[seq % len(lines)]`)."""

    origin: str
    lines: tuple[bytes, ...]

    def payload(self, fields: Mapping[str, Any]) -> bytes:
        return self.lines[int(fields["seq"]) % len(self.lines)]

    def size_hint(self, seq: int) -> int:
        return len(self.lines[seq % len(self.lines)])

    def describe(self) -> str:
        return f"{len(self.lines):,} payloads of {self.origin}"


def parse_template(text: str) -> Template:
    """`--payload-template TEXT|@FILE`: the template, checked (a `PayloadError` says what is wrong)."""
    origin = "--payload-template"
    if text.startswith("@"):
        path = Path(text[1:])
        origin = str(path)
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as error:
            raise PayloadError(f"--payload-template: cannot read {path}: {error}") from None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        raise PayloadError(
            f"{origin}: not JSON: line {error.lineno} column {error.colno}: {error.msg}"
        ) from None
    fill = _compile(value, "$", origin)
    room = len(_compact(value)) + FILLED_ROOM * _count_placeholders(value)
    if room > MAX_DATA_SIZE:
        raise PayloadError(
            f"{origin}: a filled payload may be {room:,} bytes, over a record's {MAX_DATA_SIZE:,}"
        )
    return Template(origin, fill, room)


def load_payload_file(path: Path) -> PayloadFile:
    """`--payload-file FILE`: every line read and checked before anything is sent."""
    try:
        raw = path.read_bytes()
    except OSError as error:
        raise PayloadError(f"--payload-file: cannot read {path}: {error}") from None
    lines: list[bytes] = []
    for number, line in enumerate(raw.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except (json.JSONDecodeError, UnicodeDecodeError) as error:
            detail = (
                f"column {error.colno}: {error.msg}"
                if isinstance(error, json.JSONDecodeError)
                else str(error)
            )
            raise PayloadError(f"{path}: line {number}: not JSON ({detail}); nothing was sent") from None
        payload = _compact(value)
        if len(payload) > MAX_DATA_SIZE:
            raise PayloadError(
                f"{path}: line {number}: {len(payload):,} bytes, over a record's {MAX_DATA_SIZE:,}; "
                "nothing was sent"
            )
        lines.append(payload)
    if not lines:
        raise PayloadError(f"{path}: no payload in it (one JSON value per line)")
    return PayloadFile(str(path), tuple(lines))
