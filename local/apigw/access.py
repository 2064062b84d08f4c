"""Who may call the local API, as API Gateway decides it: the RestApi's resource policy, and each
client's API key with its usage plan (throttle and quota).

The policy is evaluated for `execute-api:Invoke` as AWS evaluates a resource policy of the same
account: an explicit Deny whose principal and conditions match the caller refuses; otherwise an
Allow, or (IAM authorization, a caller of the API's own account) its identity policy admits it —
the local credentials stand for the account's root, so they always have one. The condition
operators shardline's policies use are evaluated (String(Not)Equals, Arn(Not)Like, with the IAM
rule that a negated operator holds when the key is absent); any other operator in a Deny counts
as matched, so the local API refuses at least what AWS would.
"""

from __future__ import annotations

import fnmatch
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..app.model import KeyPlan
from .steps import ThrottleBucket

__all__ = ["KeyPlans", "PolicyCaller", "QuotaExceeded", "invoke_allowed"]

_NEGATED = {"StringNotEquals": "StringEquals", "ArnNotLike": "ArnLike", "ArnNotEquals": "ArnEquals"}
_POSITIVE = ("StringEquals", "ArnLike", "ArnEquals")
_PERIOD_SECONDS = {"DAY": 86_400, "WEEK": 7 * 86_400, "MONTH": 30 * 86_400}


@dataclass(frozen=True)
class PolicyCaller:
    """The request's principal as a resource policy sees it (`aws:PrincipalArn`, ...)."""

    arn: str
    account: str
    org_id: str | None = None

    def keys(self) -> dict[str, str]:
        found = {"aws:PrincipalArn": self.arn, "aws:PrincipalAccount": self.account}
        if self.org_id is not None:
            found["aws:PrincipalOrgID"] = self.org_id
        return found


def invoke_allowed(policy: Mapping[str, Any] | None, caller: PolicyCaller, api_account: str) -> bool:
    """Whether `caller` may invoke an API whose resource policy is `policy` (None: no policy)."""
    if policy is None:
        return caller.account == api_account
    statements = [s for s in _as_list(policy.get("Statement")) if _invokes(s)]
    if any(s.get("Effect") == "Deny" and _applies(s, caller, deny=True) for s in statements):
        return False
    if any(s.get("Effect") == "Allow" and _applies(s, caller, deny=False) for s in statements):
        return True
    return caller.account == api_account  # the caller's own identity policy, in its account


def _invokes(statement: Mapping[str, Any]) -> bool:
    return any(fnmatch.fnmatchcase("execute-api:Invoke", a) for a in _as_list(statement.get("Action")))


def _applies(statement: Mapping[str, Any], caller: PolicyCaller, *, deny: bool) -> bool:
    principal = statement.get("Principal")
    named = _as_list(principal.get("AWS") if isinstance(principal, Mapping) else principal)
    if not any(_names(entry, caller) for entry in named):
        return False
    conditions = statement.get("Condition") or {}
    return all(_holds(op, tests, caller.keys(), unknown=deny) for op, tests in conditions.items())


def _names(entry: Any, caller: PolicyCaller) -> bool:
    text = str(entry)
    if text == "*":
        return True
    if text in (caller.account, f"arn:aws:iam::{caller.account}:root"):
        return True
    return text == caller.arn


def _holds(operator: str, tests: Mapping[str, Any], keys: Mapping[str, str], *, unknown: bool) -> bool:
    positive = _NEGATED.get(operator, operator)
    if positive not in _POSITIVE:
        return unknown
    for key, wanted in tests.items():
        value = keys.get(key)
        matched = value is not None and any(_matches(positive, value, str(w)) for w in _as_list(wanted))
        if operator in _NEGATED:
            if value is not None and matched:  # absent key: a negated operator holds
                return False
        elif not matched:
            return False
    return True


def _matches(operator: str, value: str, wanted: str) -> bool:
    return fnmatch.fnmatchcase(value, wanted) if operator == "ArnLike" else value == wanted


def _as_list(value: Any) -> list[Any]:
    if value is None:
        return []
    return list(value) if isinstance(value, list | tuple) else [value]


class QuotaExceeded(Exception):
    """The key's usage plan quota for the period is spent (API Gateway: 429 `Limit Exceeded`)."""


class KeyPlans:
    """The API's keys: which are known, and each one's throttle bucket and quota count."""

    def __init__(self, plans: Sequence[KeyPlan], clock: Callable[[], float] = time.monotonic) -> None:
        self.plans = {plan.value: plan for plan in plans}
        self._clock = clock
        self._buckets = {
            plan.value: ThrottleBucket(plan.throttle_rate, plan.throttle_burst or 1, clock)
            for plan in plans
            if plan.throttle_rate is not None
        }
        self._used: dict[str, tuple[int, int]] = {}  # key -> (period index, requests in it)
        self._lock = threading.Lock()

    def admit(self, value: str) -> bool:
        """Spend one request of key `value`: False when its throttle refuses it (429 Too Many
        Requests); `QuotaExceeded` when its quota is spent."""
        plan = self.plans[value]
        bucket = self._buckets.get(value)
        if bucket is not None and not bucket.take():
            return False
        if plan.quota_limit is not None:
            period = int(self._clock() // _PERIOD_SECONDS.get(plan.quota_period, 86_400))
            with self._lock:
                index, used = self._used.get(value, (period, 0))
                used = used if index == period else 0
                if used >= plan.quota_limit:
                    raise QuotaExceeded(plan.name)
                self._used[value] = (period, used + 1)
        return True
