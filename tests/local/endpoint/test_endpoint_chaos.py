"""The endpoint's chaos: each fault fires for subjects, is counted, and does exactly what it claims.

Each test starts an endpoint with a profile of one fault (rate 1.0 where the outcome must be
certain). "Subject" clients are plain boto3 clients with the SDK's retries off, so a test sees the
raw fault; observers (`local.app.provision.client`) are exempt and read back what really happened.
"""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError, ConnectionClosedError, ReadTimeoutError

from local.app.model import ACCESS_KEY, REGION, SECRET_KEY
from local.app.provision import client as observer
from local.chaos.profiles import REQUEST_ERROR_CODES, ProfileError, load_profile, profile_from_dict
from local.endpoint.handle import Endpoint
from tests.support.integration import create_stream, unique_stream_name, wait_active

pytestmark = pytest.mark.integration
THROTTLED = "ProvisionedThroughputExceededException"


@contextmanager
def chaotic_endpoint(raw: dict[str, Any], *, limits: bool = False) -> Iterator[str]:
    with Endpoint(port=0, limits=limits, chaos=profile_from_dict({"name": "test", "seed": 5, **raw})) as ep:
        yield ep.url


def subject(service: str, url: str, **config: Any) -> Any:
    """A client the profile applies to; one attempt unless `retries` says otherwise."""
    config.setdefault("retries", {"total_max_attempts": 1, "mode": "standard"})
    return boto3.client(
        service, endpoint_url=url, region_name=REGION, aws_access_key_id=ACCESS_KEY,
        aws_secret_access_key=SECRET_KEY, config=Config(**config),
    )  # fmt: skip


def chaos_report(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"{url}/_shardline/chaos", timeout=10) as response:
        return json.loads(response.read())


def new_stream(url: str, shards: int = 1) -> str:
    name = unique_stream_name("chaos")
    create_stream(observer("kinesis", url), name, shard_count=shards)
    return name


def register_consumer(url: str, name: str) -> str:
    """A consumer of the stream (enhanced fan-out), registered by an observer: its ARN."""
    kinesis = observer("kinesis", url)
    arn = kinesis.describe_stream_summary(StreamName=name)["StreamDescriptionSummary"]["StreamARN"]
    return str(
        kinesis.register_stream_consumer(StreamARN=arn, ConsumerName="fan-out")["Consumer"]["ConsumerARN"]
    )


def stream_records(url: str, name: str) -> list[dict[str, Any]]:
    kinesis = observer("kinesis", url)
    records = []
    for shard in kinesis.list_shards(StreamName=name)["Shards"]:
        iterator = kinesis.get_shard_iterator(
            StreamName=name, ShardId=shard["ShardId"], ShardIteratorType="TRIM_HORIZON"
        )["ShardIterator"]
        while iterator:
            answer = kinesis.get_records(ShardIterator=iterator)
            records += answer["Records"]
            if not answer["Records"] and answer.get("MillisBehindLatest", 0) == 0:
                break
            iterator = answer.get("NextShardIterator")
    return records


