"""A PutRecords whose reply never came is settled by reading the shards back, never retried blindly.

`FaultyKinesis.lose_replies` makes a call raise botocore's ReadTimeoutError, after writing every
entry (the reply was lost) or before writing anything (the request was). Each test reads the
stream back to count every user record: once each, whatever the faults.
"""

from __future__ import annotations

import random
from collections import Counter

import pytest
from botocore.exceptions import ClientError

from local.faults import FaultyKinesis
from shardline.errors import OUTCOME_UNKNOWN
from shardline.kinesis import UserRecord
from shardline.producer import Producer, ProducerConfig
from tests.integration.helpers import (
    create_stream,
    kinesis_client,
    numbered_records,
    position,
    read_stream,
    unique_stream_name,
    wait_active,
)

FAST = ProducerConfig(retry_base_delay=0.001, retry_max_delay=0.01)


@pytest.fixture
def faulty(kinesis_endpoint):
    client = kinesis_client(kinesis_endpoint.endpoint_url)
    name = unique_stream_name("reconcile")
    create_stream(client, name, shard_count=2)
    yield FaultyKinesis(client, rng=random.Random(7)), name
    client.delete_stream(StreamName=name, EnforceConsumerDeletion=True)


def copies(client, name: str) -> Counter[int]:
    """How many times each numbered user record is in the stream."""
    return Counter(position(user) for entries in read_stream(client, name).values() for _, _, user in entries)


def stream_positions(client, name: str) -> dict[int, tuple[str, str]]:
    return {position(u): (shard, seq) for shard, es in read_stream(client, name).items() for seq, _, u in es}


def test_a_reply_lost_after_the_write_is_read_back_and_each_record_lands_once(faulty):
    client, name = faulty
    client.lose_replies(1, landed=True)
    producer = Producer(client, name, config=FAST)
    records = numbered_records(300, 30)

    results = producer.put_many(records)

    assert all(result.success for result in results)
    assert copies(client, name) == Counter(range(300))  # none twice
    where = stream_positions(client, name)
    for index, result in enumerate(results):  # each result names where the record really is
        assert (result.shard_id, result.sequence_number) == where[index]
    metrics = producer.metrics.snapshot()
    assert metrics["UnansweredRequestsReadBack"] == 1 and metrics["ReadBackFoundLanded"] >= 1
    assert metrics["ReadBackNotLanded"] == metrics["ReadBackUnknown"] == 0


def test_a_request_lost_before_the_write_is_read_back_then_retried_and_lands_once(faulty):
    client, name = faulty
    client.lose_replies(1, landed=False)
    producer = Producer(client, name, config=FAST)

    results = producer.put_many(numbered_records(300, 30))

    assert all(result.success for result in results)
    assert copies(client, name) == Counter(range(300))
    retried = [result for result in results if len(result.attempts) > 1]
    assert retried and all(result.attempts[0].error_code == "Internal" for result in retried)
    assert "not written" in retried[0].attempts[0].error_message
    assert producer.metrics.snapshot()["ReadBackNotLanded"] >= 1


class Answers503(FaultyKinesis):
    """The first PutRecords is answered 503 ServiceUnavailable without writing anything."""

    answered = 0

    def put_records(self, **kwargs):
        if not self.answered:
            self.answered = 1
            error = {"Code": "ServiceUnavailable", "Message": "unavailable (injected)"}
            raise ClientError({"Error": error, "ResponseMetadata": {"HTTPStatusCode": 503}}, "PutRecords")
        return super().put_records(**kwargs)


def test_a_5xx_that_wrote_nothing_is_read_back_and_retried_once(faulty):
    client, name = faulty
    unavailable = Answers503(client._client)
    producer = Producer(unavailable, name, config=FAST)

    results = producer.put_many(numbered_records(100, 10))

    assert all(result.success for result in results)
    assert copies(client, name) == Counter(range(100))
    assert producer.metrics.snapshot()["UnansweredRequestsReadBack"] == 1


class UnreadableAfterLoss(FaultyKinesis):
    """Reads are throttled forever: a read-back can never tell."""

    def get_shard_iterator(self, **kwargs):
        error = {"Code": "ProvisionedThroughputExceededException", "Message": "Rate exceeded (injected)"}
        raise ClientError({"Error": error, "ResponseMetadata": {"HTTPStatusCode": 400}}, "GetShardIterator")


def test_records_a_read_back_cannot_settle_fail_as_outcome_unknown_and_are_not_retried(faulty):
    client, name = faulty
    unreadable = UnreadableAfterLoss(client._client)
    unreadable.lose_replies(1, landed=True)
    config = ProducerConfig(retry_base_delay=0.001, retry_max_delay=0.01, reconcile_timeout=0.5)
    producer = Producer(unreadable, name, config=config)

    results = producer.put_many(numbered_records(50, 5))

    unknown = [result for result in results if not result.success]
    assert unknown and all(result.error_code == OUTCOME_UNKNOWN for result in unknown)
    assert all(len(result.attempts) == 1 for result in unknown)  # never sent again
    assert "may be in the stream" in unknown[0].error_message or "reading back" in unknown[0].error_message
    assert set(copies(client, name).values()) == {1}  # they did land, once
    assert producer.metrics.snapshot()["ReadBackUnknown"] >= 1


def test_with_reconcile_timeout_0_a_lost_reply_is_retried_blindly_as_the_kpl_does(faulty):
    client, name = faulty
    client.lose_replies(1, landed=True)
    config = ProducerConfig(retry_base_delay=0.001, retry_max_delay=0.01, reconcile_timeout=0)

    results = Producer(client, name, config=config).put_many(numbered_records(100, 10))

    assert all(result.success for result in results)
    assert max(copies(client, name).values()) == 2  # the copies the read-back exists to prevent


def test_a_closed_predicted_shard_is_followed_to_its_children(kinesis_mock):
    raw = kinesis_client(kinesis_mock)
    name = unique_stream_name("reconcile-split")
    create_stream(raw, name, shard_count=1)
    client = FaultyKinesis(raw, rng=random.Random(3))
    producer = Producer(client, name, config=FAST)
    assert producer.put_many([UserRecord("warm", b"00000000|")])[0].success  # the map: one shard
    [parent] = raw.list_shards(StreamName=name)["Shards"]
    raw.split_shard(StreamName=name, ShardToSplit=parent["ShardId"], NewStartingHashKey=str(2**127))
    wait_active(raw, name)
    client.lose_replies(1, landed=True)  # predicted for the parent, written to a child, reply lost

    [result] = producer.put_many([UserRecord("after-split", b"00000001|")])

    assert result.success and result.shard_id != parent["ShardId"]
    assert copies(raw, name) == Counter({0: 1, 1: 1})
