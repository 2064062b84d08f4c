"""`local.iam.calls`: the (action, resource) pairs of requests really signed by botocore (issue 40,
property 2: "the action each operation needs ... the resource ARNs from the request").

Each request is built and SigV4-signed by a boto3 client and captured just before it would be sent
(`before-send`); `call_of` reads it as the local endpoint's enforcer will. What AWS authorizes each
operation on is cited in the mapping modules (`local/iam/_calls_*.py`); here, every operation the
shardline layer and the example functions call is pinned to it.

One module past the usual ~400 lines, on purpose: the coverage test at its end reads this file's
`case(...)` calls, so every pinned call lives here (and the directory has no package of its own to
share helpers from).
"""

from __future__ import annotations

import base64
import re
from pathlib import Path
from typing import Any

import boto3
import botocore.awsrequest
import botocore.config
import botocore.session
import pytest
from botocore import xform_name

from local.iam.calls import Call, UnknownResource, call_of, key_needs
from local.iam.capture import ACCOUNT, ENDPOINT, REGION, signed_request

ROOT = Path(__file__).resolve().parents[3]


# -- requests signed by botocore ------------------------------------------------------------------


def _client(service: str, endpoint: str = ENDPOINT) -> Any:
    return boto3.client(
        service,
        endpoint_url=endpoint,
        region_name=REGION,
        aws_access_key_id="AKIDEXAMPLE",
        aws_secret_access_key="secret",
        config=botocore.config.Config(retries={"max_attempts": 1}),
    )


def captured(
    service: str, method: str, endpoint: str = ENDPOINT, config: dict[str, Any] | None = None, **params: Any
) -> tuple[str, tuple[Any, ...]]:
    """(signing service, (method, path, query, headers, body)) of what `client.method(**params)` sends."""
    sent = signed_request(service, method, endpoint, config, **params)
    assert sent.headers["Authorization"].startswith("AWS4-HMAC-SHA256 ")  # really signed
    return sent.signing_name, (sent.method, sent.path, sent.query, sent.headers, sent.body)


def signed(service: str, method: str, endpoint: str = ENDPOINT, **params: Any) -> Call:
    """The `Call` of the request botocore signs for `client(service).method(**params)`."""
    signing, (verb, path, query, headers, body) = captured(service, method, endpoint, **params)
    return call_of(
        signing, verb, path, query, headers, body, account=ACCOUNT, region=REGION, now=1_700_000_000
    )


def pairs(call: Call) -> list[tuple[str, str]]:
    return [(n.action, n.resource) for n in call.needs]


TABLE = f"arn:aws:dynamodb:{REGION}:{ACCOUNT}:table"
STREAM = f"arn:aws:kinesis:{REGION}:{ACCOUNT}:stream"
KEY = {"pk": {"S": "a"}}

#: Every (service, client method) these tests pin; the coverage test below checks that the code's
#: calls are all among them.
COVERED: set[tuple[str, str]] = set()


def case(service: str, method: str, **params: Any) -> Call:
    COVERED.add((service, method))
    return signed(service, method, **params)


# -- DynamoDB ---------------------------------------------------------------------------------------


def test_property_2_transact_write_items_needs_each_items_own_action_on_its_table() -> None:
    call = case(
        "dynamodb",
        "transact_write_items",
        TransactItems=[
            {"Put": {"TableName": "sink", "Item": KEY}},
            {
                "Update": {
                    "TableName": "leases",
                    "Key": KEY,
                    "UpdateExpression": "SET v = :v",
                    "ExpressionAttributeValues": {":v": {"N": "1"}},
                }
            },
            {"Delete": {"TableName": "sink", "Key": KEY}},
            {
                "ConditionCheck": {
                    "TableName": "leases",
                    "Key": KEY,
                    "ConditionExpression": "attribute_exists(pk)",
                }
            },
        ],
    )
    assert call.operation == "TransactWriteItems"
    assert pairs(call) == [
        ("dynamodb:PutItem", f"{TABLE}/sink"),
        ("dynamodb:UpdateItem", f"{TABLE}/leases"),
        ("dynamodb:DeleteItem", f"{TABLE}/sink"),
        ("dynamodb:ConditionCheckItem", f"{TABLE}/leases"),
    ]
    assert "dynamodb:TransactWriteItems" not in {n.action for n in call.needs}
    assert set(call.touches) == {(f"{TABLE}/sink", "write"), (f"{TABLE}/leases", "write")}


