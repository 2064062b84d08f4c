"""The IAM policy evaluator (`local.iam.policy`): AWS's denial texts, what it cannot evaluate (issue 40,
property 3), policy variables, and the wildcard matcher against a reference."""

from __future__ import annotations

import fnmatch
import pickle
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from local.iam import Policy, Principal, Request, denial_message, evaluate, not_evaluated
from local.iam._policy_match import wildcard_regex

ACCOUNT = "000000000000"
OTHER = "111111111111"
TABLE = f"arn:aws:dynamodb:us-east-1:{ACCOUNT}:table/Events"
QUEUE = f"arn:aws:sqs:us-east-1:{ACCOUNT}:Orders"
SESSION = f"arn:aws:sts::{ACCOUNT}:assumed-role/EventSinkRole/event-sink"


def sink_role(*statements: dict[str, Any], account: str = ACCOUNT, **fields: Any) -> Principal:
    return Principal(
        arn=f"arn:aws:iam::{account}:role/EventSinkRole",
        account=account,
        policies=(
            Policy(
                "EventSinkRoleDefaultPolicyAB12", {"Version": "2012-10-17", "Statement": list(statements)}
            ),
        ),
        session_arn=f"arn:aws:sts::{account}:assumed-role/EventSinkRole/event-sink",
        **fields,
    )


# The consumer group's grants before the fix (issue 40's defect).
GROUP_GRANTS = {
    "Effect": "Allow",
    "Action": [
        "dynamodb:PutItem",
        "dynamodb:UpdateItem",
        "dynamodb:ConditionCheckItem",
        "dynamodb:DescribeTable",
    ],
    "Resource": TABLE,
}


def test_property_2_batch_write_item_is_not_covered_by_put_item() -> None:
    """The defect of issue 40: PutItem does not cover BatchWriteItem, and the denial reads as AWS's."""
    request = Request(sink_role(GROUP_GRANTS), "dynamodb:BatchWriteItem", TABLE)
    decision = evaluate(request)
    assert (decision.allowed, decision.reason, decision.policy_type) == (False, "no-allow", "identity-based")
    assert denial_message(request, decision) == (
        f"User: {SESSION} is not authorized to perform: dynamodb:BatchWriteItem on resource: {TABLE} "
        "because no identity-based policy allows the dynamodb:BatchWriteItem action"
    )
    assert evaluate(Request(request.principal, "dynamodb:PutItem", TABLE)).allowed


def test_denial_message_explicit_deny_in_an_identity_based_policy() -> None:
    """https://docs.aws.amazon.com/IAM/latest/UserGuide/troubleshoot_access-denied.html
    ("with an explicit deny in a type policy")."""
    deny = {"Effect": "Deny", "Action": "dynamodb:*", "Resource": TABLE}
    request = Request(sink_role(GROUP_GRANTS, deny), "dynamodb:PutItem", TABLE)
    assert denial_message(request, evaluate(request)) == (
        f"User: {SESSION} is not authorized to perform: dynamodb:PutItem on resource: {TABLE} "
        "with an explicit deny in an identity-based policy"
    )


def test_denial_message_explicit_deny_in_a_resource_based_policy() -> None:
    """https://docs.aws.amazon.com/IAM/latest/UserGuide/troubleshoot_access-denied.html"""
    caller = sink_role({"Effect": "Allow", "Action": "sqs:*", "Resource": "*"})
    queue = Policy(
        "queue policy of Orders",
        {
            "Statement": [
                {
                    "Effect": "Deny",
                    "Principal": "*",
                    "Action": "sqs:*",
                    "Resource": QUEUE,
                    "Condition": {"Bool": {"aws:SecureTransport": "false"}},
                }
            ]
        },
    )
    request = Request(caller, "sqs:SendMessage", QUEUE, {"aws:SecureTransport": "false"})
    decision = evaluate(request, queue)
    assert decision.statement == "queue policy of Orders: Statement[0]"
    assert denial_message(request, decision) == (
        f"User: {SESSION} is not authorized to perform: sqs:SendMessage on resource: {QUEUE} "
        "with an explicit deny in a resource-based policy"
    )
    assert evaluate(Request(caller, "sqs:SendMessage", QUEUE, {"aws:SecureTransport": "true"}), queue).allowed


