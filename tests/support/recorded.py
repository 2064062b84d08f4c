"""The conformance suite's comparison of what the local runtime answers with what AWS recorded.

The recordings (tests/conformance/aws_recorded/*.json) are distilled from AWS-validated snapshots
of LocalStack's test suite and from the AWS documentation's examples; each entry names its source.
LocalStack's snapshots replace varying values by placeholders (`<sequence-number:1>`, `<uuid:2>`,
`<timestamp:2022-07-13T13:48:01.000Z>`, `arn:<partition>:kinesis:<region>:111111111111:stream/<resource:1>`):
a placeholder stands for a value of a format, and `mismatches` checks the format.

    mismatches(local, recorded)  # [] when equal field by field: the same key sets, the same count of
                                 # items, null where AWS has null, each constant equal, each
                                 # placeholder's format matched
    shape_of(document)           # key sets, types and formats only (to show what differs)
"""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path
from typing import Any

RECORDED = Path(__file__).resolve().parents[1] / "conformance" / "aws_recorded"

_PLACEHOLDER = re.compile(r"<([A-Za-z0-9-]+)(?::[^>]*)?>")
_ACCOUNT = "111111111111"  # LocalStack's stand-in for the recording account
_ANY = ".+"
#: The formats LocalStack's placeholders stand for, as regular expressions over the value.
FORMATS = {
    "sequence-number": r"\d{1,129}",
    "start-sequence-number": r"\d{1,129}",
    "continuation-sequence-number": r"0|[1-9]\d{0,128}",  # the API reference's pattern
    "uuid": r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}",
    "timestamp": r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z",  # <timestamp:2022-07-13T13:48:01.000Z>
    "region": r"[a-z]{2}(?:-[a-z]+)+-\d",
    "partition": r"aws",
    "resource": r"[A-Za-z0-9_.+=,@-]+",
}
#: Placeholders whose value is not a string (their format is given by an AWS documentation example).
NUMBER_PLACEHOLDERS = {"approximate-arrival-timestamp"}  # 1545084650.987 (epoch seconds, ms)


@cache
def load(name: str) -> dict[str, Any]:
    """One recording file (`kinesis_esm`, `apigw`, `kinesis_errors`, `kinesis_subscribe`, ...)."""
    return json.loads((RECORDED / f"{name}.json").read_text())


def _pattern(recorded: str) -> re.Pattern[str] | None:
    """A recorded string with placeholders (or the recording account) as a pattern; None if it has none."""
    if not _PLACEHOLDER.search(recorded) and _ACCOUNT not in recorded:
        return None
    parts, last = [], 0
    for match in _PLACEHOLDER.finditer(recorded):
        parts.append(re.escape(recorded[last : match.start()]).replace(_ACCOUNT, r"\d{12}"))
        parts.append(f"(?:{FORMATS.get(match.group(1), _ANY)})")
        last = match.end()
    parts.append(re.escape(recorded[last:]).replace(_ACCOUNT, r"\d{12}"))
    return re.compile("".join(parts))


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _placeholder(local: Any, recorded: str, path: str, bindings: dict[str, Any]) -> list[str] | None:
    """The check of a value AWS recorded as one placeholder; None when `recorded` is not one."""
    match = _PLACEHOLDER.fullmatch(recorded)
    if match is None:
        return None
    name = match[1]
    # <uuid:2> twice is one value twice (<timestamp:2022-...> is a format's sample, not an index)
    if re.fullmatch(r"<[^:>]+:\d+>", recorded) and bindings.setdefault(recorded, local) != local:
        return [f"{path}: {local!r}, where AWS recorded the value of {recorded} ({bindings[recorded]!r})"]
    if name in NUMBER_PLACEHOLDERS:
        ok = _is_number(local) and len(repr(float(local)).split(".")[1]) <= 3
        return [] if ok else [f"{path}: {local!r} is not epoch seconds with at most 3 decimals"]
    if name not in FORMATS:  # a value of no recorded format: any value but null
        return [] if local is not None else [f"{path}: null where AWS recorded a value ({recorded})"]
    if isinstance(local, str) and re.fullmatch(FORMATS[name], local):
        return []
    return [f"{path}: {local!r} is not of the format of {recorded}"]


def _leaf(local: Any, recorded: Any, path: str, bindings: dict[str, Any]) -> list[str]:
    if isinstance(recorded, str) and (found := _placeholder(local, recorded, path, bindings)) is not None:
        return found
    if isinstance(recorded, str) and (pattern := _pattern(recorded)) is not None:
        if isinstance(local, str) and pattern.fullmatch(local):
            return []
        return [f"{path}: {local!r} does not have the recorded format {recorded!r}"]
    if type(local) is not type(recorded) and not (_is_number(local) and _is_number(recorded)):
        kinds = f"{type(local).__name__} {local!r} where AWS recorded {type(recorded).__name__}"
        return [f"{path}: {kinds} {recorded!r}"]
    if isinstance(recorded, float):
        return []  # a measured number: its type is the fact, not its value
    return [] if local == recorded else [f"{path}: {local!r} where AWS recorded {recorded!r}"]


def mismatches(
    local: Any,
    recorded: Any,
    path: str = "$",
    ignore: frozenset[str] = frozenset(),
    bindings: dict[str, Any] | None = None,
) -> list[str]:
    """Every difference of `local` from `recorded`, field by field (paths in `ignore` are skipped:
    values AWS's edge or the recording client put there, which a test names and explains)."""
    bindings = {} if bindings is None else bindings
    if path in ignore:
        return []
    if isinstance(recorded, dict):
        if not isinstance(local, dict):
            return [f"{path}: {type(local).__name__} where AWS recorded an object"]
        found = []
        missing, extra = set(recorded) - set(local), set(local) - set(recorded)
        if missing := {k for k in missing if f"{path}.{k}" not in ignore}:
            found.append(f"{path}: keys missing {sorted(missing)}")
        if extra := {k for k in extra if f"{path}.{k}" not in ignore}:
            found.append(f"{path}: keys AWS does not send {sorted(extra)}")
        for key in sorted(set(recorded) & set(local)):
            found += mismatches(local[key], recorded[key], f"{path}.{key}", ignore, bindings)
        return found
    if isinstance(recorded, list):
        if not isinstance(local, list):
            return [f"{path}: {type(local).__name__} where AWS recorded a list"]
        if len(local) != len(recorded):
            return [f"{path}: {len(local)} items where AWS recorded {len(recorded)}"]
        return [m for i, (a, b) in enumerate(zip(local, recorded, strict=True))
                for m in mismatches(a, b, f"{path}[{i}]", ignore, bindings)]  # fmt: skip
    if recorded is None:
        return [] if local is None else [f"{path}: {local!r} where AWS recorded null"]
    return _leaf(local, recorded, path, bindings)


def shape_of(value: Any) -> Any:
    """A JSON document's skeleton: objects keep their keys, lists their length, and each leaf becomes
    its type (`null`, `bool`, `int`, `float`, `str`) or, for a recorded placeholder, its format name."""
    if isinstance(value, dict):
        return {key: shape_of(item) for key, item in sorted(value.items())}
    if isinstance(value, list):
        return [shape_of(item) for item in value]
    if value is None:
        return "null"
    if isinstance(value, str) and (match := _PLACEHOLDER.fullmatch(value)):
        return f"<{match[1]}>"
    return type(value).__name__
