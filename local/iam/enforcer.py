"""The endpoint's IAM: every request SigV4-verified and authorized as AWS would, before moto sees it.

`Enforcer` is WSGI middleware in front of moto (`local.endpoint.server`). Until the runtime installs
the app's principals and policies (`PUT /_shardline/iam` with `local.iam.principals.endpoint_config`)
it passes everything through, as the endpoint always did for tests that start it bare. Once installed:

1. the signature is checked with the caller's secret (missing, unknown key, wrong signature: the
   service's own error, `local.iam.wire`);
2. the request is mapped to the (action, resource) pairs AWS authorizes for it (`local.iam.calls`),
   plus what the caller needs of a customer-managed key through the service that uses it;
3. each pair is evaluated (`local.iam.policy`) against the caller's identity policies, the resource's
   policy (queue, bucket) or the key's policy; the first refusal answers AccessDenied with AWS's
   message, and is kept for `status`, the dashboard and `send`'s verdict (`report()`).

Every allowed call is counted by (principal, action, resource): what the app's code really called,
which the least-privilege test compares with what its roles grant.
"""

from __future__ import annotations

import io
import threading
import time
import uuid
from collections import Counter, deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

from . import sigv4
from .calls import Call, Need, UnknownResource, call_of, key_needs
from .policy import Decision, Policy, Principal, Request, denial_message, evaluate, not_evaluated
from .wire import rejection

__all__ = ["Enforcer"]

#: What a denial names besides AWS's message: enough for `status` to say what would allow it.
RECENT_DENIALS = 200
#: The local endpoint is plain HTTP on loopback, standing in for AWS's HTTPS endpoints: every SDK
#: reaches AWS over TLS, so a policy's `aws:SecureTransport` is evaluated as deployed.
DEPLOYED_CONTEXT = {"aws:SecureTransport": "true"}
#: X-Amz-Target prefixes -> the signing service, to answer a request whose signature is unreadable.
TARGET_SERVICES = {"Kinesis_": "kinesis", "DynamoDB_": "dynamodb", "AmazonSQS": "sqs", "TrentService": "kms",
                   "Logs_": "logs", "GraniteServiceVersion": "monitoring"}  # fmt: skip


@dataclass(frozen=True)
class Identity:
    """A key the endpoint knows: its secret, its principal, and what runs as it."""

    secret: str
    principal: Principal
    who: str


@dataclass(frozen=True)
class Installed:
    """The app's IAM as the enforcer evaluates it (`Enforcer.install`)."""

    account: str
    region: str
    identities: Mapping[str, Identity]
    resource_policies: Mapping[str, Policy]
    keys: Mapping[str, str]
    not_evaluated: tuple[str, ...]

    @property
    def secrets(self) -> dict[str, str]:
        return {key: identity.secret for key, identity in self.identities.items()}