def test_denial_message_no_resource_based_policy_allows() -> None:
    """https://docs.aws.amazon.com/IAM/latest/UserGuide/troubleshoot_access-denied.html (cross-account,
    and a KMS key policy, which KMS reports as "resource-based")."""
    outsider = sink_role({"Effect": "Allow", "Action": "sqs:SendMessage", "Resource": QUEUE}, account=OTHER)
    request = Request(outsider, "sqs:SendMessage", QUEUE)
    assert denial_message(request, evaluate(request)) == (
        f"User: arn:aws:sts::{OTHER}:assumed-role/EventSinkRole/event-sink is not authorized to perform: "
        f"sqs:SendMessage on resource: {QUEUE} "
        "because no resource-based policy allows the sqs:SendMessage action"
    )
    key_arn = f"arn:aws:kms:us-east-1:{ACCOUNT}:key/k"
    key = Policy("key policy of GroupKey", {"Statement": []})
    kms = Request(sink_role({"Effect": "Allow", "Action": "kms:*", "Resource": "*"}), "kms:Decrypt", key_arn)
    decision = evaluate(kms, key, key_policy=True)
    assert decision.policy_type == "key"
    assert denial_message(kms, decision).endswith(
        "because no resource-based policy allows the kms:Decrypt action"
    )


def test_denial_message_names_a_user_by_its_arn_and_refuses_an_allowed_decision() -> None:
    user = Principal(f"arn:aws:iam::{ACCOUNT}:user/dev", ACCOUNT)
    request = Request(user, "kinesis:PutRecords", "*")
    assert denial_message(request, evaluate(request)).startswith(
        f"User: arn:aws:iam::{ACCOUNT}:user/dev is not authorized to perform: "
        "kinesis:PutRecords on resource: *"
    )
    root = Request(Principal(f"arn:aws:iam::{ACCOUNT}:root", ACCOUNT, root=True), "kinesis:PutRecords", "*")
    with pytest.raises(ValueError, match="allowed"):
        denial_message(root, evaluate(root))


TAGGED = {
    "Sid": "TeamTables",
    "Effect": "Allow",
    "Action": "dynamodb:*",
    "Resource": TABLE,
    "Condition": {"StringEquals": {"aws:PrincipalTag/team": "payments"}},
}


def test_property_3_not_evaluated_names_an_unknown_operator_key_element_and_variable() -> None:
    policy = Policy(
        "EventSinkRoleDefaultPolicyAB12",
        {
            "Version": "2012-10-17",
            "Statement": [
                TAGGED,
                {
                    "Effect": "Allow",
                    "Action": "s3:*",
                    "Resource": "*",
                    "Condition": {"StringMatches": {"s3:x": "y"}},
                },
                {"Sid": "Odd", "Effect": "Allow", "Action": "sqs:*", "Resource": "*", "Nope": 1},
                {
                    "Sid": "Home",
                    "Effect": "Allow",
                    "Action": "s3:*",
                    "Resource": "arn:aws:s3:::b/${aws:userid}/*",
                },
                {"Sid": "Fine", "Effect": "Allow", "Action": "sqs:*", "Resource": "*"},
            ],
        },
    )
    assert not_evaluated(policy) == [
        "Condition key aws:PrincipalTag/team in EventSinkRoleDefaultPolicyAB12: TeamTables",
        "Condition operator StringMatches in EventSinkRoleDefaultPolicyAB12: Statement[1]",
        "Element Nope in EventSinkRoleDefaultPolicyAB12: Odd",
        "Policy variable ${aws:userid} in EventSinkRoleDefaultPolicyAB12: Home",
    ]
    known = Policy("P", {"Statement": [{"Effect": "Allow", "Action": "sqs:*", "Resource": "*"}]})
    assert not_evaluated(known) == []


