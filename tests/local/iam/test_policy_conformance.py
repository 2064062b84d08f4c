"""The IAM policy evaluator (`local.iam.policy`) against AWS's documented policy-evaluation examples and
rules (issue 40, property 2): each test cites the page it reproduces in its docstring."""

from __future__ import annotations

from typing import Any

import pytest

from local.iam import Decision, Policy, Principal, Request, evaluate

ACCOUNT = "000000000000"
OTHER = "111111111111"
GUIDE = "https://docs.aws.amazon.com/IAM/latest/UserGuide/"
KMS_GUIDE = "https://docs.aws.amazon.com/kms/latest/developerguide/"
QUEUE = f"arn:aws:sqs:us-east-1:{ACCOUNT}:Orders"
TABLE = f"arn:aws:dynamodb:us-east-1:{ACCOUNT}:table/Events"
KEY_ARN = f"arn:aws:kms:us-east-1:{ACCOUNT}:key/1234abcd-12ab-34cd-56ef-1234567890ab"


def statement(effect: str = "Allow", **elements: Any) -> dict[str, Any]:
    return {"Effect": effect, **elements}


def document(*statements: dict[str, Any]) -> dict[str, Any]:
    return {"Version": "2012-10-17", "Statement": list(statements)}


def role(name: str = "Worker", *statements: dict[str, Any], account: str = ACCOUNT) -> Principal:
    policies = (Policy(f"{name}DefaultPolicy", document(*statements)),) if statements else ()
    return Principal(
        arn=f"arn:aws:iam::{account}:role/{name}",
        account=account,
        policies=policies,
        session_arn=f"arn:aws:sts::{account}:assumed-role/{name}/session-1",
    )


def ask(principal: Principal, action: str, resource: str = "*", **context: Any) -> Request:
    return Request(principal, action, resource, context)


def resource_policy(*statements: dict[str, Any], name: str = "queue policy of Orders") -> Policy:
    return Policy(name, document(*statements))


def verdict(decision: Decision) -> tuple[bool, str, str]:
    return decision.allowed, decision.reason, decision.policy_type


# The "AllowGetList" / "DenyReports" policy of the explicit-vs-implicit page.
INTERPLAY = document(
    statement(Sid="AllowGetList", Action=["iam:Get*", "iam:List*"], Resource="*"),
    statement("Deny", Sid="DenyReports", Action="iam:*Report", Resource="*"),
)


def test_identity_policy_allow_grants_the_action() -> None:
    """https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_evaluation-logic_AccessPolicyLanguage_Interplay.html
    ("The AllowGetList statement allows read-only access to IAM actions that begin with Get and List")."""
    caller = Principal(f"arn:aws:iam::{ACCOUNT}:user/carlos", ACCOUNT, (Policy("ReadIAM", INTERPLAY),))
    decision = evaluate(ask(caller, "iam:GetUser"))
    assert verdict(decision) == (True, "allowed", "identity-based")
    assert decision.statement == "ReadIAM: AllowGetList"


def test_explicit_deny_overrides_an_allow_of_the_same_policy() -> None:
    """https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_evaluation-logic_AccessPolicyLanguage_Interplay.html
    ("The DenyReports statement explicitly denies ... iam:GetOrganizationsAccessReport")."""
    caller = Principal(f"arn:aws:iam::{ACCOUNT}:user/carlos", ACCOUNT, (Policy("ReadIAM", INTERPLAY),))
    decision = evaluate(ask(caller, "iam:GetOrganizationsAccessReport"))
    assert verdict(decision) == (False, "explicit-deny", "identity-based")
    assert decision.statement == "ReadIAM: DenyReports"


def test_no_matching_statement_is_an_implicit_deny() -> None:
    """https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_evaluation-logic_AccessPolicyLanguage_Interplay.html
    ("All other actions in IAM, such as iam:CreatePolicy are implicitly denied")."""
    caller = Principal(f"arn:aws:iam::{ACCOUNT}:user/carlos", ACCOUNT, (Policy("ReadIAM", INTERPLAY),))
    assert verdict(evaluate(ask(caller, "iam:CreatePolicy"))) == (False, "no-allow", "identity-based")


