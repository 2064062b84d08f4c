"""The lease row's DynamoDB encoding alone (`_lease_codec`) and the sink tables' key lookups
(`_sink_keys`): items and update requests as data, no table, no client beyond a stub."""

from __future__ import annotations

from typing import Any

import pytest
from botocore.exceptions import ClientError

from shardline.consumer import Lease, SinkConflict, SinkRejected
from shardline.consumer import _lease_codec as codec
from shardline.consumer._sink_keys import SinkKeySchemas
from shardline.kinesis import TRIM_HORIZON, Position

SEQUENCE = "49590338271490256608559692538361571095921575989136588898"  # 56 digits: a string column


def test_a_new_rows_item_reads_back_as_the_lease_it_was_written_from():
    lease = Lease("shard-1", "a", 1, Position(SEQUENCE, 3), parent_shard_ids=frozenset({"p2", "p1"}))
    item = codec.new_item(lease, codec.stamp(1700000000.9))
    assert item["checkpoint"] == {"S": SEQUENCE} and item["parentShardId"] == {"SS": ["p1", "p2"]}
    assert item["updatedAt"] == {"N": "1700000000"}
    assert codec.lease_of(item) == lease


def test_an_item_with_every_column_of_ours_reads_into_the_lease():
    item = {
        **codec.key("shard-1"),
        "leaseOwner": {"S": "a"},
        "leaseCounter": {"N": "7"},
        "checkpoint": {"S": TRIM_HORIZON},
        "failedSequenceNumber": {"S": SEQUENCE},
        "failedSubSequenceNumber": {"N": "2"},
        "failedAttempts": {"N": "2"},
        "lastFailureAt": {"N": "12.5"},
        "carefulSpan": {"N": "4"},
        "spanStarted": {"BOOL": True},
        "stalls": {"N": "3"},
        "inflightSequenceNumber": {"S": "100"},
    }
    lease = codec.lease_of(item)
    assert (lease.counter, lease.checkpoint, lease.failed_at) == (
        7,
        Position(TRIM_HORIZON),
        Position(SEQUENCE, 2),
    )
    assert (lease.failed_attempts, lease.failed_time, lease.careful_span) == (2, 12.5, 4)
    assert (lease.span_started, lease.span_returned, lease.stalls, lease.inflight) == (True, False, 3, "100")


def test_a_checkpoint_update_is_a_compare_and_swap_that_clears_what_it_passes():
    lease = Lease("shard-1", "a", 4, Position("100"), failed_at=Position("150"), stalls=2, careful_span=2)
    update = codec.checkpoint_update("leases", lease, Position("200"), codec.stamp(0), release=True)
    assert update["ConditionExpression"] == (
        "leaseCounter = :counter AND checkpoint = :old_seq AND checkpointSubSequenceNumber = :old_sub"
    )
    values = update["ExpressionAttributeValues"]
    assert (values[":counter"], values[":next"], values[":old_seq"], values[":seq"]) == (
        {"N": "4"},
        {"N": "5"},
        {"S": "100"},
        {"S": "200"},
    )
    removed = update["UpdateExpression"].split(" REMOVE ")[1].split(", ")
    assert set(codec.FAILURE_ATTRIBUTES) | set(codec.STALL_ATTRIBUTES) <= set(removed)
    assert {"inflightSequenceNumber", "carefulSpan"} <= set(removed)
    short = codec.checkpoint_update("leases", lease, Position("120"), codec.stamp(0))
    assert "failedSequenceNumber" not in short["UpdateExpression"]  # the failure lies ahead


def test_a_fenced_update_claims_the_row_under_its_counter():
    lease = Lease("shard-1", "me", 9, Position("1"))
    update = codec.fenced_update(
        "leases", lease, {"lastError": ":e"}, {":e": {"S": "x"}}, ["spanStarted"], {"N": "5"}
    )
    assert update["UpdateExpression"] == (
        "SET leaseOwner = :owner, leaseCounter = :next, updatedAt = :now, lastError = :e REMOVE spanStarted"
    )
    assert update["ConditionExpression"] == "leaseCounter = :counter"
    assert update["ExpressionAttributeValues"][":next"] == {"N": "10"}


def _cancelled(*codes: str) -> ClientError:
    reasons = [{"Code": code, "Message": f"because {code}"} for code in codes]
    return ClientError(
        {"Error": {"Code": codec.TRANSACTION_CANCELED}, "CancellationReasons": reasons}, "TransactWriteItems"
    )


def test_a_cancelled_transaction_blames_sink_writes_by_their_index_past_the_checkpoint():
    error = _cancelled("None", "None", "ConditionalCheckFailed")
    with pytest.raises(SinkConflict) as conflict:
        codec.raise_for_sink_writes(error.response["CancellationReasons"], error)
    assert conflict.value.indexes == (1,)
    error = _cancelled("None", "ValidationError")
    with pytest.raises(SinkRejected) as rejected:
        codec.raise_for_sink_writes(error.response["CancellationReasons"], error)
    assert rejected.value.indexes == (0,)
    error = _cancelled("ConditionalCheckFailed", "None")  # the checkpoint's own: not a sink write's
    assert codec.raise_for_sink_writes(error.response["CancellationReasons"], error) is None


class DescribingClient:
    """Answers DescribeTable from `answers` (a key schema, or a ClientError code), counting calls."""

    def __init__(self, **answers: Any) -> None:
        self.answers = answers
        self.calls = 0

    def describe_table(self, TableName: str) -> dict[str, Any]:
        self.calls += 1
        answer = self.answers[TableName]
        if isinstance(answer, str):
            raise ClientError({"Error": {"Code": answer}}, "DescribeTable")
        return {"Table": {"KeySchema": [{"AttributeName": name} for name in answer]}}


def test_sink_keys_are_described_once_per_table():
    client = DescribingClient(orders=["pk", "sk"])
    keys = SinkKeySchemas(client)
    assert keys("orders") == keys("orders") == ("pk", "sk")
    assert client.calls == 1


def test_a_sink_table_the_role_may_not_describe_has_no_known_key_and_is_not_asked_again():
    client = DescribingClient(secret="AccessDeniedException", busy="ThrottlingException")
    keys = SinkKeySchemas(client)
    assert keys("secret") is None and keys("secret") is None
    assert keys("busy") is None and keys("busy") is None  # throttled: asked again each time
    assert client.calls == 3


def test_a_missing_sink_table_raises_so_that_the_shard_stalls_on_it():
    keys = SinkKeySchemas(DescribingClient(gone="ResourceNotFoundException"))
    with pytest.raises(ClientError):
        keys("gone")
