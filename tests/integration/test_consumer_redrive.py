"""Redriving what the event-source mapping discarded (`shardline.consumer.redrive`), on the wire:
Kinesis on moto server and on kinesis-mock, the lease table, the sink and the DLQ on moto server.

The sink counts how many times each user record was applied (`ADD applied 1`, committed with the
checkpoint), so "exactly once" is every count at 1.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import pytest

from local.lambda_.esm.batches import on_failure_message
from shardline.consumer import (
    ConsumedRecord,
    DeadLetterQueue,
    KinesisConsumer,
    LeaseTable,
    deaggregate,
    redrive,
)
from shardline.consumer._failure_text import failure_text
from shardline.consumer._redrive import batch_info
from shardline.kinesis import UserRecord
from shardline.kinesis._positions import Position
from shardline.producer import Producer, ProducerConfig
from shardline.testing import read_shard
from tests.support.integration import (
    aws_client,
    create_sink_table,
    create_stream,
    kinesis_client,
    unique_stream_name,
)

RECORDS = 90


class Shard:
    """One shard of small KPL aggregates (about ten user records each), a lease table, a counting
    sink and a DLQ."""

    def __init__(self, kinesis_url: str, moto_url: str) -> None:
        self.kinesis = kinesis_client(kinesis_url)
        self.dynamodb = aws_client("dynamodb", moto_url)
        self.sqs = aws_client("sqs", moto_url)
        self.stream = unique_stream_name("redrive")
        summary = create_stream(self.kinesis, self.stream, shard_count=1)
        self.stream_arn = summary["StreamARN"]
        shard = self.kinesis.list_shards(StreamName=self.stream)["Shards"][0]
        self.shard_id = shard["ShardId"]
        self.shard_start = shard["SequenceNumberRange"]["StartingSequenceNumber"]
        producer = Producer(self.kinesis, self.stream, config=ProducerConfig(aggregation_max_size=250))
        sent = [UserRecord(f"key-{i % 7}", json.dumps({"n": i}).encode()) for i in range(RECORDS)]
        assert all(result.success for result in producer.put_many(sent))
        self.event_records = read_shard(self.kinesis, self.stream, self.shard_id)
        self.sequences = [record["kinesis"]["sequenceNumber"] for record in self.event_records]
        self.leases = LeaseTable(self.dynamodb, f"leases-{uuid.uuid4().hex[:8]}", sleep=lambda _: None)
        LeaseTable.create(self.dynamodb, self.leases.table_name)
        self.sink = create_sink_table(self.dynamodb)
        self.dlq_url = self.sqs.create_queue(QueueName=f"dlq-{uuid.uuid4().hex[:8]}")["QueueUrl"]

    def consumer(self, poison: frozenset[str] = frozenset(), **options: Any) -> KinesisConsumer:
        consumer = KinesisConsumer(
            "redrive-group",
            self.leases,
            kinesis=self.kinesis,
            dlq=DeadLetterQueue(self.sqs, self.dlq_url),
            **options,
        )

        @consumer.handler
        def count(record: ConsumedRecord) -> list[dict[str, Any]]:
            if ident(record) in poison:
                raise ValueError(f"poison {ident(record)}")
            return [
                {
                    "Update": {
                        "TableName": self.sink,
                        "Key": {"id": {"S": ident(record)}},
                        "UpdateExpression": "ADD applied :one",
                        "ExpressionAttributeValues": {":one": {"N": "1"}},
                    }
                }
            ]

        return consumer

    def message(self, first: int, last: int, **changes: str) -> dict[str, Any]:
        """The on-failure record Lambda sends for Kinesis records `first`..`last` of the shard."""
        info = {
            "shardId": self.shard_id,
            "startSequenceNumber": self.sequences[first],
            "endSequenceNumber": self.sequences[last],
            "approximateArrivalOfFirstRecord": "2019-11-14T00:38:04.835Z",
            "approximateArrivalOfLastRecord": "2019-11-14T00:38:05.580Z",
            "batchSize": last - first + 1,
            "streamArn": self.stream_arn,
            **changes,
        }
        return {
            "requestContext": {
                "requestId": str(uuid.uuid4()),
                "functionArn": "arn:aws:lambda:us-east-1:000000000000:function:consumer",
                "condition": "RecordAgeExceeded",
                "approximateInvokeCount": 10,
            },
            "responseContext": {"statusCode": 200, "executedVersion": "$LATEST"},
            "version": "1.0",
            "timestamp": "2019-11-14T00:38:06.021Z",
            "KinesisBatchInfo": info,
        }

    def user_records(self, first: int, last: int) -> list[str]:
        """The ids of the user records of Kinesis records `first`..`last`."""
        return [ident(record) for record in deaggregate(self.event_records[first : last + 1])]

    def applied(self) -> dict[str, int]:
        """How many times each user record was applied."""
        items = self.dynamodb.scan(TableName=self.sink, ConsistentRead=True)["Items"]
        return {item["id"]["S"]: int(item["applied"]["N"]) for item in items}

    def dead_letters(self) -> list[dict[str, Any]]:
        messages = self.sqs.receive_message(QueueUrl=self.dlq_url, MaxNumberOfMessages=10)
        return [json.loads(message["Body"]) for message in messages.get("Messages", [])]

    def set_main_row(self, checkpoint: Position, skipped: list[dict[str, Any]] | None = None) -> None:
        """The shard's own lease row as the group left it (the attributes as the group writes them)."""
        item = {
            "leaseKey": {"S": self.shard_id},
            "leaseOwner": {"S": "an-earlier-invocation"},
            "leaseCounter": {"N": "7"},
            "checkpoint": {"S": checkpoint.sequence},
            "checkpointSubSequenceNumber": {"N": str(checkpoint.sub_sequence)},
            "ownerSwitchesSinceCheckpoint": {"N": "0"},
        }
        if skipped is not None:
            item["skippedByMapping"] = {"S": json.dumps(skipped)}
        self.dynamodb.put_item(TableName=self.leases.table_name, Item=item)


