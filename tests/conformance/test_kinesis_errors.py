"""The local endpoint's Kinesis error answers against what AWS recorded
(tests/conformance/aws_recorded/kinesis_errors.json), read on the wire (the JSON body's keys) and
through botocore, as a producer sees them."""

from __future__ import annotations

import base64
import json
import re
import urllib.error
import urllib.request
from typing import Any

import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from tests.support.esm.aws import client, create_stream
from tests.support.recorded import load, mismatches

pytestmark = pytest.mark.integration

RECORDED = load("kinesis_errors")


def kinesis_call(endpoint: str, operation: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """One signed Kinesis JSON request; the status and the JSON body as sent."""
    request = AWSRequest(
        method="POST",
        url=endpoint,
        data=json.dumps(body).encode(),
        headers={
            "Content-Type": "application/x-amz-json-1.1",
            "X-Amz-Target": f"Kinesis_20131202.{operation}",
        },
    )
    SigV4Auth(Credentials("testing", "testing"), "kinesis", "us-east-1").add_auth(request)
    prepared = urllib.request.Request(endpoint, data=request.body, headers=dict(request.headers.items()))
    try:
        with urllib.request.urlopen(prepared, timeout=10) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def test_a_stream_that_does_not_exist_is_the_recorded_resource_not_found(local_endpoint):
    """Source: kinesis_errors.json `resource_not_found` — LocalStack tests/aws/services/kinesis/
    test_kinesis.snapshot.json, TestKinesis::test_cbor_exceptions, cbor-error (AWS-validated
    2025-09-16): {"__type": "ResourceNotFoundException", "message": "Stream wrong-stream-name
    under account 111111111111 not found."} (the account is the local one, 12 digits)."""
    status, body = kinesis_call(local_endpoint, "DescribeStream", {"StreamName": "wrong-stream-name"})
    assert status == 400
    assert mismatches(body, RECORDED["resource_not_found"]["recorded"]) == []


def test_a_throttled_put_records_entry_has_the_documented_shape(local_endpoint):
    """Source: kinesis_errors.json `put_records_partial_failure` — the Kinesis API reference's
    PutRecords example 2 (a partially successful response): a written entry has SequenceNumber
    and ShardId, a throttled one ErrorCode ProvisionedThroughputExceededException and ErrorMessage
    "Rate exceeded for shard <shard> in stream <stream> under account <account>."; FailedRecordCount
    counts them. Three records of 600 KB on one shard: its 1 MiB/s takes the first only."""
    kinesis = client("kinesis", local_endpoint)
    stream = create_stream(kinesis)
    data = base64.b64encode(b"x" * 600_000).decode()
    entries = [{"Data": data, "PartitionKey": f"k{i}"} for i in range(3)]
    status, body = kinesis_call(local_endpoint, "PutRecords", {"StreamName": stream, "Records": entries})
    assert status == 200
    example = RECORDED["put_records_partial_failure"]["recorded"]
    assert set(body) == set(example)
    written, throttled = example["Records"][0], example["Records"][1]
    first, *rest = body["Records"]
    assert set(first) == set(written) and re.fullmatch(r"\d+", first["SequenceNumber"])
    assert body["FailedRecordCount"] == len(rest) == 2
    doc = re.escape(throttled["ErrorMessage"])
    for name in ("shardId-000000000001", "exampleStreamName", "111111111111"):
        doc = doc.replace(re.escape(name), "(.+)")
    for entry in rest:
        assert set(entry) == set(throttled)
        assert entry["ErrorCode"] == throttled["ErrorCode"]
        shard, name, account = re.fullmatch(doc, entry["ErrorMessage"]).groups()
        assert (shard, name, re.fullmatch(r"\d{12}", account) is not None) == (first["ShardId"], stream, True)
