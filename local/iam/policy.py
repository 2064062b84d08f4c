"""The IAM policy evaluator of the local runtime: is this principal allowed this action on this resource,
by these identity policies and this resource (or key) policy, as AWS decides it.

AWS's evaluation logic (IAM User Guide, "Policy evaluation logic" and its pages on requests within one
account and across accounts; the KMS Developer Guide's "Key policies"):

- an explicit Deny in any applicable policy wins;
- same account: an Allow in the identity policies, or in the resource policy naming the caller (its
  ARN, its role session's ARN, "*"); a resource policy naming the caller's account (`"AWS": "ACCT"` or
  `arn:aws:iam::ACCT:root`) only delegates to the identity policies;
- across accounts: the identity policies and the resource policy must both allow;
- a KMS key: its key policy must allow, naming the caller, or naming the account (then the identity
  policies must allow too);
- the account root: identity-wise allowed everything, a resource policy's Deny still denies.

What it cannot evaluate (an unknown element or operator, a condition key or policy variable the request
does not carry and this evaluator cannot know) it says, and refuses: such a statement never grants;
in a Deny it counts as applying (an invalid Effect too: it is read as a Deny). `not_evaluated(policy)`
lists these for the runtime's start-up and `status`. Each policy is compiled once, when its `Policy` is
made (`_policy_compile`).

Condition keys: the evaluator fills the principal's (`aws:PrincipalArn`, `aws:PrincipalAccount`,
`aws:PrincipalOrgID`, `aws:PrincipalType`, `aws:username` of a user, `aws:RequestedRegion`,
`kms:CallerAccount`; a request cannot set them); the request context carries the rest. A key absent
from it is absent as AWS would see it only if it is in `KNOWN_CONDITION_KEYS` (a service's keys, set
only when a service calls on someone's behalf); any other absent key (`aws:SecureTransport`, which AWS
sets on every request, a tag) is not evaluated. `SERVICE_CONTEXT_KEY` in the context says the caller
is that AWS service, for `{"Service": ...}` principals. Policy variables are filled in documents of
Version 2012-10-17 only, as IAM does.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ._policy_compile import Caller, CompiledPolicy, Outcome, Reach, Statement, compile_policy
from ._policy_match import KNOWN_CONDITION_KEYS, REGION, REQUEST_CONDITION_KEYS, Context

IDENTITY = "identity-based"
RESOURCE = "resource-based"
KEY = "key"
SERVICE_CONTEXT_KEY = "shardline:Service"  # the request comes from this AWS service (a service principal)


@dataclass(frozen=True)
class Policy:
    """A policy document and where it comes from ("EventSinkRoleDefaultPolicyAB12", "queue policy of
    DeadLetters", "key policy of GroupKey"); compiled once, here."""

    name: str
    document: Mapping[str, Any]  # the policy JSON, intrinsics already resolved to local ARNs
    compiled: CompiledPolicy = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "compiled", compile_policy(self.name, self.document))

    def __reduce__(self) -> tuple[type[Policy], tuple[str, Mapping[str, Any]]]:
        # the compiled form holds closures: a copy in another process compiles its own
        return (Policy, (self.name, self.document))