def test_explicit_deny_in_another_policy_overrides_an_allow() -> None:
    """https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_evaluation-logic_policy-eval-denyallow.html
    ("An explicit deny overrides an explicit allow"; every applicable policy is evaluated)."""
    allow = Policy("Writes", document(statement(Action="dynamodb:*", Resource=TABLE)))
    deny = Policy("Guard", document(statement("Deny", Action="dynamodb:DeleteItem", Resource="*")))
    caller = Principal(f"arn:aws:iam::{ACCOUNT}:role/Worker", ACCOUNT, (allow, deny))
    assert evaluate(ask(caller, "dynamodb:PutItem", TABLE)).allowed
    decision = evaluate(ask(caller, "dynamodb:DeleteItem", TABLE))
    assert verdict(decision) == (False, "explicit-deny", "identity-based")
    assert decision.statement == "Guard: Statement[0]"


def test_resource_policy_alone_grants_a_role_of_the_same_account() -> None:
    """https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_evaluation-logic_policy-eval-basics.html
    ("If either the identity-based policy or the resource-based policy within the same account allows
    the request and the other doesn't, the request is still allowed")."""
    caller = role("Worker")  # no identity policy at all
    queue = resource_policy(
        statement(Principal={"AWS": caller.arn}, Action="sqs:SendMessage", Resource=QUEUE)
    )
    decision = evaluate(ask(caller, "sqs:SendMessage", QUEUE), queue)
    assert verdict(decision) == (True, "allowed", "resource-based")
    assert not evaluate(ask(caller, "sqs:DeleteMessage", QUEUE), queue).allowed


def test_resource_policy_naming_the_role_session_grants_it() -> None:
    """https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_elements_principal.html
    (role sessions: "arn:aws:sts::AWS-account-ID:assumed-role/role-name/role-session-name")."""
    caller = role("Worker")
    queue = resource_policy(
        statement(Principal={"AWS": [caller.session_arn]}, Action="sqs:SendMessage", Resource=QUEUE)
    )
    assert evaluate(ask(caller, "sqs:SendMessage", QUEUE), queue).allowed
    other_session = Principal(
        caller.arn, ACCOUNT, session_arn=f"arn:aws:sts::{ACCOUNT}:assumed-role/Worker/s2"
    )
    assert not evaluate(ask(other_session, "sqs:SendMessage", QUEUE), queue).allowed


@pytest.mark.parametrize("account", [f"arn:aws:iam::{ACCOUNT}:root", ACCOUNT])
def test_resource_policy_naming_the_account_root_does_not_grant_without_an_identity_allow(
    account: str,
) -> None:
    """https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_elements_principal.html
    (an account principal "delegates authority to the account ... the administrator must grant it
    with identity-based policies")."""
    queue = resource_policy(statement(Principal={"AWS": account}, Action="sqs:*", Resource=QUEUE))
    bare = role("Worker")
    assert verdict(evaluate(ask(bare, "sqs:SendMessage", QUEUE), queue)) == (
        False,
        "no-allow",
        "identity-based",
    )
    granted = role("Worker", statement(Action="sqs:SendMessage", Resource=QUEUE))
    assert evaluate(ask(granted, "sqs:SendMessage", QUEUE), queue).allowed


def test_cross_account_needs_both_the_identity_and_the_resource_policy() -> None:
    """https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_evaluation-logic-cross-account.html
    (the resource-based policy must name the principal of the trusted account, and the principal's
    identity-based policy must allow the access)."""
    outsider_with_grant = role("Partner", statement(Action="sqs:SendMessage", Resource=QUEUE), account=OTHER)
    outsider_bare = role("Partner", account=OTHER)
    naming = resource_policy(statement(Principal={"AWS": outsider_bare.arn}, Action="sqs:*", Resource=QUEUE))
    naming_account = resource_policy(statement(Principal={"AWS": OTHER}, Action="sqs:*", Resource=QUEUE))
    silent = resource_policy(statement(Principal={"AWS": ACCOUNT}, Action="sqs:*", Resource=QUEUE))
    request = ask(outsider_with_grant, "sqs:SendMessage", QUEUE)
    assert verdict(evaluate(request, naming)) == (True, "allowed", "resource-based")
    assert evaluate(request, naming_account).allowed
    assert verdict(evaluate(request, silent)) == (False, "no-allow", "resource-based")
    assert verdict(evaluate(request)) == (False, "no-allow", "resource-based")
    alone = ask(outsider_bare, "sqs:SendMessage", QUEUE)
    assert verdict(evaluate(alone, naming)) == (False, "no-allow", "identity-based")


