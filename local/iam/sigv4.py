"""SigV4 checking for the local runtime: the REST API's `AWS_IAM` methods (answered as API Gateway
answers) and every request to the local AWS endpoint once it enforces IAM (`local.iam.enforcer`).

The signature is recomputed over the request as received — method, raw path, raw query, the
headers the caller signed, the body — by SigV4's documented steps, written here rather than through
botocore's signer because that one rebuilds a whole `AWSRequest` per call (about 0.3 ms, on every
request to the endpoint); tests/local/iam/test_sigv4_oracle.py proves it accepts exactly what
botocore's own `SigV4Auth` and `S3SigV4Auth` sign. The refusals carry the services' messages.
Both forms are read: the `Authorization` header and a presigned query (`X-Amz-Signature`).
"""

from __future__ import annotations

import functools
import hashlib
import hmac
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from urllib.parse import quote, unquote

from botocore.utils import normalize_url_path

from ..app.model import ACCESS_KEY, ACCOUNT, REGION

SERVICE = "execute-api"
ALGORITHM = "AWS4-HMAC-SHA256"
MAX_SKEW = timedelta(minutes=5)  # SigV4's window either side of the server's clock
AMZ_DATE = "%Y%m%dT%H%M%SZ"

MISMATCH = (
    "The request signature we calculated does not match the signature you provided. Check your AWS "
    "Secret Access Key and signing method. Consult the service documentation for details."
)


UNKNOWN_KEY = "The security token included in the request is invalid."
#: AWS's answer to a signature whose SignedHeaders leave out `host` (it would let the signature be
#: replayed against another host).
HOST_NOT_SIGNED = "'Host' or ':authority' must be a 'SignedHeader' in the AWS Authorization."


class SignatureRejected(Exception):
    """A request API Gateway would refuse with 403 (`error_type` goes into `x-amzn-ErrorType`)."""

    def __init__(self, error_type: str, message: str) -> None:
        super().__init__(message)
        self.error_type = error_type
        self.message = message


@dataclass(frozen=True)
class Caller:
    """Who signed: what `requestContext.identity` reports for an IAM-authorized request."""

    access_key: str
    account_id: str = ACCOUNT
    service: str = SERVICE  # the service of the signature's credential scope

    @property
    def user_arn(self) -> str:
        """The signing principal's ARN, as API Gateway reports it (`identity.userArn`). The local
        credentials (`test`) stand for the account's root user, as `test`/`test` does elsewhere;
        any other access key the server was given stands for an IAM user of that name, so two
        keys are two principals, as two IAM users' keys are in AWS (the producer function stamps
        this ARN on records as their caller)."""
        if self.access_key == ACCESS_KEY:
            return f"arn:aws:iam::{self.account_id}:root"
        return f"arn:aws:iam::{self.account_id}:user/{self.access_key}"


@dataclass(frozen=True)
class SignedRequest:
    """The parts of an HTTP request a SigV4 signature covers, as received (path and query still encoded)."""

    method: str
    raw_path: str
    raw_query: str
    headers: Sequence[tuple[str, str]]  # every header line, duplicates kept
    body: bytes


def _parse_authorization(value: str) -> dict[str, str]:
    algorithm, _, rest = value.strip().partition(" ")
    if algorithm != ALGORITHM:
        # API Gateway treats a non-SigV4 Authorization header like a missing signature.
        raise SignatureRejected(
            "IncompleteSignatureException", f"Unsupported authorization type: {algorithm}"
        )
    fields: dict[str, str] = {}
    for part in rest.split(","):
        key, sep, val = part.strip().partition("=")
        if not sep:
            raise SignatureRejected(
                "IncompleteSignatureException",
                f"Invalid key=value pair (missing equal-sign) in Authorization header: '{part.strip()}'",
            )
        fields[key] = val
    missing = [name for name in ("Credential", "SignedHeaders", "Signature") if name not in fields]
    if missing:
        message = " ".join(f"Authorization header requires '{name}' parameter." for name in missing)
        raise SignatureRejected("IncompleteSignatureException", message)
    return fields


def _check_clock(amz_date: str, now: datetime) -> datetime:
    try:  # by hand: strptime costs ~0.1 ms a call
        if len(amz_date) != 16 or amz_date[8] != "T" or amz_date[15] != "Z":
            raise ValueError(amz_date)
        day, clock = amz_date[:8], amz_date[9:15]
        signed_at = datetime(
            int(day[:4]),
            int(day[4:6]),
            int(day[6:]),
            int(clock[:2]),
            int(clock[2:4]),
            int(clock[4:]),
            tzinfo=UTC,
        )
    except ValueError:
        raise SignatureRejected(
            "IncompleteSignatureException", f"Date must be in ISO-8601 'basic format'. Got '{amz_date}'."
        ) from None
    stamp = now.strftime(AMZ_DATE)
    if signed_at < now - MAX_SKEW:
        earliest = (now - MAX_SKEW).strftime(AMZ_DATE)
        raise SignatureRejected(
            "InvalidSignatureException",
            f"Signature expired: {amz_date} is now earlier than {earliest} ({stamp} - 5 min.)",
        )
    if signed_at > now + MAX_SKEW:
        latest = (now + MAX_SKEW).strftime(AMZ_DATE)
        raise SignatureRejected(
            "InvalidSignatureException",
            f"Signature not yet current: {amz_date} is still later than {latest} ({stamp} + 5 min.)",
        )
    return signed_at


def _sha256(body: bytes) -> str:
    """Hex SHA-256 (of a body, or of a canonical request)."""
    return hashlib.sha256(body).hexdigest()


