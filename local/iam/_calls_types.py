"""The names `local.iam.calls` and its service modules share: a request's needs (`Need`, `Call`),
where resources are named (`Where`), a service's mapper, and `UnknownResource`. Apart from
`calls.py` so the service modules it dispatches to need not import it back."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

__all__ = ["Call", "Mapper", "Need", "Request", "UnknownResource", "Where", "json_params"]

_EMPTY: Mapping[str, str] = MappingProxyType({})


@dataclass(frozen=True)
class Request:
    """A request as received: what identifies its operation."""

    method: str
    path: str  # raw (percent-encoded) path
    query: str  # raw query string
    headers: Mapping[str, str]  # lower-cased names
    body: bytes


@dataclass(frozen=True)
class Need:
    """One (action, resource) pair AWS authorizes: `dynamodb:PutItem` on a table's ARN."""

    action: str  # the IAM action as the Service Authorization Reference names it
    resource: str  # the ARN it is authorized on ("*" where the action has no resource type)


@dataclass(frozen=True)
class Call:
    """A request as IAM sees it."""

    service: str  # the IAM service prefix: "kinesis", "dynamodb", "cloudwatch", ...
    operation: str  # botocore's operation name: "TransactWriteItems"
    needs: tuple[Need, ...]  # every pair must be allowed (in the order AWS checks them; de-duplicated)
    touches: tuple[tuple[str, str], ...] = ()  # (resource ARN, "read"|"write") of data-plane access
    context: Mapping[str, str] = field(
        default_factory=lambda: _EMPTY
    )  # condition keys the request itself carries
    modelled: bool = True  # False: not mapped here; the needs are the `prefix:Operation` guess on "*"
    protocol: str = ""  # the wire protocol the request used: "json", "query", "rest-xml", ... (for wire.py)
    account: str = ""  # the account the endpoint serves (kms:CallerAccount of `key_needs`)


class UnknownResource(Exception):
    """The request names its resource in a form whose ARN cannot be known here (a shard iterator
    that does not decode, a consumer named without its creation time, a ciphertext's key): the
    enforcer treats the request as not evaluated rather than guessing an ARN."""


#: (service model name, per-operation mapper) per IAM prefix with its own module; a mapper takes
#: (operation, params, request, where) and answers (needs, touches, extra context).
#: A mapper answers None for an operation it was not written for (an API newer than its sources):
#: the call is then `modelled=False`.
Mapper = Callable[
    [str, dict[str, Any], Request, "Where"], tuple[list[Need], list[tuple[str, str]], dict[str, str]] | None
]


@dataclass(frozen=True)
class Where:
    """The account and region resources are named in when the request does not say."""

    account: str
    region: str

    def arn(self, service: str, resource: str, *, region: bool = True, account: bool = True) -> str:
        return (
            f"arn:aws:{service}:{self.region if region else ''}:{self.account if account else ''}:{resource}"
        )


def json_params(body: bytes) -> dict[str, Any]:
    """A JSON body as a dict ({} when empty); a body that is not a JSON object is refused by name."""
    if not body:
        return {}
    try:
        parsed = json.loads(body)
    except ValueError as error:
        raise UnknownResource(f"the request body is not JSON ({error})") from None
    if not isinstance(parsed, dict):
        raise UnknownResource("the request body is JSON but not an object")
    return parsed
