"""Fast draft-04 checks for API Gateway's request models, with jsonschema's verdicts.

`jsonschema.Draft4Validator.is_valid` walks a schema keyword by keyword for every value: 34 ms for
a 1 MB body of 950 records here, which would make the validator the API's bottleneck. The models
an API carries use a handful of keywords, so those compile to plain closures; a schema with any
other keyword keeps jsonschema's validator. The tests check that both give the same verdicts.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import jsonschema

Check = Callable[[Any], bool]

ANNOTATIONS = {"$schema", "id", "title", "description", "default"}  # no effect on validity
TYPES: dict[str, Check] = {
    # draft-04's types, as jsonschema's draft-04 type checker reads them (a bool is no number)
    "object": lambda x: isinstance(x, dict),
    "array": lambda x: isinstance(x, list),
    "string": lambda x: isinstance(x, str),
    "integer": lambda x: isinstance(x, int) and not isinstance(x, bool),
    "number": lambda x: isinstance(x, int | float) and not isinstance(x, bool),
    "boolean": lambda x: isinstance(x, bool),
    "null": lambda x: x is None,
}


_is_number = TYPES["number"]


class _Unsupported(Exception):
    pass


def _type(value: str | list[str]) -> Check:
    names = [value] if isinstance(value, str) else value
    if not all(name in TYPES for name in names):
        raise _Unsupported
    checks = [TYPES[name] for name in names]
    return checks[0] if len(checks) == 1 else lambda x: any(check(x) for check in checks)


def _object_keywords(schema: dict[str, Any]) -> Check | None:
    properties = {name: _compile(sub) for name, sub in schema.get("properties", {}).items()}
    required = list(schema.get("required", ()))
    extra = schema.get("additionalProperties", True)
    if not isinstance(extra, bool):
        raise _Unsupported
    if not (properties or required or not extra):
        return None

    # Plain loops rather than all()/any() over generators: this runs once per record.
    property_checks = list(properties.items())

    def check(x: Any) -> bool:
        if type(x) is not dict:
            return True
        for name in required:
            if name not in x:
                return False
        if not extra:
            for name in x:
                if name not in properties:
                    return False
        for name, check in property_checks:  # noqa: SIM110 (a loop is faster than all() here)
            if name in x and not check(x[name]):
                return False
        return True

    return check


def _items(item: Check) -> Check:
    def check(x: Any) -> bool:
        if type(x) is list:
            for value in x:
                if not item(value):
                    return False
        return True

    return check


def _length(key: str, n: int) -> Check:
    """minItems, maxItems (of an array), minLength or maxLength (of a string) `n`."""
    kind: type[list[Any]] | type[str] = list if key.endswith("Items") else str
    if key.startswith("min"):
        return lambda x: not isinstance(x, kind) or len(x) >= n
    return lambda x: not isinstance(x, kind) or len(x) <= n


def _pattern(value: str) -> Check:
    search = re.compile(value).search
    return lambda x: not isinstance(x, str) or search(x) is not None


def _bound(key: str, n: Any) -> Check:
    """minimum or maximum `n` (of a number)."""
    if key == "minimum":
        return lambda x: not _is_number(x) or x >= n
    return lambda x: not _is_number(x) or x <= n


def _compile(schema: Any) -> Check:  # noqa: C901 -- over the gate before it existed; issue 26 cuts it
    if not isinstance(schema, dict):
        raise _Unsupported
    checks: list[Check] = []
    handled = ANNOTATIONS | {"properties", "required", "additionalProperties"}
    if (object_check := _object_keywords(schema)) is not None:
        checks.append(object_check)
    for key, value in schema.items():
        if key in handled:
            continue
        if key == "type":
            checks.append(_type(value))
        elif key == "items" and isinstance(value, dict):
            checks.append(_items(_compile(value)))
        elif key in ("minItems", "maxItems", "minLength", "maxLength") and type(value) is int:
            checks.append(_length(key, value))
        elif key == "pattern" and isinstance(value, str):
            checks.append(_pattern(value))
        elif key in ("minimum", "maximum") and not ({"exclusiveMinimum", "exclusiveMaximum"} & set(schema)):
            checks.append(_bound(key, value))
        else:
            raise _Unsupported
    if len(checks) == 1:
        return checks[0]

    def check_all(x: Any) -> bool:
        for check in checks:  # noqa: SIM110 (a loop is faster than all() here)
            if not check(x):
                return False
        return True

    return check_all


def compile_model(schema: dict[str, Any]) -> Check:
    """`is_valid` for one model: compiled closures, or jsonschema's draft-04 validator for the rest."""
    try:
        return _compile(schema)
    except (_Unsupported, re.error):
        is_valid: Check = jsonschema.Draft4Validator(schema).is_valid  # jsonschema: untyped here
        return is_valid