def test_property_2_batch_write_item_needs_batch_write_item_on_each_table_not_put_item() -> None:
    """The defect of issue 40: PutItem does not cover BatchWriteItem."""
    call = case(
        "dynamodb",
        "batch_write_item",
        RequestItems={
            "events": [{"PutRequest": {"Item": KEY}}],
            "other": [{"DeleteRequest": {"Key": KEY}}],
        },
    )
    assert pairs(call) == [
        ("dynamodb:BatchWriteItem", f"{TABLE}/events"),
        ("dynamodb:BatchWriteItem", f"{TABLE}/other"),
    ]


def test_property_2_dynamodb_single_item_reads_and_control_on_the_table() -> None:
    assert pairs(case("dynamodb", "put_item", TableName="t", Item=KEY)) == [
        ("dynamodb:PutItem", f"{TABLE}/t")
    ]
    assert pairs(case("dynamodb", "update_item", TableName="t", Key=KEY)) == [
        ("dynamodb:UpdateItem", f"{TABLE}/t")
    ]
    assert pairs(case("dynamodb", "get_item", TableName="t", Key=KEY)) == [("dynamodb:GetItem", f"{TABLE}/t")]
    assert pairs(case("dynamodb", "scan", TableName="t")) == [("dynamodb:Scan", f"{TABLE}/t")]
    assert pairs(case("dynamodb", "describe_table", TableName="t")) == [
        ("dynamodb:DescribeTable", f"{TABLE}/t")
    ]
    created = case(
        "dynamodb",
        "create_table",
        TableName="t",
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    assert pairs(created) == [("dynamodb:CreateTable", f"{TABLE}/t")]
    assert pairs(case("dynamodb", "list_tables")) == [("dynamodb:ListTables", "*")]
    batch_get = case("dynamodb", "batch_get_item", RequestItems={"a": {"Keys": [KEY]}, "b": {"Keys": [KEY]}})
    assert pairs(batch_get) == [
        ("dynamodb:BatchGetItem", f"{TABLE}/a"),
        ("dynamodb:BatchGetItem", f"{TABLE}/b"),
    ]
    got = case("dynamodb", "transact_get_items", TransactItems=[{"Get": {"TableName": "a", "Key": KEY}}])
    assert pairs(got) == [("dynamodb:GetItem", f"{TABLE}/a")]


def test_property_2_query_and_scan_on_an_index_need_the_index_arn() -> None:
    call = case(
        "dynamodb",
        "query",
        TableName="t",
        IndexName="by-owner",
        KeyConditionExpression="o = :o",
        ExpressionAttributeValues={":o": {"S": "x"}},
    )
    assert pairs(call) == [("dynamodb:Query", f"{TABLE}/t/index/by-owner")]
    assert call.touches == ((f"{TABLE}/t", "read"),)


def test_property_2_partiql_needs_the_partiql_action_of_its_verb() -> None:
    call = signed(
        "dynamodb",
        "execute_statement",
        Statement='SELECT * FROM "orders"."by-owner" WHERE o = ?',
        Parameters=[{"S": "x"}],
    )
    assert pairs(call) == [("dynamodb:PartiQLSelect", f"{TABLE}/orders/index/by-owner")]
    call = signed("dynamodb", "execute_statement", Statement="INSERT INTO orders VALUE {'pk': 'a'}")
    assert pairs(call) == [("dynamodb:PartiQLInsert", f"{TABLE}/orders")]


# -- Kinesis ----------------------------------------------------------------------------------------


def test_property_2_kinesis_writes_and_reads_on_the_stream() -> None:
    call = case("kinesis", "put_records", StreamName="s", Records=[{"Data": b"x", "PartitionKey": "p"}])
    assert pairs(call) == [("kinesis:PutRecords", f"{STREAM}/s")]
    assert call.touches == ((f"{STREAM}/s", "write"),)
    by_arn = case("kinesis", "put_record", StreamARN=f"{STREAM}/s", Data=b"x", PartitionKey="p")
    assert pairs(by_arn) == [("kinesis:PutRecord", f"{STREAM}/s")]
    listed = case("kinesis", "list_shards", StreamName="s")
    assert pairs(listed) == [("kinesis:ListShards", f"{STREAM}/s")]
    iterator = case(
        "kinesis",
        "get_shard_iterator",
        StreamName="s",
        ShardId="shardId-000000000000",
        ShardIteratorType="TRIM_HORIZON",
    )
    assert pairs(iterator) == [("kinesis:GetShardIterator", f"{STREAM}/s")]
    assert pairs(case("kinesis", "list_streams")) == [("kinesis:ListStreams", "*")]
    assert pairs(case("kinesis", "describe_stream_summary", StreamName="s")) == [
        ("kinesis:DescribeStreamSummary", f"{STREAM}/s")
    ]


def test_property_2_subscribe_to_shard_needs_the_consumer_arn() -> None:
    consumer = f"{STREAM}/s/consumer/app:1700000000"
    call = case(
        "kinesis",
        "subscribe_to_shard",
        ConsumerARN=consumer,
        ShardId="shardId-000000000000",
        StartingPosition={"Type": "LATEST"},
    )
    assert pairs(call) == [("kinesis:SubscribeToShard", consumer)]
    assert call.touches == ((f"{STREAM}/s", "read"),)  # the stream's key decrypts what it reads
    registered = signed("kinesis", "register_stream_consumer", StreamARN=f"{STREAM}/s", ConsumerName="app")
    assert pairs(registered) == [("kinesis:RegisterStreamConsumer", f"{STREAM}/s")]
    with pytest.raises(UnknownResource, match="creation time"):
        signed("kinesis", "describe_stream_consumer", StreamARN=f"{STREAM}/s", ConsumerName="app")


@pytest.mark.integration
def test_property_2_get_records_reads_its_stream_from_the_local_endpoints_iterator(
    local_endpoint: str,
) -> None:
    """The iterator and the ListShards page token are the local endpoint's own, issued by a real
    GetShardIterator and ListShards."""
    kinesis = _client("kinesis", local_endpoint)
    kinesis.create_stream(StreamName="calls-iter", ShardCount=2)
    kinesis.get_waiter("stream_exists").wait(StreamName="calls-iter", WaiterConfig={"Delay": 0.1})
    iterator = kinesis.get_shard_iterator(
        StreamName="calls-iter", ShardId="shardId-000000000000", ShardIteratorType="TRIM_HORIZON"
    )["ShardIterator"]
    call = case("kinesis", "get_records", ShardIterator=iterator)
    assert pairs(call) == [("kinesis:GetRecords", f"{STREAM}/calls-iter")]
    assert call.touches == ((f"{STREAM}/calls-iter", "read"),)
    token = kinesis.list_shards(StreamName="calls-iter", MaxResults=1)["NextToken"]
    page = signed("kinesis", "list_shards", NextToken=token)
    assert pairs(page) == [("kinesis:ListShards", f"{STREAM}/calls-iter")]
    with pytest.raises(UnknownResource, match="NextToken"):
        signed("kinesis", "list_shards", NextToken="not-a-token")


@pytest.mark.integration
def test_property_2_decrypt_names_the_key_inside_the_local_endpoints_ciphertext(local_endpoint: str) -> None:
    kms = _client("kms", local_endpoint)
    key = kms.create_key()["KeyMetadata"]
    blob = kms.encrypt(KeyId=key["KeyId"], Plaintext=b"secret")["CiphertextBlob"]
    call = signed("kms", "decrypt", CiphertextBlob=blob)
    assert pairs(call) == [("kms:Decrypt", key["Arn"])]


def test_property_2_get_records_with_an_iterator_it_cannot_read_is_unknown_not_star() -> None:
    with pytest.raises(UnknownResource, match="ShardIterator"):
        signed("kinesis", "get_records", ShardIterator="not-an-iterator!")
    with pytest.raises(UnknownResource, match="names no stream"):
        signed("kinesis", "get_records", ShardIterator=base64.b64encode(b"None:shardId-0:1").decode())


# -- SQS, S3, Lambda, X-Ray, STS, CloudWatch, Logs, KMS ----------------------------------------------


def test_property_2_sqs_queue_from_its_url_and_the_batch_actions() -> None:
    url = f"{ENDPOINT}/{ACCOUNT}/orders"
    call = case("sqs", "send_message", QueueUrl=url, MessageBody="x")
    assert call.protocol == "json"
    assert pairs(call) == [("sqs:SendMessage", f"arn:aws:sqs:{REGION}:{ACCOUNT}:orders")]
    assert call.touches == ((f"arn:aws:sqs:{REGION}:{ACCOUNT}:orders", "write"),)
    batch = signed("sqs", "send_message_batch", QueueUrl=url, Entries=[{"Id": "1", "MessageBody": "x"}])
    assert pairs(batch) == [("sqs:SendMessage", f"arn:aws:sqs:{REGION}:{ACCOUNT}:orders")]
    by_name = signed("sqs", "get_queue_url", QueueName="orders")
    assert pairs(by_name) == [("sqs:GetQueueUrl", f"arn:aws:sqs:{REGION}:{ACCOUNT}:orders")]
    assert pairs(signed("sqs", "list_queues")) == [("sqs:ListQueues", "*")]
    aws_url = "https://sqs.eu-west-1.amazonaws.com/111122223333/orders"
    remote = signed("sqs", "receive_message", QueueUrl=aws_url)
    assert pairs(remote) == [("sqs:ReceiveMessage", "arn:aws:sqs:eu-west-1:111122223333:orders")]


def test_property_2_sqs_and_sts_query_forms() -> None:
    body = b"Action=SendMessage&Version=2012-11-05&MessageBody=x"
    query_form = call_of(
        "sqs",
        "POST",
        f"/{ACCOUNT}/orders",
        "",
        {"Content-Type": "application/x-www-form-urlencoded"},
        body,
        account=ACCOUNT,
        region=REGION,
    )
    assert query_form.protocol == "query"
    assert pairs(query_form) == [("sqs:SendMessage", f"arn:aws:sqs:{REGION}:{ACCOUNT}:orders")]
    identity = case("sts", "get_caller_identity")
    assert identity.operation == "GetCallerIdentity" and identity.needs == ()  # AWS never refuses it
    assumed = signed(
        "sts", "assume_role", RoleArn=f"arn:aws:iam::{ACCOUNT}:role/r", RoleSessionName="session"
    )
    assert pairs(assumed) == [("sts:AssumeRole", f"arn:aws:iam::{ACCOUNT}:role/r")]


def test_property_2_s3_actions_are_the_documented_ones_path_and_virtual_host_style() -> None:
    assert pairs(case("s3", "put_object", Bucket="dlq", Key="a/b c.json", Body=b"x")) == [
        ("s3:PutObject", "arn:aws:s3:::dlq/a/b c.json")
    ]
    assert pairs(signed("s3", "list_objects_v2", Bucket="dlq")) == [("s3:ListBucket", "arn:aws:s3:::dlq")]
    assert pairs(signed("s3", "get_object", Bucket="dlq", Key="k")) == [
        ("s3:GetObject", "arn:aws:s3:::dlq/k")
    ]
    assert pairs(signed("s3", "head_object", Bucket="dlq", Key="k")) == [
        ("s3:GetObject", "arn:aws:s3:::dlq/k")
    ]
    assert pairs(signed("s3", "get_object", Bucket="dlq", Key="k", VersionId="v1")) == [
        ("s3:GetObjectVersion", "arn:aws:s3:::dlq/k")
    ]
    assert pairs(signed("s3", "list_buckets")) == [("s3:ListAllMyBuckets", "*")]
    copy = signed("s3", "copy_object", Bucket="dlq", Key="k2", CopySource={"Bucket": "src", "Key": "k1"})
    assert pairs(copy) == [("s3:PutObject", "arn:aws:s3:::dlq/k2"), ("s3:GetObject", "arn:aws:s3:::src/k1")]
    part = signed("s3", "upload_part", Bucket="dlq", Key="k", UploadId="u", PartNumber=1, Body=b"x")
    assert (part.operation, pairs(part)) == ("UploadPart", [("s3:PutObject", "arn:aws:s3:::dlq/k")])
    deleted = signed("s3", "delete_objects", Bucket="dlq", Delete={"Objects": [{"Key": "a"}, {"Key": "b"}]})
    assert pairs(deleted) == [
        ("s3:DeleteObject", "arn:aws:s3:::dlq/a"),
        ("s3:DeleteObject", "arn:aws:s3:::dlq/b"),
    ]
    # virtual-host style: the bucket is in the Host header, the key is the whole path
    signing, (verb, path, query, headers, body) = captured(
        "s3",
        "get_object",
        "http://localhost:4566",
        {"s3": {"addressing_style": "virtual"}},
        Bucket="dlq",
        Key="k",
    )
    assert path == "/k"
    vhost = call_of(
        signing,
        verb,
        path,
        query,
        {**headers, "Host": "dlq.localhost:4566"},
        body,
        account=ACCOUNT,
        region=REGION,
    )
    assert pairs(vhost) == [("s3:GetObject", "arn:aws:s3:::dlq/k")]
    listed = call_of(
        signing,
        "GET",
        "/",
        "list-type=2",
        {"Host": "dlq.s3.us-east-1.amazonaws.com"},
        b"",
        account=ACCOUNT,
        region=REGION,
    )
    assert (listed.operation, pairs(listed)) == ("ListObjectsV2", [("s3:ListBucket", "arn:aws:s3:::dlq")])
    slash = call_of(signing, "GET", "/dlq/", "list-type=2", {}, b"", account=ACCOUNT, region=REGION)
    assert (slash.operation, pairs(slash)) == ("ListObjectsV2", [("s3:ListBucket", "arn:aws:s3:::dlq")])


def test_property_2_lambda_xray_cloudwatch_logs_kms() -> None:
    invoked = case("lambda", "invoke", FunctionName="replay", Payload=b"{}")
    assert pairs(invoked) == [("lambda:InvokeFunction", f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:replay")]
    qualified = signed("lambda", "invoke", FunctionName="replay", Qualifier="live")
    assert pairs(qualified) == [
        ("lambda:InvokeFunction", f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:replay:live")
    ]
    traced = signed("xray", "put_trace_segments", TraceSegmentDocuments=["{}"])
    assert pairs(traced) == [("xray:PutTraceSegments", "*")]
    metric = signed(
        "cloudwatch", "put_metric_data", Namespace="shardline", MetricData=[{"MetricName": "m", "Value": 1.0}]
    )
    assert (metric.service, pairs(metric)) == ("cloudwatch", [("cloudwatch:PutMetricData", "*")])
    assert metric.context["cloudwatch:namespace"] == "shardline"
    alarm = signed("cloudwatch", "describe_alarms_for_metric", MetricName="m", Namespace="n")
    assert pairs(alarm) == [("cloudwatch:DescribeAlarmsForMetric", "*")]
    group = f"arn:aws:logs:{REGION}:{ACCOUNT}:log-group:/aws/lambda/f"
    logged = signed(
        "logs",
        "put_log_events",
        logGroupName="/aws/lambda/f",
        logStreamName="s",
        logEvents=[{"timestamp": 1, "message": "m"}],
    )
    assert pairs(logged) == [("logs:PutLogEvents", f"{group}:log-stream:s")]
    assert pairs(signed("logs", "create_log_group", logGroupName="/aws/lambda/f")) == [
        ("logs:CreateLogGroup", f"{group}:log-stream:")
    ]
    key = f"arn:aws:kms:{REGION}:{ACCOUNT}:key/1234abcd-12ab-34cd-56ef-1234567890ab"
    assert pairs(signed("kms", "encrypt", KeyId=key, Plaintext=b"x")) == [("kms:Encrypt", key)]
    signing, (verb, path, query, headers, body) = captured(
        "kms", "generate_data_key", KeyId="alias/sink", KeySpec="AES_256"
    )
    aliased = call_of(
        signing, verb, path, query, headers, body, account=ACCOUNT, region=REGION, aliases={"alias/sink": key}
    )
    assert pairs(aliased) == [
        ("kms:GenerateDataKey", f"arn:aws:kms:{REGION}:{ACCOUNT}:alias/sink"),
        ("kms:GenerateDataKey", key),
    ]
    with pytest.raises(UnknownResource, match="ciphertext names no key"):
        signed("kms", "decrypt", CiphertextBlob=b"blob")


def test_property_2_cloudwatch_cbor_and_query_forms_name_the_same_operation() -> None:
    import botocore.serialize

    model = botocore.session.get_session().get_service_model("cloudwatch")
    operation = model.operation_model("PutMetricAlarm")
    params = {"AlarmName": "lag", "EvaluationPeriods": 1, "ComparisonOperator": "GreaterThanThreshold"}
    alarm = f"arn:aws:cloudwatch:{REGION}:{ACCOUNT}:alarm:lag"
    for protocol in ("smithy-rpc-v2-cbor", "query", "json"):
        request = botocore.serialize.create_serializer(protocol).serialize_to_request(dict(params), operation)
        body = (
            request["body"]
            if isinstance(request["body"], bytes)
            else (
                request["body"].encode()
                if isinstance(request["body"], str)
                else "&".join(f"{k}={v}" for k, v in request["body"].items()).encode()
            )
        )
        call = call_of(
            "monitoring",
            request["method"],
            request["url_path"],
            "",
            request["headers"],
            body,
            account=ACCOUNT,
            region=REGION,
        )
        assert (call.operation, pairs(call), call.protocol) == (
            "PutMetricAlarm",
            [("cloudwatch:PutMetricAlarm", alarm)],
            protocol,
        )


def test_property_2_an_operation_no_model_names_is_flagged_not_modelled() -> None:
    call = call_of(
        "firehose-x",
        "POST",
        "/",
        "",
        {"X-Amz-Target": "Firehose_20150804.PutRecord"},
        b"{}",
        account=ACCOUNT,
        region=REGION,
    )
    assert call.modelled is False and pairs(call) == [("firehose-x:PutRecord", "*")]
    unknown_op = call_of(
        "kinesis",
        "POST",
        "/",
        "",
        {"X-Amz-Target": "Kinesis_20131202.NoSuchThing"},
        b"{}",
        account=ACCOUNT,
        region=REGION,
    )
    assert unknown_op.modelled is False and pairs(unknown_op) == [("kinesis:NoSuchThing", "*")]


def test_property_2_request_context_keys() -> None:
    call = signed("kinesis", "list_streams")
    assert dict(call.context) == {
        "aws:SecureTransport": "false",
        "aws:SourceIp": "127.0.0.1",
        "aws:RequestedRegion": REGION,
        "aws:CurrentTime": "2023-11-14T22:13:20Z",
        "aws:EpochTime": "1700000000",
    }


def test_property_2_service_condition_keys_the_request_carries() -> None:
    listed = signed("s3", "list_objects_v2", Bucket="dlq", Prefix="batches/", Delimiter="/")
    assert (listed.context["s3:prefix"], listed.context["s3:delimiter"]) == ("batches/", "/")
    put = signed(
        "s3",
        "put_object",
        Bucket="dlq",
        Key="k",
        Body=b"x",
        ServerSideEncryption="aws:kms",
        SSEKMSKeyId="arn:aws:kms:us-east-1:000000000000:key/k",
    )
    assert put.context["s3:x-amz-server-side-encryption"] == "aws:kms"
    assert (
        put.context["s3:x-amz-server-side-encryption-aws-kms-key-id"]
        == "arn:aws:kms:us-east-1:000000000000:key/k"
    )
    encrypted = signed("kms", "encrypt", KeyId="k", Plaintext=b"x", EncryptionContext={"stream": "events"})
    assert encrypted.context["kms:EncryptionContext:stream"] == "events"
    assert encrypted.context["kms:CallerAccount"] == ACCOUNT
    assert "kms:ViaService" not in encrypted.context  # a direct call: no service on the caller's behalf
    updated = signed("dynamodb", "update_item", TableName="t", Key=KEY, ReturnValues="ALL_NEW")
    assert updated.context["dynamodb:ReturnValues"] == "ALL_NEW"


# -- KMS through the service ------------------------------------------------------------------------

KEY_ARN = f"arn:aws:kms:{REGION}:{ACCOUNT}:key/k"


def _key_needs(call: Call, resource: str) -> list[tuple[str, str, dict[str, str]]]:
    return [(n.action, n.resource, dict(c)) for n, c in key_needs(call, {resource: KEY_ARN}, REGION)]


def test_property_2_key_needs_through_the_service() -> None:
    via = {"kms:CallerAccount": ACCOUNT}
    put = signed("kinesis", "put_records", StreamName="s", Records=[{"Data": b"x", "PartitionKey": "p"}])
    assert _key_needs(put, f"{STREAM}/s") == [
        ("kms:GenerateDataKey", KEY_ARN, {"kms:ViaService": f"kinesis.{REGION}.amazonaws.com", **via})
    ]
    sub = signed(
        "kinesis",
        "subscribe_to_shard",
        ConsumerARN=f"{STREAM}/s/consumer/c:1",
        ShardId="shardId-0",
        StartingPosition={"Type": "LATEST"},
    )
    assert [a for a, _, _ in _key_needs(sub, f"{STREAM}/s")] == ["kms:Decrypt"]
    queue = f"arn:aws:sqs:{REGION}:{ACCOUNT}:q"
    sent = signed("sqs", "send_message", QueueUrl=f"{ENDPOINT}/{ACCOUNT}/q", MessageBody="x")
    assert [(a, c["kms:ViaService"]) for a, _, c in _key_needs(sent, queue)] == [
        ("kms:GenerateDataKey", f"sqs.{REGION}.amazonaws.com"),
        ("kms:Decrypt", f"sqs.{REGION}.amazonaws.com"),
    ]
    received = signed("sqs", "receive_message", QueueUrl=f"{ENDPOINT}/{ACCOUNT}/q")
    assert [a for a, _, _ in _key_needs(received, queue)] == ["kms:Decrypt"]
    batch = signed("dynamodb", "batch_write_item", RequestItems={"t": [{"PutRequest": {"Item": KEY}}]})
    assert [a for a, _, _ in _key_needs(batch, f"{TABLE}/t")] == ["kms:Decrypt"]
    uploaded = signed("s3", "put_object", Bucket="b", Key="k", Body=b"x")
    assert [a for a, _, _ in _key_needs(uploaded, "arn:aws:s3:::b")] == ["kms:GenerateDataKey"]
    # a resource with no customer-managed key, and a control-plane call: nothing
    assert key_needs(put, {}, REGION) == ()
    assert _key_needs(signed("kinesis", "list_shards", StreamName="s"), f"{STREAM}/s") == []


# -- every call the code makes is covered ---------------------------------------------------------

_SERVICES = ("kinesis", "dynamodb", "sqs", "s3", "kms", "logs", "cloudwatch", "xray", "sts", "lambda")


def _calls_in_code() -> set[tuple[str, str]]:
    session = botocore.session.get_session()
    methods: dict[str, list[str]] = {}
    for service in _SERVICES:
        for name in session.get_service_model(service).operation_names:
            methods.setdefault(xform_name(name), []).append(service)
    found: set[tuple[str, str]] = set()
    for root in ("layers/shardline/python/shardline", "functions", "examples"):
        for path in (ROOT / root).rglob("*.py"):
            if "cdk" in path.relative_to(ROOT).parts or "node_modules" in path.parts:
                continue
            for method in re.findall(r"\.([a-z_]+)\(", path.read_text()):
                for service in methods.get(method, ()):
                    found.add((service, method))
    return found


def test_property_2_every_aws_call_of_the_layer_and_the_examples_is_covered_here() -> None:
    """Each call the code makes is pinned by a test of this module that makes it through `case`."""
    code = _calls_in_code()
    assert ("dynamodb", "batch_write_item") in code, "the scan no longer finds the code's AWS calls"
    source = Path(__file__).read_text()
    pinned = set(re.findall(r'case\(\s*"([a-z0-9]+)",\s*"([a-z_]+)"', source))
    assert not code - pinned, f"AWS calls the code makes that no test here pins: {sorted(code - pinned)}"
    assert pinned >= COVERED  # the cases that ran are the ones read here
