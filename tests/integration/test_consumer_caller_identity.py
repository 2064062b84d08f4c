"""Issue 39 on the consumer side, through the example groups' real handlers (functions/event_sink,
functions/key_counter) on moto server (Kinesis, DynamoDB, SQS): records written by the real
`Producer` (or, for the forged floor, one raw `PutRecord`), read back with GetRecords and
delivered as the event-source mapping does.

- Property 2: an id belongs to its caller — two callers' equal ids are two records, and an explicit
  id `k:1` never meets the id `k:1` derived from an Idempotency-Key; a re-POST is applied once.
- Property 3: the same scoped id re-used with another payload is a conflict — the first payload's
  item or count stays as it was, the conflicting record is dead-lettered whole with both payload
  hashes, and `ClientIdConflicts` counts it; also when the two copies race in two shards. What
  tells the two apart (the refusing item, returned with the refusal) holds on moto server and on
  the local endpoint.
- Property 7: one `PutRecord` from another caller carrying the victim's aggregate id with a high
  floor suppresses none of the victim's records.
"""

from __future__ import annotations

import base64
import hashlib
import json
import uuid
from typing import Any

import pytest
from botocore.exceptions import ClientError

from shardline.consumer import once
from shardline.consumer._idempotent import SAME_PAYLOAD
from shardline.kinesis import UserRecord
from shardline.kpl import encode
from shardline.kpl._decode import decode_aggregate
from shardline.kpl._identity import AggregateId
from shardline.producer import Producer, ProducerConfig
from shardline.testing import read_shard
from tests.support.consumer_handlers import Function, Stream, drain
from tests.support.integration import aws_client, shard_ranges

ALICE = "arn:aws:iam::000000000000:user/alice"
BOB = "arn:aws:iam::000000000000:user/bob"
MALLORY = "arn:aws:iam::000000000000:user/mallory"


def put(stream: Stream, records: list[UserRecord]) -> None:
    """One request of the real producer (each call a new Kinesis record: a client's re-POST)."""
    assert all(result.success for result in Producer(stream.kinesis, stream.name).put_many(records))


def id_items(stream: Stream, sink: str) -> list[dict[str, Any]]:
    return [item for item in stream.scan(sink) if "recordId" in item]


def counted(stream: Stream, table: str) -> dict[str, int]:
    """The key counter's counts (its guard items left out)."""
    return {
        item["partitionKey"]["S"]: int(item["count"]["N"]) for item in stream.scan(table) if "count" in item
    }


def letters(stream: Stream, function: Function) -> list[dict[str, Any]]:
    answer = stream.sqs.receive_message(QueueUrl=function.env["DLQ_URL"], MaxNumberOfMessages=10)
    return [json.loads(message["Body"]) for message in answer.get("Messages", [])]


def hash_of(record: UserRecord) -> str:
    """The payload hash of `record` as the design defines it: SHA-256 of (partition key, explicit
    hash key or "", data), each length-prefixed (`shardline.kinesis._payload`), computed here."""
    key, hash_key = record.partition_key.encode(), (record.explicit_hash_key or "").encode()
    prefix = len(key).to_bytes(4, "big") + key + len(hash_key).to_bytes(4, "big") + hash_key
    return hashlib.sha256(prefix + record.data).hexdigest()