def test_property_3_allow_depending_on_an_unknown_key_is_refused() -> None:
    request = Request(sink_role(TAGGED), "dynamodb:PutItem", TABLE)
    decision = evaluate(request)
    assert (decision.allowed, decision.reason, decision.policy_type) == (
        False,
        "not-evaluated",
        "identity-based",
    )
    assert decision.statement == "EventSinkRoleDefaultPolicyAB12: TeamTables"
    assert decision.not_evaluated == (
        "Condition key aws:PrincipalTag/team in EventSinkRoleDefaultPolicyAB12: TeamTables",
    )
    # with the key in the request context, it is evaluated
    told = Request(request.principal, "dynamodb:PutItem", TABLE, {"aws:PrincipalTag/team": "payments"})
    assert evaluate(told).allowed
    # another statement allowing it decides: the unknown one does not matter
    both = Request(sink_role(TAGGED, GROUP_GRANTS), "dynamodb:PutItem", TABLE)
    assert evaluate(both).reason == "allowed"


def test_property_3_deny_depending_on_an_unknown_key_is_applied() -> None:
    deny = {
        "Sid": "OnlyPayments",
        "Effect": "Deny",
        "Action": "dynamodb:*",
        "Resource": "*",
        "Condition": {"StringNotEquals": {"aws:PrincipalTag/team": "payments"}},
    }
    request = Request(sink_role(GROUP_GRANTS, deny), "dynamodb:PutItem", TABLE)
    decision = evaluate(request)
    assert (decision.allowed, decision.reason, decision.statement) == (
        False,
        "explicit-deny",
        "EventSinkRoleDefaultPolicyAB12: OnlyPayments",
    )
    assert decision.not_evaluated == (
        "Condition key aws:PrincipalTag/team in EventSinkRoleDefaultPolicyAB12: OnlyPayments",
    )
    told = Request(request.principal, "dynamodb:PutItem", TABLE, {"aws:PrincipalTag/team": "payments"})
    assert evaluate(told).allowed


def test_property_3_unknown_operator_and_element_never_grant() -> None:
    odd_operator = {
        "Effect": "Allow",
        "Action": "sqs:*",
        "Resource": "*",
        "Condition": {"StringSorta": {"k": "v"}},
    }
    odd_element = {"Effect": "Allow", "Action": "sqs:*", "Resource": "*", "Unless": {"x": "y"}}
    for statement, item in (
        (odd_operator, "Condition operator StringSorta"),
        (odd_element, "Element Unless"),
    ):
        decision = evaluate(Request(sink_role(statement), "sqs:SendMessage", QUEUE))
        assert decision.reason == "not-evaluated"
        assert decision.not_evaluated == (f"{item} in EventSinkRoleDefaultPolicyAB12: Statement[0]",)


def test_property_3_a_key_aws_always_sets_is_not_guessed_when_the_request_lacks_it() -> None:
    """aws:SecureTransport is in every AWS request: a request context without it is not read as
    "absent" (which would make a TLS-only Deny silently pass)."""
    tls_only = {
        "Effect": "Deny",
        "Action": "sqs:*",
        "Resource": "*",
        "Condition": {"Bool": {"aws:SecureTransport": "false"}},
    }
    caller = sink_role({"Effect": "Allow", "Action": "sqs:*", "Resource": "*"}, tls_only)
    assert evaluate(Request(caller, "sqs:SendMessage", QUEUE)).reason == "explicit-deny"
    assert evaluate(Request(caller, "sqs:SendMessage", QUEUE, {"aws:SecureTransport": "true"})).allowed


def test_property_3_managed_policies_without_documents_are_named_when_nothing_else_allows() -> None:
    managed = "arn:aws:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole"
    caller = sink_role(GROUP_GRANTS, not_evaluated_policies=(managed,))
    decision = evaluate(Request(caller, "logs:PutLogEvents", "*"))
    assert (decision.allowed, decision.reason) == (False, "not-evaluated")
    assert decision.not_evaluated == (f"Policy {managed} (not evaluated)",)
    assert evaluate(Request(caller, "dynamodb:PutItem", TABLE)).allowed