def ident(record: ConsumedRecord) -> str:
    return f"{record.sequence_number}#{record.sub_sequence_number or 0}"


@pytest.fixture
def shard(kinesis_endpoint, moto_server) -> Shard:
    return Shard(kinesis_endpoint.endpoint_url, moto_server)


def test_a_redrive_applies_every_record_of_the_range_exactly_once(shard):
    expected = shard.user_records(2, 4)
    assert len(shard.event_records) > 5 and len(expected) > 3

    result = redrive(shard.consumer(), shard.kinesis, shard.message(2, 4))

    assert result.complete and result.finished and result.missing is None
    assert (result.records_read, result.processed, result.already_applied) == (3, len(expected), 0)
    assert (result.failed, result.dead_lettered, result.deliveries) == (0, 0, 1)
    assert shard.applied() == dict.fromkeys(expected, 1)
    row = shard.leases.get(f"{shard.shard_id}#redrive#{shard.sequences[2]}")
    assert result.lease_key == row.key
    assert row.checkpoint == Position(shard.sequences[4], len(expected) - len(shard.user_records(2, 3)) - 1)
    assert shard.leases.get(shard.shard_id) is None  # the group's own row is not touched


def test_a_redrive_run_twice_applies_nothing_twice(shard):
    expected = shard.user_records(1, 3)
    message = json.dumps(shard.message(1, 3))  # the SQS body, as text

    first = redrive(shard.consumer(), shard.kinesis, message)
    second = redrive(shard.consumer(), shard.kinesis, {"Body": message})  # an SQS message

    assert first.complete and second.complete
    assert (first.processed, first.already_applied) == (len(expected), 0)
    assert (second.processed, second.already_applied, second.records_read) == (0, len(expected), 3)
    assert shard.applied() == dict.fromkeys(expected, 1)


