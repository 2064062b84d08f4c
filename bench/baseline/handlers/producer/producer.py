"""The baseline's producer: API Gateway (Lambda proxy) -> PutRecords, each record its own Kinesis record.

`POST /v1/streams/{stream}/records` with `{"records": [{"partitionKey", "data" (base64), "id"?,
"explicitHashKey"?}, ...]}` (or `application/x-ndjson`, one record a line). The body is checked
whole before anything is sent (400 with `{"errors": [{"index", "field", "message"}]}`); the records
go in one PutRecords call (at most 500, Kinesis's limit), and only the entries that failed are sent
again, 3 attempts in all with a jittered exponential backoff. The answer, one entry per record in
request order (the client's `id` echoed):

- 200: every record written, each entry `{"id"?, "shardId", "sequenceNumber", "attempts"}`;
- 207: some not written after the attempts: their entries `{"id"?, "errorCode", "errorMessage",
  "written": false, "retry": "resend"}` (Kinesis did not write a failed entry);
- 503 + Retry-After: nothing written (every call failed as a whole); 404: unknown stream.

The record's data goes to Kinesis as it came: its id is the client's to carry in the payload (the
consumer reads it there); Kinesis has no field for it.

Imports only what the Lambda runtime provides (boto3). Routes: `SHARDLINE_STREAMS`, a JSON object
`{"<route>": {"streamName": "<stream>"}}`.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import random
import time
from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

MAX_RECORDS = 500
MAX_RECORD_BYTES = 1_048_576  # data + partition key, Kinesis's record limit
MAX_KEY_LENGTH = 256
MAX_ID_LENGTH = 128
ATTEMPTS = 3
BACKOFF_BASE_S = 0.1

ROUTES: dict[str, Any] = json.loads(os.environ.get("SHARDLINE_STREAMS") or "{}")
# One client per container, made at first use; botocore's standard retry mode for whole-call errors.
_kinesis: Any = None


def kinesis() -> Any:
    global _kinesis
    if _kinesis is None:
        _kinesis = boto3.client("kinesis", config=Config(retries={"mode": "standard", "max_attempts": 3}))
    return _kinesis


def answer(status: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "statusCode": status,
        "headers": {"Content-Type": "application/json", **(headers or {})},
        "body": json.dumps(body, separators=(",", ":")),
    }


def parse(event: dict[str, Any]) -> list[Any] | str:
    """The request's records, or why the body is malformed."""
    body = event.get("body") or ""
    if event.get("isBase64Encoded"):
        body = base64.b64decode(body).decode("utf-8", "replace")
    headers = {key.lower(): value for key, value in (event.get("headers") or {}).items()}
    try:
        if "ndjson" in headers.get("content-type", ""):
            return [json.loads(line) for line in body.splitlines() if line.strip()]
        document = json.loads(body)
    except ValueError as error:
        return f"the body is not JSON: {error}"
    if not isinstance(document, dict) or not isinstance(document.get("records"), list):
        return 'the body must be an object with a "records" list'
    records: list[Any] = document["records"]
    return records


