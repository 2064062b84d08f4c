"""DynamoDB AttributeValues parsed and serialized faster for the endpoint, to the same bytes as moto's.

moto (5.2.5) parses every DynamoDB request and serializes every answer against the service model,
one shape member at a time. An `AttributeValue` is a structure of ten members (S, N, B, SS, NS,
BS, M, L, NULL, BOOL) of which a value sets one, and that walk was most of a call's framework CPU:
a BatchGetItem of 25 lease rows spent 8 of its 11 ms (profiled) serializing its answer, picking
each of the ten members of every attribute through moto's alias providers; a TransactWriteItems
of 100 sink Puts spent 7 ms parsing its request.

`apply()` (idempotent; `local.endpoint.dynamodb.apply()` calls it) patches, for the `AttributeValue`
shape of the `dynamodb` service only:
- the JSON parser's `_parse_structure`: an AttributeValue of one known member is parsed as that
  member alone (its value still through moto's `_parse_shape`: a B is base64-decoded as before).
  moto's walk gives the same: the members present and not null, in the shape's order; anything
  else (several members, an unknown one, not an object) takes moto's walk;
- the JSON serializer's `_serialize_type_structure`: when the value is a plain dict whose keys are
  all members of the shape, each member present and not None is serialized by moto's `_serialize`
  in the shape's order, as moto's walk does; its per-member picker would have found exactly
  `value[member]` (a dict has no `Meta` aliases, and no member's alias is another member's name),
  unless a response transformer names a member's path: then, or for any other value, moto's walk.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from moto.core import parse, serialize

SHAPE = "AttributeValue"
_APPLIED = False


def _is_attribute_value(owner: Any, shape: Any) -> bool:
    return bool(shape.name == SHAPE and owner.service_model.service_name == "dynamodb")


def _parse_structure(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def parse_structure(self: Any, shape: Any, value: Any) -> Any:
        if type(value) is dict and len(value) == 1 and _is_attribute_value(self.operation_model, shape):
            ((name, raw),) = value.items()
            member = shape.members.get(name)
            if member is not None and not member.serialization.get("name"):
                parsed = self.MAP_TYPE()
                if raw is not None:
                    parsed[name] = self._parse_shape(member, raw)
                return parsed
        return original(self, shape, value)

    return parse_structure


def _serialize_structure(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def serialize_structure(self: Any, serialized: Any, value: Any, shape: Any, key: str) -> None:
        if (
            key
            and type(value) is dict
            and _is_attribute_value(self.operation_model, shape)
            and all(name in shape.members for name in value)
            and not _transformed(self, shape)
        ):
            wrapper = self.MAP_TYPE()
            for name, member in shape.members.items():
                member.parent = shape  # as moto's walk leaves it, for the pickers below
                member_value = value.get(name)
                if member_value is not None:
                    self._serialize(wrapper, member_value, member, name)
            self._default_serialize(serialized, wrapper, shape, key)
            return
        original(self, serialized, value, shape, key)

    return serialize_structure


def _transformed(serializer: Any, shape: Any) -> bool:
    """Whether moto's picker could find anything but `value[member]`: a picker or aliases not moto's
    defaults, or a response transformer that could apply to a member (moto matches the end of the
    member's dotted path)."""
    picker = serializer._value_picker
    if type(picker) is serialize.DefaultAttributePicker:
        return False  # it reads `value[member]` itself
    if type(picker) is not serialize.XFormedAttributePicker:
        return True
    if picker.alias_providers is not serialize.DEFAULT_ALIAS_PROVIDERS:
        return True
    return any(path.rsplit(".", 1)[-1] in shape.members for path in picker.response_transformers)


def apply() -> None:
    """Patch moto's JSON parser and serializer in this process (the endpoint's)."""
    global _APPLIED
    if _APPLIED:
        return
    parser: Any = parse.BaseJSONParser
    parser._parse_structure = _parse_structure(parser._parse_structure)
    serializer: Any = serialize.BaseJSONSerializer
    serializer._serialize_type_structure = _serialize_structure(serializer._serialize_type_structure)
    _APPLIED = True