def new_table(url: str, name: str) -> str:
    observer("dynamodb", url).create_table(
        TableName=name,
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    return name


def test_request_errors_are_answered_without_serving_the_call():
    with chaotic_endpoint({"endpoint": {"request_error_rate": {"kinesis": 1.0}}}) as url:
        name = new_stream(url)
        codes = set()
        for index in range(30):
            with pytest.raises(ClientError) as error:
                subject("kinesis", url).put_record(StreamName=name, PartitionKey=f"k{index}", Data=b"x")
            codes.add(error.value.response["Error"]["Code"])
        assert codes == set(REQUEST_ERROR_CODES)
        assert stream_records(url, name) == []  # nothing was written
        injected = chaos_report(url)["injected"]
        assert sum(n for kind, n in injected.items() if kind.startswith("kinesis.request_error.")) == 30


def test_the_sdk_retries_injected_request_errors_as_it_retries_aws():
    faults = {"request_error_rate": {"kinesis": 0.5, "dynamodb": 0.5}}
    with chaotic_endpoint({"endpoint": faults}) as url:
        name = new_stream(url)
        kinesis = subject("kinesis", url, retries={"max_attempts": 10, "mode": "standard"})
        retried = 0
        for index in range(20):
            answer = kinesis.put_record(StreamName=name, PartitionKey=f"k{index}", Data=b"x")
            retried += answer["ResponseMetadata"]["RetryAttempts"] > 0
        assert retried >= 3  # each error was retried by the SDK, and every call succeeded
        assert len(stream_records(url, name)) == 20


def test_a_lost_response_takes_effect_and_the_client_sees_a_closed_connection():
    with chaotic_endpoint({"endpoint": {"lost_response_rate": {"kinesis": 1.0}}}) as url:
        name = new_stream(url)
        with pytest.raises(ConnectionClosedError):
            subject("kinesis", url).put_record(StreamName=name, PartitionKey="k", Data=b"landed")
        [record] = stream_records(url, name)
        assert record["Data"] == b"landed"
        assert chaos_report(url)["injected"] == {"kinesis.lost_response": 1}


def test_a_lost_subscribe_to_shard_response_made_the_subscription_a_retry_within_5_s_is_refused():
    with chaotic_endpoint({"endpoint": {"lost_response_rate": {"kinesis": 1.0}}}) as url:
        name = new_stream(url)
        call = {"ConsumerARN": register_consumer(url, name), "ShardId": "shardId-000000000000",
                "StartingPosition": {"Type": "LATEST"}}  # fmt: skip
        with pytest.raises(ConnectionClosedError):
            subject("kinesis", url).subscribe_to_shard(**call)
        with pytest.raises(ClientError) as refused:
            observer("kinesis", url).subscribe_to_shard(**call)
        assert refused.value.response["Error"]["Code"] == "ResourceInUseException"
        assert chaos_report(url)["injected"] == {"kinesis.lost_response": 1}


def test_put_records_entries_refused_one_by_one_are_not_written():
    faults = {"put_records_throttle_rate": 0.3, "put_records_failure_rate": 0.1}
    with chaotic_endpoint({"endpoint": faults}, limits=True) as url:
        name = new_stream(url, shards=2)
        entries = [{"PartitionKey": f"k{i}", "Data": f"r{i}".encode()} for i in range(500)]
        answer = subject("kinesis", url).put_records(StreamName=name, Records=entries)
        results = answer["Records"]
        throttled = [i for i, r in enumerate(results) if r.get("ErrorCode") == THROTTLED]
        failed = [i for i, r in enumerate(results) if r.get("ErrorCode") == "InternalFailure"]
        assert 100 <= len(throttled) <= 200 and 25 <= len(failed) <= 75  # 30 % and ~7 % (of the rest)
        assert answer["FailedRecordCount"] == len(throttled) + len(failed)
        assert all(results[i]["ErrorMessage"].startswith("Rate exceeded for shard") for i in throttled)
        assert all(results[i]["ErrorMessage"] == "Internal service failure." for i in failed)
        written = {record["Data"].decode() for record in stream_records(url, name)}
        refused = {f"r{i}" for i in throttled + failed}
        assert written == {f"r{i}" for i in range(500)} - refused
        injected = chaos_report(url)["injected"]
        assert injected["kinesis.put_records.throttled_entries"] == len(throttled)
        assert injected["kinesis.put_records.failed_entries"] == len(failed)


def test_a_cancelled_transaction_writes_nothing():
    with chaotic_endpoint({"endpoint": {"dynamodb_transaction_canceled_rate": 1.0}}) as url:
        table = new_table(url, "sink-a")
        items = [{"Put": {"TableName": table, "Item": {"pk": {"S": f"p{i}"}}}} for i in range(3)]
        with pytest.raises(ClientError) as error:
            subject("dynamodb", url).transact_write_items(TransactItems=items)
        response = error.value.response
        assert response["Error"]["Code"] == "TransactionCanceledException"
        assert [r["Code"] for r in response["CancellationReasons"]] == ["None", "None", "TransactionConflict"]
        assert observer("dynamodb", url).scan(TableName=table)["Count"] == 0
        assert chaos_report(url)["injected"] == {"dynamodb.transaction_canceled": 1}


def test_dynamodb_throttling_refuses_calls_on_the_chosen_tables_only():
    faults = {"dynamodb_throttling_rate": 1.0, "dynamodb_tables": ["hot-*"]}
    with chaotic_endpoint({"endpoint": faults}) as url:
        hot, cold = new_table(url, "hot-leases"), new_table(url, "cold-sink")
        dynamodb = subject("dynamodb", url)
        with pytest.raises(ClientError) as error:
            dynamodb.put_item(TableName=hot, Item={"pk": {"S": "a"}})
        assert error.value.response["Error"]["Code"] == "ThrottlingException"
        dynamodb.put_item(TableName=cold, Item={"pk": {"S": "a"}})
        assert observer("dynamodb", url).scan(TableName=hot)["Count"] == 0
        assert observer("dynamodb", url).scan(TableName=cold)["Count"] == 1
        assert chaos_report(url)["injected"] == {"dynamodb.throttled": 1}


def test_sqs_send_errors_send_nothing():
    with chaotic_endpoint({"endpoint": {"sqs_send_error_rate": 1.0}}) as url:
        queue = observer("sqs", url).create_queue(QueueName=unique_stream_name("dlq"))["QueueUrl"]
        sqs = subject("sqs", url)
        with pytest.raises(ClientError):
            sqs.send_message(QueueUrl=queue, MessageBody="lost")
        with pytest.raises(ClientError):
            sqs.send_message_batch(QueueUrl=queue, Entries=[{"Id": "1", "MessageBody": "lost"}])
        assert observer("sqs", url).receive_message(QueueUrl=queue).get("Messages", []) == []
        assert chaos_report(url)["injected"] == {"sqs.send_error": 2}


def test_latency_is_added_to_the_subjects_calls_only():
    with chaotic_endpoint({"endpoint": {"latency": {"fixed_ms": 400}}}) as url:
        name = new_stream(url)

        def seconds(kinesis: Any) -> float:
            began = time.monotonic()
            kinesis.describe_stream_summary(StreamName=name)
            return time.monotonic() - began

        assert min(seconds(subject("kinesis", url)) for _ in range(3)) >= 0.4
        assert sorted(seconds(observer("kinesis", url)) for _ in range(5))[2] < 0.4


def test_observers_are_never_injected_into():
    faults = {"request_error_rate": {"kinesis": 1.0, "dynamodb": 1.0, "sqs": 1.0}}
    with chaotic_endpoint({"endpoint": faults}) as url:
        name = new_stream(url)
        observer("kinesis", url).put_record(StreamName=name, PartitionKey="k", Data=b"x")
        observer("sqs", url).list_queues()
        observer("dynamodb", url).list_tables()
        assert chaos_report(url)["injected"] == {}


def test_a_split_and_a_merge_happen_at_their_times_after_the_first_record():
    reshards = [{"at_s": 1.0, "action": "split"}, {"at_s": 2.5, "action": "merge"}]
    with chaotic_endpoint({"reshards": reshards}) as url:
        name = new_stream(url, shards=2)
        kinesis = observer("kinesis", url)
        time.sleep(2.0)
        assert len(kinesis.list_shards(StreamName=name)["Shards"]) == 2  # no record yet: the clock waits
        first = time.time()
        subject("kinesis", url).put_record(StreamName=name, PartitionKey="k", Data=b"x")
        deadline = time.monotonic() + 60
        while not all(r["done_at"] for r in chaos_report(url)["reshards"]) and time.monotonic() < deadline:
            time.sleep(0.2)
        split, merge = chaos_report(url)["reshards"]
        assert split["done_at"] - first >= 1.0 and merge["done_at"] - first >= 2.5
        wait_active(kinesis, name)  # the merge takes effect once the stream is ACTIVE again
        shards = kinesis.list_shards(StreamName=name)["Shards"]
        open_shards = kinesis.list_shards(StreamName=name, ShardFilter={"Type": "AT_LATEST"})["Shards"]
        assert len(shards) == 2 + 2 + 1 and len(open_shards) == 2  # split in two, then two merged in one
        assert chaos_report(url)["injected"] == {"reshard.split": 1, "reshard.merge": 1}


def test_without_a_profile_nothing_is_injected_and_the_route_says_so(local_endpoint):
    nothing = {"profile": "none", "active": False, "injected": {}, "reshards": []}
    assert chaos_report(local_endpoint) == nothing


# --- the faults a producer must survive by identity, not by reading the stream back -------


def test_a_lost_request_is_not_served_and_the_client_sees_a_closed_connection():
    with chaotic_endpoint({"endpoint": {"lost_request_rate": {"kinesis": 1.0}}}) as url:
        name = new_stream(url)
        entries = [{"PartitionKey": "k", "Data": b"never"}]
        with pytest.raises(ConnectionClosedError):
            subject("kinesis", url).put_records(StreamName=name, Records=entries)
        assert stream_records(url, name) == []  # nothing was written: the request was lost on its way
        assert chaos_report(url)["injected"] == {"kinesis.lost_request": 1}


def test_a_slow_put_records_lands_after_the_clients_read_timeout():
    faults = {"slow_put_records_rate": 1.0, "slow_put_records_s": 2.5}
    with chaotic_endpoint({"endpoint": faults}) as url:
        name = new_stream(url)
        kinesis = subject("kinesis", url, read_timeout=1)
        began = time.monotonic()
        with pytest.raises(ReadTimeoutError):
            kinesis.put_records(StreamName=name, Records=[{"PartitionKey": "k", "Data": b"late"}])
        assert time.monotonic() - began < 2.0
        assert stream_records(url, name) == []  # the client gave up before the write
        time.sleep(max(0.0, began + 3.5 - time.monotonic()))
        assert [record["Data"] for record in stream_records(url, name)] == [b"late"]  # then it landed
        assert chaos_report(url)["injected"] == {"kinesis.put_records.slow": 1}


def test_a_brownout_refuses_every_put_records_for_its_duration_writing_nothing():
    faults = {"brownout_every_s": 2.5, "brownout_s": 1.0}
    with chaotic_endpoint({"endpoint": faults}) as url:
        name = new_stream(url)
        kinesis = subject("kinesis", url)
        calls: list[tuple[float, str | None]] = []  # (when, None: written, else the error)
        began = time.monotonic()
        while time.monotonic() - began < 7.0:
            data = f"r{len(calls)}".encode()
            try:
                kinesis.put_records(StreamName=name, Records=[{"PartitionKey": "k", "Data": data}])
                calls.append((time.monotonic(), None))
            except ClientError as error:
                status = error.response["ResponseMetadata"]["HTTPStatusCode"]
                calls.append((time.monotonic(), f"{error.response['Error']['Code']}/{status}"))
            kinesis.describe_stream_summary(StreamName=name)  # not a PutRecords: never refused
            time.sleep(0.03)
        assert {code for _, code in calls} == {None, "ServiceUnavailable/503"}
        runs: list[list[float]] = []  # each brownout: the times of the calls it refused, in a row
        for index, (when, code) in enumerate(calls):
            if code is not None:
                if index == 0 or calls[index - 1][1] is None:
                    runs.append([])
                runs[-1].append(when)
        complete = [run for run in runs if run[-1] < calls[-1][0] - 0.2]
        assert complete and all(0.7 <= run[-1] - run[0] <= 1.1 for run in complete)  # brownout_s
        gaps = [later[0] - earlier[-1] for earlier, later in itertools.pairwise(runs)]
        assert all(gap >= 0.5 * 2.5 for gap in gaps)  # the next begins 0.5 to 1.5 intervals after
        written = {record["Data"].decode() for record in stream_records(url, name)}
        assert written == {f"r{i}" for i, (_, code) in enumerate(calls) if code is None}  # refused: nothing
        injected = chaos_report(url)["injected"]
        assert injected["kinesis.put_records.brownout"] == len(runs)
        assert injected["kinesis.put_records.brownout_refused"] == sum(len(run) for run in runs)


_READER = """
import json, sys, boto3
from botocore.config import Config
url, stream, iterator, consumer = sys.argv[1:5]
kinesis = boto3.client("kinesis", endpoint_url=url, config=Config(retries={"total_max_attempts": 1}))
out = {}
for name, call in [
    ("GetShardIterator", lambda: kinesis.get_shard_iterator(
        StreamName=stream, ShardId="shardId-000000000000", ShardIteratorType="TRIM_HORIZON")),
    ("GetRecords", lambda: kinesis.get_records(ShardIterator=iterator)),
    ("SubscribeToShard", lambda: kinesis.subscribe_to_shard(ConsumerARN=consumer,
        ShardId="shardId-000000000000", StartingPosition={"Type": "LATEST"})["EventStream"].close()),
    ("PutRecords", lambda: kinesis.put_records(
        StreamName=stream, Records=[{"PartitionKey": "k", "Data": b"w"}])),
]:
    try:
        call()
        out[name] = "ok"
    except Exception as error:
        out[name] = getattr(error, "response", {}).get("Error", {}).get("Code", type(error).__name__)
print(json.dumps(out))
"""


def _read_from_a_function(
    url: str, stream: str, iterator: str, consumer: str, **environment: str
) -> dict[str, str]:
    """What a Lambda function's process (its environment: `environment`) gets for reads and a write."""
    env = {
        "AWS_EXECUTION_ENV": "AWS_Lambda_python3.12", "AWS_DEFAULT_REGION": REGION,
        "AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY, "AWS_CONFIG_FILE": "/dev/null",
        "AWS_SHARED_CREDENTIALS_FILE": "/dev/null", **environment,
    }  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-c", _READER, url, stream, iterator, consumer],
        env=env,
        capture_output=True,
        timeout=60,
        check=True,
    )
    return json.loads(done.stdout)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the caller is found through /proc")