def entry(index: int, record: Any, errors: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The PutRecords entry for one request record, or None with its errors noted."""

    def error(field: str, message: str) -> None:
        errors.append({"index": index, "field": field, "message": message})

    if not isinstance(record, dict):
        error("", "a record is an object")
        return None
    key, data, record_id = record.get("partitionKey"), record.get("data"), record.get("id")
    if not isinstance(key, str) or not 1 <= len(key.encode("utf-16-le")) // 2 <= MAX_KEY_LENGTH:
        error("partitionKey", f"a string of 1 to {MAX_KEY_LENGTH} characters")
        return None
    if record_id is not None and (
        not isinstance(record_id, str)
        or not 1 <= len(record_id) <= MAX_ID_LENGTH
        or not all("!" <= c <= "~" for c in record_id)
    ):
        error("id", f"1 to {MAX_ID_LENGTH} visible ASCII characters, no spaces")
        return None
    try:
        payload = base64.b64decode(data, validate=True) if isinstance(data, str) else None
    except (binascii.Error, ValueError):
        payload = None
    if payload is None:
        error("data", "base64 text")
        return None
    if len(payload) + len(key.encode()) > MAX_RECORD_BYTES:
        error("data", f"data and partition key over {MAX_RECORD_BYTES} bytes")
        return None
    put: dict[str, Any] = {"Data": payload, "PartitionKey": key}
    if isinstance(record.get("explicitHashKey"), str):
        put["ExplicitHashKey"] = record["explicitHashKey"]
    return put


def put_all(stream: str, entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each entry's result, retrying only the failed ones."""
    results: list[dict[str, Any]] = [{} for _ in entries]
    pending = list(range(len(entries)))
    for attempt in range(1, ATTEMPTS + 1):
        try:
            reply = kinesis().put_records(StreamName=stream, Records=[entries[i] for i in pending])
        except (ClientError, BotoCoreError) as failure:
            code = (
                failure.response["Error"]["Code"]
                if isinstance(failure, ClientError)
                else "ServiceUnavailable"
            )
            for i in pending:
                results[i] = {
                    "errorCode": code,
                    "errorMessage": "the PutRecords call failed",
                    "attempts": attempt,
                }
            if isinstance(failure, BotoCoreError):  # no answer: a copy may be in the stream
                for i in pending:
                    results[i]["written"] = "unconfirmed"
        else:
            failed = []
            for i, outcome in zip(pending, reply["Records"], strict=True):
                if "SequenceNumber" in outcome:
                    results[i] = {
                        "shardId": outcome["ShardId"],
                        "sequenceNumber": outcome["SequenceNumber"],
                        "attempts": attempt,
                    }
                else:
                    failed.append(i)
                    results[i] = {
                        "errorCode": outcome.get("ErrorCode", "InternalFailure"),
                        "errorMessage": outcome.get("ErrorMessage", ""),
                        "attempts": attempt,
                    }
            pending = failed
        if not pending:
            break
        if attempt < ATTEMPTS:
            time.sleep(random.uniform(0, BACKOFF_BASE_S * 2**attempt))  # full jitter
    for i in pending:
        results[i].setdefault("written", False)
        results[i]["retry"] = "resend" if results[i]["written"] is False else "resend-same-id"
    return results


def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    route = (event.get("pathParameters") or {}).get("stream", "")
    stream = (ROUTES.get(route) or {}).get("streamName")
    if not stream:
        return answer(404, {"message": f"no stream {route!r}"})
    records = parse(event)
    if isinstance(records, str):
        return answer(400, {"message": records, "errors": [{"index": None, "field": "", "message": records}]})
    if not 1 <= len(records) <= MAX_RECORDS:
        return answer(413, {"message": f"1 to {MAX_RECORDS} records a request, got {len(records)}"})
    errors: list[dict[str, Any]] = []
    entries = [entry(index, record, errors) for index, record in enumerate(records)]
    ids = [record.get("id") for record in records if isinstance(record, dict) and record.get("id")]
    if len(ids) != len(set(ids)):
        errors.append(
            {"index": None, "field": "id", "message": "two records of the request have the same id"}
        )
    if errors:
        return answer(400, {"message": "invalid records: nothing was sent", "errors": errors})
    results = put_all(stream, [put for put in entries if put is not None])
    for record, result in zip(records, results, strict=True):
        if record.get("id"):
            result["id"] = record["id"]
    failed = sum(1 for result in results if "errorCode" in result)
    body = {"failedRecordCount": failed, "records": results}
    if failed == len(results):  # nothing written (or nothing confirmed): the client posts it again
        return answer(503, {"message": "nothing was written", **body}, {"Retry-After": "1"})
    return answer(200 if failed == 0 else 207, body)