@dataclass(frozen=True)
class Principal:
    """Who makes the request, with its identity-based policies."""

    arn: str  # "arn:aws:iam::000000000000:role/Name", ...:user/x or ...:root
    account: str
    policies: tuple[Policy, ...] = ()  # identity-based (inline + attached + customer-managed)
    session_arn: str | None = None  # a role's: "arn:aws:sts::ACCT:assumed-role/Name/<session>"
    org_id: str | None = None
    root: bool = False  # the account root: identity-wise allowed everything
    not_evaluated_policies: tuple[str, ...] = ()  # e.g. AWS-managed policies we have no documents of
    caller: Caller = field(init=False, repr=False, compare=False)
    context_keys: Mapping[str, str] = field(init=False, repr=False, compare=False)
    kms_context_keys: Mapping[str, str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        names = frozenset(name for name in (self.arn, self.session_arn) if name)
        object.__setattr__(self, "caller", Caller(self.account, names, self.root))
        object.__setattr__(self, "context_keys", self._context_keys())
        kms_keys = {**self.context_keys, "kms:calleraccount": self.account}
        object.__setattr__(self, "kms_context_keys", kms_keys)

    def _context_keys(self) -> dict[str, str]:
        """The global condition keys the evaluator adds for this principal (lower-case names)."""
        kind = "Account" if self.root else "User" if ":user/" in self.arn else "AssumedRole"
        keys = {
            "aws:principalarn": self.arn,
            "aws:principalaccount": self.account,
            "aws:principaltype": kind,
            "aws:requestedregion": REGION,
            "aws:principalisawsservice": "false",
        }
        if self.org_id:
            keys["aws:principalorgid"] = self.org_id
        if kind == "User":
            keys["aws:username"] = self.arn.rsplit("/", 1)[-1]
        return keys


@dataclass(frozen=True)
class Request:
    """One request to authorize: the principal, the action, the resource and its condition keys."""

    principal: Principal
    action: str  # "dynamodb:BatchWriteItem"
    resource: str  # an ARN, or "*"
    # aws:SecureTransport, kms:ViaService, aws:SourceArn, aws:SourceAccount, aws:CurrentTime, ...
    context: Mapping[str, str | Sequence[str]] = field(default_factory=dict)


@dataclass(frozen=True)
class Decision:
    """The answer, and what decided it."""

    allowed: bool
    reason: str  # "allowed" | "explicit-deny" | "no-allow" | "not-evaluated"
    policy_type: str  # "identity-based" | "resource-based" | "key"
    statement: str | None  # "<policy name>: <Sid or Statement[i]>" that allowed or denied
    not_evaluated: tuple[str, ...] = ()  # what could not be evaluated in statements bearing on it


class _Side:
    """What one side's policies (identity, or the resource's) say about the request."""

    __slots__ = ("allow", "delegate", "deny", "denying_unknowns", "unknown", "unknown_statement")

    def __init__(self) -> None:
        self.deny: str | None = None
        self.allow: str | None = None  # a statement that grants (resource side: naming the caller)
        self.delegate: str | None = None  # resource side: a statement naming the caller's account
        self.unknown: list[str] = []  # from Allow statements that could not be evaluated
        self.unknown_statement: str | None = None  # the first of them
        self.denying_unknowns: list[str] = []


def _scan(
    statements: tuple[Statement, ...],
    resource: str,
    context: Context,
    side: _Side,
    caller: Caller | None,
    service: str | None,
) -> None:
    for statement in statements:
        reach = Reach.DIRECT
        if caller is not None:  # a resource policy: whom does the statement name?
            reach = statement.reach(caller, service)
            if reach is Reach.NONE:
                continue
        unknowns: list[str] = []
        outcome = statement.applies(resource, context, unknowns)
        if outcome is Outcome.NO:
            continue
        if not statement.allow:  # a Deny that might apply is applied
            side.deny = side.deny or statement.label
            side.denying_unknowns.extend(unknowns)
            return
        if outcome is Outcome.UNKNOWN:
            side.unknown.extend(unknowns)
            side.unknown_statement = side.unknown_statement or statement.label
        elif reach is Reach.DIRECT:
            side.allow = side.allow or statement.label
        else:
            side.delegate = side.delegate or statement.label


def _service(request: Request) -> str | None:
    value = request.context.get(SERVICE_CONTEXT_KEY)
    return value if isinstance(value, str) else None


def _account_of(resource: str, principal: Principal) -> str:
    """The account owning the resource ("" in an S3 ARN, or "*": the caller's own)."""
    account = _ACCOUNTS.get(resource)
    if account is None:
        parts = resource.split(":", 5)
        account = parts[4] if len(parts) == 6 else ""
        if len(_ACCOUNTS) >= 8192:
            _ACCOUNTS.clear()
        _ACCOUNTS[resource] = account
    return account or principal.account


_ACCOUNTS: dict[str, str] = {}  # resource ARN -> its account ("" when it names none)


_NO_RESOURCE_POLICY = _Side()  # read only: the resource side when there is no resource policy
_ALLOWED: dict[tuple[str, str], Decision] = {}


def _allowed(policy_type: str, statement: str) -> Decision:
    """The (immutable) allowed decision of a statement, made once."""
    decision = _ALLOWED.get((policy_type, statement))
    if decision is None:
        decision = Decision(True, "allowed", policy_type, statement)
        if len(_ALLOWED) < 65536:
            _ALLOWED[(policy_type, statement)] = decision
    return decision


def _identity_side(principal: Principal, action: str, target: str, context: Context) -> _Side:
    identity = _Side()
    if principal.root:
        identity.allow = principal.arn
        return identity
    for policy in principal.policies:
        _scan(policy.compiled.applicable(action, target), target, context, identity, None, None)
        if identity.deny:
            return identity
    if principal.not_evaluated_policies:
        identity.unknown.extend(f"Policy {name} (not evaluated)" for name in principal.not_evaluated_policies)
        identity.unknown_statement = identity.unknown_statement or principal.not_evaluated_policies[0]
    return identity


def evaluate(
    request: Request, resource_policy: Policy | None = None, *, key_policy: bool = False
) -> Decision:
    """Decide the request as AWS would, by the principal's identity policies and the resource's policy
    (`key_policy=True`: it is a KMS key policy, which must allow)."""
    principal = request.principal
    action = request.action.lower()
    keys = principal.kms_context_keys if action.startswith("kms:") else principal.context_keys
    service = _service(request)
    if service is not None:
        keys = {**keys, "aws:principalisawsservice": "true", "aws:principalservicename": service}
    context = Context(request.context, keys)
    target = request.resource
    identity, resource = _identity_side(principal, action, target, context), _NO_RESOURCE_POLICY
    if resource_policy is not None and not identity.deny:
        resource = _Side()
        statements = resource_policy.compiled.applicable(action, target)
        _scan(statements, target, context, resource, principal.caller, service)
    resource_type = KEY if key_policy else RESOURCE
    if identity.deny:
        return Decision(False, "explicit-deny", IDENTITY, identity.deny, tuple(identity.denying_unknowns))
    if resource.deny:
        return Decision(
            False, "explicit-deny", resource_type, resource.deny, tuple(resource.denying_unknowns)
        )
    same_account = _account_of(request.resource, principal) == principal.account
    if key_policy or not same_account:
        return _both(
            identity, resource, resource_type, resource_policy is not None and key_policy and same_account
        )
    if resource.allow:
        return _allowed(RESOURCE, resource.allow)
    if identity.allow:
        return _allowed(IDENTITY, identity.allow)
    return _missing(IDENTITY, identity, resource)


def _both(identity: _Side, resource: _Side, resource_type: str, direct_grants: bool) -> Decision:
    """The resource's policy must allow (a KMS key's naming the caller itself grants on its own, in
    the key's account); naming the account, or across accounts, the identity policies must allow too."""
    if resource.allow and direct_grants:
        return _allowed(resource_type, resource.allow)
    granted = resource.allow or resource.delegate
    if not granted:
        return _missing(resource_type, resource)
    if identity.allow:
        return _allowed(resource_type, granted)
    return _missing(IDENTITY, identity)


def _missing(policy_type: str, *sides: _Side) -> Decision:
    """No allow: "not-evaluated" when an Allow that could have granted was not evaluated."""
    unknown = tuple(item for side in sides for item in side.unknown)
    if unknown:
        first = next(side.unknown_statement for side in sides if side.unknown_statement)
        return Decision(False, "not-evaluated", policy_type, first, unknown)
    return _NO_ALLOW[policy_type]


_NO_ALLOW = {kind: Decision(False, "no-allow", kind, None) for kind in (IDENTITY, RESOURCE, KEY)}


def denial_message(request: Request, decision: Decision) -> str:
    """AWS's AccessDenied text for the decision (IAM User Guide, "Troubleshoot access denied error
    messages"); a KMS key policy's denial reads "resource-based", as KMS writes it."""
    if decision.allowed:
        raise ValueError(f"{request.action} on {request.resource} is allowed: there is no denial to tell")
    principal = request.principal
    who = principal.session_arn or principal.arn
    kind = RESOURCE if decision.policy_type == KEY else decision.policy_type
    head = f"User: {who} is not authorized to perform: {request.action} on resource: {request.resource}"
    if decision.reason == "explicit-deny":
        article = "an" if kind[0] in "aeiou" else "a"  # "an identity-based", "a resource-based"
        return f"{head} with an explicit deny in {article} {kind} policy"
    return f"{head} because no {kind} policy allows the {request.action} action"


def not_evaluated(policy: Policy, carried: Iterable[str] = ()) -> list[str]:
    """What in the policy this evaluator cannot evaluate, by name and place ("Condition key
    aws:PrincipalTag/team in <policy name>: <Sid>"): an Allow depending on it never grants, a Deny
    depending on it always applies. `carried`: condition keys the runtime's requests carry beyond
    `KNOWN_CONDITION_KEYS` and `REQUEST_CONDITION_KEYS` (a service's own keys it fills)."""
    extra = {key.lower() for key in carried}
    if not extra:
        return list(policy.compiled.static_unknowns)
    return [item for item in policy.compiled.static_unknowns if not _names_carried_key(item, extra)]


def _names_carried_key(item: str, carried: set[str]) -> bool:
    for prefix in ("Condition key ", "Policy variable ${"):
        if item.startswith(prefix):
            key = item[len(prefix) :].split(" in ", 1)[0].rstrip("}").split(",", 1)[0].strip()
            return key.lower() in carried
    return False


__all__ = [
    "IDENTITY",
    "KEY",
    "KNOWN_CONDITION_KEYS",
    "REQUEST_CONDITION_KEYS",
    "RESOURCE",
    "SERVICE_CONTEXT_KEY",
    "Decision",
    "Policy",
    "Principal",
    "Request",
    "denial_message",
    "evaluate",
    "not_evaluated",
]
