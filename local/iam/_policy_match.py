"""Wildcards, policy variables and the request context of the IAM policy evaluator (`policy`).

Everything here is built once per policy (patterns to regexes, variables to templates) so that a
request costs set look-ups and pre-compiled regex matches, never parsing.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Final


def _lowered(*keys: str) -> frozenset[str]:
    return frozenset(key.lower() for key in keys)  # condition key names are case-insensitive


# The keys the evaluator fills from the principal and the action: never taken from the request.
EVALUATOR_KEYS: Final = _lowered(
    "aws:PrincipalArn",
    "aws:PrincipalAccount",
    "aws:PrincipalOrgID",
    "aws:PrincipalType",
    "aws:PrincipalIsAWSService",
    "aws:PrincipalServiceName",
    "aws:username",
    "aws:RequestedRegion",
    "kms:CallerAccount",
)

# Keys whose absence from the request context is what AWS would see too.
ABSENT_UNLESS_CARRIED: Final = _lowered(
    # absent unless a service calls on someone's behalf (the request context then carries them)
    "aws:SourceArn",
    "aws:SourceAccount",
    "aws:SourceOrgID",
    "aws:SourceOwner",
    "aws:CalledVia",
    "aws:CalledViaFirst",
    "aws:CalledViaLast",
    "aws:ViaAWSService",
    "kms:ViaService",
    # absent locally and deployed alike unless the request goes through a VPC endpoint
    "aws:SourceVpc",
    "aws:SourceVpce",
)

# Keys whose value this evaluator knows on every request: it fills them itself, or their absence is
# what AWS would see.
KNOWN_CONDITION_KEYS: Final = EVALUATOR_KEYS | ABSENT_UNLESS_CARRIED

# Keys AWS sets on every request, which the local endpoint passes in the request context (a request
# without one of them gets it reported as not evaluated, never guessed).
REQUEST_CONDITION_KEYS: Final = _lowered(
    "aws:SecureTransport", "aws:CurrentTime", "aws:EpochTime", "aws:SourceIp"
)

REGION: Final = "us-east-1"  # the local runtime's one region (aws:RequestedRegion)

ABSENT: Final = None


class _Unknown:
    """A key AWS would have a value for, which this request does not carry."""

    def __repr__(self) -> str:
        return "UNKNOWN"


UNKNOWN: Final = _Unknown()

Values = tuple[str, ...] | None | _Unknown


def as_list(value: object) -> list[object]:
    """A policy element's single value or list, as a list."""
    if isinstance(value, list | tuple):
        return list(value)
    return [value]


def policy_string(value: object) -> str:
    """A policy value as IAM reads it: JSON booleans as "true"/"false", numbers as written."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


class Context:
    """The request context of one evaluation: the request's keys, then the principal's."""

    __slots__ = ("_lowered", "_principal_keys", "_request")

    def __init__(self, request_context: Mapping[str, str | Sequence[str]], principal_keys: Mapping[str, str]):
        self._request = request_context
        self._principal_keys = principal_keys  # lower-case keys, filled by the evaluator: they win
        self._lowered: dict[str, str | Sequence[str]] | None = None

    def values(self, key_lower: str, key: str = "") -> Values:
        """The values of a key (lower-case name; `key` as the policy writes it, tried first as is):
        a tuple, ABSENT (None) or UNKNOWN."""
        found = self._principal_keys.get(key_lower)
        if found is not None:
            return (found,)
        if key_lower in EVALUATOR_KEYS:
            return ABSENT
        value = self._request.get(key)
        if value is None:  # condition key names are case-insensitive
            if self._lowered is None:
                self._lowered = {name.lower(): value for name, value in self._request.items()}
            value = self._lowered.get(key_lower)
        if value is None:
            return ABSENT if key_lower in KNOWN_CONDITION_KEYS else UNKNOWN
        if isinstance(value, str):
            return (value,)
        return tuple(value)

    def variable(self, key_lower: str) -> str | _Unknown | None:
        """A policy variable's value: one string, ABSENT or UNKNOWN (a multivalued key is unknown)."""
        values = self.values(key_lower)
        if isinstance(values, tuple):
            return values[0] if len(values) == 1 else UNKNOWN
        return values


# ${key} or ${key, 'default'}; ${*}, ${?} and ${$} are the literal characters.
_VARIABLE = re.compile(r"\$\{([^}]*)\}")
_DEFAULT = re.compile(r"^\s*([^,\s]+)\s*,\s*'([^']*)'\s*$")
_LITERAL_VARIABLES: Final = {"*": "*", "?": "?", "$": "$"}


