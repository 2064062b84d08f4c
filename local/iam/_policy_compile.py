"""A policy document compiled once (`CompiledPolicy`): per statement its action, resource and principal
matchers and its conditions, and what in it cannot be evaluated; per action, the statements that
name it (memoized), so that a request scans only those.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

from ._policy_conditions import Clause, compile_condition, static_unknowns, variable_unknowns
from ._policy_match import Context, PatternSet, _Unknown, as_list, policy_string

_ELEMENTS = frozenset(
    {
        "Sid",
        "Effect",
        "Action",
        "NotAction",
        "Resource",
        "NotResource",
        "Principal",
        "NotPrincipal",
        "Condition",
    }
)


class Reach(IntEnum):
    """How a resource policy's statement names the caller."""

    NONE = 0
    ACCOUNT = 1  # the caller's account ("ACCT" or its root ARN): delegates to the identity policies
    DIRECT = 2  # the caller itself (its ARN, its session's, "*", its service)


@dataclass(frozen=True)
class Caller:
    """What a Principal element is matched against (derived once per principal)."""

    account: str
    names: frozenset[str]  # the principal's ARN, its session's ARN
    root: bool


@dataclass
class _Principals:
    """A Principal / NotPrincipal element."""

    anyone: bool = False
    accounts: set[str] = field(default_factory=set)
    arns: set[str] = field(default_factory=set)
    services: set[str] = field(default_factory=set)

    def reach(self, caller: Caller, service: str | None) -> Reach:
        if (
            self.anyone
            or not caller.names.isdisjoint(self.arns)
            or (service is not None and service in self.services)
        ):
            return Reach.DIRECT
        return Reach.ACCOUNT if caller.account in self.accounts else Reach.NONE

    def lists_all_of(self, caller: Caller) -> bool:
        """NotPrincipal: the caller is left out only if each of its names is listed (its account
        included), as the IAM "NotPrincipal" page warns for Deny."""
        if self.anyone:
            return True
        return caller.account in self.accounts and (caller.root or caller.names <= self.arns)

    def lists_any_of(self, caller: Caller) -> bool:
        return self.anyone or not caller.names.isdisjoint(self.arns) or caller.account in self.accounts


def _principals(element: object, problems: list[str]) -> _Principals:
    found = _Principals()
    if element == "*":
        found.anyone = True
        return found
    if not isinstance(element, Mapping):
        problems.append(f"Principal {element!r}")
        return found
    for kind, raw in element.items():
        for value in (policy_string(v) for v in as_list(raw)):
            if kind == "AWS":
                _aws_principal(value, found, problems)
            elif kind == "Service":
                found.services.add(value)
            else:
                problems.append(f"Principal {kind}: {value}")  # Federated, CanonicalUser: no local caller
    return found


def _aws_principal(value: str, found: _Principals, problems: list[str]) -> None:
    if value == "*":
        found.anyone = True
    elif value.isdigit():
        found.accounts.add(value)
    elif value.startswith("arn:") and value.endswith(":root") and value.count(":") == 5:
        found.accounts.add(value.split(":")[4])
    elif value.startswith("arn:") and "*" not in value and "?" not in value:
        found.arns.add(value)
    else:
        problems.append(f"Principal AWS: {value}")  # wildcards are not allowed in Principal ARNs


class Outcome(IntEnum):
    NO = 0
    UNKNOWN = 1  # it would apply, but depends on something not evaluated
    YES = 2


@dataclass
class Statement:
    """One statement, compiled."""

    label: str  # "<policy name>: <Sid or Statement[i]>"
    allow: bool
    actions: PatternSet
    not_action: bool
    resources: PatternSet
    not_resource: bool
    principals: _Principals | None
    not_principal: bool
    conditions: list[Clause]
    problems: list[str]  # what makes it not evaluated on every request it would apply to

    def names_action(self, action: str) -> bool:
        return bool(self.actions.match(action, None)) != self.not_action

    def reach(self, caller: Caller, service: str | None) -> Reach:
        """How this (resource policy's) statement names the caller."""
        if self.principals is None:
            return Reach.NONE
        if not self.not_principal:
            return self.principals.reach(caller, service)
        left_out = (
            self.principals.lists_all_of(caller) if not self.allow else self.principals.lists_any_of(caller)
        )
        return Reach.NONE if left_out else Reach.DIRECT

    def applies(self, resource: str, context: Context, unknowns: list[str]) -> Outcome:
        """Whether the statement applies under its conditions; its action, and its resource unless
        it holds variables, already matched (`CompiledPolicy.applicable`). What it could not
        evaluate is appended to `unknowns`."""
        if self.resources.templates:
            named = self.resources.match(resource, context)
            if named is None:
                unknowns.extend(f"{item} in {self.label}" for item in self._resource_variables())
                return Outcome.UNKNOWN
            if named == self.not_resource:
                return Outcome.NO
        if not self.conditions and not self.problems:
            return Outcome.YES
        outcome = Outcome.YES
        for clause in self.conditions:
            holds = clause.holds(context)
            if holds is False:
                return Outcome.NO
            if holds is None:
                unknowns.append(f"{_clause_unknown(clause, context)} in {self.label}")
                outcome = Outcome.UNKNOWN
        if self.problems:
            unknowns.extend(f"{problem} in {self.label}" for problem in self.problems)
            return Outcome.UNKNOWN
        return outcome

    def _resource_variables(self) -> list[str]:
        return [f"Policy variable {v}" for t in self.resources.templates for v in t.variables]