def test_records_the_group_applied_before_the_mapping_discarded_the_batch_are_not_applied_again(shard):
    # The group applied sub-records 0..3 of the batch's first aggregate, then stalled; the mapping
    # discarded the batch and the group moved on past it (its checkpoint is beyond the batch now).
    users = shard.user_records(2, 2)
    assert len(users) > 5, "the first Kinesis record of the batch is an aggregate"
    shard.set_main_row(
        Position(shard.sequences[-1]),
        [
            {
                "start": shard.sequences[0],
                "checkpoint": shard.sequences[0],
                "checkpointSub": 0,
                "detectedAt": 1,
            },
            {
                "start": shard.sequences[2],
                "checkpoint": shard.sequences[2],
                "checkpointSub": 3,
                "detectedAt": 2,
            },
        ],
    )
    expected = shard.user_records(2, 3)[4:]

    result = redrive(shard.consumer(), shard.kinesis, shard.message(2, 3))

    assert result.complete
    assert (result.processed, result.already_applied) == (len(expected), 4)
    assert shard.applied() == dict.fromkeys(expected, 1)  # sub-records 0..3 not applied again


def test_without_a_note_the_groups_checkpoint_inside_the_batch_is_where_the_redrive_starts(shard):
    shard.set_main_row(Position(shard.sequences[3], 1))  # applied up to there, not moved since
    expected = shard.user_records(3, 4)[2:]

    result = redrive(shard.consumer(), shard.kinesis, shard.message(2, 4))

    assert result.complete
    assert result.already_applied == len(shard.user_records(2, 2)) + 2
    assert shard.applied() == dict.fromkeys(expected, 1)


def test_records_the_stream_no_longer_holds_are_reported_missing(shard):
    # The batch began before the oldest record the shard still holds (trimmed past retention).
    start = str(int(shard.sequences[0]) - 1)
    expected = shard.user_records(0, 1)

    result = redrive(shard.consumer(), shard.kinesis, shard.message(0, 1, startSequenceNumber=start))

    assert result.finished and not result.complete
    assert result.missing is not None
    assert (result.missing.start, result.missing.held_from) == (start, shard.sequences[0])
    assert f"from {start} up to (not including) {shard.sequences[0]}" in str(result.missing)
    assert "no longer in the stream" in str(result.missing)
    assert shard.applied() == dict.fromkeys(expected, 1)  # what is still there went through


def test_a_batch_wholly_gone_is_reported_and_nothing_runs(shard):
    end = str(int(shard.sequences[0]) - 1)
    message = shard.message(0, 0, startSequenceNumber=shard.shard_start, endSequenceNumber=end)

    result = redrive(shard.consumer(), shard.kinesis, message)

    assert result.finished and not result.complete
    assert result.missing is not None and result.missing.held_from is None
    assert str(result.missing).startswith(f"every record from {shard.shard_start} to {end}: ")
    assert (result.records_read, result.processed, result.deliveries) == (0, 0, 0)
    assert shard.applied() == {}


def test_a_deleted_stream_is_reported_missing(shard):
    shard.kinesis.delete_stream(StreamName=shard.stream, EnforceConsumerDeletion=True)
    deadline = time.monotonic() + 30
    while shard.stream in shard.kinesis.list_streams()["StreamNames"]:  # DELETING, then gone
        assert time.monotonic() < deadline, "the stream was not deleted"
        time.sleep(0.05)

    result = redrive(shard.consumer(), shard.kinesis, shard.message(0, 2))

    assert result.missing is not None and result.missing.held_from is None
    assert "the stream or the shard is gone" in result.missing.reason
    assert not result.complete and shard.applied() == {}