def test_policy_variables_are_filled_from_the_request() -> None:
    """https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_variables.html (${aws:username};
    ${*}, ${?}, ${$} as literal characters; a default value after a comma)."""
    home = {"Effect": "Allow", "Action": "s3:*", "Resource": "arn:aws:s3:::home/${aws:username}/*"}
    literal = {"Effect": "Allow", "Action": "s3:GetObject", "Resource": "arn:aws:s3:::odd/${*}${?}${$}"}
    user = Principal(
        f"arn:aws:iam::{ACCOUNT}:user/ana",
        ACCOUNT,
        (Policy("Home", {"Version": "2012-10-17", "Statement": [home, literal]}),),
    )
    assert evaluate(Request(user, "s3:PutObject", "arn:aws:s3:::home/ana/notes.txt")).allowed
    assert not evaluate(Request(user, "s3:PutObject", "arn:aws:s3:::home/bob/notes.txt")).allowed
    assert evaluate(Request(user, "s3:GetObject", "arn:aws:s3:::odd/*?$")).allowed
    assert not evaluate(Request(user, "s3:GetObject", "arn:aws:s3:::odd/ab$")).allowed
    # a role has no aws:username: the variable matches nothing (refused, not "not evaluated")
    assert evaluate(Request(sink_role(home), "s3:PutObject", "arn:aws:s3:::home/x/y")).reason == "no-allow"
    defaulted = {
        "Effect": "Allow",
        "Action": "s3:*",
        "Resource": "arn:aws:s3:::t/${aws:username, 'shared'}/*",
    }
    assert evaluate(Request(sink_role(defaulted), "s3:PutObject", "arn:aws:s3:::t/shared/x")).allowed
    unknown = {"Effect": "Allow", "Action": "s3:*", "Resource": "arn:aws:s3:::t/${aws:PrincipalTag/team}/*"}
    decision = evaluate(Request(sink_role(unknown), "s3:PutObject", "arn:aws:s3:::t/a/x"))
    assert decision.reason == "not-evaluated"
    assert decision.not_evaluated == (
        "Policy variable ${aws:PrincipalTag/team} in EventSinkRoleDefaultPolicyAB12: Statement[0]",
    )


def test_each_policy_is_compiled_once() -> None:
    policy = Policy("P", {"Statement": [GROUP_GRANTS]})
    compiled = policy.compiled
    caller = Principal(f"arn:aws:iam::{ACCOUNT}:role/R", ACCOUNT, (policy,))
    for _ in range(3):
        assert evaluate(Request(caller, "dynamodb:PutItem", TABLE)).allowed
    assert policy.compiled is compiled
    assert compiled.for_action("dynamodb:putitem") is compiled.for_action("dynamodb:putitem")


_PATTERN_CHARS = st.sampled_from([*"ab:/*?[]-.", "\\", "\n"])


@settings(max_examples=500, deadline=None)
@given(
    pattern=st.text(_PATTERN_CHARS, max_size=12),
    value=st.text(st.sampled_from(list("ab:/*?[]-.\n")), max_size=12),
)
def test_wildcard_matcher_agrees_with_fnmatch(pattern: str, value: str) -> None:
    """`*` any run of characters (across `:` and `/`), `?` one character, nothing else special: as
    `fnmatch.fnmatchcase` with its `[` sets escaped."""
    reference = fnmatch.fnmatchcase(value, pattern.replace("[", "[[]"))
    assert bool(wildcard_regex(pattern).fullmatch(value)) is reference


