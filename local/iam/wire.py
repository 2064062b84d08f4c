"""How each AWS service refuses a request on the wire: the local endpoint's IAM rejections.

`rejection(signing_service, kind, message, request_id)` answers the WSGI status line, headers and
body the service itself sends for an authorization or signature failure, so that botocore (and any
SDK) raises the same `ClientError` code and message it raises against AWS. The error codes come
from botocore's models and parsers (JSON `__type`, the query-compatible `x-amzn-query-error` header,
REST-JSON's `x-amzn-ErrorType`, S3's and the query protocol's XML `<Code>`), the status codes and
body shapes from AWS's recorded answers:

- DynamoDB, Kinesis, KMS, CloudWatch Logs: HTTP 400, `{"__type": "...AccessDeniedException",
  "message": ...}` (DynamoDB namespaced `com.amazon.coral.service#` with `Message`), as the SDKs'
  logs of real refusals show ("Status Code: 400; Error Code: AccessDeniedException").
- SQS (JSON, query-compatible): HTTP 403, `x-amzn-query-error: AccessDenied;Sender` and
  `{"__type":"com.amazon.coral.service#AccessDeniedException","Message":...}`, the error code an SDK
  reports being `AccessDenied` (the query one); its query form: `<ErrorResponse>` XML, 403.
  The AWS-validated shapes recorded in the public SDKs' query-compatibility tests
  (aws-sdk-go-v2 `service/sqs` "for unmodeled error code": header `AccessDenied;Sender`, code
  `AccessDenied`).
- CloudWatch (query-compatible JSON or Smithy RPC v2 CBOR, or query): 403, `AccessDenied;Sender`.
- S3: HTTP 403 `<Error><Code>AccessDenied</Code><Message>Access Denied</Message>...` (S3's REST
  error responses, https://docs.aws.amazon.com/AmazonS3/latest/API/ErrorResponses.html).
- Lambda, X-Ray (REST-JSON): HTTP 403, `x-amzn-ErrorType: AccessDeniedException`.
- STS (query): HTTP 403 `<ErrorResponse><Error><Type>Sender</Type><Code>AccessDenied</Code>...`.

Signature failures follow the same shapes with the codes of AWS's common errors
(https://docs.aws.amazon.com/STS/latest/APIReference/CommonErrors.html and each JSON API's
"Common Errors"): InvalidSignatureException / SignatureDoesNotMatch, UnrecognizedClientException /
InvalidClientTokenId / InvalidAccessKeyId, MissingAuthenticationTokenException /
MissingAuthenticationToken, IncompleteSignatureException / IncompleteSignature; an expired
signature is an invalid one to the JSON services ("Signature expired: ..."), SignatureDoesNotMatch
to the query ones and RequestTimeTooSkewed to S3.
"""

from __future__ import annotations

import json
from xml.sax.saxutils import escape

__all__ = ["KINDS", "rejection"]

KINDS = (
    "AccessDenied",
    "InvalidSignature",
    "UnrecognizedClient",
    "MissingAuthentication",
    "IncompleteSignature",
    "ExpiredSignature",
)

#: The protocol each signing service answers in when the request's is not given (botocore's model).
_PROTOCOL = {
    "dynamodb": "json-1.0",
    "kinesis": "json-1.1",
    "sqs": "json-1.0",
    "kms": "json-1.1",
    "logs": "json-1.1",
    "monitoring": "json-1.0",
    "s3": "rest-xml",
    "lambda": "rest-json",
    "xray": "rest-json",
    "sts": "query",
}
#: Query-protocol XML namespaces (the services' API versions).
_NAMESPACE = {
    "sts": "https://sts.amazonaws.com/doc/2011-06-15/",
    "sqs": "http://queue.amazonaws.com/doc/2012-11-05/",
    "monitoring": "http://monitoring.amazonaws.com/doc/2010-08-01/",
}
#: Services whose JSON errors carry the query protocol's code in `x-amzn-query-error`
#: (botocore's `awsQueryCompatible` models).
_QUERY_COMPATIBLE = frozenset({"sqs", "monitoring"})

#: kind -> (JSON `__type`, status) for the JSON and REST-JSON services.
_JSON_CODES = {
    "AccessDenied": ("AccessDeniedException", 400),
    "InvalidSignature": ("InvalidSignatureException", 400),
    "UnrecognizedClient": ("UnrecognizedClientException", 400),
    "MissingAuthentication": ("MissingAuthenticationTokenException", 400),
    "IncompleteSignature": ("IncompleteSignatureException", 400),
    "ExpiredSignature": ("InvalidSignatureException", 400),
}
#: kind -> (query code, status) for the query protocol and the query-compatible header.
_QUERY_CODES = {
    "AccessDenied": ("AccessDenied", 403),
    "InvalidSignature": ("SignatureDoesNotMatch", 403),
    "UnrecognizedClient": ("InvalidClientTokenId", 403),
    "MissingAuthentication": ("MissingAuthenticationToken", 403),
    "IncompleteSignature": ("IncompleteSignature", 400),
    "ExpiredSignature": ("SignatureDoesNotMatch", 403),
}
#: kind -> (S3 code, status).
_S3_CODES = {
    "AccessDenied": ("AccessDenied", 403),
    "InvalidSignature": ("SignatureDoesNotMatch", 403),
    "UnrecognizedClient": ("InvalidAccessKeyId", 403),
    "MissingAuthentication": ("AccessDenied", 403),  # an unsigned request is anonymous, and refused
    "IncompleteSignature": ("AuthorizationHeaderMalformed", 400),
    "ExpiredSignature": ("RequestTimeTooSkewed", 403),
}
_REASONS = {400: "Bad Request", 403: "Forbidden"}


