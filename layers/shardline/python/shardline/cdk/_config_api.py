"""The API's part of the pipeline configuration (`shardline.api`): request bounds, throttles (the
stage's, and each IAM caller's share), the producer's reservation, who may invoke it, and its
clients' keys and plans."""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from shardline.aws_lambda._environment import DEFAULT_MAX_BODY_BYTES as ENVIRONMENT_DEFAULT_MAX_BODY_BYTES
from shardline.aws_lambda._http_rate import MAX_PER_CALLER_RATE
from shardline.aws_lambda._http_settings import LAMBDA_PAYLOAD_BYTES
from shardline.cdk._config_reader import ConfigError, Reader

#: Lambda takes at most 6 MB (6,291,456 bytes) in a synchronous invocation, and the REST proxy event
#: holds the body JSON-escaped (a quote or a newline grows to 2 bytes: a 5.8 MB body of JSON records
#: can become 8.7 MB) beside headers and a requestContext. `maxBodyBytes` bounds the body as the event
#: holds it (shardline.aws_lambda counts it so and answers 413 above it), and leaves the envelope room:
#: a body within the bound always reaches the function, never the gateway's own failure.
LAMBDA_SYNC_PAYLOAD = LAMBDA_PAYLOAD_BYTES
EVENT_ENVELOPE = 128 * 1024
MAX_BODY_BYTES = LAMBDA_SYNC_PAYLOAD - EVENT_ENVELOPE
DEFAULT_MAX_BODY_BYTES = ENVIRONMENT_DEFAULT_MAX_BODY_BYTES
#: Seconds a producer invocation holds beside the throttled give-up: its own work, a last backoff.
PRODUCER_CALL_SECONDS = 1.0
#: Each IAM caller's share of the stage's rate by default (`perCallerRate`): half. One caller can
#: then never hold more than half the stage, so the others always keep at least half between them,
#: while a deployment with a single caller keeps half the stage's rate (at 500 records a request,
#: 100/s × ½ is 25,000 records/s) instead of a share so small it breaks it on upgrade.
DEFAULT_PER_CALLER_SHARE = 0.5


@dataclass(frozen=True)
class ApiClient:
    """One caller of the API: its own key and usage plan (throttle and daily quota)."""

    name: str
    throttle_rate: float
    throttle_burst: int
    requests_per_day: int


@dataclass(frozen=True)
class ApiConfig:
    auth: str  # "iam" or "api-key"
    throttle_rate: float
    throttle_burst: int
    max_records_per_request: int
    max_body_bytes: int
    throttled_give_up_seconds: float = 3.0  # a shard throttling this long: 503 + Retry-After
    reserved_concurrency: int = 400  # the producer function's (see `producer_reservation`)
    # Who may invoke (auth "iam"): IAM principal ARNs and/or an organization id; none: this account.
    allowed_principals: tuple[str, ...] = ()
    allowed_organization: str | None = None
    clients: tuple[ApiClient, ...] = ()  # each with its own API key and usage plan (key required)
    # Each IAM caller's requests per second, counted by the producer function (0: no per-caller limit).
    per_caller_rate: float = 0.0


def default_per_caller_rate(auth: str, throttle_rate: float) -> float:
    """Each IAM caller's share by default: `DEFAULT_PER_CALLER_SHARE` of the stage's rate (at least 1
    request a second, at most `MAX_PER_CALLER_RATE`); none with auth "api-key", whose clients' usage
    plans limit them."""
    share = min(float(MAX_PER_CALLER_RATE), max(1.0, throttle_rate * DEFAULT_PER_CALLER_SHARE))
    return share if auth == "iam" else 0.0


def producer_reservation(throttle_rate: float, throttled_give_up_seconds: float) -> int:
    """The producer's reserved concurrency by default: the stage's request rate times the longest
    an invocation holds while its shards throttle (`ceil(throttleRate × (throttledGiveUpSeconds +
    PRODUCER_CALL_SECONDS))`), so a throttled stream cannot take more executions than its API lets
    in during that time."""
    return max(1, math.ceil(throttle_rate * (throttled_give_up_seconds + PRODUCER_CALL_SECONDS)))


PRINCIPAL_ARN = re.compile(r"^arn:aws[a-z-]*:(iam|sts)::\d{12}:[A-Za-z0-9+=,.@_/-]+$|^\d{12}$")
ORGANIZATION_ID = re.compile(r"^o-[a-z0-9]{10,32}$")


#: Names an API setting in an error: (configuration key, construct prop) -> the message's prefix.
Where = Callable[[str, str], str]