@functools.lru_cache(maxsize=8192)
def _segment_regex(
    segments: tuple[tuple[bool, str], ...], wildcards: bool, ignore_case: bool
) -> re.Pattern[str]:
    parts: list[str] = []
    for literal, text in segments:
        if literal or not wildcards:
            parts.append(re.escape(text))
        else:
            parts.append(
                ".*".join(".".join(re.escape(p) for p in piece.split("?")) for piece in text.split("*"))
            )
    return re.compile("".join(parts), re.DOTALL | (re.IGNORECASE if ignore_case else 0))


def wildcard_regex(pattern: str, ignore_case: bool = False) -> re.Pattern[str]:
    """`pattern` as a regex to `fullmatch`: `*` any characters (any number), `?` any one character."""
    return _segment_regex(((False, pattern),), True, ignore_case)


class Template:
    """A policy value holding variables: filled from the request's context, then matched."""

    __slots__ = ("_ignore_case", "_parts", "_wildcards", "variables")

    def __init__(self, text: str, wildcards: bool, ignore_case: bool):
        self._wildcards = wildcards
        self._ignore_case = ignore_case
        self._parts: list[tuple[str, str, str | None]] = []  # (kind, text or key, default)
        self.variables: list[str] = []  # "${...}" as written, for messages
        position = 0
        for found in _VARIABLE.finditer(text):
            if found.start() > position:
                self._parts.append(("text", text[position : found.start()], None))
            inner = found.group(1).strip()
            if inner in _LITERAL_VARIABLES:
                self._parts.append(("literal", _LITERAL_VARIABLES[inner], None))
            else:
                with_default = _DEFAULT.match(inner)
                key, default = (
                    (with_default.group(1), with_default.group(2)) if with_default else (inner, None)
                )
                self._parts.append(("variable", key.lower(), default))
                self.variables.append(found.group(0))
            position = found.end()
        if position < len(text):
            self._parts.append(("text", text[position:], None))

    def keys(self) -> list[str]:
        return [text for kind, text, _ in self._parts if kind == "variable"]

    def regex(self, context: Context) -> re.Pattern[str] | _Unknown | None:
        """The filled-in pattern; None when a variable's key is absent (matches nothing), or UNKNOWN."""
        segments: list[tuple[bool, str]] = []
        for kind, text, default in self._parts:
            if kind != "variable":
                segments.append((kind == "literal", text))
                continue
            value = context.variable(text)
            if value is None:
                value = default
            if value is None or isinstance(value, _Unknown):
                return value
            segments.append((True, value))  # a variable's value is matched literally
        return _segment_regex(tuple(segments), self._wildcards, self._ignore_case)


def has_variable(text: str) -> bool:
    return "${" in text


class PatternSet:
    """Values of one element (Action, Resource, a condition's values): exact ones in a set, wildcard
    ones in one compiled regex, ones with variables as templates."""

    __slots__ = ("_exact", "_ignore_case", "_regex", "templates")

    def __init__(self, patterns: Iterable[str], *, wildcards: bool, ignore_case: bool, variables: bool):
        self._ignore_case = ignore_case
        exact: set[str] = set()
        regexes: list[str] = []
        self.templates: list[Template] = []
        for pattern in patterns:
            if variables and has_variable(pattern):
                self.templates.append(Template(pattern, wildcards, ignore_case))
            elif wildcards and ("*" in pattern or "?" in pattern):
                regexes.append(wildcard_regex(pattern, ignore_case).pattern)
            else:
                exact.add(pattern.lower() if ignore_case else pattern)
        self._exact = frozenset(exact)
        flags = re.DOTALL | (re.IGNORECASE if ignore_case else 0)
        self._regex = re.compile("|".join(f"(?:{r})" for r in regexes), flags) if regexes else None

    def match(self, value: str, context: Context | None) -> bool | None:
        """Whether `value` matches one of the patterns; None when only an unknown variable could tell."""
        if (value.lower() if self._ignore_case else value) in self._exact:
            return True
        if self._regex is not None and self._regex.fullmatch(value):
            return True
        if not self.templates:
            return False
        unknown = False
        for template in self.templates:
            regex = template.regex(context) if context is not None else UNKNOWN
            if isinstance(regex, _Unknown):
                unknown = True
            elif regex is not None and regex.fullmatch(value):
                return True
        return None if unknown else False
