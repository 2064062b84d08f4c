"""`make local` end to end: HTTP, producer function, Kinesis (limits on), mappings, consumers, DynamoDB."""

from __future__ import annotations

import base64
import json
import time
import urllib.error
import urllib.request

import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from local.app import model
from local.app.provision import client
from local.commands.send import send
from local.commands.status import consumer_groups
from local.commands.verify import SENDER_SCOPES, wait_and_verify
from local.commands.verify_render import render

# Whole-pipeline runs drain through the emulated DynamoDB: minutes on a loaded 2-core machine.
pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(1200)]


def post(
    url: str, body: bytes, *, content_type: str = "application/json", sign: bool = True
) -> tuple[int, dict]:
    """One POST as a user's client makes it (SigV4 with the local credentials unless `sign=False`)."""
    request = AWSRequest("POST", url, data=body, headers={"content-type": content_type})
    if sign:
        credentials = Credentials(model.ACCESS_KEY, model.SECRET_KEY)
        SigV4Auth(credentials, "execute-api", model.REGION).add_auth(request)
    prepared = urllib.request.Request(url, data=body, method="POST", headers=dict(request.headers))
    try:
        with urllib.request.urlopen(prepared, timeout=60) as response:
            return response.status, json.loads(response.read() or b"{}")
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"{}")


def records_in_stream(runtime, stream: str) -> int:
    """User-visible Kinesis records written to every shard of `stream` (from the endpoint's counters)."""
    return sum(shard["records_written"] for shard in shard_counters(runtime, stream).values())


def events_since(dynamodb, sink: str, first: dict) -> list[dict]:
    """The event sink's items of `first`'s shard from `first` (an entry of the API's answer) on:
    the partition holds earlier tests' records too."""
    return dynamodb.query(
        TableName=sink,
        KeyConditionExpression="pk = :pk AND sk >= :first",
        ExpressionAttributeValues={
            ":pk": {"S": f"shardline-dev-events#{first['shardId']}"},
            ":first": {"S": first["sequenceNumber"].zfill(129)},
        },
    )["Items"]


def records_url(runtime, stream: str = "events") -> str:
    return f"{runtime.api_url}/streams/{stream}/records"


def test_send_of_5000_records_reaches_both_consumer_groups_exactly_once(runtime):
    """10 requests of 500 over 4 shards: several batches a shard for each group, as 20,000 gave
    (4× the time on the suite's critical path); the heavy chaos run sends 20,000."""
    report = send(f"{runtime.api_url}/streams", "events", count=5_000, progress=False)
    verdict = wait_and_verify(runtime.endpoint_url, runtime.app, report, timeout=900, progress=False)
    print(render(verdict))
    assert verdict.ok, render(verdict)
    assert len(report.accepted) == 5_000 and not report.failed
    groups = {result.group.name: result for result in verdict.groups}
    assert set(groups) == {"event-sink", "key-counter"}
    assert groups["event-sink"].group.kind == "records" and groups["key-counter"].group.kind == "counter"
    for result in groups.values():
        assert result.applied == result.expected == 5_000, result.group.name
        assert not result.lost and not result.duplicated and not result.wrong_counts, result.group.name
        assert result.dlq_depth == 0, result.group.name


