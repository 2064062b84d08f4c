"""S3 operations -> the actions and ARNs IAM authorizes them on.

Source: the Service Authorization Reference for S3
(https://docs.aws.amazon.com/service-authorization/latest/reference/list_amazons3.html) and the user
guide's "Required permissions for Amazon S3 API operations"
(https://docs.aws.amazon.com/AmazonS3/latest/userguide/using-with-s3-policy-actions.html), where many
operations are authorized under another action's name (ListObjectsV2 and HeadBucket ->
s3:ListBucket, HeadObject -> s3:GetObject, the multipart upload steps -> s3:PutObject, a request
with `versionId` -> the `...Version` action, DeleteObjects -> s3:DeleteObject per key, CopyObject ->
s3:PutObject on the target and s3:GetObject on the source). Buckets are `arn:aws:s3:::<bucket>`,
objects `arn:aws:s3:::<bucket>/<key>` (no region, no account).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import unquote
from xml.etree import ElementTree

from ._calls_types import Need, UnknownResource, Where

__all__ = ["needs"]

_ACTION = {
    "ListObjects": "ListBucket",
    "ListObjectsV2": "ListBucket",
    "HeadBucket": "ListBucket",
    "ListObjectVersions": "ListBucketVersions",
    "ListBuckets": "ListAllMyBuckets",
    "ListMultipartUploads": "ListBucketMultipartUploads",
    "ListParts": "ListMultipartUploadParts",
    "HeadObject": "GetObject",
    "SelectObjectContent": "GetObject",
    "CreateMultipartUpload": "PutObject",
    "UploadPart": "PutObject",
    "CompleteMultipartUpload": "PutObject",
    "CopyObject": "PutObject",
    "UploadPartCopy": "PutObject",
    "DeleteObjects": "DeleteObject",
    "GetBucketEncryption": "GetEncryptionConfiguration",
    "PutBucketEncryption": "PutEncryptionConfiguration",
    "DeleteBucketEncryption": "PutEncryptionConfiguration",
    "GetBucketLifecycle": "GetLifecycleConfiguration",
    "GetBucketLifecycleConfiguration": "GetLifecycleConfiguration",
    "PutBucketLifecycle": "PutLifecycleConfiguration",
    "PutBucketLifecycleConfiguration": "PutLifecycleConfiguration",
    "DeleteBucketLifecycle": "PutLifecycleConfiguration",
    "GetBucketNotificationConfiguration": "GetBucketNotification",
    "PutBucketNotificationConfiguration": "PutBucketNotification",
    "GetBucketCors": "GetBucketCORS",
    "PutBucketCors": "PutBucketCORS",
    "DeleteBucketCors": "PutBucketCORS",
    "GetBucketReplication": "GetReplicationConfiguration",
    "PutBucketReplication": "PutReplicationConfiguration",
    "DeleteBucketReplication": "PutReplicationConfiguration",
    "DeleteBucketTagging": "PutBucketTagging",
    "GetPublicAccessBlock": "GetBucketPublicAccessBlock",
    "PutPublicAccessBlock": "PutBucketPublicAccessBlock",
    "DeletePublicAccessBlock": "PutBucketPublicAccessBlock",
    "DeleteBucketOwnershipControls": "PutBucketOwnershipControls",
    "GetBucketAccelerateConfiguration": "GetAccelerateConfiguration",
    "PutBucketAccelerateConfiguration": "PutAccelerateConfiguration",
    "GetBucketAnalyticsConfiguration": "GetAnalyticsConfiguration",
    "ListBucketAnalyticsConfigurations": "GetAnalyticsConfiguration",
    "PutBucketAnalyticsConfiguration": "PutAnalyticsConfiguration",
    "DeleteBucketAnalyticsConfiguration": "PutAnalyticsConfiguration",
    "GetBucketMetricsConfiguration": "GetMetricsConfiguration",
    "ListBucketMetricsConfigurations": "GetMetricsConfiguration",
    "PutBucketMetricsConfiguration": "PutMetricsConfiguration",
    "DeleteBucketMetricsConfiguration": "PutMetricsConfiguration",
    "GetBucketInventoryConfiguration": "GetInventoryConfiguration",
    "ListBucketInventoryConfigurations": "GetInventoryConfiguration",
    "PutBucketInventoryConfiguration": "PutInventoryConfiguration",
    "DeleteBucketInventoryConfiguration": "PutInventoryConfiguration",
    "GetBucketIntelligentTieringConfiguration": "GetIntelligentTieringConfiguration",
    "ListBucketIntelligentTieringConfigurations": "GetIntelligentTieringConfiguration",
    "PutBucketIntelligentTieringConfiguration": "PutIntelligentTieringConfiguration",
    "DeleteBucketIntelligentTieringConfiguration": "PutIntelligentTieringConfiguration",
    "GetObjectLockConfiguration": "GetBucketObjectLockConfiguration",
    "PutObjectLockConfiguration": "PutBucketObjectLockConfiguration",
}
#: Operations whose request with `versionId` is authorized as the version's action.
_VERSIONED = {
    "GetObject": "GetObjectVersion",
    "HeadObject": "GetObjectVersion",
    "DeleteObject": "DeleteObjectVersion",
    "GetObjectAcl": "GetObjectVersionAcl",
    "PutObjectAcl": "PutObjectVersionAcl",
    "GetObjectTagging": "GetObjectVersionTagging",
    "PutObjectTagging": "PutObjectVersionTagging",
    "DeleteObjectTagging": "DeleteObjectVersionTagging",
}
_WRITES = frozenset(
    {
        "PutObject",
        "CreateMultipartUpload",
        "UploadPart",
        "CompleteMultipartUpload",
        "CopyObject",
        "UploadPartCopy",
    }
)
_READS = frozenset({"GetObject", "HeadObject", "SelectObjectContent"})
_BUCKET = "arn:aws:s3:::"
#: S3's condition keys a request carries in its query or headers (the Service Authorization
#: Reference's condition keys for S3: s3:prefix, s3:delimiter, s3:max-keys on ListBucket;
#: s3:x-amz-server-side-encryption[-aws-kms-key-id], s3:x-amz-acl on writes).
_QUERY_KEYS = {"prefix": "s3:prefix", "delimiter": "s3:delimiter", "max-keys": "s3:max-keys"}
_HEADER_KEYS = (
    "x-amz-server-side-encryption",
    "x-amz-server-side-encryption-aws-kms-key-id",
    "x-amz-acl",
    "x-amz-copy-source",
    "x-amz-metadata-directive",
    "x-amz-storage-class",
)


def _context(query: dict[str, str], headers: Any) -> dict[str, str]:
    context = {key: query[name] for name, key in _QUERY_KEYS.items() if name in query}
    context.update({f"s3:{name}": headers[name] for name in _HEADER_KEYS if name in headers})
    if "versionId" in query:
        context["s3:VersionId"] = query["versionId"]
    return context


def _deleted_keys(body: bytes) -> list[str]:
    try:
        root = ElementTree.fromstring(body)
    except ElementTree.ParseError:
        raise UnknownResource("DeleteObjects: the request body is not XML") from None
    return [e.text or "" for e in root.iter() if e.tag.rsplit("}", 1)[-1] == "Key"]


def _copy_source(header: str) -> tuple[str, str, bool]:
    """(bucket, key, versioned) of `x-amz-copy-source: /bucket/key?versionId=...` (URL-encoded)."""
    source, _, query = header.partition("?")
    bucket, _, key = unquote(source).lstrip("/").partition("/")
    if not bucket or not key:
        raise UnknownResource(f"x-amz-copy-source {header!r} names no bucket and key")
    return bucket, key, "versionId=" in query


def needs(
    operation: str, params: dict[str, Any], request: Any, where: Where
) -> tuple[list[Need], list[tuple[str, str]], dict[str, str]]:
    query: dict[str, str] = params.get("__query__", {})
    name = _ACTION.get(operation, operation)
    if "versionId" in query and operation in _VERSIONED:
        name = _VERSIONED[operation]
    bucket = params.get("Bucket")
    key = params.get("Key")
    touches: list[tuple[str, str]] = []
    out: list[Need] = []
    if bucket is None:
        out.append(Need(f"s3:{name}", "*"))
    elif operation == "DeleteObjects":
        out += [Need("s3:DeleteObject", f"{_BUCKET}{bucket}/{k}") for k in _deleted_keys(request.body)]
    elif key is not None:
        out.append(Need(f"s3:{name}", f"{_BUCKET}{bucket}/{key}"))
        if operation == "GetObjectAttributes":  # needs both (using-with-s3-policy-actions.html)
            out.append(Need("s3:GetObject", f"{_BUCKET}{bucket}/{key}"))
    else:
        out.append(Need(f"s3:{name}", f"{_BUCKET}{bucket}"))
    if bucket is not None and operation in _WRITES:
        touches.append((f"{_BUCKET}{bucket}", "write"))
    elif bucket is not None and operation in _READS:
        touches.append((f"{_BUCKET}{bucket}", "read"))
    if operation in ("CopyObject", "UploadPartCopy"):
        source_bucket, source_key, versioned = _copy_source(request.headers.get("x-amz-copy-source", ""))
        action = "s3:GetObjectVersion" if versioned else "s3:GetObject"
        out.append(Need(action, f"{_BUCKET}{source_bucket}/{source_key}"))
        touches.append((f"{_BUCKET}{source_bucket}", "read"))
    return out, touches, _context(query, request.headers)