def _clause_unknown(clause: Clause, context: Context) -> str:
    if isinstance(context.values(clause.key_lower), _Unknown):
        return f"Condition key {clause.key}"
    return f"Policy variable in {clause.operator} on {clause.key}"


_MEMO_ENTRIES = 8192  # (action, resource) pairs remembered per policy; an app has few, S3 keys many


@dataclass
class CompiledPolicy:
    """A policy document, compiled: its statements and what in it cannot be evaluated."""

    name: str
    statements: list[Statement]
    static_unknowns: list[str]  # for `not_evaluated`: by name and place
    _by_action: dict[str, tuple[Statement, ...]] = field(default_factory=dict)
    _by_request: dict[tuple[str, str], tuple[Statement, ...]] = field(default_factory=dict)

    def for_action(self, action_lower: str) -> tuple[Statement, ...]:
        """The statements whose Action (or NotAction) takes in the action (memoized per action)."""
        found = self._by_action.get(action_lower)
        if found is None:
            found = tuple(s for s in self.statements if s.names_action(action_lower))
            self._by_action[action_lower] = found
        return found

    def applicable(self, action_lower: str, resource: str) -> tuple[Statement, ...]:
        """The statements naming the action and the resource (those whose Resource holds variables
        are kept, to be matched per request): memoized per (action, resource)."""
        found = self._by_request.get((action_lower, resource))
        if found is None:
            found = tuple(
                s
                for s in self.for_action(action_lower)
                if s.resources.templates or s.resources.match(resource, None) != s.not_resource
            )
            if len(self._by_request) >= _MEMO_ENTRIES:
                self._by_request.clear()
            self._by_request[(action_lower, resource)] = found
        return found


def compile_policy(name: str, document: object) -> CompiledPolicy:
    """Compile a policy document (intrinsics already resolved); nothing in it raises: what cannot be
    evaluated is recorded, and refused at evaluation."""
    if isinstance(document, Mapping) and document.get("Version") != "2012-10-17":
        document = _without_variables(document)
    raw_statements = as_list(document.get("Statement", [])) if isinstance(document, Mapping) else []
    statements: list[Statement] = []
    listed: list[str] = []
    if not isinstance(document, Mapping):
        listed.append(f"Policy document {document!r} in {name}")
    for index, raw in enumerate(raw_statements):
        statement, static = _statement(name, index, raw)
        statements.append(statement)
        listed.extend(f"{item} in {statement.label}" for item in static)
    return CompiledPolicy(name, statements, listed)


def _without_variables(value: Any) -> Any:
    """Before policy language version 2012-10-17 a `${...}` is literal text, not a variable (IAM
    "Version" element): written as `${$}{...}`, which the templates read as that text."""
    if isinstance(value, str):
        return value.replace("${", "${$}{")
    if isinstance(value, Mapping):
        return {key: _without_variables(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_without_variables(item) for item in value]
    return value


def _statement(name: str, index: int, raw: object) -> tuple[Statement, list[str]]:
    body: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
    sid = body.get("Sid")
    label = f"{name}: {sid}" if sid else f"{name}: Statement[{index}]"
    problems = [f"Element {key}" for key in body if key not in _ELEMENTS]
    if not isinstance(raw, Mapping):
        problems.append(f"Statement {raw!r}")
    effect = body.get("Effect")
    if effect not in ("Allow", "Deny"):
        problems.append(f"Effect {effect!r}")
    not_action = "Action" not in body and "NotAction" in body
    actions = [policy_string(a) for a in as_list(body.get("NotAction" if not_action else "Action", []))]
    if "Action" not in body and "NotAction" not in body:
        problems.append("Element Action (missing)")
    not_resource = "Resource" not in body and "NotResource" in body
    resources = [
        policy_string(r) for r in as_list(body.get("NotResource" if not_resource else "Resource", "*"))
    ]
    principals = None
    not_principal = "Principal" not in body and "NotPrincipal" in body
    if "Principal" in body or not_principal:
        principals = _principals(body["NotPrincipal" if not_principal else "Principal"], problems)
    conditions, condition_problems = compile_condition(body.get("Condition", {}))
    problems.extend(problem.what for problem in condition_problems)
    static = [*problems, *static_unknowns(conditions, body.get("Condition"))]
    for resource in resources:
        static.extend(variable_unknowns(resource))
    statement = Statement(
        label=label,
        allow=effect == "Allow",
        actions=PatternSet(actions, wildcards=True, ignore_case=True, variables=False),
        not_action=not_action,
        resources=PatternSet(resources, wildcards=True, ignore_case=False, variables=True),
        not_resource=not_resource,
        principals=principals,
        not_principal=not_principal,
        conditions=conditions,
        problems=problems,
    )
    return statement, static