class Enforcer:
    """WSGI middleware authorizing each request (see the module docstring)."""

    def __init__(self, app: Callable[..., Iterable[bytes]], clock: Callable[[], float] = time.time) -> None:
        self.app = app
        self._clock = clock
        self._installed: Installed | None = None
        self._secrets: dict[str, str] = {}
        self._lock = threading.Lock()
        self._denials: deque[dict[str, Any]] = deque(maxlen=RECENT_DENIALS)
        self._denied = 0
        #: (who, action, resource) -> the last denial of it, with its count
        self._denied_by: dict[tuple[str, str, str], dict[str, Any]] = {}
        self._calls: Counter[tuple[str, str, str]] = Counter()
        self._unmodelled: Counter[str] = Counter()  # operations authorized by a guess: prefix:Operation on *

    # -- configuration ------------------------------------------------------------------------

    def install(self, config: Mapping[str, Any]) -> None:
        """Start enforcing `config` (`local.iam.principals.endpoint_config`); `{}` stops enforcing."""
        if not config:
            self._installed = None
            return
        account = str(config["account"])
        identities: dict[str, Identity] = {}
        for key, secret in config.get("root_keys", {}).items():
            root = Principal(arn=f"arn:aws:iam::{account}:root", account=account, root=True)
            identities[key] = Identity(str(secret), root, "the account's root (the runtime, the CLI)")
        for key, entry in config.get("principals", {}).items():
            policies = tuple(Policy(str(name), document) for name, document in entry.get("policies", []))
            principal = Principal(
                arn=entry["arn"],
                account=account,
                policies=policies,
                session_arn=entry.get("session_arn"),
                root=bool(entry.get("root", False)),
                not_evaluated_policies=tuple(entry.get("not_evaluated_policies", ())),
            )
            identities[key] = Identity(str(entry["secret"]), principal, str(entry.get("who", entry["arn"])))
        resource_policies = {
            arn: Policy(str(name), document)
            for arn, (name, document) in config.get("resource_policies", {}).items()
        }
        listed = list(config.get("not_evaluated", []))
        seen_policies: set[str] = set()
        for identity in identities.values():
            for policy in identity.principal.policies:
                if policy.name not in seen_policies:
                    seen_policies.add(policy.name)
                    listed += not_evaluated(policy)
        for policy in resource_policies.values():
            listed += not_evaluated(policy)
        installed = Installed(
            account=account,
            region=str(config["region"]),
            identities=identities,
            resource_policies=resource_policies,
            keys=dict(config.get("keys", {})),
            not_evaluated=tuple(dict.fromkeys(listed)),
        )
        with self._lock:
            self._installed = installed
            self._secrets = installed.secrets
            self._denials.clear()
            self._denied_by.clear()
            self._denied = 0
            self._calls.clear()
            self._unmodelled.clear()

    def report(self) -> dict[str, Any]:
        """`GET /_shardline/iam`: whether it enforces, what it cannot evaluate, each principal, the
        denials (recent ones whole), and every allowed call by (principal, action, resource)."""
        installed = self._installed
        with self._lock:
            calls = [
                {"who": who, "action": action, "resource": resource, "count": count}
                for (who, action, resource), count in sorted(self._calls.items())
            ]
            grouped = [dict(entry) for entry in self._denied_by.values()]
            denials = {"total": self._denied, "recent": list(self._denials), "grouped": grouped}
            unmodelled = dict(self._unmodelled)
        if installed is None:
            return {
                "enforcing": False,
                "not_evaluated": [],
                "principals": [],
                "denials": denials,
                "calls": calls,
            }
        principals = [
            {
                "who": identity.who,
                "arn": identity.principal.arn,
                "session_arn": identity.principal.session_arn,
            }
            for identity in installed.identities.values()
        ]
        return {
            "enforcing": True,
            "not_evaluated": list(installed.not_evaluated),
            "unmodelled": unmodelled,
            "principals": principals,
            "denials": denials,
            "calls": calls,
        }

    # -- the request --------------------------------------------------------------------------

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        installed = self._installed
        if installed is None:
            return self.app(environ, start_response)
        headers = _headers(environ)
        body = _body(environ)
        raw_uri = environ.get("RAW_URI") or environ.get("REQUEST_URI") or quote(environ.get("PATH_INFO", ""))
        raw_path, _, raw_query = str(raw_uri).partition("?")
        raw_query = raw_query or environ.get("QUERY_STRING", "")
        signed = sigv4.SignedRequest(
            environ["REQUEST_METHOD"], raw_path, raw_query, list(headers.items()), body
        )
        now = datetime.fromtimestamp(self._clock(), UTC)
        try:
            caller = sigv4.verify(signed, self._secrets, now, service=None)
        except sigv4.SignatureRejected as rejected:
            return self._reject(start_response, _service_of(headers), rejected.error_type, rejected.message)
        identity = installed.identities[caller.access_key]
        try:
            call = call_of(
                caller.service, signed.method, raw_path, raw_query, headers, body,
                account=installed.account, region=installed.region, secure=True,
            )  # fmt: skip
        except UnknownResource as unknown:  # what it acts on cannot be known: refused, and said why
            refused = Call(caller.service, "?", (Need(f"{caller.service}:?", "*"),))
            decision = Decision(False, "not-evaluated", "identity-based", None, (str(unknown),))
            return self._deny(start_response, caller.service, identity, refused, refused.needs[0], decision)
        needs = self._needs(installed, call)
        for need, context in needs:
            decision = self._decide(
                installed, identity, need, {**call.context, **context, **DEPLOYED_CONTEXT}
            )
            if not decision.allowed:
                return self._deny(start_response, caller.service, identity, call, need, decision)
        with self._lock:
            for need, _ in needs:
                self._calls[(identity.who, need.action, need.resource)] += 1
            if not call.modelled:
                self._unmodelled[f"{call.service}:{call.operation}"] += 1
        return self.app(environ, start_response)

    @staticmethod
    def _needs(installed: Installed, call: Call) -> list[tuple[Need, Mapping[str, str]]]:
        needs: list[tuple[Need, Mapping[str, str]]] = [(need, {}) for need in call.needs]
        return needs + list(key_needs(call, installed.keys, installed.region))

    @staticmethod
    def _decide(installed: Installed, identity: Identity, need: Need, context: Mapping[str, str]) -> Decision:
        request = Request(identity.principal, need.action, need.resource, context)
        if need.action.startswith("kms:"):
            return evaluate(request, installed.resource_policies.get(need.resource), key_policy=True)
        policy = installed.resource_policies.get(need.resource)
        if policy is None and need.resource.startswith("arn:aws:s3:::"):  # an object: its bucket's policy
            policy = installed.resource_policies.get(need.resource.split("/", 1)[0])
        return evaluate(request, policy)

    def _deny(
        self,
        start_response: Callable[..., Any],
        service: str,
        identity: Identity,
        call: Call,
        need: Need,
        decision: Decision,
    ) -> Iterable[bytes]:
        request = Request(identity.principal, need.action, need.resource, {})
        message = denial_message(request, decision)
        denial = {
            "at": self._clock(),
            "who": identity.who,
            "principal": identity.principal.session_arn or identity.principal.arn,
            "operation": f"{call.service}:{call.operation}",
            "action": need.action,
            "resource": need.resource,
            "reason": decision.reason,
            "policy_type": decision.policy_type,
            "statement": decision.statement,
            "not_evaluated": list(decision.not_evaluated),
            "message": message,
            # What would allow it, as the statement a role's policy would carry.
            "would_allow": {"Effect": "Allow", "Action": need.action, "Resource": need.resource},
        }
        with self._lock:
            self._denied += 1
            self._denials.append(denial)
            key = (identity.who, need.action, need.resource)
            count = self._denied_by.get(key, {}).get("count", 0)
            self._denied_by[key] = {**denial, "count": count + 1}
        return self._reject(start_response, service, "AccessDenied", message, call.protocol)

    @staticmethod
    def _reject(
        start_response: Callable[..., Any], service: str, kind: str, message: str, protocol: str = ""
    ) -> Iterable[bytes]:
        request_id = str(uuid.uuid4())
        status, headers, body = rejection(
            service, _KINDS.get(kind, kind), message, request_id, protocol=protocol
        )
        start_response(status, headers)
        return [body]


