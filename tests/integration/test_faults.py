"""FaultyKinesis itself: what it injects really happens, and what it lets through really lands."""

from __future__ import annotations

import random

import pytest
from botocore.exceptions import ClientError

from local.chaos.faults import THROTTLED, FaultyKinesis
from tests.support.integration import create_stream, kinesis_client, read_stream, unique_stream_name


@pytest.fixture
def faulty(moto_server):
    client = kinesis_client(moto_server)
    name = unique_stream_name("faulty")
    create_stream(client, name, shard_count=1)
    return FaultyKinesis(client, rng=random.Random(5)), name


def entries(count: int) -> list[dict]:
    return [{"Data": f"{i}".encode(), "PartitionKey": f"k{i}"} for i in range(count)]


def landed(client, name: str) -> list[bytes]:
    return sorted(user.data for items in read_stream(client, name).values() for _, _, user in items)


def test_throttled_entries_are_answered_in_place_and_never_written(faulty):
    client, name = faulty
    client.throttle_fraction = 0.5
    response = client.put_records(StreamName=name, Records=entries(100))
    throttled = [i for i, r in enumerate(response["Records"]) if r.get("ErrorCode") == THROTTLED]
    assert response["FailedRecordCount"] == len(throttled) == client.injected[THROTTLED] > 0
    assert all("SequenceNumber" in r for r in response["Records"] if "ErrorCode" not in r)
    assert landed(client, name) == sorted(f"{i}".encode() for i in range(100) if i not in throttled)


def test_record_errors_use_internal_failure(faulty):
    client, name = faulty
    client.record_error_fraction = 1.0
    response = client.put_records(StreamName=name, Records=entries(3))
    assert [r["ErrorCode"] for r in response["Records"]] == ["InternalFailure"] * 3
    assert landed(client, name) == []


def test_failed_requests_raise_the_code_and_send_nothing(faulty):
    client, name = faulty
    client.fail_requests("InternalFailure", times=2)
    for _ in range(2):
        with pytest.raises(ClientError) as raised:
            client.put_records(StreamName=name, Records=entries(2))
        assert raised.value.response["Error"]["Code"] == "InternalFailure"
    assert len(client.put_records(StreamName=name, Records=entries(2))["Records"]) == 2
    assert landed(client, name) == [b"0", b"1"]


def test_count_mismatch_lands_everything_but_answers_one_entry_short(faulty):
    client, name = faulty
    client.mismatch_counts(1)
    assert len(client.put_records(StreamName=name, Records=entries(4))["Records"]) == 3
    assert landed(client, name) == [b"0", b"1", b"2", b"3"]


def test_list_shards_denied_while_set(faulty):
    client, name = faulty
    client.list_shards_error = "AccessDeniedException"
    with pytest.raises(ClientError, match="AccessDenied"):
        client.list_shards(StreamName=name)
    client.list_shards_error = None
    assert len(client.list_shards(StreamName=name)["Shards"]) == 1


def test_lost_replies_raise_a_read_timeout_after_writing_or_before(faulty):
    from botocore.exceptions import ReadTimeoutError

    client, name = faulty
    client.lose_replies(1, landed=True)
    client.lose_replies(1, landed=False)
    with pytest.raises(ReadTimeoutError):
        client.put_records(StreamName=name, Records=entries(3))  # written, reply lost
    with pytest.raises(ReadTimeoutError):
        client.put_records(StreamName=name, Records=[{"Data": b"never", "PartitionKey": "k"}])
    client.put_records(StreamName=name, Records=[{"Data": b"after", "PartitionKey": "k"}])  # answered again
    assert landed(client, name) == [b"0", b"1", b"2", b"after"]
    injected = client.injected
    assert injected["PutRecords:ReplyLost"] == injected["PutRecords:ReplyLostBeforeWriting"] == 1
