"""The endpoint's own SigV4 check against the oracle it replaced: every request botocore's `SigV4Auth`
(and `S3SigV4Auth`, for S3) signs is accepted, with the right service; any change to what was
signed — a byte of the body, of the path, of the query, of a signed header — is refused."""

from __future__ import annotations

from datetime import UTC, datetime
from urllib.parse import quote, urlsplit

import pytest
from botocore.auth import S3SigV4Auth, SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from hypothesis import given, settings
from hypothesis import strategies as st

from local.iam.sigv4 import SignatureRejected, SignedRequest, verify

SECRETS = {"ASIAEXAMPLE": "secret/with+chars"}
SERVICES = ("dynamodb", "kinesis", "sqs", "s3", "execute-api", "monitoring")
text = st.text(st.characters(codec="utf-8", exclude_categories=("Cs", "Cc")), max_size=12)


@st.composite
def requests(draw: st.DrawFn) -> tuple[str, AWSRequest]:
    service = draw(st.sampled_from(SERVICES))
    segments = draw(st.lists(text, max_size=4))
    path = "/" + "/".join(quote(segment, safe="") for segment in segments)
    pairs = draw(st.lists(st.tuples(text, text), max_size=4))
    query = "&".join(f"{quote(k, safe='-_.~')}={quote(v, safe='-_.~')}" for k, v in pairs)
    url = f"http://127.0.0.1:4566{path}" + (f"?{query}" if query else "")
    body = draw(st.binary(max_size=64))
    request = AWSRequest(method=draw(st.sampled_from(("GET", "POST", "PUT"))), url=url, data=body)
    request.headers["Content-Type"] = "application/x-amz-json-1.0"
    request.headers["X-Amz-Target"] = draw(st.sampled_from(("Kinesis_20131202.PutRecords", "  a   b  ")))
    signer = S3SigV4Auth if service == "s3" else SigV4Auth
    signer(Credentials("ASIAEXAMPLE", SECRETS["ASIAEXAMPLE"]), service, "us-east-1").add_auth(request)
    return service, request


def as_received(request: AWSRequest, **changes: object) -> SignedRequest:
    parts = urlsplit(request.url)
    body = request.body if isinstance(request.body, bytes) else (request.body or b"")
    headers = [("Host", parts.netloc)] + [
        (name, value.decode() if isinstance(value, bytes) else value)
        for name, value in request.headers.items()
    ]
    fields = {"method": request.method, "raw_path": parts.path or "/", "raw_query": parts.query,
              "headers": headers, "body": body}  # fmt: skip
    fields.update(changes)
    return SignedRequest(**fields)  # type: ignore[arg-type]


@settings(max_examples=300, deadline=None)
@given(requests())
def test_every_request_botocore_signs_is_accepted(signed: tuple[str, AWSRequest]) -> None:
    service, request = signed
    caller = verify(as_received(request), SECRETS, datetime.now(UTC), service=None)
    assert (caller.access_key, caller.service) == ("ASIAEXAMPLE", service)


@settings(max_examples=200, deadline=None)
@given(requests(), st.sampled_from(("body", "path", "query", "header")))
def test_any_change_to_what_was_signed_is_refused(signed: tuple[str, AWSRequest], part: str) -> None:
    _, request = signed
    received = as_received(request)
    changed = {
        "body": {"body": received.body + b"x"},
        "path": {"raw_path": received.raw_path + "x"},
        "query": {"raw_query": received.raw_query + ("&" if received.raw_query else "") + "extra=1"},
        "header": {"headers": [(n, v + "x" if n == "X-Amz-Target" else v) for n, v in received.headers]},
    }[part]
    with pytest.raises(SignatureRejected) as refused:
        verify(as_received(request, **changed), SECRETS, datetime.now(UTC), service=None)
    assert refused.value.error_type == "InvalidSignatureException"