def test_explicit_deny_in_a_resource_policy_denies_the_account_root() -> None:
    """https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_evaluation-logic_policy-eval-denyallow.html
    ("all requests are implicitly denied with the exception of the AWS account root user, which has
    full access"; an explicit deny in any policy, resource-based ones included, overrides it)."""
    root = Principal(f"arn:aws:iam::{ACCOUNT}:root", ACCOUNT, root=True)
    assert verdict(evaluate(ask(root, "sqs:SendMessage", QUEUE))) == (True, "allowed", "identity-based")
    queue = resource_policy(
        statement("Deny", Principal="*", Action="sqs:SendMessage", Resource=QUEUE),
        statement(Principal={"AWS": ACCOUNT}, Action="sqs:*", Resource=QUEUE),
    )
    decision = evaluate(ask(root, "sqs:SendMessage", QUEUE), queue)
    assert verdict(decision) == (False, "explicit-deny", "resource-based")
    assert decision.statement == "queue policy of Orders: Statement[0]"
    assert evaluate(ask(root, "sqs:ReceiveMessage", QUEUE), queue).allowed


def test_not_action_allows_every_action_but_the_listed_ones() -> None:
    """https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_elements_notaction.html
    ("NotAction": "iam:*" with "Effect": "Allow" allows every action in every service but IAM's)."""
    caller = role("Admin", statement(NotAction="iam:*", Resource="*"))
    assert evaluate(ask(caller, "s3:GetObject", "arn:aws:s3:::bucket/key")).allowed
    assert evaluate(ask(caller, "dynamodb:BatchWriteItem", TABLE)).allowed
    assert not evaluate(ask(caller, "iam:CreateUser")).allowed
    assert not evaluate(ask(caller, "IAM:createuser")).allowed  # action names are case-insensitive


def test_not_action_in_a_deny_denies_every_action_but_the_listed_ones() -> None:
    """https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_elements_notaction.html
    (NotAction with Deny: "deny access to all of the listed resources except for the actions
    specified in the NotAction element")."""
    caller = role(
        "Reader",
        statement(Action="*", Resource="*"),
        statement("Deny", NotAction=["sqs:ReceiveMessage", "sqs:GetQueue*"], Resource=QUEUE),
    )
    assert evaluate(ask(caller, "sqs:ReceiveMessage", QUEUE)).allowed
    assert evaluate(ask(caller, "sqs:GetQueueAttributes", QUEUE)).allowed
    assert evaluate(ask(caller, "sqs:SendMessage", f"{QUEUE}-2")).allowed
    assert evaluate(ask(caller, "sqs:SendMessage", QUEUE)).reason == "explicit-deny"


def test_not_resource_allows_every_resource_but_the_listed_ones() -> None:
    """https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_elements_notresource.html
    (Allow with NotResource: access to everything except the Payroll folder of HRBucket)."""
    caller = role(
        "Hr",
        statement(
            Action="s3:*", NotResource=["arn:aws:s3:::HRBucket/Payroll", "arn:aws:s3:::HRBucket/Payroll/*"]
        ),
    )
    assert evaluate(ask(caller, "s3:GetObject", "arn:aws:s3:::HRBucket/Reviews/2026.pdf")).allowed
    assert not evaluate(ask(caller, "s3:GetObject", "arn:aws:s3:::HRBucket/Payroll/march.csv")).allowed
    assert not evaluate(ask(caller, "s3:ListBucket", "arn:aws:s3:::HRBucket/Payroll")).allowed
    # resource ARNs are case-sensitive
    assert evaluate(ask(caller, "s3:GetObject", "arn:aws:s3:::HRBucket/payroll/march.csv")).allowed