def test_a_redrive_cut_short_resumes_and_a_poison_record_is_dead_lettered(shard):
    users = shard.user_records(1, 2)
    poison = users[3]

    cut = redrive(shard.consumer(frozenset({poison})), shard.kinesis, shard.message(1, 2), max_deliveries=1)
    assert not cut.finished and cut.retry_from == shard.sequences[1]
    assert cut.error == failure_text(ValueError(f"poison {poison}")).text  # the lease row's bounded text
    assert shard.applied() == dict.fromkeys(users[:3], 1)

    rest = redrive(shard.consumer(frozenset({poison}), max_attempts=2), shard.kinesis, shard.message(1, 2))

    assert rest.complete and rest.dead_lettered == 1 and rest.already_applied == 3
    assert shard.applied() == dict.fromkeys([u for u in users if u != poison], 1)
    [letter] = shard.dead_letters()
    assert f"{letter['sequenceNumber']}#{letter['subSequenceNumber']}" == poison


# -- the message, as AWS and the local runtime write it (no server needed) -------------------------


def test_the_message_is_read_as_lambda_writes_it():
    """AWS's documented example (Lambda developer guide, "Retain discarded batch records for a
    Kinesis Data Streams event source"), and the local runtime's own on-failure message."""
    documented = {
        "requestContext": {
            "requestId": "c9b8fa9f-5a7f-xmpl-af9c-0c604cde93a5",
            "functionArn": "arn:aws:lambda:us-east-2:123456789012:function:myfunction",
            "condition": "RetryAttemptsExhausted",
            "approximateInvokeCount": 1,
        },
        "responseContext": {"statusCode": 200, "executedVersion": "$LATEST", "functionError": "Unhandled"},
        "version": "1.0",
        "timestamp": "2019-11-14T00:38:06.021Z",
        "KinesisBatchInfo": {
            "shardId": "shardId-000000000001",
            "startSequenceNumber": "49601189658422359378836298521827638475320189012309704722",
            "endSequenceNumber": "49601189658422359378836298522902373528957594348623495186",
            "approximateArrivalOfFirstRecord": "2019-11-14T00:38:04.835Z",
            "approximateArrivalOfLastRecord": "2019-11-14T00:38:05.580Z",
            "batchSize": 500,
            "streamArn": "arn:aws:kinesis:us-east-2:123456789012:stream/mystream",
        },
    }
    info = batch_info(documented)
    assert (info.stream, info.shard_id, info.size) == ("mystream", "shardId-000000000001", 500)
    assert info.start.startswith("496011896584223593788362985218")
    sns = {"Type": "Notification", "Message": json.dumps(documented)}
    assert batch_info(sns) == batch_info({"Sns": {"Message": json.dumps(documented)}}) == info

    class Record:
        def __init__(self, sequence_number: str) -> None:
            self.sequence_number, self.arrival = sequence_number, 1.5

    local = on_failure_message(
        request_id="r",
        function_arn="arn:aws:lambda:us-east-1:000000000000:function:f",
        condition="RecordAgeExceeded",
        invoke_count=0,
        function_error=None,
        invoked=False,
        now=2.0,
        shard_id="shardId-000000000000",
        stream_arn="arn:aws:kinesis:us-east-1:000000000000:stream/events",
        records=[Record("11"), Record("15")],  # type: ignore[list-item]
    )
    assert batch_info(json.dumps(local))[1:] == ("events", "shardId-000000000000", "11", "15", 2)


@pytest.mark.parametrize(
    ("change", "complaint"),
    [
        ({"startSequenceNumber": "4x"}, "startSequenceNumber"),
        ({"endSequenceNumber": "3"}, "endSequenceNumber"),
        ({"streamArn": "arn:aws:sqs:us-east-1:0:q"}, "streamArn"),
        ({"shardId": ""}, "shardId"),
    ],
)
def test_a_message_that_is_not_a_kinesis_on_failure_record_is_refused_by_field(change, complaint):
    info = {"shardId": "shardId-0", "startSequenceNumber": "5", "endSequenceNumber": "9", "batchSize": 2}
    message = {"KinesisBatchInfo": {**info, "streamArn": "arn:aws:kinesis:us-east-1:0:stream/s", **change}}
    with pytest.raises(ValueError, match=complaint):
        batch_info(message)
    with pytest.raises(ValueError, match="no KinesisBatchInfo"):
        batch_info({"DDBStreamBatchInfo": {}})