def test_property_2_two_callers_posting_the_same_id_are_each_applied_once_and_explicit_k1_is_not_derived_k1(
    stream: Stream,
) -> None:
    """Alice and Bob both post `order-1`; Alice posts an explicit `k:1` and a request whose
    Idempotency-Key `k` derives `k:1` for its record. The request is posted again once applied.
    Each of the four records is one item of the event sink and counts once in the key counter."""
    request = [
        UserRecord("p2-alice", b'{"order": 1}', id="order-1", caller=ALICE),
        UserRecord("p2-bob", b'{"order": 1}', id="order-1", caller=BOB),
        UserRecord("p2-explicit", b"explicit", id="k:1", caller=ALICE),
        UserRecord("p2-derived", b"derived", id="k:1", caller=ALICE, id_derived=True),
    ]
    put(stream, request)
    sink_fn, _, sink = stream.group("event_sink", key="pk")
    counter_fn, _, counters = stream.group("key_counter", key="partitionKey")
    drain(sink_fn, stream.feeds())
    drain(counter_fn, stream.feeds())

    put(stream, request)  # the client's re-POST of the same records, after they were applied
    drain(sink_fn, stream.feeds())
    drain(counter_fn, stream.feeds())

    items = id_items(stream, sink)
    assert sorted((item["partitionKey"]["S"], item["recordId"]["S"]) for item in items) == [
        ("p2-alice", "order-1"),
        ("p2-bob", "order-1"),
        ("p2-derived", "k:1"),
        ("p2-explicit", "k:1"),
    ], "one item per (caller, explicit or derived, id)"
    assert len({item["pk"]["S"] for item in items}) == 4
    assert {key: n for key, n in counted(stream, counters).items() if key.startswith("p2-")} == {
        "p2-alice": 1,
        "p2-bob": 1,
        "p2-explicit": 1,
        "p2-derived": 1,
    }
    assert counter_fn.metrics["ClientIdDuplicatesSkipped"] == 4  # the re-POST, applied once
    for function in (sink_fn, counter_fn):
        assert function.metrics["ClientIdConflicts"] == 0 and letters(stream, function) == []


def test_property_3_a_re_used_id_with_another_payload_is_dead_lettered_with_both_hashes_in_both_sinks(
    stream: Stream,
) -> None:
    """Alice posts `order-9`, then `order-9` again with another body. The first stays applied (the
    event sink's item keeps its data, the key counter counted it once); the second is neither
    applied nor dropped silently: dead-lettered whole with both hashes, and counted."""
    first = UserRecord("p3", b'{"total": 10}', id="order-9", caller=ALICE)
    other = UserRecord("p3", b'{"total": 99}', id="order-9", caller=ALICE)  # one shard: stream order
    put(stream, [first])
    put(stream, [other])
    sink_fn, _, sink = stream.group("event_sink", key="pk")
    counter_fn, _, counters = stream.group("key_counter", key="partitionKey")

    drain(sink_fn, stream.feeds())
    drain(counter_fn, stream.feeds())

    [item] = id_items(stream, sink)
    assert item["data"]["B"] == first.data, "the first payload's item is intact: never overwritten"
    assert item["shardlinePayload"]["S"] == hash_of(first)
    assert counted(stream, counters).get("p3") == 1, "counted once, for the first payload"
    for function in (sink_fn, counter_fn):
        [letter] = letters(stream, function)
        assert base64_data(letter) == other.data and letter["partitionKey"] == "p3"
        assert letter["recordId"] == "order-9"
        assert letter["details"]["clientIdConflict"] == {
            "scopedId": item["pk"]["S"].removeprefix("id#"),
            "appliedPayloadHash": hash_of(first),
            "payloadHash": hash_of(other),
        }
        assert letter["attempts"] == 1, "a conflict is dead-lettered at once: no retry can change it"
        metrics = function.metrics
        assert metrics["ClientIdConflicts"] == 1 and metrics["RecordsSentToDLQ"] == 1


def test_property_3_two_shards_racing_with_one_id_and_two_payloads_never_overwrite_each_other(
    stream: Stream,
) -> None:
    """The same scoped id with two payloads lands in two shards (explicit hash keys), each shard's
    batch delivered in turn: whichever applies first keeps its item; the other is dead-lettered."""
    ranges = sorted(shard_ranges(stream.kinesis, stream.name).values())
    low = UserRecord("p3-race", b"low", str(ranges[0][0]), id="race-1", caller=BOB)
    high = UserRecord("p3-race", b"high", str(ranges[1][0]), id="race-1", caller=BOB)
    put(stream, [low, high])
    sink_fn, _, sink = stream.group("event_sink", key="pk")

    drain(sink_fn, list(reversed(stream.feeds())))  # the high shard first

    [item] = id_items(stream, sink)
    assert item["data"]["B"] == b"high" and item["shardlinePayload"]["S"] == hash_of(high)
    [letter] = letters(stream, sink_fn)
    assert base64_data(letter) == b"low"
    conflict = letter["details"]["clientIdConflict"]
    assert (conflict["appliedPayloadHash"], conflict["payloadHash"]) == (hash_of(high), hash_of(low))
    assert sink_fn.metrics["ClientIdConflicts"] == 1