# Operators on a key whose absence this evaluator knows to be real (aws:SourceOwner: set only when a
# service calls on someone's behalf), so each operator's missing-key rule shows.
KEY = "aws:SourceOwner"
ABSENT = None
D = "2026-01-01T00:00:00Z"
OPERATORS = [
    ("StringEquals", ["a", "b"], "b", True),
    ("StringEquals", ["a", "b"], "B", False),
    ("StringEquals", ["a"], ABSENT, False),
    ("StringNotEquals", ["a", "b"], "c", True),
    ("StringNotEquals", ["a", "b"], "a", False),
    ("StringNotEquals", ["a"], ABSENT, True),
    ("StringEqualsIgnoreCase", ["ABC"], "abc", True),
    ("StringEqualsIgnoreCase", ["ABC"], ABSENT, False),
    ("StringNotEqualsIgnoreCase", ["ABC"], "abc", False),
    ("StringNotEqualsIgnoreCase", ["ABC"], ABSENT, True),
    ("StringLike", ["queue-?/*"], "queue-1/x/y", True),
    ("StringLike", ["queue-?/*"], "queue-12/x", False),
    ("StringLike", ["queue-*"], ABSENT, False),
    ("StringNotLike", ["a*"], "abc", False),
    ("StringNotLike", ["a*"], "bcd", True),
    ("StringNotLike", ["a*"], ABSENT, True),
    ("NumericEquals", ["10"], "10.0", True),
    ("NumericEquals", ["10"], "11", False),
    ("NumericEquals", ["10"], ABSENT, False),
    ("NumericNotEquals", ["10"], "11", True),
    ("NumericNotEquals", ["10"], "10", False),
    ("NumericNotEquals", ["10"], ABSENT, True),
    ("NumericLessThan", ["10"], "9", True),
    ("NumericLessThan", ["10"], "10", False),
    ("NumericLessThan", ["10"], ABSENT, False),
    ("NumericLessThanEquals", ["10"], "10", True),
    ("NumericLessThanEquals", ["10"], "10.5", False),
    ("NumericGreaterThan", ["10"], "11", True),
    ("NumericGreaterThan", ["10"], "10", False),
    ("NumericGreaterThanEquals", ["10"], "10", True),
    ("NumericGreaterThanEquals", ["10"], ABSENT, False),
    ("DateEquals", [D], "2026-01-01T00:00:00+00:00", True),
    ("DateEquals", [D], "1767225600", True),  # epoch seconds
    ("DateEquals", [D], ABSENT, False),
    ("DateNotEquals", [D], "2026-01-02T00:00:00Z", True),
    ("DateNotEquals", [D], ABSENT, True),
    ("DateLessThan", [D], "2025-12-31T23:59:59Z", True),
    ("DateLessThan", [D], D, False),
    ("DateLessThanEquals", [D], D, True),
    ("DateGreaterThan", [D], "2026-01-01T00:00:01Z", True),
    ("DateGreaterThan", [D], D, False),
    ("DateGreaterThanEquals", [D], D, True),
    ("DateGreaterThanEquals", [D], ABSENT, False),
    ("Bool", ["true"], "true", True),
    ("Bool", ["true"], "false", False),
    ("Bool", ["true"], ABSENT, False),
    ("BinaryEquals", ["QmluYXJ5VmFsdWVJbkJhc2U2NA=="], "QmluYXJ5VmFsdWVJbkJhc2U2NA==", True),
    ("BinaryEquals", ["QmluYXJ5VmFsdWVJbkJhc2U2NA=="], "b3RoZXI=", False),
    ("BinaryEquals", ["QmluYXJ5VmFsdWVJbkJhc2U2NA=="], ABSENT, False),
    ("IpAddress", ["203.0.113.0/24"], "203.0.113.7", True),
    ("IpAddress", ["203.0.113.0/24", "2001:db8::/32"], "2001:db8::1", True),
    ("IpAddress", ["203.0.113.0/24"], "198.51.100.1", False),
    ("IpAddress", ["203.0.113.0/24"], ABSENT, False),
    ("NotIpAddress", ["203.0.113.0/24"], "198.51.100.1", True),
    ("NotIpAddress", ["203.0.113.0/24"], "203.0.113.7", False),
    ("NotIpAddress", ["203.0.113.0/24"], ABSENT, True),
    ("ArnEquals", [QUEUE], QUEUE, True),
    ("ArnEquals", [QUEUE], f"{QUEUE}-2", False),
    ("ArnEquals", [QUEUE], ABSENT, False),
    ("ArnLike", [f"arn:aws:sqs:*:{ACCOUNT}:Ord*"], QUEUE, True),
    ("ArnLike", ["arn:aws:sqs:*:111111111111:*"], QUEUE, False),
    ("ArnLike", ["arn:aws:sqs:*:*"], QUEUE, False),  # each of the six parts is matched on its own
    ("ArnLike", [QUEUE], ABSENT, False),
    ("ArnNotEquals", [QUEUE], f"{QUEUE}-2", True),
    ("ArnNotEquals", [QUEUE], QUEUE, False),
    ("ArnNotEquals", [QUEUE], ABSENT, True),
    ("ArnNotLike", ["arn:aws:sqs:*:*:Ord*"], QUEUE, False),
    ("ArnNotLike", ["arn:aws:sqs:*:*:Ord*"], ABSENT, True),
    ("Null", ["true"], ABSENT, True),
    ("Null", ["true"], "x", False),
    ("Null", ["false"], "x", True),
    ("Null", ["false"], ABSENT, False),
    ("StringEqualsIfExists", ["a"], ABSENT, True),
    ("StringEqualsIfExists", ["a"], "a", True),
    ("StringEqualsIfExists", ["a"], "b", False),
    ("StringNotEqualsIfExists", ["a"], ABSENT, True),
    ("StringNotEqualsIfExists", ["a"], "a", False),
    ("NumericLessThanIfExists", ["10"], ABSENT, True),
    ("NumericLessThanIfExists", ["10"], "11", False),
    ("DateGreaterThanIfExists", [D], ABSENT, True),
    ("BoolIfExists", ["true"], ABSENT, True),
    ("BoolIfExists", ["true"], "false", False),
    ("IpAddressIfExists", ["203.0.113.0/24"], ABSENT, True),
    ("ArnLikeIfExists", [QUEUE], ABSENT, True),
    ("ArnLikeIfExists", [QUEUE], f"{QUEUE}-2", False),
    ("BinaryEqualsIfExists", ["QQ=="], ABSENT, True),
]


