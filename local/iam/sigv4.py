"""SigV4 checking for the local runtime: the REST API's `AWS_IAM` methods (answered as API Gateway
answers) and every request to the local AWS endpoint once it enforces IAM (`local.iam.enforcer`).

The signature is recomputed with botocore's own signer (`SigV4Auth`) over a request rebuilt from
the incoming one — method, raw path, raw query, the headers the caller signed, the body — so any
client that signs as the AWS SDKs do is accepted, and the refusals carry API Gateway's messages.
Both forms are read: the `Authorization` header and a presigned query (`X-Amz-Signature`).
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from urllib.parse import unquote

from botocore.auth import S3SigV4Auth, SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.compat import HTTPHeaders
from botocore.credentials import Credentials

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


class _ExactHeadersSigV4(SigV4Auth):  # type: ignore[misc]  # botocore is untyped here: SigV4Auth is Any
    """botocore's signer, limited to the headers the caller listed in SignedHeaders.

    botocore itself never signs `User-Agent` or `Expect`; another client may have, so the list is
    taken from the request rather than from botocore's rules.
    """

    def __init__(self, credentials: Credentials, signed: HTTPHeaders, service: str) -> None:
        super().__init__(credentials, service, REGION)
        self._signed = signed

    def headers_to_sign(self, request: AWSRequest) -> HTTPHeaders:
        return self._signed


class _ExactHeadersS3SigV4(S3SigV4Auth, _ExactHeadersSigV4):  # type: ignore[misc]
    """The same for S3, whose canonical path is the path as sent (no second encoding, no normalizing)."""


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
    try:
        signed_at = datetime.strptime(amz_date, AMZ_DATE).replace(tzinfo=UTC)
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
    return hashlib.sha256(body).hexdigest()


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

    signed = HTTPHeaders()
    for name in signed_names.split(";"):
        for line_name, value in header_lines:
            if line_name == name:
                signed[name] = value
    declared_hash = lookup.get("x-amz-content-sha256")
    if declared_hash is not None and not _unsigned(declared_hash) and declared_hash != _sha256(request.body):
        raise SignatureRejected("InvalidSignatureException", MISMATCH)
    url = f"http://{lookup.get('host', 'localhost')}{request.raw_path}"
    if canonical_query:
        url += f"?{canonical_query}"
    rebuilt = AWSRequest(method=request.method, url=url, data=request.body)
    if declared_hash and "x-amz-content-sha256" in signed:
        rebuilt.headers["X-Amz-Content-SHA256"] = declared_hash
    rebuilt.context["timestamp"] = amz_date
    signer_class = _ExactHeadersS3SigV4 if scoped == "s3" else _ExactHeadersSigV4
    signer = signer_class(Credentials(access_key, secrets[access_key]), signed, scoped)
    canonical = signer.canonical_request(rebuilt)
    expected = signer.signature(signer.string_to_sign(rebuilt, canonical), rebuilt)
    if not hmac.compare_digest(expected, signature):
        raise SignatureRejected("InvalidSignatureException", MISMATCH)
    return Caller(access_key=access_key, service=scoped)