def test_property_7_a_forged_floor_from_another_caller_suppresses_none_of_the_victims_records(
    stream: Stream,
) -> None:
    """The victim (a library producer) sends 90 of its 200 records; Mallory, another caller, puts
    one record per victim lane carrying the victim's aggregate id with the next counter and a
    high floor; the victim sends its other 110. Measured on the code before: 110 of 200
    suppressed. Every one of the victim's 200 records is applied."""
    victim = Producer(stream.kinesis, stream.name, config=ProducerConfig(aggregation_max_size=160))
    records = [UserRecord(f"victim-{i % 7}", json.dumps({"v": i}).encode()) for i in range(200)]
    assert all(result.success for result in victim.put_many(records[:90]))
    newest: dict[tuple[str, str], tuple[AggregateId, str]] = {}  # (producer, lane) -> its last, shard
    for shard in stream.shards:
        for event_record in read_shard(stream.kinesis, stream.name, shard):
            data = base64.b64decode(event_record["kinesis"]["data"])
            try:
                users, aggregate = decode_aggregate(data)
            except ValueError:
                continue
            if aggregate is None or not users[0].partition_key.startswith("victim-"):
                continue
            parsed = AggregateId.parse(aggregate)
            newest[(parsed.producer, parsed.lane)] = (parsed, shard)
    assert newest, "the victim's aggregates carry shardline ids"
    ranges = shard_ranges(stream.kinesis, stream.name)
    for parsed, shard in newest.values():
        forged = parsed._replace(counter=parsed.counter + 1, floor=0xFFFFFF).encode()
        payload = encode([UserRecord("mallory", b"forged", caller=MALLORY)], aggregate_id=forged)
        stream.kinesis.put_record(
            StreamName=stream.name, Data=payload, PartitionKey="a", ExplicitHashKey=str(ranges[shard][0])
        )
    assert all(result.success for result in victim.put_many(records[90:]))
    sink_fn, _, sink = stream.group("event_sink", key="pk")

    drain(sink_fn, stream.feeds(batch_size=1))  # each Kinesis record's state committed before the next

    applied = [item for item in stream.scan(sink) if item["partitionKey"]["S"].startswith("victim-")]
    suppressed = len(records) - len(applied)
    assert suppressed == 0, f"{suppressed} of {len(records)} of the victim's records suppressed"
    assert sorted(json.loads(item["data"]["B"])["v"] for item in applied) == list(range(200))


def base64_data(letter: dict[str, Any]) -> bytes:
    return base64.b64decode(letter["data"])


@pytest.mark.parametrize("server", ["moto_server", "local_endpoint"])
def test_property_3_both_endpoints_return_the_refusing_item_that_tells_a_copy_from_a_conflict(
    server: str, request: pytest.FixtureRequest
) -> None:
    """What the consumer relies on to tell a copy from a conflict without another call: a refused
    conditional write that asks `ReturnValuesOnConditionCheckFailure=ALL_OLD` comes back with the
    item that refused it — in a TransactWriteItems (a `once` guard) and in a PutItem (an id-keyed
    idempotent put) — on moto server and on the local endpoint, as on DynamoDB."""
    dynamodb = aws_client("dynamodb", request.getfixturevalue(server))
    table = f"t-{uuid.uuid4().hex[:12]}"
    dynamodb.create_table(
        TableName=table,
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    guard = once(table, {"pk": {"S": "-/i/order-1"}}, payload_hash="a" * 64)
    dynamodb.transact_write_items(TransactItems=[guard])
    again = once(table, {"pk": {"S": "-/i/order-1"}}, payload_hash="b" * 64)
    with pytest.raises(ClientError) as refused:
        dynamodb.transact_write_items(TransactItems=[again])
    [reason] = refused.value.response["CancellationReasons"]
    assert reason["Code"] == "ConditionalCheckFailed" and reason["Item"]["shardlinePayload"] == {
        "S": "a" * 64
    }
    with pytest.raises(ClientError) as put_refused:
        dynamodb.put_item(
            TableName=table,
            Item={"pk": {"S": "-/i/order-1"}, "shardlinePayload": {"S": "b" * 64}},
            ConditionExpression=SAME_PAYLOAD,
            ExpressionAttributeValues={":payloadHash": {"S": "b" * 64}},
            ReturnValuesOnConditionCheckFailure="ALL_OLD",
        )
    assert put_refused.value.response["Item"]["shardlinePayload"] == {"S": "a" * 64}
