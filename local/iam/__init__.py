"""IAM in the local runtime: every request to the local AWS endpoint authorized as AWS would.

- `policy`: the evaluator: a principal, an action, a resource and its condition keys against the
  identity policies and the resource's (or KMS key's) policy, as AWS's evaluation logic decides;
  what it cannot evaluate it lists (`not_evaluated`) and refuses; AWS's AccessDenied text
  (`denial_message`).
"""

from .policy import (
    KNOWN_CONDITION_KEYS,
    REQUEST_CONDITION_KEYS,
    SERVICE_CONTEXT_KEY,
    Decision,
    Policy,
    Principal,
    Request,
    denial_message,
    evaluate,
    not_evaluated,
)

__all__ = [
    "KNOWN_CONDITION_KEYS",
    "REQUEST_CONDITION_KEYS",
    "SERVICE_CONTEXT_KEY",
    "Decision",
    "Policy",
    "Principal",
    "Request",
    "denial_message",
    "evaluate",
    "not_evaluated",
]
