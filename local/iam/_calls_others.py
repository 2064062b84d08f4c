"""KMS, CloudWatch Logs, CloudWatch, X-Ray, STS and Lambda operations -> the actions and ARNs IAM
authorizes them on (each service's Service Authorization Reference page, cited per mapper)."""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Mapping
from typing import Any

from ._calls_types import Mapper, Need, UnknownResource, Where

__all__ = ["MAPPERS"]

Out = tuple[list[Need], list[tuple[str, str]], dict[str, str]]


# -- KMS: https://docs.aws.amazon.com/service-authorization/latest/reference/list_awskeymanagementservice.html
# KeyId may be a key id, a key ARN, an alias name or an alias ARN; AWS authorizes on the key
# (https://docs.aws.amazon.com/kms/latest/developerguide/alias-authorization.html: "aliases don't
# grant access to the key"), so an alias names the alias ARN and, when the caller can resolve it,
# the key ARN too.
#: No resource type in the reference: key stores, key listing, randomness.
_KMS_STAR = frozenset(
    {
        "CreateKey",
        "ListKeys",
        "ListAliases",
        "GenerateRandom",
        "ListRetirableGrants",
        "CreateCustomKeyStore",
        "ConnectCustomKeyStore",
        "DeleteCustomKeyStore",
        "DescribeCustomKeyStores",
        "DisconnectCustomKeyStore",
        "UpdateCustomKeyStore",
    }
)