#: sigv4's error types -> `local.iam.wire`'s kinds of rejection.
_KINDS = {
    "MissingAuthenticationTokenException": "MissingAuthentication",
    "UnrecognizedClientException": "UnrecognizedClient",
    "InvalidSignatureException": "InvalidSignature",
    "IncompleteSignatureException": "IncompleteSignature",
}


def _headers(environ: Mapping[str, Any]) -> dict[str, str]:
    found = {
        key[5:].replace("_", "-").lower(): str(value)
        for key, value in environ.items()
        if key.startswith("HTTP_")
    }
    for key in ("CONTENT_TYPE", "CONTENT_LENGTH"):
        if environ.get(key):
            found[key.replace("_", "-").lower()] = str(environ[key])
    return found


def _body(environ: dict[str, Any]) -> bytes:
    """The body, read once and put back for moto."""
    length = int(environ.get("CONTENT_LENGTH") or 0)
    raw: bytes = environ["wsgi.input"].read(length) if length else b""
    environ["wsgi.input"] = io.BytesIO(raw)
    return raw


def _service_of(headers: Mapping[str, str]) -> str:
    """The service a request is for, when its signature cannot say (to answer in its shape)."""
    scope = headers.get("authorization", "").partition("Credential=")[2].split(",")[0].split("/")
    if len(scope) >= 4 and scope[3]:
        return scope[3]
    target = headers.get("x-amz-target", "")
    return next((service for prefix, service in TARGET_SERVICES.items() if target.startswith(prefix)), "s3")
