"""What each request to the local AWS endpoint asks AWS to authorize: its (action, resource) pairs.

The enforcer (`local.endpoint.server`'s IAM middleware) calls `call_of` on every request once its
SigV4 signature is verified: the operation is identified from botocore's own service models (the
pinned botocore of the venv: the oracle we did not write), then each service's module
(`_calls_<service>`) names the actions and resource ARNs AWS's Service Authorization Reference and
the service's developer guide say the operation is authorized on, with their documented
exceptions (TransactWriteItems per item, SubscribeToShard on the consumer, S3's ListObjectsV2 ->
s3:ListBucket, ...). `key_needs` adds what the caller needs of a customer-managed KMS key the
touched resource is encrypted with, through the service.

How an operation is found, per protocol of the model:
- JSON (Kinesis, DynamoDB, SQS, KMS, Logs): the `X-Amz-Target` header, `<targetPrefix>.<Operation>`;
- query (STS; SQS and CloudWatch also accept it): `Action=` in the form body or the query string;
- Smithy RPC v2 CBOR (CloudWatch in this botocore): the path `/service/<Service>/operation/<Op>`;
- REST-JSON / REST-XML (Lambda, X-Ray, S3): the method and the path matched against the model's
  `http.requestUri` templates, the literal query keys, required query members and headers
  deciding between templates of one path (S3's PUT object vs. CopyObject vs. UploadPart).

Models and lookup tables are built once per signing service, on its first request.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from types import MappingProxyType
from urllib.parse import parse_qsl, unquote

from ._calls_model import lookup_for
from ._calls_types import Call, Mapper, Need, Request, UnknownResource, Where

__all__ = ["Call", "Need", "UnknownResource", "call_of", "key_needs"]

_EMPTY: Mapping[str, str] = MappingProxyType({})


#: The IAM prefix of a signing service, where they differ.
_IAM_PREFIX = {"monitoring": "cloudwatch", "execute-api": "execute-api"}

_MAPPERS: dict[str, Mapper] = {}
_MAPPERS_LOCK = threading.Lock()


def _mapper(prefix: str) -> Mapper | None:
    if not _MAPPERS:
        with _MAPPERS_LOCK:
            if not _MAPPERS:
                from . import _calls_dynamodb, _calls_kinesis, _calls_others, _calls_s3, _calls_sqs

                found: dict[str, Mapper] = {
                    "dynamodb": _calls_dynamodb.needs,
                    "kinesis": _calls_kinesis.needs,
                    "sqs": _calls_sqs.needs,
                    "s3": _calls_s3.needs,
                }
                found.update(_calls_others.MAPPERS)
                _MAPPERS.update(found)
    return _MAPPERS.get(prefix)


def call_of(
    signing_service: str,
    method: str,
    raw_path: str,
    raw_query: str,
    headers: Mapping[str, str],
    body: bytes,
    *,
    account: str,
    region: str,
    secure: bool = False,
    source_ip: str = "127.0.0.1",
    now: float | None = None,
    aliases: Mapping[str, str] = _EMPTY,
) -> Call:
    """The `Call` a verified request makes. `headers` are matched case-insensitively and should
    include `Host` (S3's virtual-host style names the bucket there); `aliases`
    maps a KMS alias name (`alias/x`) to its key id or ARN where the caller knows it; `now` is the
    clock (epoch seconds) for aws:CurrentTime and aws:EpochTime, the wall clock when None."""
    lowered = {k.lower(): v for k, v in headers.items()}
    request = Request(method.upper(), raw_path or "/", raw_query, lowered, body)
    prefix = _IAM_PREFIX.get(signing_service, signing_service)
    lookup = lookup_for(signing_service)
    found = lookup.identify(request) if lookup is not None else None
    context = _request_context(lowered, region, secure, source_ip, now)
    if found is None:
        protocol = lookup.protocol_of(request) if lookup is not None else ""
        return _unmodelled(prefix, _guess_operation(request), context, protocol, account)
    operation, protocol, params = found
    mapper = _mapper(prefix)
    where = Where(account, region)
    if aliases:
        params = {**params, "__aliases__": aliases}
    mapped = mapper(operation, params, request, where) if mapper is not None else None
    if mapped is None:
        return _unmodelled(prefix, operation, context, protocol, account)
    needs, touches, extra = mapped
    context.update(extra)
    return Call(
        prefix,
        operation,
        tuple(dict.fromkeys(needs)),
        tuple(dict.fromkeys(touches)),
        MappingProxyType(context),
        True,
        protocol,
        account,
    )


def _request_context(
    headers: Mapping[str, str], region: str, secure: bool, source_ip: str, now: float | None
) -> dict[str, str]:
    """The global condition keys every request carries (IAM User Guide, "AWS global condition
    context keys": https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_condition-keys.html)."""
    moment = time.time() if now is None else now
    return {
        "aws:SecureTransport": "true" if secure else "false",
        "aws:SourceIp": source_ip,
        # the region the request is signed for (its credential scope), the endpoint's when unsigned
        "aws:RequestedRegion": _scope_region(headers) or region,
        "aws:CurrentTime": _iso_second(int(moment)),
        "aws:EpochTime": str(int(moment)),
    }


@functools.lru_cache(maxsize=4)
def _iso_second(epoch: int) -> str:
    """ISO 8601 of a second (cached: every request of one second shares it; strftime is most of the
    context's cost)."""
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _scope_region(headers: Mapping[str, str]) -> str:
    authorization = headers.get("authorization", "")
    start = authorization.find("Credential=")
    if start < 0:
        return ""
    scope = authorization[start + 11 :].split(",", 1)[0].split("/")
    return scope[2] if len(scope) >= 5 else ""


def _guess_operation(request: Request) -> str:
    """The operation's name when no model says it: the target's, the query Action, or the method."""
    target = request.headers.get("x-amz-target", "")
    if "." in target:
        return target.rsplit(".", 1)[1]
    for key, value in parse_qsl(request.query):
        if key == "Action":
            return value
    if request.body[:7] == b"Action=":
        return unquote(request.body[7:].split(b"&", 1)[0].decode("utf-8", "replace"))
    return request.method.capitalize()


# -- KMS through the service ------------------------------------------------------------------------

#: What the caller needs of a touched resource's customer-managed key, per (service, access):
#: - Kinesis: "kms:GenerateDataKey" to write, "kms:Decrypt" to read,
#:   https://docs.aws.amazon.com/streams/latest/dev/permissions-user-key-KMS.html
#: - SQS: a producer needs kms:GenerateDataKey and kms:Decrypt, a consumer kms:Decrypt,
#:   https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-key-management.html
#: - DynamoDB (customer-managed key): the table key is decrypted with the caller's kms:Decrypt on
#:   every access, https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/encryption.howitworks.html
#: - S3 (SSE-KMS): upload needs kms:GenerateDataKey (and kms:Decrypt for multipart uploads),
#:   download kms:Decrypt, https://docs.aws.amazon.com/AmazonS3/latest/userguide/UsingKMSEncryption.html
#: CloudWatch Logs uses a log group's key with its own service principal (the key policy grants
#: `logs.<region>.amazonaws.com`), not the caller's: nothing of the caller,
#: https://docs.aws.amazon.com/AmazonCloudWatch/latest/logs/encrypt-log-data-kms.html
_KEY_ACTIONS: dict[tuple[str, str], tuple[str, ...]] = {
    ("kinesis", "write"): ("kms:GenerateDataKey",),
    ("kinesis", "read"): ("kms:Decrypt",),
    ("sqs", "write"): ("kms:GenerateDataKey", "kms:Decrypt"),
    ("sqs", "read"): ("kms:Decrypt",),
    ("dynamodb", "write"): ("kms:Decrypt",),
    ("dynamodb", "read"): ("kms:Decrypt",),
    ("s3", "write"): ("kms:GenerateDataKey",),
    ("s3", "read"): ("kms:Decrypt",),
}
#: S3 multipart uploads also decrypt the data key to assemble the parts (UsingKMSEncryption.html).
_S3_MULTIPART = frozenset(
    {"CreateMultipartUpload", "UploadPart", "UploadPartCopy", "CompleteMultipartUpload"}
)


def _unmodelled(prefix: str, operation: str, context: dict[str, str], protocol: str, account: str) -> Call:
    """A call no mapper names: authorized by the `prefix:Operation` guess on "*", and flagged."""
    need = Need(f"{prefix}:{operation}", "*")
    return Call(prefix, operation, (need,), context=MappingProxyType(context), modelled=False,
                protocol=protocol, account=account)  # fmt: skip


def key_needs(call: Call, keys: Mapping[str, str], region: str) -> tuple[tuple[Need, Mapping[str, str]], ...]:
    """For each touched resource encrypted with a customer-managed key (`keys`: resource ARN -> key
    ARN), what the caller's principal needs of the key through the service, with the context AWS
    evaluates it in (kms:ViaService, kms:CallerAccount)."""
    out: dict[Need, Mapping[str, str]] = {}
    context = MappingProxyType(
        {
            "kms:ViaService": f"{call.service}.{region}.amazonaws.com",
            "kms:CallerAccount": call.account,
        }
    )
    for resource, access in call.touches:
        key = keys.get(resource)
        if key is None:
            continue
        actions = _KEY_ACTIONS.get((call.service, access), ())
        if call.service == "s3" and call.operation in _S3_MULTIPART:
            actions = ("kms:GenerateDataKey", "kms:Decrypt")
        for action in actions:
            out.setdefault(Need(action, key), context)
    return tuple(out.items())