def _status(code: int) -> str:
    return f"{code} {_REASONS[code]}"


def _cbor_text(text: str) -> bytes:
    data = text.encode("utf-8")
    n = len(data)
    if n < 24:
        head = bytes([0x60 | n])
    elif n < 0x100:
        head = bytes([0x78, n])
    elif n < 0x10000:
        head = bytes([0x79]) + n.to_bytes(2, "big")
    else:
        head = bytes([0x7A]) + n.to_bytes(4, "big")
    return head + data


def _cbor_map(items: dict[str, str]) -> bytes:
    """A CBOR map of text to text (RFC 8949 major types 5 and 3): all an error body holds."""
    out = bytes([0xA0 | len(items)])
    for key, value in items.items():
        out += _cbor_text(key) + _cbor_text(value)
    return out


def _protocol(signing_service: str, protocol: str) -> str:
    default = _PROTOCOL.get(signing_service, "json-1.1")
    if protocol == "json":  # which JSON version is the service's
        return default if default.startswith("json") else "json-1.1"
    return protocol or default


def rejection(
    signing_service: str, kind: str, message: str, request_id: str, *, protocol: str = "", method: str = ""
) -> tuple[str, list[tuple[str, str]], bytes]:
    """(WSGI status line, headers, body) of the service's refusal. `protocol` is the one the request
    used (`Call.protocol`: "json", "query", "rest-xml", "rest-json", "smithy-rpc-v2-cbor"); the
    service's default when empty (an SQS or CloudWatch request in the query form is answered in it).
    A HEAD request is answered without a body, as S3 answers it (the SDKs then report the status:
    code "403", message "Forbidden")."""
    if kind not in KINDS:
        raise ValueError(f"rejection kind {kind!r} is none of {', '.join(KINDS)}")
    wire = _protocol(signing_service, protocol)
    if wire == "rest-xml":
        line, s3_headers, s3_body = _s3(kind, message, request_id)
        if method.upper() == "HEAD":
            return line, [(k, "0" if k == "Content-Length" else v) for k, v in s3_headers], b""
        return line, s3_headers, s3_body
    if wire == "query":
        return _query(signing_service, kind, message, request_id)
    code, status = _JSON_CODES[kind]
    headers = [("x-amzn-RequestId", request_id)]
    type_ = code
    message_key = "message"
    if signing_service in _QUERY_COMPATIBLE:
        query_code, status = _QUERY_CODES[kind]
        if signing_service == "sqs" and kind == "MissingAuthentication":
            query_code, code = (
                "AccessDenied",
                "AccessDeniedException",
            )  # SQS refuses an unsigned call as denied
        headers.append(("x-amzn-query-error", f"{query_code};Sender"))
        type_ = f"com.amazon.coral.service#{code}"
        message_key = "Message"
    elif signing_service == "dynamodb":
        type_ = f"com.amazon.coral.service#{code}"
        message_key = "Message"
    if wire == "rest-json":
        status = 403
        headers.append(("x-amzn-ErrorType", code))
        body = json.dumps({"Type": "User", "message": message}).encode()
        content_type = "application/json"
    elif wire == "smithy-rpc-v2-cbor":
        body = _cbor_map({"__type": type_, "message": message})
        headers.append(("smithy-protocol", "rpc-v2-cbor"))
        content_type = "application/cbor"
    else:
        body = json.dumps({"__type": type_, message_key: message}).encode()
        content_type = "application/x-amz-json-1.0" if wire == "json-1.0" else "application/x-amz-json-1.1"
    headers += [("Content-Type", content_type), ("Content-Length", str(len(body)))]
    return _status(status), headers, body


def _query(
    signing_service: str, kind: str, message: str, request_id: str
) -> tuple[str, list[tuple[str, str]], bytes]:
    code, status = _QUERY_CODES[kind]
    namespace = _NAMESPACE.get(signing_service, f"https://{signing_service}.amazonaws.com/doc/")
    body = (
        f'<?xml version="1.0"?>\n<ErrorResponse xmlns="{namespace}"><Error><Type>Sender</Type>'
        f"<Code>{code}</Code><Message>{escape(message)}</Message></Error>"
        f"<RequestId>{escape(request_id)}</RequestId></ErrorResponse>"
    ).encode()
    headers = [
        ("x-amzn-RequestId", request_id),
        ("Content-Type", "text/xml"),
        ("Content-Length", str(len(body))),
    ]
    return _status(status), headers, body


def _s3(kind: str, message: str, request_id: str) -> tuple[str, list[tuple[str, str]], bytes]:
    code, status = _S3_CODES[kind]
    body = (
        f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code>'
        f"<Message>{escape(message)}</Message><RequestId>{escape(request_id)}</RequestId>"
        f"<HostId>{escape(request_id)}</HostId></Error>"
    ).encode()
    headers = [
        ("x-amz-request-id", request_id),
        ("x-amz-id-2", request_id),
        ("Content-Type", "application/xml"),
        ("Content-Length", str(len(body))),
    ]
    return _status(status), headers, body
