"""Each IAM caller's share of the producer API: a per-caller request rate, counted in the idempotency
table so that every execution environment of the function counts the same requests.

Why in the function: API Gateway throttles a stage, and a usage plan throttles an API key, but it
cannot key a plan by IAM principal; with IAM authorization alone, one caller could take the whole
stage's rate and starve the others. The producer function knows the caller API Gateway
authenticated (`requestContext.identity.userArn`) and answers a caller over its share itself.

Who is "a caller" (`rate_key`): the signing principal, with a role's session cut off. For an
assumed role API Gateway reports `arn:aws:sts::<account>:assumed-role/<role>/<session>`, and the
session name is chosen by whoever calls `sts:AssumeRole`: keyed by session, a caller would get a
fresh share with every `AssumeRole` (and every Lambda environment, every ECS task of one role is
its own session). The role is the principal the API's resource policy admits, so it is the unit
the share belongs to: `arn:aws:sts::<account>:assumed-role/<role>`. An IAM user, a federated user
or an account's root keep their ARN. Records are still stamped with the full session ARN
(`_http_caller`): the limit's key and the records' caller are different questions.

How it counts: a fixed window of `WINDOW_SECONDS` per caller, one item per (caller, window) in the
idempotency table, key `#rate/<caller>/<window start>` (`#` is never in a stream name, which
begins every id item's key). Each request is one `UpdateItem`: `ADD requests 1`, on the condition
that the count is below the limit, with `expiresAt` a minute past the window (the table's TTL
deletes it). A refused condition is the answer "over the share" (and leaves the count as it was:
a caller retrying against 429 does not push its next window away). One write request unit per
request, whatever it holds: at 500 records a request, a million records are 2,000 requests, so
2,000 write units — $0.00125 on demand at $0.625 per million (us-east-1).
Once an execution environment is refused a caller's window, it refuses the rest of that window
itself, without a write: a caller hammering past its share costs at most one write per environment
per window, and cannot push its window's item past DynamoDB's 1,000 writes a second on one item
(where the counter would be throttled, and let requests through). That bound is why a per-caller
rate is at most `MAX_PER_CALLER_RATE`.
A fixed window admits up to twice the rate across a window's edge (the end of one, the start of the
next); the stage's throttle still bounds the whole API.

Over the share: `rate_limited_response`, 429 with `Retry-After` (the seconds to the next window) and
API Gateway's throttle body (`{"message": "Too Many Requests"}`), before the request is read: nothing
is sent. A table that cannot be written for a while (throttled, unavailable, unreachable) lets the
request through (`Admission.unavailable` says why, the function logs and counts it): the share is
fairness between callers, the stage's throttle is the API's protection, and a table outage must not
stop every caller. A refusal that no retry can cure (AccessDenied: the role lacks `UpdateItem`; no
such table) is a deployment fault, as Kinesis refusing the function is: `RateLimitMisconfigured`,
a 500, nothing written — never a limit silently off.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from shardline.aws_lambda._http_idempotency import EXPIRES_AT_ATTRIBUTE, KEY_ATTRIBUTE
from shardline.aws_lambda._http_response import ApiResponse
from shardline.errors import ConfigurationError

__all__ = [
    "COUNT_ATTRIBUTE",
    "MAX_PER_CALLER_RATE",
    "RATE_KEY_PREFIX",
    "WINDOW_SECONDS",
    "Admission",
    "CallerRateLimiter",
    "RateClient",
    "RateLimitMisconfigured",
    "rate_key",
    "rate_limited_response",
]

#: The length of a counting window: the rate is per second, as the stage's throttle is.
WINDOW_SECONDS = 1
#: Begins every counter's key: never the first character of a stream name (an id item's key).
RATE_KEY_PREFIX = "#rate/"
#: The counter's attribute (N): requests admitted in the window.
COUNT_ATTRIBUTE = "requests"
#: DynamoDB writes one item at most 1,000 times a second (a partition's limit): a window's counter.
MAX_PER_CALLER_RATE = 1000
#: Callers whose full window an environment remembers; past it, the windows gone by are dropped.
_FULL_WINDOWS_KEPT = 1024
#: Seconds a window's item outlives the window before the table's TTL may delete it.
_EXPIRY_SLACK_SECONDS = 60
#: API Gateway's own throttle answer, which clients already handle.
_THROTTLED_MESSAGE = "Too Many Requests"
_ASSUMED_ROLE = ":assumed-role/"
#: DynamoDB's answers that a retry cannot change: the deployment is at fault.
_DEPLOYMENT_FAULTS = frozenset(
    {
        "AccessDeniedException",
        "ResourceNotFoundException",
        "ValidationException",
        "UnrecognizedClientException",
    }
)


class RateLimitMisconfigured(ConfigurationError):
    """The callers' counters cannot be written, whatever the retry: the role lacks `UpdateItem` on
    the table, or the table does not exist."""


class RateClient(Protocol):
    """The one DynamoDB call of the per-caller limit."""

    def update_item(self, **kwargs: Any) -> Mapping[str, Any]: ...


@dataclass(frozen=True, slots=True)
class Admission:
    """The verdict on one request: `admitted`, else `retry_after` seconds to the next window;
    `unavailable` is DynamoDB's error code when the count could not be taken (then admitted)."""

    admitted: bool
    key: str
    retry_after: int = 0
    unavailable: str | None = None


