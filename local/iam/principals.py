"""Who runs as whom locally: each function, each event-source mapping's poller and each worker task
gets credentials of its own principal — its role from the template, in a session of its own — and
the endpoint is told every principal's policies (`endpoint_config`), so it authorizes each request
as AWS would authorize that role's.

    access_key, secret = session_credentials(function.role_arn, function.name)

Credentials are derived from (role, session), never random, so a restarted process signs with the
same keys. The account's root (`model.ACCESS_KEY`) stays what it is in AWS — allowed everything
its account's resource policies do not deny — for the runtime's own provisioning, the monitor and
a developer's CLI.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ..app import model

__all__ = ["MANAGED_POLICIES", "Session", "endpoint_config", "session_credentials", "sessions_of"]

#: AWS-managed policies whose documents the runtime ships (a pinned copy: the policy's version as
#: AWS publishes it in the Managed Policy Reference); any other AWS-managed policy attached to a role is
#: listed as not evaluated, and grants nothing locally.
MANAGED_POLICIES: Mapping[str, Mapping[str, Any]] = {
    # https://docs.aws.amazon.com/aws-managed-policy/latest/reference/AWSLambdaBasicExecutionRole.html (v1)
    "arn:aws:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole": {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Effect": "Allow",
                "Action": ["logs:CreateLogGroup", "logs:CreateLogStream", "logs:PutLogEvents"],
                "Resource": "*",
            }
        ],
    },
}


@dataclass(frozen=True)
class Session:
    """One principal the runtime runs code as: a role assumed under a session name."""

    role_arn: str
    name: str  # the session name: the function's name, `mapping-<function>`, the worker group's
    who: str  # what runs as it, for status and denials: "function event-sink", "worker group g"

    @property
    def credentials(self) -> tuple[str, str]:
        return session_credentials(self.role_arn, self.name)

    @property
    def session_arn(self) -> str:
        """The assumed-role ARN AWS names the caller by (`aws sts get-caller-identity`)."""
        role_name = self.role_arn.rsplit("/", 1)[-1]
        account = self.role_arn.split(":")[4]
        return f"arn:aws:sts::{account}:assumed-role/{role_name}/{self.name}"


def session_credentials(role_arn: str, session: str) -> tuple[str, str]:
    """The (access key, secret) the runtime gives `role_arn` in `session`: temporary-looking
    (`ASIA…`), derived from both, the same on every run."""
    digest = hashlib.sha256(f"{role_arn}\n{session}".encode()).hexdigest()
    return f"ASIA{digest[:16].upper()}", digest[16:56]


def sessions_of(app: model.LocalApp, functions: Iterable[model.Function] = ()) -> list[Session]:
    """Every principal the runtime runs code as for `app`: each function (also its redrive), each
    event-source mapping's poller (Lambda polls with the function's role), each worker group's tasks."""
    sessions = []
    for function in (*app.functions, *functions):
        sessions.append(Session(function.role_arn, function.name, f"function {function.name}"))
    for mapping in app.mappings:
        role = app.function(mapping.function_name).role_arn
        sessions.append(
            Session(role, mapping_session(mapping.function_name), f"mapping of {mapping.function_name}")
        )
    for worker in app.workers:
        sessions.append(Session(worker.task_role_arn, worker.name, f"worker group {worker.name}"))
    return sessions


def mapping_session(function_name: str) -> str:
    """The session name of a function's event-source mapping poller (`sessions_of`)."""
    return f"mapping-{function_name}"[:64]


def endpoint_config(app: model.LocalApp, sessions: Iterable[Session]) -> dict[str, Any]:
    """What the endpoint needs to authorize as AWS would (`PUT /_shardline/iam`, `local.iam.enforcer`):
    each session's keys, principal and identity policies; the resource and key policies; which key
    encrypts what; and what the runtime could not read or does not evaluate."""
    principals: dict[str, Any] = {}
    not_evaluated = [f"{where}: {why}" for where, why in app.iam.unreadable]
    for session in sessions:
        access_key, secret = session.credentials
        role = app.iam.role(session.role_arn)
        entry: dict[str, Any] = {
            "secret": secret,
            "arn": session.role_arn,
            "session_arn": session.session_arn,
            "who": session.who,
            "policies": [],
            "not_evaluated_policies": [],
            "root": False,
        }
        if role is None:
            # A function built by hand around a test (no template role): it runs unrestricted, said so.
            entry["root"] = True
            not_evaluated.append(
                f"{session.who}: its role {session.role_arn} is not in the template: not authorized"
            )
        else:
            entry["policies"] = [[name, document] for name, document in role.policies]
            for arn in role.managed_arns:
                if arn in MANAGED_POLICIES:
                    entry["policies"].append([arn, MANAGED_POLICIES[arn]])
                else:
                    entry["not_evaluated_policies"].append(arn)
                    not_evaluated.append(
                        f"{session.who}: the AWS-managed policy {arn} of role {role.name} is not "
                        "shipped with the runtime: what it allows is refused locally"
                    )
        principals[access_key] = entry
    return {
        "account": model.ACCOUNT,
        "region": model.REGION,
        "root_keys": {model.ACCESS_KEY: model.SECRET_KEY},
        "principals": principals,
        "resource_policies": {
            arn: [name, document] for arn, (name, document) in app.iam.resource_policies.items()
        },
        "keys": dict(app.iam.keys),
        "not_evaluated": sorted(set(not_evaluated)),
    }