_UUID = re.compile(rb"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def _key_of_ciphertext(blob: object, operation: str) -> str:
    """The key id inside a ciphertext the local endpoint made: moto's blob starts with the key's
    36-character id (`moto.kms.utils._serialize_ciphertext_blob`); AWS's is opaque to the caller."""
    try:
        raw = base64.b64decode(str(blob), validate=True)[:36]
    except (ValueError, binascii.Error):
        raw = b""
    if _UUID.fullmatch(raw) is None:
        raise UnknownResource(f"KMS {operation} without KeyId: the ciphertext names no key the endpoint made")
    return raw.decode("ascii")


def _key(where: Where, key_id: str, aliases: Mapping[str, str]) -> list[str]:
    if key_id.startswith("arn:") and ":alias/" not in key_id:
        return [key_id]
    if key_id.startswith("alias/") or ":alias/" in key_id:
        alias = key_id if key_id.startswith("arn:") else where.arn("kms", key_id)
        name = "alias/" + key_id.split(":alias/", 1)[1] if key_id.startswith("arn:") else key_id
        target = aliases.get(name)
        return [alias] + (_key(where, target, {}) if target else [])
    return [where.arn("kms", f"key/{key_id}")]


def _kms_context(params: dict[str, Any], where: Where) -> dict[str, str]:
    """kms:CallerAccount (the endpoint serves one account) and kms:EncryptionContext:<key> of the
    request (https://docs.aws.amazon.com/kms/latest/developerguide/conditions-kms.html)."""
    context = {"kms:CallerAccount": where.account}
    encryption = params.get("EncryptionContext")
    if isinstance(encryption, dict):
        context.update({f"kms:EncryptionContext:{k}": str(v) for k, v in encryption.items()})
        context["kms:EncryptionContextKeys"] = ",".join(sorted(encryption))
    return context


def _kms(operation: str, params: dict[str, Any], request: Any, where: Where) -> Out:
    out = _kms_needs(operation, params, where)
    return out, [], _kms_context(params, where)


def _kms_needs(operation: str, params: dict[str, Any], where: Where) -> list[Need]:
    aliases: Mapping[str, str] = params.get("__aliases__", {})
    action = f"kms:{operation}"
    if operation in _KMS_STAR:
        return [Need(action, "*")]
    if operation == "ReEncrypt":
        source = params.get("SourceKeyId") or _key_of_ciphertext(params.get("CiphertextBlob"), operation)
        return [Need("kms:ReEncryptFrom", r) for r in _key(where, str(source), aliases)] + [
            Need("kms:ReEncryptTo", r) for r in _key(where, str(params.get("DestinationKeyId", "")), aliases)
        ]
    if operation in ("CreateAlias", "UpdateAlias"):  # on the alias and on the key it points to
        return [Need(action, r) for r in _key(where, str(params.get("AliasName", "")), {})] + [
            Need(action, r) for r in _key(where, str(params.get("TargetKeyId", "")), aliases)
        ]
    if operation == "DeleteAlias":
        return [Need(action, r) for r in _key(where, str(params.get("AliasName", "")), aliases)]
    key_id = params.get("KeyId")
    if not key_id and operation == "Decrypt":
        key_id = _key_of_ciphertext(params.get("CiphertextBlob"), operation)
    if not key_id:
        raise UnknownResource(f"KMS {operation} names no key (KeyId absent)")
    return [Need(action, r) for r in _key(where, str(key_id), aliases)]


# -- CloudWatch Logs: https://docs.aws.amazon.com/service-authorization/latest/reference/list_amazoncloudwatchlogs.html
# AWS's own refusals show the resource it checks: CreateLogGroup on
# `log-group:<g>:log-stream:` and CreateLogStream/PutLogEvents on `log-group:<g>:log-stream:<s>`;
# the rest of the group's operations on `log-group:<g>`.
_LOGS_STAR = frozenset(
    {
        "DescribeLogGroups",
        "DescribeDestinations",
        "DescribeQueries",
        "DescribeResourcePolicies",
        "PutResourcePolicy",
        "DeleteResourcePolicy",
        "DescribeExportTasks",
        "StopQuery",
        "GetQueryResults",
    }
)


def _logs(operation: str, params: dict[str, Any], request: Any, where: Where) -> Out:
    action = f"logs:{operation}"
    group = params.get("logGroupName") or params.get("logGroupIdentifier")
    if operation in _LOGS_STAR or not group:
        if params.get("resourceArn"):
            return [Need(action, str(params["resourceArn"]))], [], {}
        return [Need(action, "*")], [], {}
    arn = str(group) if str(group).startswith("arn:") else where.arn("logs", f"log-group:{group}")
    if operation == "CreateLogGroup":
        return [Need(action, f"{arn}:log-stream:")], [], {}
    stream = params.get("logStreamName")
    if stream is not None and operation in (
        "CreateLogStream",
        "PutLogEvents",
        "DeleteLogStream",
        "GetLogEvents",
    ):
        resource = f"{arn}:log-stream:{stream}"
        return [Need(action, resource)], ([(arn, "write")] if operation == "PutLogEvents" else []), {}
    return [Need(action, arn)], [], {}


# -- CloudWatch: https://docs.aws.amazon.com/service-authorization/latest/reference/list_amazoncloudwatch.html
# Metrics have no resource type (PutMetricData, GetMetricData, ListMetrics on "*"); alarms are
# `arn:aws:cloudwatch:<region>:<account>:alarm:<name>`, dashboards
# `arn:aws:cloudwatch::<account>:dashboard/<name>`.
def _cloudwatch(operation: str, params: dict[str, Any], request: Any, where: Where) -> Out:
    action = f"cloudwatch:{operation}"
    context: dict[str, str] = {}
    if operation == "PutMetricData" and params.get("Namespace"):
        context["cloudwatch:namespace"] = str(params["Namespace"])
    names: list[str] = []
    if params.get("AlarmName"):
        names = [str(params["AlarmName"])]
    elif operation in ("DeleteAlarms", "EnableAlarmActions", "DisableAlarmActions"):
        listed = params.get("AlarmNames")
        names = (
            [str(n) for n in listed]
            if isinstance(listed, list)
            else [str(v) for k, v in params.items() if k.startswith("AlarmNames.member.")]
        )
    if names:
        return [Need(action, where.arn("cloudwatch", f"alarm:{n}")) for n in names], [], context
    if params.get("DashboardName"):
        return (
            [Need(action, where.arn("cloudwatch", f"dashboard/{params['DashboardName']}", region=False))],
            [],
            context,
        )
    if params.get("ResourceARN"):
        return [Need(action, str(params["ResourceARN"]))], [], context
    return [Need(action, "*")], [], context


# -- X-Ray: https://docs.aws.amazon.com/service-authorization/latest/reference/list_awsx-ray.html
# PutTraceSegments, PutTelemetryRecords and the reads have no resource type; groups and sampling
# rules do, but nothing here uses them: "*".
def _xray(operation: str, params: dict[str, Any], request: Any, where: Where) -> Out:
    return [Need(f"xray:{operation}", "*")], [], {}


# -- STS: https://docs.aws.amazon.com/service-authorization/latest/reference/list_awssecuritytokenservice.html
# GetCallerIdentity needs no permission ("No permissions are required to perform this operation",
# https://docs.aws.amazon.com/STS/latest/APIReference/API_GetCallerIdentity.html); AssumeRole* on the role.
def _sts(operation: str, params: dict[str, Any], request: Any, where: Where) -> Out:
    if operation == "GetCallerIdentity":
        return [], [], {}
    if params.get("RoleArn"):
        return [Need(f"sts:{operation}", str(params["RoleArn"]))], [], {}
    return [Need(f"sts:{operation}", "*")], [], {}


# -- Lambda: https://docs.aws.amazon.com/service-authorization/latest/reference/list_awslambda.html
# and https://docs.aws.amazon.com/lambda/latest/dg/lambda-api-permissions-ref.html: Invoke (and
# InvokeWithResponseStream) are authorized as lambda:InvokeFunction on the function ARN, with the
# qualifier when the request names one; FunctionName may be a name, a partial or a full ARN.
_LAMBDA_ACTION = {"Invoke": "InvokeFunction", "InvokeWithResponseStream": "InvokeFunction"}


def _function(where: Where, name: str, qualifier: str | None) -> str:
    parts = name.split(":")
    if name.startswith("arn:"):
        base, qual = ":".join(parts[:7]), (parts[7] if len(parts) > 7 else None)
    elif len(parts) >= 3 and parts[1] == "function":  # <account>:function:<name>[:<qualifier>]
        base = f"arn:aws:lambda:{where.region}:{parts[0]}:function:{parts[2]}"
        qual = parts[3] if len(parts) > 3 else None
    else:
        base, qual = where.arn("lambda", f"function:{parts[0]}"), (parts[1] if len(parts) > 1 else None)
    qual = qualifier or qual
    return f"{base}:{qual}" if qual else base


def _lambda(operation: str, params: dict[str, Any], request: Any, where: Where) -> Out:
    action = f"lambda:{_LAMBDA_ACTION.get(operation, operation)}"
    query: dict[str, str] = params.get("__query__", {})
    if params.get("FunctionName"):
        return [Need(action, _function(where, str(params["FunctionName"]), query.get("Qualifier")))], [], {}
    if params.get("UUID"):  # event-source mappings
        return [Need(action, where.arn("lambda", f"event-source-mapping:{params['UUID']}"))], [], {}
    return [Need(action, "*")], [], {}


MAPPERS: dict[str, Mapper] = {
    "kms": _kms,
    "logs": _logs,
    "cloudwatch": _cloudwatch,
    "xray": _xray,
    "sts": _sts,
    "lambda": _lambda,
}