def test_a_poison_record_goes_whole_to_its_groups_dlq_and_the_shard_keeps_flowing(runtime):
    key = f"poison-{time.time_ns()}"
    poison = b"p" * (450 * 1024)  # over a DynamoDB item: event_sink's handler rejects it
    records = [{"partitionKey": key, "data": base64.b64encode(b"before-%d" % i).decode()} for i in range(5)]
    records.append({"partitionKey": key, "data": base64.b64encode(poison).decode()})
    records += [{"partitionKey": key, "data": base64.b64encode(b"after-%d" % i).decode()} for i in range(5)]
    status, answer = post(records_url(runtime), json.dumps({"records": records}).encode())
    assert status == 200, answer
    groups = {group["group"]: group for group in consumer_groups(runtime.app)}
    dynamodb = client("dynamodb", runtime.endpoint_url)
    sqs = client("sqs", runtime.endpoint_url)
    sink = groups["event-sink"]["sink_table"]
    counter = groups["key-counter"]["sink_table"]
    deadline = time.monotonic() + 300
    dead_letter = None
    while time.monotonic() < deadline:
        if dead_letter is None:
            received = sqs.receive_message(QueueUrl=groups["event-sink"]["dlq_url"], WaitTimeSeconds=1)
            for message in received.get("Messages", []):
                body = json.loads(message["Body"])
                if body.get("partitionKey") == key:
                    dead_letter = body
        stored = events_since(dynamodb, sink, answer["records"][0])
        ours = sorted(item["data"]["B"] for item in stored if item["partitionKey"]["S"] == key)
        count = dynamodb.get_item(TableName=counter, Key={"partitionKey": {"S": key}}).get("Item")
        if dead_letter is not None and len(ours) == 10 and count and count["count"]["N"] == "11":
            break
        time.sleep(1)
    assert dead_letter is not None, "the poison record never reached event-sink's DLQ"
    assert base64.b64decode(dead_letter["data"]) == poison
    assert ours == sorted([b"before-%d" % i for i in range(5)] + [b"after-%d" % i for i in range(5)])
    assert count is not None and count["count"]["N"] == "11"  # key-counter accepts every record


def test_1_a_forged_aggregate_posted_as_data_is_read_back_as_the_one_record_accepted(runtime):
    """One record whose data is a KPL aggregate of 20,000 members with keys Kinesis refuses: every
    consumer group reads back exactly that record (its key counted once), never its members."""
    from shardline.kinesis import UserRecord
    from shardline.kpl import encode

    key = f"tenant-{time.time_ns()}"
    forged = encode([UserRecord("" if i % 2 else "x" * 300, b"m") for i in range(20_000)])
    record = {"partitionKey": key, "data": base64.b64encode(forged).decode(), "id": f"{key}-forged"}
    status, answer = post(records_url(runtime), json.dumps({"records": [record]}).encode())
    assert status == 200, answer
    groups = {group["group"]: group for group in consumer_groups(runtime.app)}
    dynamodb = client("dynamodb", runtime.endpoint_url)
    sink, counter = groups["event-sink"]["sink_table"], groups["key-counter"]["sink_table"]
    deadline = time.monotonic() + 300
    ours: list[dict] = []
    count = None
    while time.monotonic() < deadline:
        # a record with a client id is one item keyed by the id as its caller's (functions/event_sink):
        # the local credentials' principal, or no caller where none was stamped
        ours = []
        for scope in SENDER_SCOPES:
            key_of = {"pk": {"S": f"id#{scope}/i/{record['id']}"}, "sk": {"S": "id"}}
            item = dynamodb.get_item(TableName=sink, Key=key_of)
            ours += [item["Item"]] if "Item" in item else []
        count = dynamodb.get_item(TableName=counter, Key={"partitionKey": {"S": key}}).get("Item")
        if ours and count:
            break
        time.sleep(1)
    assert [item["data"]["B"] for item in ours] == [forged], "the event sink holds the accepted record"
    assert count is not None and count["count"]["N"] == "1", "the key counter counted it once"
    members = dynamodb.get_item(TableName=counter, Key={"partitionKey": {"S": "x" * 300}}).get("Item")
    assert members is None, "no member of the forged aggregate was counted"


@pytest.mark.parametrize(
    ("case", "body", "content_type", "sign", "expected"),
    [
        ("malformed JSON", b'{"records": [', "application/json", True, 400),
        ("wrong types", b'{"records": [{"partitionKey": 7, "data": "AA=="}]}', "application/json", True, 400),
        ("no records", b'{"records": []}', "application/json", True, 400),
        ("bad base64", b'{"records": [{"partitionKey": "k", "data": "%%%"}]}', "application/json", True, 400),
        (
            "oversize",
            b'{"records": [{"partitionKey": "k", "data": "' + b"A" * 6_100_000 + b'"}]}',
            "application/json",
            True,
            413,
        ),
        ("unsigned", b'{"records": [{"partitionKey": "k", "data": "AA=="}]}', "application/json", False, 403),
    ],
)
def test_a_bad_request_gets_its_4xx_and_writes_nothing(runtime, case, body, content_type, sign, expected):
    before = records_in_stream(runtime, "shardline-dev-events")
    status, answer = post(records_url(runtime), body, content_type=content_type, sign=sign)
    assert status == expected, (case, answer)
    assert records_in_stream(runtime, "shardline-dev-events") == before