@pytest.mark.parametrize(("operator", "values", "value", "holds"), OPERATORS)
def test_condition_operator_with_present_and_missing_key(
    operator: str, values: list[str], value: str | None, holds: bool
) -> None:
    """https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_elements_condition_operators.html
    ("If the key that you specify in a policy condition is not present in the request context, the
    values do not match and the condition is false. If the policy condition requires that the key is
    not matched, such as StringNotLike or ArnNotLike, and the right key is not present, the condition
    is true. This logic applies to all condition operators except ...IfExists and Null check")."""
    caller = role(
        "Worker", statement(Action="sqs:SendMessage", Resource="*", Condition={operator: {KEY: values}})
    )
    context = {} if value is None else {KEY: value}
    decision = evaluate(Request(caller, "sqs:SendMessage", QUEUE, context))
    assert decision.allowed is holds, decision
    assert decision.reason == ("allowed" if holds else "no-allow")


def test_multiple_keys_are_anded_and_multiple_values_ored() -> None:
    """https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_elements_condition.html
    ("If you specify multiple context keys ... we evaluate them using a logical AND operation. If you
    specify multiple values for a single context key, we evaluate the condition using a logical OR")."""
    condition = {
        "StringEquals": {
            "aws:SourceAccount": [ACCOUNT, OTHER],
            "kms:ViaService": "sqs.us-east-1.amazonaws.com",
        },
        "ArnLike": {"aws:SourceArn": f"arn:aws:sns:us-east-1:{ACCOUNT}:*"},
    }
    caller = role("Worker", statement(Action="sqs:SendMessage", Resource="*", Condition=condition))
    good = {
        "aws:SourceAccount": OTHER,
        "kms:ViaService": "sqs.us-east-1.amazonaws.com",
        "aws:SourceArn": f"arn:aws:sns:us-east-1:{ACCOUNT}:topic",
    }
    assert evaluate(Request(caller, "sqs:SendMessage", QUEUE, good)).allowed
    for key, wrong in (
        ("aws:SourceAccount", "222222222222"),
        ("kms:ViaService", "s3.us-east-1.amazonaws.com"),
    ):
        assert not evaluate(Request(caller, "sqs:SendMessage", QUEUE, {**good, key: wrong})).allowed
    missing = {k: v for k, v in good.items() if k != "aws:SourceArn"}
    assert not evaluate(Request(caller, "sqs:SendMessage", QUEUE, missing)).allowed


