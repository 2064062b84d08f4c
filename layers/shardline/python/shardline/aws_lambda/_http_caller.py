"""Who called the producer API, as API Gateway authenticated it: the caller stamped on every record.

A record's id belongs to its caller (consumers scope ids by it), so the caller must be what
shardline asserts, never what the client says: it is read from the REST proxy event's
`requestContext.identity`, which API Gateway fills after authorizing the request, and never from
the body or a header.

- IAM (SigV4) authorization — the producer API's default — gives `identity.userArn`, the signing
  principal's ARN (an IAM user's, or `arn:aws:sts::<account>:assumed-role/<role>/<session>` for a
  role: each role session is its own caller). It is the caller whenever it is present, an API key
  beside it included (`ProducerApi(clients=...)` with IAM).
- `auth="api-key"` (no IAM authorization; `apiKeyRequired`) gives only `identity.apiKeyId`, the id
  of the key API Gateway matched (never the key's value): the caller is `apikey:<id>`.
- An event with neither was not authenticated by API Gateway (a method deployed without
  authorization, or an invocation that did not come through the API): `UnauthenticatedEvent`,
  and nothing is written.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from shardline.errors import ConfigurationError

__all__ = ["API_KEY_CALLER_PREFIX", "UnauthenticatedEvent", "caller_of"]

#: The caller of a request authenticated by an API key alone: `apikey:<apiKeyId>`.
API_KEY_CALLER_PREFIX = "apikey:"


class UnauthenticatedEvent(ConfigurationError):
    """The API Gateway event names no authenticated caller: the method must require IAM
    authorization or an API key (as `shardline.cdk.ProducerApi` deploys it)."""


def caller_of(event: Mapping[str, Any]) -> str:
    """The authenticated caller of a REST proxy event: `requestContext.identity.userArn` (IAM), else
    `apikey:<requestContext.identity.apiKeyId>` (API key), else `UnauthenticatedEvent`."""
    context = event.get("requestContext")
    identity = context.get("identity") if isinstance(context, Mapping) else None
    if isinstance(identity, Mapping):
        user_arn = identity.get("userArn")
        if isinstance(user_arn, str) and user_arn:
            return user_arn
        key_id = identity.get("apiKeyId")
        if isinstance(key_id, str) and key_id:
            return API_KEY_CALLER_PREFIX + key_id
    raise UnauthenticatedEvent(
        "the API Gateway event names no authenticated caller (requestContext.identity has neither "
        "userArn nor apiKeyId): the producer API's method must require IAM authorization or an API "
        "key; nothing was written"
    )