def rate_key(user_arn: str) -> str:
    """The share's key of an IAM caller: its ARN, an assumed role's session cut off (see the module)."""
    head, found, rest = user_arn.partition(_ASSUMED_ROLE)
    if found and "/" in rest:
        return head + _ASSUMED_ROLE + rest.split("/", 1)[0]
    return user_arn


def iam_caller(event: Mapping[str, Any]) -> str | None:
    """`requestContext.identity.userArn` of a REST proxy event: the IAM caller, or None (an API-key
    caller, whose usage plan limits it)."""
    context = event.get("requestContext")
    identity = context.get("identity") if isinstance(context, Mapping) else None
    user_arn = identity.get("userArn") if isinstance(identity, Mapping) else None
    return user_arn if isinstance(user_arn, str) and user_arn else None


def rate_limited_response(retry_after: int) -> ApiResponse:
    """429 + `Retry-After`, with API Gateway's throttle body: nothing was read or written."""
    return ApiResponse(
        429,
        {"message": _THROTTLED_MESSAGE},
        {"Retry-After": str(retry_after), "x-amzn-ErrorType": "TooManyRequestsException"},
    )


class CallerRateLimiter:
    """Admits at most `rate` requests per caller per window, counted in `table` (see the module)."""

    def __init__(
        self,
        client: Callable[[], RateClient],
        table: str,
        *,
        rate: float,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if not rate > 0:
            raise ValueError(f"rate must be > 0 requests per second, got {rate}")
        self._client = client
        self.table = table
        self.rate = rate
        self.clock = clock
        self._full: dict[str, int] = {}  # caller -> the start of its window this environment saw full

    @property
    def limit(self) -> int:
        """Requests a caller may make in one window (at least one)."""
        return max(1, math.floor(self.rate * WINDOW_SECONDS))

    def admit(self, user_arn: str) -> Admission:
        """Count one request of `user_arn`, or refuse it when its window is full."""
        from botocore.exceptions import BotoCoreError, ClientError

        now = self.clock()
        start = math.floor(now / WINDOW_SECONDS) * WINDOW_SECONDS
        who = rate_key(user_arn)
        if self._full.get(who) == start:  # refused in this window already: no write needed
            return Admission(False, who, max(1, math.ceil(start + WINDOW_SECONDS - now)))
        key = f"{RATE_KEY_PREFIX}{who}/{start}"
        try:
            self._client().update_item(
                TableName=self.table,
                Key={KEY_ATTRIBUTE: {"S": key}},
                UpdateExpression="ADD #n :one SET #e = :expires",
                ConditionExpression="attribute_not_exists(#n) OR #n < :limit",
                ExpressionAttributeNames={"#n": COUNT_ATTRIBUTE, "#e": EXPIRES_AT_ATTRIBUTE},
                ExpressionAttributeValues={
                    ":one": {"N": "1"},
                    ":limit": {"N": str(self.limit)},
                    ":expires": {"N": str(start + WINDOW_SECONDS + _EXPIRY_SLACK_SECONDS)},
                },
            )
        except ClientError as error:
            code = str(error.response.get("Error", {}).get("Code") or "ClientError")
            if code == "ConditionalCheckFailedException":
                self._remember_full(who, start)
                return Admission(False, who, max(1, math.ceil(start + WINDOW_SECONDS - now)))
            if code in _DEPLOYMENT_FAULTS:
                raise RateLimitMisconfigured(
                    f"the per-caller rate's counter in {self.table!r} could not be written ({code}): the "
                    "producer's role needs dynamodb:UpdateItem on its idempotency table; nothing was written"
                ) from None
            return Admission(True, who, unavailable=code)
        except BotoCoreError as error:
            return Admission(True, who, unavailable=type(error).__name__)
        return Admission(True, who)

    def _remember_full(self, who: str, start: int) -> None:
        if len(self._full) >= _FULL_WINDOWS_KEPT:
            self._full = {caller: window for caller, window in self._full.items() if window == start}
        self._full[who] = start