SET_OPERATORS = [
    # (operator, policy values, request values (None: absent), holds)
    ("ForAllValues:StringLike", ["key1*", "key2*"], ["key1a", "key2b"], True),
    ("ForAllValues:StringLike", ["key1*", "key2*"], ["key1a", "other"], False),
    ("ForAllValues:StringLike", ["key1*"], [], True),  # an empty set of values: vacuously true
    ("ForAllValues:StringLike", ["key1*"], None, True),  # "also returns true if there are no context keys"
    ("ForAnyValue:StringEquals", ["a", "b"], ["x", "b"], True),
    ("ForAnyValue:StringEquals", ["a", "b"], ["x", "y"], False),
    ("ForAnyValue:StringEquals", ["a"], None, False),
    ("ForAnyValue:StringNotEquals", ["a"], ["a", "z"], True),
    ("ForAnyValue:StringNotEquals", ["a"], ["a"], False),
    ("ForAllValues:StringNotEquals", ["a", "b"], ["c", "d"], True),
    ("ForAllValues:StringNotEquals", ["a", "b"], ["c", "a"], False),
    ("ForAnyValue:StringEqualsIfExists", ["a"], None, True),
]


@pytest.mark.parametrize(("operator", "values", "request_values", "holds"), SET_OPERATORS)
def test_set_operators_on_multivalued_keys(
    operator: str, values: list[str], request_values: list[str] | None, holds: bool
) -> None:
    """https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_condition-single-vs-multi-valued-context-keys.html
    (ForAllValues: every value in the request matches at least one in the policy; ForAnyValue: at
    least one does) and
    https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_condition_examples-multi-valued-context-keys.html
    ("The ForAllValues set operator also returns true if there are no context keys in the request")."""
    key = "aws:CalledVia"  # multivalued, and absent when no service calls on the caller's behalf
    caller = role(
        "Worker", statement(Action="sqs:SendMessage", Resource="*", Condition={operator: {key: values}})
    )
    context = {} if request_values is None else {key: request_values}
    assert evaluate(Request(caller, "sqs:SendMessage", QUEUE, context)).allowed is holds


def test_kms_key_policy_naming_the_account_root_allows_iam_policies() -> None:
    """https://docs.aws.amazon.com/kms/latest/developerguide/key-policy-default.html#key-policy-default-allow-root-enable-iam
    and https://docs.aws.amazon.com/kms/latest/developerguide/key-policies.html ("Unless the key policy
    explicitly allows it, you cannot use IAM policies to allow access to a KMS key")."""
    key = Policy(
        "key policy of GroupKey",
        document(
            statement(
                Sid="Enable IAM User Permissions",
                Principal={"AWS": f"arn:aws:iam::{ACCOUNT}:root"},
                Action="kms:*",
                Resource="*",
            )
        ),
    )
    granted = role("Worker", statement(Action=["kms:Decrypt", "kms:GenerateDataKey"], Resource=KEY_ARN))
    decision = evaluate(ask(granted, "kms:Decrypt", KEY_ARN), key, key_policy=True)
    assert verdict(decision) == (True, "allowed", "key")
    bare = role("Worker")
    assert verdict(evaluate(ask(bare, "kms:Decrypt", KEY_ARN), key, key_policy=True)) == (
        False,
        "no-allow",
        "identity-based",
    )


def test_kms_key_policy_without_the_root_delegation_ignores_iam_policies() -> None:
    """https://docs.aws.amazon.com/kms/latest/developerguide/key-policies.html ("Without permission from
    the key policy, IAM policies that allow permissions have no effect"); a key policy naming the role
    itself grants it on its own."""
    granted = role("Worker", statement(Action="kms:*", Resource="*"))
    admins_only = Policy(
        "key policy of GroupKey",
        document(
            statement(Principal={"AWS": f"arn:aws:iam::{ACCOUNT}:role/Admin"}, Action="kms:*", Resource="*")
        ),
    )
    decision = evaluate(ask(granted, "kms:Decrypt", KEY_ARN), admins_only, key_policy=True)
    assert verdict(decision) == (False, "no-allow", "key")
    assert not evaluate(ask(granted, "kms:Decrypt", KEY_ARN), None, key_policy=True).allowed
    naming_the_user = Policy(
        "key policy of GroupKey",
        document(
            statement(
                Principal={"AWS": f"arn:aws:iam::{ACCOUNT}:role/Worker"},
                Action="kms:Decrypt",
                Resource="*",
                Condition={"StringEquals": {"kms:ViaService": "dynamodb.us-east-1.amazonaws.com"}},
            )
        ),
    )
    bare = role("Worker")
    via = {"kms:ViaService": "dynamodb.us-east-1.amazonaws.com"}
    assert evaluate(Request(bare, "kms:Decrypt", KEY_ARN, via), naming_the_user, key_policy=True).allowed
    assert not evaluate(Request(bare, "kms:Decrypt", KEY_ARN), naming_the_user, key_policy=True).allowed