def _canonical_query(query: str) -> str:
    """The query's pairs sorted, as sent (SigV4's canonical query of an already-encoded URL)."""
    if not query:
        return ""
    return "&".join(
        f"{key}={value}" for key, _, value in sorted(pair.partition("=") for pair in query.split("&"))
    )


def _header_values(lines: Sequence[tuple[str, str]], name: str) -> str:
    """A signed header's canonical value: every line of it, each trimmed and its spaces squeezed."""
    return ",".join(" ".join(value.split()) for line_name, value in lines if line_name == name)


@functools.lru_cache(maxsize=1024)
def _signing_key(secret: str, date: str, region: str, service: str) -> bytes:
    """SigV4's derived key of a day, region and service: the same for every request of them."""
    key = f"AWS4{secret}".encode()
    for part in (date, region, service, "aws4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    return key


def _unsigned(declared: str) -> bool:
    """A payload the signature does not cover: S3's unsigned and chunked (streaming) forms."""
    return declared == "UNSIGNED-PAYLOAD" or declared.startswith("STREAMING-")


def _check_scope(scope: str, amz_date: str, expected: str | None) -> str:
    """The scope's service, once the scope is right (`expected` None: any service, the endpoint's case)."""
    date, region, service, terminator = ([*scope.split("/"), "", "", ""])[:4]
    if date != amz_date[:8]:
        message = (
            "Date in Credential scope does not match YYYYMMDD from ISO-8601 version of date from HTTP: "
            f"'{date}' != '{amz_date[:8]}', from '{amz_date}'."
        )
    elif region != REGION:
        message = f"Credential should be scoped to a valid region, not '{region}'. "
    elif expected is not None and service != expected:
        message = f"Credential should be scoped to correct service: '{expected}'. "
    elif not service:
        message = "Credential should be scoped to correct service. "
    elif terminator != "aws4_request":
        message = f"Credential should be scoped with a valid terminator: 'aws4_request', not '{terminator}'. "
    else:
        return service
    raise SignatureRejected("InvalidSignatureException", message)


def _signature_parts(request: SignedRequest, lookup: Mapping[str, str]) -> tuple[str, str, str, str, str]:
    """(credential, signature, signed header names, X-Amz-Date, canonical query) from the
    Authorization header or a presigned URL's query; `SignatureRejected` when there is neither."""
    query_pairs = [pair.partition("=") for pair in request.raw_query.split("&") if pair]
    query = {key: value for key, _, value in query_pairs}
    if "authorization" in lookup:
        fields = _parse_authorization(lookup["authorization"])
        return (
            fields["Credential"],
            fields["Signature"],
            fields["SignedHeaders"],
            lookup.get("x-amz-date", ""),
            request.raw_query,
        )
    if "X-Amz-Signature" in query:
        # The canonical query covers every parameter but the signature itself.
        canonical_query = "&".join(
            f"{key}{sep}{value}" for key, sep, value in query_pairs if key != "X-Amz-Signature"
        )
        return (
            unquote(query.get("X-Amz-Credential", "")),
            query["X-Amz-Signature"],
            unquote(query.get("X-Amz-SignedHeaders", "")),
            query.get("X-Amz-Date", ""),
            canonical_query,
        )
    raise SignatureRejected("MissingAuthenticationTokenException", "Missing Authentication Token")


def verify(
    request: SignedRequest, secrets: Mapping[str, str], now: datetime, service: str | None = SERVICE
) -> Caller:
    """The caller whose signature this is, or `SignatureRejected` with API Gateway's answer;
    `service` None accepts a scope of any service (the local AWS endpoint serves them all on one
    port) and reports it in `Caller.service`."""
    header_lines = [(name.lower(), value) for name, value in request.headers]
    lookup = dict(header_lines)
    credential, signature, signed_names, amz_date, canonical_query = _signature_parts(request, lookup)

    access_key, _, scope = credential.partition("/")
    if access_key not in secrets:
        raise SignatureRejected("UnrecognizedClientException", UNKNOWN_KEY)
    if not amz_date:
        raise SignatureRejected(
            "IncompleteSignatureException",
            "Authorization header requires existence of either a 'X-Amz-Date' or a 'Date' header.",
        )
    _check_clock(amz_date, now)
    scoped = _check_scope(scope, amz_date, service)
    if "host" not in signed_names.lower().split(";"):
        raise SignatureRejected("InvalidSignatureException", HOST_NOT_SIGNED)

    declared_hash = lookup.get("x-amz-content-sha256")
    body_hash = _sha256(request.body)
    if declared_hash is not None and not _unsigned(declared_hash) and declared_hash != body_hash:
        raise SignatureRejected("InvalidSignatureException", MISMATCH)
    names = sorted({name.strip().lower() for name in signed_names.split(";")})
    payload = declared_hash if declared_hash and "x-amz-content-sha256" in names else body_hash
    canonical = "\n".join(
        (
            request.method.upper(),
            request.raw_path if scoped == "s3" else quote(normalize_url_path(request.raw_path), safe="/~"),
            _canonical_query(canonical_query),
            "".join(f"{name}:{_header_values(header_lines, name)}\n" for name in names),
            ";".join(names),
            payload,
        )
    )
    string_to_sign = "\n".join(
        (ALGORITHM, amz_date, f"{amz_date[:8]}/{REGION}/{scoped}/aws4_request", _sha256(canonical.encode()))
    )
    key = _signing_key(secrets[access_key], amz_date[:8], REGION, scoped)
    expected = hmac.new(key, string_to_sign.encode(), hashlib.sha256).hexdigest()
    if not hmac.compare_digest(expected, signature):
        raise SignatureRejected("InvalidSignatureException", MISMATCH)
    return Caller(access_key=access_key, service=scoped)
