"""The endpoint's usage ledger (`local.endpoint.metering`): each counter against numbers worked out
by hand from AWS's metering rules, over real calls to the endpoint on loopback."""

from __future__ import annotations

import base64
import json
import urllib.request
import uuid

import pytest
from botocore.exceptions import ClientError

from local.app.provision import client
from local.endpoint.metering import item_size

pytestmark = pytest.mark.integration

KiB = 1024


APP = "an-app/1.0"  # the app's clients; `client()`'s default is an observer's, which is not metered


def usage(url: str, *, reset: bool = False) -> dict:
    with urllib.request.urlopen(f"{url}/_shardline/usage{'?reset=1' if reset else ''}", timeout=10) as answer:
        return json.load(answer)["services"]


def counted(url: str, service: str, resource: str) -> dict:
    return usage(url).get(service, {}).get(resource, {})


def sized(pk: str, size: int, **more: dict) -> dict:
    """An item of exactly `size` bytes as DynamoDB counts them: "pk" + its value + "data" + its value."""
    extra = sum(len(name) + len(value["S"]) for name, value in more.items())
    return {"pk": {"S": pk}, "data": {"S": "x" * (size - 2 - len(pk) - 4 - extra)}, **more}


@pytest.fixture
def table(local_endpoint_no_limits):
    dynamodb = client("dynamodb", local_endpoint_no_limits, retries={"max_attempts": 0}, user_agent_extra=APP)
    name = f"metered-{uuid.uuid4().hex[:8]}"
    dynamodb.create_table(
        TableName=name,
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    yield dynamodb, name
    dynamodb.delete_table(TableName=name)


def write_units(url: str, name: str) -> float:
    return counted(url, "dynamodb", name).get("write_units", 0)


def read_units(url: str, name: str) -> float:
    return counted(url, "dynamodb", name).get("read_units", 0)


def test_item_size_is_names_plus_values_as_dynamodb_counts_them():
    assert item_size({"pk": {"S": "abc"}}) == 5
    assert item_size({"n": {"N": "123.4500"}}) == 1 + 3 + 1  # 4 significant digits: 2 bytes + 1
    assert item_size({"b": {"B": base64.b64encode(b"12345").decode()}}) == 1 + 5
    assert item_size({"ok": {"BOOL": True}, "no": {"NULL": True}}) == 3 + 3
    assert item_size({"l": {"L": [{"S": "ab"}, {"N": "7"}]}}) == 1 + 3 + (1 + 2) + (1 + 2)
    assert item_size({"m": {"M": {"k": {"S": "v"}}}}) == 1 + 3 + (1 + 1 + 1)
    assert item_size({"ss": {"SS": ["a", "bcd"]}}) == 2 + 4


def test_a_put_costs_its_size_in_kilobytes_rounded_up(local_endpoint_no_limits, table):
    dynamodb, name = table
    url = local_endpoint_no_limits
    for pk, size, units in (("one", 1 * KiB, 1), ("one-and-a-half", 1536, 2), ("thirty", 30 * KiB, 30)):
        before = write_units(url, name)
        dynamodb.put_item(TableName=name, Item=sized(pk, size))
        assert write_units(url, name) - before == units, (pk, size)


def test_a_transactional_write_costs_twice(local_endpoint_no_limits, table):
    dynamodb, name = table
    url = local_endpoint_no_limits
    for pk, size, units in (("one", 1 * KiB, 2), ("one-and-a-half", 1536, 4), ("thirty", 30 * KiB, 60)):
        before = write_units(url, name)
        dynamodb.transact_write_items(TransactItems=[{"Put": {"TableName": name, "Item": sized(pk, size)}}])
        assert write_units(url, name) - before == units, (pk, size)


def test_a_condition_check_in_a_transaction_is_a_transactional_read(local_endpoint_no_limits, table):
    dynamodb, name = table
    url = local_endpoint_no_limits
    dynamodb.put_item(TableName=name, Item=sized("checked", 9 * KiB))
    before_w, before_r = write_units(url, name), read_units(url, name)
    dynamodb.transact_write_items(
        TransactItems=[
            {"ConditionCheck": {"TableName": name, "Key": {"pk": {"S": "checked"}},
                                "ConditionExpression": "attribute_exists(pk)"}},
            {"Put": {"TableName": name, "Item": sized("new", 1 * KiB)}},
        ]
    )  # fmt: skip
    assert write_units(url, name) - before_w == 2
    assert read_units(url, name) - before_r == 2 * 3  # 9 KiB: 3 read units, twice


def test_an_update_costs_the_larger_of_the_item_before_and_after(local_endpoint_no_limits, table):
    dynamodb, name = table
    url = local_endpoint_no_limits
    dynamodb.put_item(TableName=name, Item=sized("grows", 1000))
    before = write_units(url, name)
    dynamodb.update_item(
        TableName=name,
        Key={"pk": {"S": "grows"}},
        UpdateExpression="SET more = :v",
        ExpressionAttributeValues={":v": {"S": "y" * 1500}},
    )
    assert write_units(url, name) - before == 3  # 1000 + 4 + 1500 = 2504 bytes after: 3 units
    before = write_units(url, name)
    dynamodb.update_item(TableName=name, Key={"pk": {"S": "grows"}}, UpdateExpression="REMOVE more")
    assert write_units(url, name) - before == 3  # back to 1000 bytes: the larger, before, counts


def test_a_batch_write_costs_each_item_and_an_update_that_creates_its_item_after(
    local_endpoint_no_limits, table
):
    dynamodb, name = table
    url = local_endpoint_no_limits
    before = write_units(url, name)
    dynamodb.batch_write_item(
        RequestItems={
            name: [{"PutRequest": {"Item": sized("a", 1 * KiB)}}, {"PutRequest": {"Item": sized("b", 1536)}}]
        }
    )
    assert write_units(url, name) - before == 1 + 2
    before = write_units(url, name)
    dynamodb.batch_write_item(RequestItems={name: [{"DeleteRequest": {"Key": {"pk": {"S": "b"}}}}]})
    assert write_units(url, name) - before == 2
    before = write_units(url, name)
    dynamodb.update_item(
        TableName=name,
        Key={"pk": {"S": "created"}},
        UpdateExpression="SET more = :v",
        ExpressionAttributeValues={":v": {"S": "y" * 2100}},
    )
    assert write_units(url, name) - before == 3  # 2 + 7 + 4 + 2100 bytes


def test_a_failed_conditional_write_still_costs_a_unit_and_a_delete_its_item(local_endpoint_no_limits, table):
    dynamodb, name = table
    url = local_endpoint_no_limits
    dynamodb.put_item(TableName=name, Item=sized("there", 500))
    before = write_units(url, name)
    with pytest.raises(ClientError, match="ConditionalCheckFailed"):
        dynamodb.put_item(
            TableName=name, Item=sized("there", 500), ConditionExpression="attribute_not_exists(pk)"
        )
    assert write_units(url, name) - before == 1
    dynamodb.put_item(TableName=name, Item=sized("big", 3000))
    before = write_units(url, name)
    dynamodb.delete_item(TableName=name, Key={"pk": {"S": "big"}})
    assert write_units(url, name) - before == 3


def test_reads_cost_4_kilobytes_a_unit_half_when_eventually_consistent(local_endpoint_no_limits, table):
    dynamodb, name = table
    url = local_endpoint_no_limits
    dynamodb.put_item(TableName=name, Item=sized("nine", 9 * KiB))
    key = {"pk": {"S": "nine"}}
    for consistent, units in ((True, 3), (False, 1.5)):
        before = read_units(url, name)
        dynamodb.get_item(TableName=name, Key=key, ConsistentRead=consistent)
        assert read_units(url, name) - before == units
    before = read_units(url, name)
    dynamodb.get_item(TableName=name, Key=key, ConsistentRead=True, ProjectionExpression="pk")
    assert read_units(url, name) - before == 3  # a projection reads the whole item
    before = read_units(url, name)
    dynamodb.transact_get_items(TransactItems=[{"Get": {"TableName": name, "Key": key}}])
    assert read_units(url, name) - before == 6
    dynamodb.put_item(TableName=name, Item=sized("small", 1000))
    before = read_units(url, name)
    dynamodb.batch_get_item(RequestItems={name: {"Keys": [key, {"pk": {"S": "small"}}]}})
    assert read_units(url, name) - before == 1.5 + 0.5  # per item, as GetItems
    before = read_units(url, name)
    dynamodb.get_item(TableName=name, Key={"pk": {"S": "absent"}}, ConsistentRead=True)
    assert read_units(url, name) - before == 1  # no item: still a unit


def test_a_query_sums_its_items_then_rounds(local_endpoint_no_limits):
    dynamodb = client("dynamodb", local_endpoint_no_limits, retries={"max_attempts": 0}, user_agent_extra=APP)
    url, name = local_endpoint_no_limits, f"metered-{uuid.uuid4().hex[:8]}"
    dynamodb.create_table(
        TableName=name,
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
        AttributeDefinitions=[{"AttributeName": k, "AttributeType": "S"} for k in ("pk", "sk")],
        BillingMode="PAY_PER_REQUEST",
    )
    for n in range(5):  # 5 items of 1000 bytes: 5000 bytes, 2 units (one by one it would be 5)
        dynamodb.put_item(TableName=name, Item=sized("p", 1000, sk={"S": f"s{n}"}))
    query = {
        "TableName": name,
        "KeyConditionExpression": "pk = :p",
        "ExpressionAttributeValues": {":p": {"S": "p"}},
    }
    for consistent, units in ((True, 2), (False, 1)):
        before = read_units(url, name)
        assert len(dynamodb.query(**query, ConsistentRead=consistent)["Items"]) == 5
        assert read_units(url, name) - before == units
    before = read_units(url, name)
    dynamodb.scan(TableName=name, ConsistentRead=True)
    assert read_units(url, name) - before == 2
    stored = counted(url, "dynamodb", name)
    assert (stored["items"], stored["bytes_stored"]) == (5, 5000)
    dynamodb.delete_table(TableName=name)


def test_kinesis_meters_records_in_25_kib_payload_units(local_endpoint_no_limits):
    kinesis = client("kinesis", local_endpoint_no_limits, retries={"max_attempts": 0}, user_agent_extra=APP)
    url, stream = local_endpoint_no_limits, f"metered-{uuid.uuid4().hex[:8]}"
    kinesis.create_stream(StreamName=stream, ShardCount=1)
    kinesis.get_waiter("stream_exists").wait(StreamName=stream, WaiterConfig={"Delay": 0.1})
    # data + the 1-byte partition key; AWS's "1MB record: 40 units" is 1,000 KiB: a whole MiB is 41
    sizes = (5 * KiB, 45 * KiB, 1000 * KiB, 1024 * KiB)
    answer = kinesis.put_records(
        StreamName=stream, Records=[{"Data": b"x" * (s - 1), "PartitionKey": "k"} for s in sizes]
    )
    assert answer["FailedRecordCount"] == 0
    kinesis.put_record(StreamName=stream, Data=b"y" * 99, PartitionKey="k")
    written = counted(url, "kinesis", stream)
    assert written["put_records_calls"] == 1 and written["put_record_calls"] == 1
    assert written["records_written"] == 5
    assert written["bytes_written"] == sum(sizes) + 100
    assert written["put_payload_units"] == 1 + 2 + 40 + 41 + 1
    assert written["kib_written"] == 5 + 45 + 1000 + 1024 + 1
    shard = kinesis.list_shards(StreamName=stream)["Shards"][0]["ShardId"]
    iterator = kinesis.get_shard_iterator(StreamName=stream, ShardId=shard, ShardIteratorType="TRIM_HORIZON")
    records = kinesis.get_records(ShardIterator=iterator["ShardIterator"])["Records"]
    assert len(records) == 5
    read = counted(url, "kinesis", stream)
    assert (read["get_records_calls"], read["records_read"], read["bytes_read"]) == (1, 5, sum(sizes) + 100)
    kinesis.delete_stream(StreamName=stream)


def test_sqs_bills_a_request_per_64_kib_of_payload(local_endpoint_no_limits):
    sqs = client("sqs", local_endpoint_no_limits, retries={"max_attempts": 0}, user_agent_extra=APP)
    url, queue = local_endpoint_no_limits, f"metered-{uuid.uuid4().hex[:8]}"
    queue_url = sqs.create_queue(QueueName=queue)["QueueUrl"]
    assert counted(url, "sqs", queue) == {"requests": 1, "messages_sent": 0}  # CreateQueue
    sqs.send_message(QueueUrl=queue_url, MessageBody="x" * (100 * KiB))
    assert counted(url, "sqs", queue) == {"requests": 1 + 2, "messages_sent": 1}
    sqs.send_message_batch(
        QueueUrl=queue_url, Entries=[{"Id": str(n), "MessageBody": "z" * 10} for n in range(3)]
    )
    assert counted(url, "sqs", queue) == {"requests": 3 + 1, "messages_sent": 4}
    received = sqs.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=10)["Messages"]
    assert len(received) == 4  # 100 KiB + 30 bytes: 2 requests
    assert counted(url, "sqs", queue) == {"requests": 4 + 2, "messages_sent": 4}
    sqs.delete_queue(QueueUrl=queue_url)


