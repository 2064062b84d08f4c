"""The Condition element of the IAM policy evaluator (`policy`): every operator of the IAM "Condition
operators" reference, with `...IfExists`, `ForAnyValue:` / `ForAllValues:`, and the missing-key rules.

https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_elements_condition_operators.html
https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_condition-single-vs-multi-valued-context-keys.html
"""

from __future__ import annotations

import ipaddress
import math
import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from ._policy_match import (
    KNOWN_CONDITION_KEYS,
    REQUEST_CONDITION_KEYS,
    UNKNOWN,
    Context,
    PatternSet,
    Template,
    _Unknown,
    as_list,
    has_variable,
    policy_string,
)

# One value of the request against the policy's values: True (one matches), False, None (unknown).
Matcher = Callable[[str, Context], "bool | None"]

_ORDER: dict[str, Callable[[float, float], bool]] = {
    "Equals": operator.eq,
    "NotEquals": operator.eq,  # negated below
    "LessThan": operator.lt,
    "LessThanEquals": operator.le,
    "GreaterThan": operator.gt,
    "GreaterThanEquals": operator.ge,
}


class PolicyValueError(ValueError):
    """A condition value the operator cannot read (e.g. "abc" for NumericEquals)."""


def _number(text: str) -> float:
    value = float(text)
    if math.isnan(value):
        raise ValueError(text)
    return value


def _date(text: str) -> float:
    """ISO 8601 (date, or date and time, "Z" or an offset) or epoch seconds, as epoch seconds."""
    text = text.strip()
    try:
        return float(text)
    except ValueError:
        pass
    parsed = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.timestamp()


def _ordered(
    values: list[str], compare: Callable[[float, float], bool], parse: Callable[[str], float]
) -> Matcher:
    try:
        bounds = [parse(value) for value in values]
    except ValueError as error:
        raise PolicyValueError(f"not a value this operator compares: {error}") from None

    def match(value: str, context: Context) -> bool | None:
        try:
            number = parse(value)
        except ValueError:
            return False  # a request value that is not a number/date matches nothing
        return any(compare(number, bound) for bound in bounds)

    return match


def _patterns(values: list[str], *, wildcards: bool, ignore_case: bool) -> Matcher:
    patterns = PatternSet(values, wildcards=wildcards, ignore_case=ignore_case, variables=True)
    return lambda value, context: patterns.match(value, context)


def _arn(values: list[str]) -> Matcher:
    """ArnEquals and ArnLike alike: each of the six colon-separated parts matched on its own, with
    `*` and `?` wildcards inside a part (the reference's "Amazon Resource Name (ARN)" operators)."""
    anything = "*" in values
    split = [value.split(":", 5) for value in values if value != "*"]
    parts = [
        [PatternSet([part], wildcards=True, ignore_case=False, variables=True) for part in value]
        for value in split
        if len(value) == 6
    ]

    def match(value: str, context: Context) -> bool | None:
        if anything:
            return True
        pieces = value.split(":", 5)
        if len(pieces) != 6:
            return False
        unknown = False
        for candidate in parts:
            results = [
                pattern.match(piece, context) for pattern, piece in zip(candidate, pieces, strict=True)
            ]
            if all(results):
                return True
            unknown = unknown or (None in results and False not in results)
        return None if unknown else False

    return match


def _bool(values: list[str]) -> Matcher:
    wanted = {value.lower() for value in values}
    return lambda value, context: value.lower() in wanted


def _exact(values: list[str]) -> Matcher:
    wanted = set(values)
    return lambda value, context: value in wanted


def _ip(values: list[str]) -> Matcher:
    try:
        networks = [ipaddress.ip_network(value, strict=False) for value in values]
    except ValueError as error:
        raise PolicyValueError(str(error)) from None

    def match(value: str, context: Context) -> bool | None:
        try:
            address = ipaddress.ip_address(value)
        except ValueError:
            return False
        return any(address in network for network in networks)

    return match


def _build(base: str, values: list[str]) -> tuple[Matcher, bool] | None:
    """(the positive matcher, negated) of a base operator, or None when the operator is unknown."""
    for family, parse in (("Numeric", _number), ("Date", _date)):
        rest = base.removeprefix(family)
        if rest != base and rest in _ORDER:
            return _ordered(values, _ORDER[rest], parse), rest == "NotEquals"
    simple = _SIMPLE.get(base)
    if simple is None:
        return None
    build, negated = simple
    return build(values), negated


_SIMPLE: dict[str, tuple[Callable[[list[str]], Matcher], bool]] = {
    "StringEquals": (lambda v: _patterns(v, wildcards=False, ignore_case=False), False),
    "StringNotEquals": (lambda v: _patterns(v, wildcards=False, ignore_case=False), True),
    "StringEqualsIgnoreCase": (lambda v: _patterns(v, wildcards=False, ignore_case=True), False),
    "StringNotEqualsIgnoreCase": (lambda v: _patterns(v, wildcards=False, ignore_case=True), True),
    "StringLike": (lambda v: _patterns(v, wildcards=True, ignore_case=False), False),
    "StringNotLike": (lambda v: _patterns(v, wildcards=True, ignore_case=False), True),
    "ArnEquals": (_arn, False),
    "ArnLike": (_arn, False),
    "ArnNotEquals": (_arn, True),
    "ArnNotLike": (_arn, True),
    "Bool": (_bool, False),
    "BinaryEquals": (_exact, False),
    "IpAddress": (_ip, False),
    "NotIpAddress": (_ip, True),
}