def test_a_producer_functions_reads_are_denied_and_no_one_elses():
    with chaotic_endpoint({"endpoint": {"producer_reads_denied": True}}) as url:
        name = new_stream(url)
        iterator = observer("kinesis", url).get_shard_iterator(
            StreamName=name, ShardId="shardId-000000000000", ShardIteratorType="TRIM_HORIZON"
        )["ShardIterator"]
        fan_out = register_consumer(url, name)
        producer = _read_from_a_function(url, name, iterator, fan_out, SHARDLINE_STREAMS='{"events": {}}')
        denied = "AccessDeniedException"
        assert producer == {"GetShardIterator": denied, "GetRecords": denied, "SubscribeToShard": denied,
                            "PutRecords": "ok"}  # fmt: skip
        consumer = _read_from_a_function(url, name, iterator, fan_out, SINK_TABLE="sink")
        assert consumer == {
            "GetShardIterator": "ok",
            "GetRecords": "ok",
            "SubscribeToShard": "ok",
            "PutRecords": "ok",
        }
        subject("kinesis", url).get_records(ShardIterator=iterator)  # the runtime's poller: not a function
        assert len(stream_records(url, name)) == 2
        assert chaos_report(url)["injected"] == {"kinesis.producer_read_denied": 3}


def test_the_heavy_profile_has_every_fault_a_producer_must_survive():
    faults = load_profile("heavy").endpoint
    assert faults.lost_response_rate["kinesis"] > 0 and faults.lost_request_rate["kinesis"] > 0
    assert faults.slow_put_records_rate > 0 and faults.slow_put_records_s > 5  # the producer's read timeout
    assert faults.brownout_every_s > 0 and faults.brownout_s > 0 and faults.producer_reads_denied
    with pytest.raises(ProfileError, match="producer_reads_denied"):
        profile_from_dict({"endpoint": {"producer_reads_denied": 1}})
    with pytest.raises(ProfileError, match="lost_request_rate"):
        profile_from_dict({"endpoint": {"lost_request_rate": {"kinesis": 2}}})
