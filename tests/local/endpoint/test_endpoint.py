"""Issue 11: the local AWS endpoint — one port for every service, shard limits for every client.

Every test talks to a real endpoint (`python -m local.endpoint`) started by a fixture as a child
process on a free port. Time-based behaviour (the read limits) is checked against bounds the
behaviour implies (a lower bound on how long a throttled read takes), never a tight upper one.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator

import pytest
from botocore.exceptions import ClientError

from local.endpoint.handle import IMPORT_ROOT, Endpoint
from shardline.kinesis import UserRecord
from shardline.kpl import decode, is_aggregated
from shardline.producer import Producer
from tests.support.endpoint import (
    THROTTLED,
    TOP,
    MiB,
    data_of,
    get_json,
    new_stream,
    rate_exceeded,
    read_shard,
    shard_ids,
    sized,
)
from tests.support.integration import aws_client, wait_active

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def reads_limited_endpoint(tmp_path_factory) -> Iterator[str]:
    """Limits on, then writes turned off while running: to fill a shard fast and read it limited."""
    with Endpoint(port=0, log_path=tmp_path_factory.mktemp("endpoint") / "endpoint.log") as endpoint:
        assert get_json(f"{endpoint.url}/_shardline/limits", "PUT", {"writes": False}) == {
            "writes": False,
            "reads": True,
            "reshard_seconds": 1.0,
            "iterator_ttl_seconds": 300.0,
            "subscription_seconds": 300.0,
            "consumer_creating_seconds": 0.0,
        }
        yield endpoint.url


# --- shard limits, for every client ---------------------------------------------------------------------


def test_put_records_over_a_shards_budget_are_refused_per_record_and_not_written(local_endpoint):
    client, name = new_stream(local_endpoint, shards=2)
    first, second = shard_ids(client, name)
    third = 300 * 1024  # three fit in a shard's 1 MiB a second, four do not
    entries = [{**sized(f"k{i}", third), "ExplicitHashKey": "0" if i < 5 else str(TOP)} for i in range(7)]
    for i, entry in enumerate(entries):
        entry["Data"] = b"%d" % i + entry["Data"][1:]

    answer = client.put_records(StreamName=name, Records=entries)

    errors = {
        i: (e["ErrorCode"], e["ErrorMessage"]) for i, e in enumerate(answer["Records"]) if "ErrorCode" in e
    }
    assert errors == {3: (THROTTLED, rate_exceeded(first, name)), 4: (THROTTLED, rate_exceeded(first, name))}
    assert answer["FailedRecordCount"] == 2
    assert [e["ShardId"] for i, e in enumerate(answer["Records"]) if i not in errors] == [first] * 3 + [
        second
    ] * 2
    assert [d[:1] for d in data_of(client, name, first)] == [b"0", b"1", b"2"], "refused entries never land"
    assert [d[:1] for d in data_of(client, name, second)] == [b"5", b"6"]


def test_put_record_over_budget_is_an_http_400_throughput_error(local_endpoint):
    client, name = new_stream(local_endpoint)
    (shard,) = shard_ids(client, name)
    client.put_record(StreamName=name, **sized("a", MiB))
    with pytest.raises(ClientError) as refused:
        client.put_record(StreamName=name, **sized("b", MiB // 2))  # needs half a second's refill
    assert refused.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400
    assert refused.value.response["ResponseMetadata"]["HTTPHeaders"]["x-amzn-errortype"] == THROTTLED
    assert refused.value.response["Error"] == {"Code": THROTTLED, "Message": rate_exceeded(shard, name)}
    assert [len(d) for d in data_of(client, name, shard)] == [MiB - 1]


def test_get_records_is_limited_to_5_calls_a_second_per_shard(local_endpoint):
    client, name = new_stream(local_endpoint)
    iterator = client.get_shard_iterator(
        StreamName=name, ShardId="shardId-000000000000", ShardIteratorType="LATEST"
    )
    iterator = iterator["ShardIterator"]
    outcomes: Counter[str] = Counter()
    began = time.monotonic()
    while outcomes[THROTTLED] < 3 and sum(outcomes.values()) < 200:
        try:
            iterator = client.get_records(ShardIterator=iterator)["NextShardIterator"]
            outcomes["ok"] += 1
        except ClientError as error:
            outcomes[error.response["Error"]["Code"]] += 1
            assert error.response["ResponseMetadata"]["HTTPStatusCode"] == 400
            assert error.response["Error"]["Message"] == rate_exceeded("shardId-000000000000", name)
    elapsed = time.monotonic() - began
    assert outcomes[THROTTLED] == 3, outcomes
    assert outcomes["ok"] <= 5 + 5 * elapsed + 1, (outcomes, elapsed)


def test_get_records_is_limited_to_2_mib_a_second_per_shard(reads_limited_endpoint):
    client, name = new_stream(reads_limited_endpoint)
    for i in range(6):
        client.put_record(StreamName=name, **sized(f"k{i}", MiB))
    iterator = client.get_shard_iterator(
        StreamName=name, ShardId="shardId-000000000000", ShardIteratorType="TRIM_HORIZON"
    )
    iterator, read, throttles = iterator["ShardIterator"], 0, 0
    began = time.monotonic()
    while read < 6:
        try:
            answer = client.get_records(ShardIterator=iterator, Limit=1)
        except ClientError as error:
            assert error.response["Error"]["Code"] == THROTTLED
            throttles += 1
            time.sleep(0.05)
            continue
        read += len(answer["Records"])
        iterator = answer["NextShardIterator"]
    elapsed = time.monotonic() - began
    assert throttles > 0
    # 6 MiB at 2 MiB a second: the last read cannot start before 5 MiB have been paid for.
    assert elapsed >= 2.5 - 0.01, elapsed


def test_a_10_mib_read_holds_the_shard_back_for_5_seconds(reads_limited_endpoint):
    client, name = new_stream(reads_limited_endpoint)
    for i in range(11):
        client.put_record(StreamName=name, **sized(f"k{i}", MiB))
    iterator = client.get_shard_iterator(
        StreamName=name, ShardId="shardId-000000000000", ShardIteratorType="TRIM_HORIZON"
    )
    began = time.monotonic()
    answer = client.get_records(ShardIterator=iterator["ShardIterator"])
    assert len(answer["Records"]) == 10, "GetRecords returns 10 MiB at most"

    refusals = 0
    while True:
        try:
            client.get_records(ShardIterator=answer["NextShardIterator"])
            break
        except ClientError as error:
            assert error.response["Error"]["Code"] == THROTTLED
            refusals += 1
            assert time.monotonic() - began < 30, "never admitted again"
            time.sleep(0.5)
    admitted_after = time.monotonic() - began
    assert refusals >= 4 and admitted_after >= 5.0, (refusals, admitted_after)


def test_no_limits_endpoint_enforces_none(local_endpoint_no_limits):
    client, name = new_stream(local_endpoint_no_limits)
    for i in range(3):
        answer = client.put_records(StreamName=name, Records=[sized(f"k{i}-{j}", MiB // 4) for j in range(4)])
        assert answer["FailedRecordCount"] == 0
    iterator = client.get_shard_iterator(
        StreamName=name, ShardId="shardId-000000000000", ShardIteratorType="TRIM_HORIZON"
    )
    iterator = iterator["ShardIterator"]
    for _ in range(15):  # 3 MiB, then calls far beyond 5 a second
        iterator = client.get_records(ShardIterator=iterator)["NextShardIterator"]
    limits = get_json(f"{local_endpoint_no_limits}/_shardline/limits")
    assert (limits["writes"], limits["reads"]) == (False, False)


def test_shardline_producer_lands_everything_through_the_throttling_endpoint(local_endpoint):
    client, name = new_stream(local_endpoint, shards=2)
    records = [UserRecord(f"user-{i % 500}", f"{i:08d}|".encode().ljust(1000, b".")) for i in range(6000)]

    results = Producer(client, name).put_many(records)

    assert Counter(result.error_code for result in results) == {None: 6000}
    counters = get_json(f"{local_endpoint}/_shardline/kinesis")["streams"][name]["shards"]
    assert sum(shard["write_throttles"] for shard in counters.values()) > 0, "the endpoint did throttle"
    landed = []
    for shard_id in counters:
        for record in read_shard(client, name, shard_id)[0]:
            users = (
                decode(record["Data"]) if is_aggregated(record["Data"]) else [UserRecord("", record["Data"])]
            )
            landed += [int(user.data.split(b"|", 1)[0]) for user in users]
    assert sorted(landed) == list(range(6000)), "each record once"


# --- one endpoint ---------------------------------------------------------------------------------------


def test_dynamodb_sqs_s3_and_logs_answer_on_the_same_port(local_endpoint):
    dynamodb = aws_client("dynamodb", local_endpoint)
    dynamodb.create_table(
        TableName="t-endpoint",
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    dynamodb.put_item(TableName="t-endpoint", Item={"pk": {"S": "a"}})
    assert dynamodb.get_item(TableName="t-endpoint", Key={"pk": {"S": "a"}})["Item"] == {"pk": {"S": "a"}}

    sqs = aws_client("sqs", local_endpoint)
    queue = sqs.create_queue(QueueName="q-endpoint")["QueueUrl"]
    sqs.send_message(QueueUrl=queue, MessageBody="hello")
    assert sqs.receive_message(QueueUrl=queue)["Messages"][0]["Body"] == "hello"
    assert sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ] == ("arn:aws:sqs:us-east-1:000000000000:q-endpoint")

    s3 = aws_client("s3", local_endpoint)
    s3.create_bucket(Bucket="b-endpoint")
    s3.put_object(Bucket="b-endpoint", Key="k", Body=b"body")
    assert s3.get_object(Bucket="b-endpoint", Key="k")["Body"].read() == b"body"

    logs = aws_client("logs", local_endpoint)
    logs.create_log_group(logGroupName="/g-endpoint")
    logs.create_log_stream(logGroupName="/g-endpoint", logStreamName="s")
    logs.put_log_events(
        logGroupName="/g-endpoint",
        logStreamName="s",
        logEvents=[{"timestamp": int(time.time() * 1000), "message": "m"}],
    )
    events = logs.get_log_events(logGroupName="/g-endpoint", logStreamName="s")["events"]
    assert [event["message"] for event in events] == ["m"]


def test_counters_endpoint_reports_each_shard(local_endpoint):
    client, name = new_stream(local_endpoint)
    client.put_records(StreamName=name, Records=[sized("k1", MiB - 1000), sized("k2", 1000)])
    with pytest.raises(ClientError):
        client.put_record(StreamName=name, **sized("k3", MiB // 2))  # the second's 1 MiB is spent
    iterator = client.get_shard_iterator(
        StreamName=name, ShardId="shardId-000000000000", ShardIteratorType="LATEST"
    )
    calls = 0
    with pytest.raises(ClientError):
        for calls in range(1, 100):  # noqa: B007 - counted for the assertion below
            iterator = {
                "ShardIterator": client.get_records(ShardIterator=iterator["ShardIterator"])[
                    "NextShardIterator"
                ]
            }
    client.split_shard(StreamName=name, ShardToSplit="shardId-000000000000", NewStartingHashKey=str(2**127))
    wait_active(client, name)  # a reshard takes effect once ACTIVE again

    report = get_json(f"{local_endpoint}/_shardline/kinesis")

    assert report["limits"] == {"writes": True, "reads": True}
    stream = report["streams"][name]
    assert (stream["status"], stream["open_shards"], stream["account"]) == ("ACTIVE", 2, "000000000000")
    parent = stream["shards"]["shardId-000000000000"]
    assert parent == {
        "open": False,
        "parents": [],
        "hash_key_range": ["0", str(TOP)],
        "records_written": 2,
        "bytes_written": MiB,
        "write_throttles": 1,
        "read_throttles": 1,
        "get_records_calls": calls,
    }
    child = stream["shards"]["shardId-000000000002"]
    assert (child["open"], child["parents"], child["records_written"]) == (True, ["shardId-000000000000"], 0)


def test_limits_can_be_switched_while_running(reads_limited_endpoint):
    client, name = new_stream(reads_limited_endpoint)
    answer = client.put_records(StreamName=name, Records=[sized(f"k{j}", MiB // 4) for j in range(8)])
    assert answer["FailedRecordCount"] == 0, "writes are off: 2 MiB at once lands"


def test_stop_leaves_no_process_and_frees_the_port(tmp_path):
    endpoint = Endpoint(port=0, log_path=tmp_path / "endpoint.log").start()
    pid, port = endpoint._process.pid, endpoint.port
    assert endpoint.running() and endpoint.started_in > 0
    endpoint.stop()
    endpoint.stop()  # twice is fine
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))


def test_a_killed_parent_leaves_no_endpoint_behind(tmp_path):
    script = (
        "import sys, time; from local.endpoint.handle import IMPORT_ROOT, Endpoint; "
        "e = Endpoint(port=0).start(); print(e._process.pid, flush=True); time.sleep(60)"
    )
    parent = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, cwd=IMPORT_ROOT
    )
    try:
        child = int(parent.stdout.readline())
    finally:
        parent.kill()
        parent.wait()
        parent.stdout.close()
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    os.kill(child, signal.SIGKILL)
    pytest.fail("the endpoint outlived its parent")