@dataclass(frozen=True)
class Clause:
    """One operator on one key, with its policy values."""

    operator: str  # as written, for messages
    key: str  # as written
    key_lower: str
    set_operator: str | None  # "any" | "all" | None
    if_exists: bool
    negated: bool
    null: frozenset[str] | None  # Null's wanted answers ("true": absent, "false": present)
    matcher: Matcher | None

    def holds(self, context: Context) -> bool | None:
        """Whether the clause holds; None when it depends on something this request does not tell."""
        values = context.values(self.key_lower, self.key)
        if isinstance(values, _Unknown):
            return None
        if self.null is not None:
            return ("true" if not values else "false") in self.null
        if not values:  # absent (or an empty set of values)
            if self.if_exists or self.set_operator == "all":
                return True
            return False if self.set_operator == "any" else self.negated
        assert self.matcher is not None
        if self.set_operator is None and len(values) == 1:  # the common case, without lists
            single = self.matcher(values[0], context)
            return single if single is None or not self.negated else not single
        results = [self.matcher(value, context) for value in values]
        if self.negated:
            results = [None if r is None else not r for r in results]
        if self.set_operator == "all":
            return False if False in results else (None if None in results else True)
        if self.set_operator == "any" or not self.negated:
            return True if True in results else (None if None in results else False)
        # a negated operator without a set operator: no value of the request may match
        return False if False in results else (None if None in results else True)


@dataclass(frozen=True)
class Unevaluable:
    """Something in a Condition block this evaluator does not evaluate."""

    what: str  # "Condition operator StringFoo", "Condition key aws:PrincipalTag/team"


def compile_condition(block: object) -> tuple[list[Clause], list[Unevaluable]]:
    """The clauses of a Condition element (all must hold), and what cannot be evaluated at all."""
    clauses: list[Clause] = []
    problems: list[Unevaluable] = []
    if not isinstance(block, Mapping):
        return clauses, [Unevaluable(f"Condition element {block!r} (not an object)")]
    for op_name, keys in block.items():
        if not isinstance(keys, Mapping):
            problems.append(Unevaluable(f"Condition operator {op_name} (its value is not an object)"))
            continue
        for key, raw in keys.items():
            clause = _clause(str(op_name), str(key), [policy_string(v) for v in as_list(raw)], problems)
            if clause is not None:
                clauses.append(clause)
    return clauses, problems


def _clause(op_name: str, key: str, values: list[str], problems: list[Unevaluable]) -> Clause | None:
    base, set_operator = op_name, None
    for prefix, name in (("ForAnyValue:", "any"), ("ForAllValues:", "all")):
        if op_name.lower().startswith(prefix.lower()):
            base, set_operator = op_name[len(prefix) :], name
    if_exists = base.endswith("IfExists")
    base = base.removesuffix("IfExists")
    null = None
    matcher: Matcher | None = None
    negated = False
    if base == "Null" and not if_exists:
        null = frozenset(value.lower() for value in values)
    else:
        try:
            built = _build(base, values)
        except PolicyValueError as error:
            problems.append(Unevaluable(f"Condition {op_name} on {key} ({error})"))
            return None
        if built is None:
            problems.append(Unevaluable(f"Condition operator {op_name}"))
            return None
        matcher, negated = built
    return Clause(op_name, key, key.lower(), set_operator, if_exists, negated, null, matcher)


def static_unknowns(clauses: list[Clause], block: Any) -> list[str]:
    """What a Condition element needs that no local request will tell: keys this evaluator does not
    know or the local endpoint does not carry, variables naming such keys (for `not_evaluated`)."""
    found: list[str] = []
    carried = KNOWN_CONDITION_KEYS | REQUEST_CONDITION_KEYS
    for clause in clauses:
        if clause.key_lower not in carried:
            found.append(f"Condition key {clause.key}")
    if isinstance(block, Mapping):
        for keys in block.values():
            if not isinstance(keys, Mapping):
                continue
            for raw in keys.values():
                for value in as_list(raw):
                    found.extend(variable_unknowns(policy_string(value)))
    return found


def variable_unknowns(text: str) -> list[str]:
    """The variables of `text` naming keys no local request carries."""
    if not has_variable(text):
        return []
    carried = KNOWN_CONDITION_KEYS | REQUEST_CONDITION_KEYS
    template = Template(text, wildcards=False, ignore_case=False)
    return [
        f"Policy variable {written}"
        for written, key in zip(template.variables, template.keys(), strict=True)
        if key not in carried
    ]


__all__ = ["UNKNOWN", "Clause", "Unevaluable", "compile_condition", "static_unknowns", "variable_unknowns"]