def test_kms_key_policy_across_accounts_needs_the_identity_policy_too() -> None:
    """https://docs.aws.amazon.com/kms/latest/developerguide/key-policy-modifying-external-accounts.html
    (the key policy gives the external account permission; its IAM policies must delegate it)."""
    key = Policy(
        "key policy of GroupKey",
        document(
            statement(Principal={"AWS": f"arn:aws:iam::{OTHER}:role/Partner"}, Action="kms:*", Resource="*")
        ),
    )
    assert not evaluate(
        ask(role("Partner", account=OTHER), "kms:Decrypt", KEY_ARN), key, key_policy=True
    ).allowed
    granted = role("Partner", statement(Action="kms:Decrypt", Resource=KEY_ARN), account=OTHER)
    assert evaluate(ask(granted, "kms:Decrypt", KEY_ARN), key, key_policy=True).allowed


def test_service_principal_matches_only_a_request_made_by_that_service() -> None:
    """https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_elements_principal.html
    (AWS service principals) with the confused-deputy guard aws:SourceArn
    (https://docs.aws.amazon.com/IAM/latest/UserGuide/confused-deputy.html)."""
    topic = f"arn:aws:sns:us-east-1:{ACCOUNT}:alarms"
    queue = resource_policy(
        statement(
            Principal={"Service": "sns.amazonaws.com"},
            Action="sqs:SendMessage",
            Resource=QUEUE,
            Condition={"ArnEquals": {"aws:SourceArn": topic}},
        )
    )
    caller = role("Worker")
    as_sns = {"shardline:Service": "sns.amazonaws.com", "aws:SourceArn": topic}
    assert evaluate(Request(caller, "sqs:SendMessage", QUEUE, as_sns), queue).allowed
    wrong_topic = {**as_sns, "aws:SourceArn": f"{topic}-2"}
    assert not evaluate(Request(caller, "sqs:SendMessage", QUEUE, wrong_topic), queue).allowed
    assert not evaluate(Request(caller, "sqs:SendMessage", QUEUE), queue).allowed


def test_principal_condition_keys_are_filled_by_the_evaluator() -> None:
    """https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_condition-keys.html
    (aws:PrincipalArn, aws:PrincipalAccount, aws:PrincipalOrgID, aws:PrincipalType are in every
    request context; aws:PrincipalOrgID only for a member of an organization)."""
    queue = resource_policy(
        statement(
            Principal="*",
            Action="sqs:SendMessage",
            Resource=QUEUE,
            Condition={
                "StringEquals": {"aws:PrincipalOrgID": "o-abc", "aws:PrincipalType": "AssumedRole"},
                "ArnLike": {"aws:PrincipalArn": f"arn:aws:iam::{ACCOUNT}:role/Work*"},
            },
        )
    )
    member = Principal(f"arn:aws:iam::{ACCOUNT}:role/Worker", ACCOUNT, org_id="o-abc")
    assert evaluate(ask(member, "sqs:SendMessage", QUEUE), queue).allowed
    # the request cannot forge them: the evaluator's values win
    forged = Request(role("Worker"), "sqs:SendMessage", QUEUE, {"aws:PrincipalOrgID": "o-abc"})
    assert not evaluate(forged, queue).allowed
    other = Principal(f"arn:aws:iam::{ACCOUNT}:role/Admin", ACCOUNT, org_id="o-abc")
    assert not evaluate(ask(other, "sqs:SendMessage", QUEUE), queue).allowed