def test_put_metric_data_counts_calls_and_distinct_metrics(local_endpoint_no_limits):
    cloudwatch = client(
        "cloudwatch", local_endpoint_no_limits, retries={"max_attempts": 0}, user_agent_extra=APP
    )
    namespace = f"Metered/{uuid.uuid4().hex[:8]}"
    data = [
        {"MetricName": "Sent", "Value": 1, "Dimensions": [{"Name": "Group", "Value": "a"}]},
        {"MetricName": "Sent", "Value": 2, "Dimensions": [{"Name": "Group", "Value": "a"}]},
        {"MetricName": "Sent", "Value": 3, "Dimensions": [{"Name": "Group", "Value": "b"}]},
    ]
    cloudwatch.put_metric_data(Namespace=namespace, MetricData=data)
    cloudwatch.put_metric_data(Namespace=namespace, MetricData=data[:1])
    assert counted(local_endpoint_no_limits, "cloudwatch", namespace) == {
        "put_metric_data_calls": 2,
        "metrics": 2,
    }


def test_a_reset_answers_what_it_zeroed(local_endpoint_no_limits, table):
    dynamodb, name = table
    url = local_endpoint_no_limits
    dynamodb.put_item(TableName=name, Item=sized("one", 2 * KiB))
    assert usage(url, reset=True)["dynamodb"][name]["write_units"] >= 2
    after = usage(url)["dynamodb"][name]
    assert (after["write_units"], after["read_units"], after["items"]) == (0, 0, 1)  # storage is state
    request = urllib.request.Request(f"{url}/_shardline/usage", method="POST")
    dynamodb.put_item(TableName=name, Item=sized("two", 1 * KiB))
    with urllib.request.urlopen(request, timeout=10) as answer:
        assert json.load(answer)["services"]["dynamodb"][name]["write_units"] == 1
    assert usage(url)["dynamodb"][name]["write_units"] == 0


def test_an_observers_calls_are_no_cost_of_the_app(local_endpoint_no_limits, table):
    """Provisioning, `status`, `send`'s verdict and a benchmark's reads use observer clients: the
    same put and read from one are not counted; from the app's client they are."""
    app_client, name = table
    observer = client("dynamodb", local_endpoint_no_limits, retries={"max_attempts": 0})
    usage(local_endpoint_no_limits, reset=True)
    observer.put_item(TableName=name, Item=sized("seen", 1000))
    observer.get_item(TableName=name, Key={"pk": {"S": "seen"}}, ConsistentRead=True)
    observer.scan(TableName=name)
    assert (write_units(local_endpoint_no_limits, name), read_units(local_endpoint_no_limits, name)) == (0, 0)
    app_client.get_item(TableName=name, Key={"pk": {"S": "seen"}}, ConsistentRead=True)
    assert read_units(local_endpoint_no_limits, name) == 1