def test_property_3_not_evaluated_leaves_out_keys_the_runtime_carries() -> None:
    policy = Policy(
        "P", {"Statement": [TAGGED, {**TAGGED, "Sid": "Ns", "Condition": {"StringEquals": {"x:Ns": "a"}}}]}
    )
    assert not_evaluated(policy, carried=["AWS:PrincipalTag/team"]) == ["Condition key x:Ns in P: Ns"]
    federated = {
        "Effect": "Allow",
        "Principal": {"Federated": "cognito-identity.amazonaws.com"},
        "Action": "s3:*",
    }
    assert not_evaluated(Policy("bucket policy of B", {"Statement": [federated]})) == [
        "Principal Federated: cognito-identity.amazonaws.com in bucket policy of B: Statement[0]"
    ]


def test_condition_key_names_are_case_insensitive() -> None:
    """https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_elements_condition.html
    ("Condition key names are not case-sensitive")."""
    statement = {
        "Effect": "Allow",
        "Action": "sqs:SendMessage",
        "Resource": "*",
        "Condition": {"StringEquals": {"AWS:sourceaccount": OTHER}},
    }
    assert evaluate(
        Request(sink_role(statement), "sqs:SendMessage", QUEUE, {"aws:SourceAccount": OTHER})
    ).allowed


def test_not_principal_deny_leaves_out_only_a_caller_whose_every_name_is_listed() -> None:
    """https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_elements_notprincipal.html
    (with Deny, list the account as well as the role and its session, or the account's deny applies)."""
    caller = sink_role({"Effect": "Allow", "Action": "sqs:*", "Resource": "*"})
    assert caller.session_arn is not None

    def queue(*names: str) -> Policy:
        deny = {"Effect": "Deny", "NotPrincipal": {"AWS": list(names)}, "Action": "sqs:*", "Resource": QUEUE}
        return Policy("queue policy of Orders", {"Statement": [deny]})

    request = Request(caller, "sqs:SendMessage", QUEUE)
    assert evaluate(request, queue(caller.arn)).reason == "explicit-deny"
    assert evaluate(request, queue(caller.arn, caller.session_arn)).reason == "explicit-deny"
    assert evaluate(request, queue(ACCOUNT, caller.arn, caller.session_arn)).allowed
    allow_all_but = {
        "Effect": "Allow",
        "NotPrincipal": {"AWS": f"arn:aws:iam::{ACCOUNT}:role/Admin"},
        "Action": "sqs:SendMessage",
        "Resource": QUEUE,
    }
    bare = Principal(caller.arn, ACCOUNT, session_arn=caller.session_arn)
    assert evaluate(
        Request(bare, "sqs:SendMessage", QUEUE), Policy("q", {"Statement": [allow_all_but]})
    ).allowed


def test_policy_variables_are_literal_text_before_version_2012_10_17() -> None:
    """https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_elements_version.html
    (without "Version": "2012-10-17", variables such as ${aws:username} are treated as literal strings)."""
    home = {"Effect": "Allow", "Action": "s3:*", "Resource": "arn:aws:s3:::home/${aws:username}/*"}
    for version, literal_allowed, ana_allowed in (("2008-10-17", True, False), ("2012-10-17", False, True)):
        policy = Policy("Home", {"Version": version, "Statement": [home]})
        user = Principal(f"arn:aws:iam::{ACCOUNT}:user/ana", ACCOUNT, (policy,))
        literal = Request(user, "s3:GetObject", "arn:aws:s3:::home/${aws:username}/x")
        assert evaluate(literal).allowed is literal_allowed
        assert evaluate(Request(user, "s3:GetObject", "arn:aws:s3:::home/ana/x")).allowed is ana_allowed


def test_a_principal_crosses_to_another_process_and_recompiles_its_policies() -> None:
    """The runtime may build principals in one process and authorize in another (pickle)."""
    caller = sink_role(TAGGED, GROUP_GRANTS)
    copy = pickle.loads(pickle.dumps(caller))
    assert copy == caller
    assert copy.policies[0].compiled is not caller.policies[0].compiled
    assert evaluate(Request(copy, "dynamodb:PutItem", TABLE)).allowed
    assert not_evaluated(copy.policies[0]) == not_evaluated(caller.policies[0])