def check_api(
    where: Where,
    *,
    auth: str,
    throttle_rate: float,
    throttle_burst: int,
    max_body_bytes: int,
    allowed_principals: Sequence[str],
    allowed_organization: str | None,
    clients: Sequence[ApiClient],
    per_caller_rate: float = 0.0,
) -> None:
    """The refusals of an API's settings, for the configuration and the `ProducerApi` construct alike."""
    if auth not in ("iam", "api-key"):
        raise ConfigError(f"{where('auth', 'auth')}: must be one of iam, api-key, got {auth!r}")
    _check_per_caller_rate(where, auth, throttle_rate, per_caller_rate)
    if not 1 <= max_body_bytes <= MAX_BODY_BYTES:
        raise ConfigError(
            f"{where('maxBodyBytes', 'max_body_bytes')}: must be within 1024..{MAX_BODY_BYTES}, "
            f"got {max_body_bytes}"
        )
    for index, principal in enumerate(allowed_principals):
        if not isinstance(principal, str) or not PRINCIPAL_ARN.match(principal):
            raise ConfigError(
                f"{where(f'allowedPrincipals[{index}]', f'allowed_principals[{index}]')}: not an IAM "
                f"principal ARN (role, user, account root) or a 12-digit account id: {principal!r}"
            )
    if allowed_organization is not None and (
        not isinstance(allowed_organization, str) or not ORGANIZATION_ID.match(allowed_organization)
    ):
        raise ConfigError(
            f"{where('allowedOrganization', 'allowed_organization')}: not an organization id (o-...): "
            f"{allowed_organization!r}"
        )
    if auth != "iam" and (allowed_principals or allowed_organization):
        raise ConfigError(
            f"{where('allowedPrincipals', 'allowed_principals')}: needs auth 'iam' (a resource policy names "
            "IAM callers; an API-key caller has no IAM identity to match)"
        )
    names = [client.name for client in clients]
    for index, client in enumerate(clients):
        if client.name in names[:index]:
            raise ConfigError(
                f"{where(f'clients[{index}].name', f'clients[{index}].name')}: duplicate client "
                f"{client.name!r}"
            )
        if client.throttle_rate > throttle_rate or client.throttle_burst > throttle_burst:
            raise ConfigError(
                f"{where(f'clients[{index}].throttleRate', f'clients[{index}].throttle_rate')}: a client's "
                f"throttle ({client.throttle_rate:g}/s, burst {client.throttle_burst}) must be within the "
                f"stage's ({throttle_rate:g}/s, burst {throttle_burst}): the stage's applies first"
            )
    if auth == "api-key" and not clients:
        raise ConfigError(
            f"{where('clients', 'clients')}: auth 'api-key' needs at least one client, each with its "
            "own key, throttle and quota (one shared key could not be traced or limited per caller)"
        )


def _check_per_caller_rate(where: Where, auth: str, throttle_rate: float, per_caller_rate: float) -> None:
    """0 (off), or within 1..the stage's rate, and only with auth "iam"."""
    if not per_caller_rate:
        return
    highest = min(throttle_rate, MAX_PER_CALLER_RATE)
    if not 1 <= per_caller_rate <= highest:
        raise ConfigError(
            f"{where('perCallerRate', 'per_caller_rate')}: must be 0 (no per-caller limit) or within "
            f"1..{highest:g} (the stage's throttleRate, which applies first, and at most "
            f"{MAX_PER_CALLER_RATE}: DynamoDB's writes a second on one counter), got {per_caller_rate:g}"
        )
    if auth != "iam":
        raise ConfigError(
            f"{where('perCallerRate', 'per_caller_rate')}: needs auth 'iam' (the share is keyed by the "
            "IAM caller; an API-key client's usage plan is its share), set it to 0"
        )


def read_api(data: Any) -> ApiConfig:
    api = Reader(data, "shardline.api")
    auth = api.str("auth", "iam", choices=("iam", "api-key"))
    rate = api.number("throttleRate", 100.0, low=1, high=10000)
    burst = api.int("throttleBurst", 200, low=1, high=5000)
    give_up = api.number("throttledGiveUpSeconds", 3.0, low=0, high=23)
    principals = api.list("allowedPrincipals")
    organization = api.data.get("allowedOrganization")
    clients = tuple(
        _client(item, f"shardline.api.clients[{index}]", rate, burst)
        for index, item in enumerate(api.list("clients"))
    )
    max_body_bytes = api.int("maxBodyBytes", DEFAULT_MAX_BODY_BYTES, low=1024, high=MAX_BODY_BYTES)
    per_caller_rate = api.number("perCallerRate", default_per_caller_rate(auth, rate), low=0, high=10000)
    check_api(
        lambda key, _prop: f"shardline.api.{key}",
        auth=auth,
        throttle_rate=rate,
        throttle_burst=burst,
        max_body_bytes=max_body_bytes,
        allowed_principals=principals,
        allowed_organization=organization,
        clients=clients,
        per_caller_rate=per_caller_rate,
    )
    return ApiConfig(
        auth=auth,
        throttle_rate=rate,
        throttle_burst=burst,
        max_records_per_request=api.int("maxRecordsPerRequest", 500, low=1, high=10000),
        max_body_bytes=max_body_bytes,
        throttled_give_up_seconds=give_up,
        reserved_concurrency=api.int(
            "reservedConcurrency", producer_reservation(rate, give_up), low=1, high=1_000_000
        ),
        allowed_principals=tuple(principals),
        allowed_organization=organization,
        clients=clients,
        per_caller_rate=per_caller_rate,
    )


def _client(data: Any, path: str, rate: float, burst: int) -> ApiClient:
    read = Reader(data, path)
    return ApiClient(
        name=read.name("name"),
        throttle_rate=read.number("throttleRate", rate, low=1, high=10000),
        throttle_burst=read.int("throttleBurst", burst, low=1, high=5000),
        requests_per_day=read.int("requestsPerDay", low=1, high=2_000_000_000),
    )