GOOD = {"partitionKey": "k", "data": "AA=="}


@pytest.mark.parametrize(
    ("record", "field"),
    [
        pytest.param({**GOOD, "id": "an id"}, "id", id="id-with-a-space"),
        pytest.param({**GOOD, "id": ""}, "id", id="empty-id"),
        pytest.param({**GOOD, "id": "i" * 129}, "id", id="id-of-129"),
        pytest.param({**GOOD, "id": 7}, "id", id="id-a-number"),
        pytest.param({**GOOD, "partitionKey": ""}, "partitionKey", id="empty-partition-key"),
        pytest.param({**GOOD, "partitionKey": "k" * 300}, "partitionKey", id="partition-key-of-300"),
        pytest.param({**GOOD, "partitionKey": 7}, "partitionKey", id="partition-key-a-number"),
        pytest.param({"data": "AA=="}, "partitionKey", id="no-partition-key"),
        pytest.param({**GOOD, "explicitHashKey": "0x1f"}, "explicitHashKey", id="hash-key-not-decimal"),
        pytest.param({**GOOD, "explicitHashKey": "01"}, "explicitHashKey", id="hash-key-leading-zero"),
        pytest.param({**GOOD, "data": 7}, "data", id="data-a-number"),
        pytest.param("text", "record", id="record-not-an-object"),
    ],
)
def test_4_every_refused_record_is_named_by_index_and_field_and_nothing_is_written(runtime, record, field):
    """Issue 42, 4: nothing in front of the function refuses a record (API Gateway's model answered
    a bare "Invalid request body" for 4 of these); the function names the record and the field."""
    before = records_in_stream(runtime, "shardline-dev-events")
    status, answer = post(records_url(runtime), json.dumps({"records": [GOOD, record]}).encode())
    assert status == 400, answer
    assert {(error["index"], error["field"]) for error in answer["errors"]} == {(1, field)}, answer
    assert records_in_stream(runtime, "shardline-dev-events") == before


@pytest.mark.parametrize(
    ("body", "words"),
    [
        pytest.param(b'{"records": []}', "no records", id="no-records"),
        pytest.param(b'{"items": []}', '"records" array', id="no-records-field"),
        pytest.param(b'{"records": {}}', '"records" array', id="records-not-an-array"),
        pytest.param(b'{"records": [', "not valid JSON", id="not-json"),
    ],
)
def test_4_a_refused_body_says_what_is_wrong_with_it(runtime, body, words):
    status, answer = post(records_url(runtime), body)
    assert status == 400, answer
    assert words in answer["message"], answer


def test_an_unknown_stream_gets_404_and_writes_nothing(runtime):
    before = records_in_stream(runtime, "shardline-dev-events")
    body = json.dumps({"records": [{"partitionKey": "k", "data": "AA=="}]}).encode()
    status, answer = post(records_url(runtime, "no-such-stream"), body)
    assert status == 404, answer
    assert records_in_stream(runtime, "shardline-dev-events") == before


def shard_counters(runtime, stream: str = "shardline-dev-events") -> dict[str, dict]:
    with urllib.request.urlopen(f"{runtime.endpoint_url}/_shardline/kinesis", timeout=10) as response:
        return json.load(response)["streams"][stream]["shards"]


def test_a_shard_offered_more_than_it_takes_throttles_and_the_producer_still_lands_everything(runtime):
    before = shard_counters(runtime)
    # One partition key: every record goes to one shard, offered ~5 MB as fast as the API takes it.
    report = send(f"{runtime.api_url}/streams", "events", count=5_000, size=1_000, keys=1, progress=False)
    assert len(report.accepted) == 5_000 and not report.failed
    after = shard_counters(runtime)
    throttled = {
        shard: after[shard]["write_throttles"] - before.get(shard, {}).get("write_throttles", 0)
        for shard in after
    }
    (hot,) = {accepted.shard_id for accepted in report.accepted.values()}
    assert throttled[hot] > 0, throttled  # the endpoint refused what the shard could not take
    verdict = wait_and_verify(runtime.endpoint_url, runtime.app, report, timeout=900, progress=False)
    assert verdict.ok, render(verdict)
