"""`LeaseStore`, the protocol: the DynamoDB `LeaseTable` (on moto) and `InMemoryLeaseTable` both
implement it — neither subclassing the other — and one test body runs against each."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import boto3
import pytest
from moto import mock_aws

from shardline.consumer import Lease, LeaseLost, LeaseStore, LeaseTable, SinkConflict
from shardline.consumer._lease_store import Claim, ClaimsMoved
from shardline.kinesis import SHARD_END, TRIM_HORIZON, Position
from shardline.testing import InMemoryLeaseTable

SINK = "sink"


def _dynamodb_table() -> LeaseTable:
    dynamodb = boto3.client("dynamodb", region_name="us-east-1")
    LeaseTable.create(dynamodb, "leases")
    dynamodb.create_table(
        TableName=SINK,
        KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    return LeaseTable(dynamodb, "leases", clock=lambda: 1000.0, sleep=lambda seconds: None)


@pytest.fixture(params=["dynamodb", "in-memory"])
def store(request: pytest.FixtureRequest) -> Iterator[Any]:
    if request.param == "in-memory":
        yield InMemoryLeaseTable(key_schema={SINK: ["id"]}, start=1000.0)
        return
    with mock_aws():
        yield _dynamodb_table()


def put(item_id: str, *, only_new: bool = False) -> dict[str, Any]:
    body: dict[str, Any] = {"TableName": SINK, "Item": {"id": {"S": item_id}}}
    if only_new:
        body["ConditionExpression"] = "attribute_not_exists(id)"
    return {"Put": body}


def test_neither_table_subclasses_the_other_and_both_are_lease_stores(store):
    assert isinstance(store, LeaseStore)
    assert not issubclass(InMemoryLeaseTable, LeaseTable)
    assert not issubclass(LeaseTable, InMemoryLeaseTable)


def test_begin_claims_the_row_and_finds_a_delivery_that_never_answered(store):
    first, crashed = store.begin("shard-1", "a", "100")
    assert (first.owner, first.counter, first.checkpoint, first.inflight, crashed) == (
        "a",
        1,
        Position(TRIM_HORIZON),
        "100",
        False,
    )
    again, crashed = store.begin("shard-1", "b", "100")  # a's delivery left its mark: it died
    assert (again.counter, crashed) == (2, True)
    released = store.release(again)
    assert released.inflight is None and store.get("shard-1").inflight is None


def test_checkpoints_only_move_forward_and_only_under_the_lease_they_were_taken_with(store):
    held = store.hold("shard-1", "a")
    moved = store.checkpoint(held, Position("200", 1))
    assert moved.checkpoint == Position("200", 1) and moved.counter == held.counter + 1
    assert store.checkpoint(moved, Position("200")) == moved  # backwards: nothing written
    with pytest.raises(LeaseLost):
        store.checkpoint(held, Position("300"))  # a stale lease: fenced
    taken = store.take("shard-1", "b")
    with pytest.raises(LeaseLost):
        store.record_failure(moved, Position("300"), "late")
    assert store.get("shard-1") == Lease("shard-1", "b", taken.counter, Position("200", 1), owner_switches=1)


def test_failures_count_per_position_and_a_checkpoint_with_writes_clears_the_one_it_passes(store):
    lease = store.take("shard-1", "a")
    lease = store.record_failure(lease, Position("300"), "boom")
    lease = store.record_failure(lease, Position("300"), "boom again", details='{"why": 1}')
    assert (lease.failed_at, lease.failed_attempts, lease.last_error) == (Position("300"), 2, "boom again")
    assert lease.failed_time == store.now() and lease.last_error_details == '{"why": 1}'
    lease = store.checkpoint_with(lease, Position("300"), [put("x")])
    stored = store.get("shard-1")
    assert stored == lease
    assert (stored.failed_at, stored.failed_attempts, stored.checkpoint) == (None, 0, Position("300"))


def test_a_sink_write_whose_condition_fails_cancels_the_checkpoint_and_names_its_index(store):
    lease = store.take("shard-1", "a")
    lease = store.checkpoint_with(lease, Position("1"), [put("x")])
    with pytest.raises(SinkConflict) as refused:
        store.checkpoint_with(lease, Position("2"), [put("y"), put("x", only_new=True)])
    assert refused.value.indexes == (1,)
    assert store.get("shard-1").checkpoint == Position("1")
    assert store.sink_key(SINK) == ("id",)


def test_careful_spans_stalls_and_skipped_batches_are_kept_in_the_row(store):
    lease = store.take("shard-1", "a")
    lease = store.mark_careful(lease, 1, started=True)
    assert (lease.careful_span, lease.span_started, lease.span_returned) == (1, True, False)
    lease = store.stall(lease, "DynamoDB is down", "500")
    lease = store.stall(lease, "still down", "500")
    assert (lease.stalls, lease.stalled_cause, lease.stalled_sequence) == (2, "still down", "500")
    lease = store.note_skipped(lease, '[{"start": "500"}]')
    assert (lease.stalls, lease.stalled_since, lease.skipped_by_mapping) == (0, None, '[{"start": "500"}]')
    stored = store.get("shard-1")
    assert (stored.careful_span, stored.span_started, stored.stalls) == (1, True, 0)
    assert stored.skipped_by_mapping == '[{"start": "500"}]'


def test_rows_start_where_they_are_told_and_a_closed_shard_ends_only_where_it_was_seen(store):
    assert store.start_at("parent", Position("900")) is True
    assert store.start_at("parent", Position("1")) is False
    seen = store.get("parent")
    moved = store.checkpoint(store.take("parent", "a"), Position("950"))
    assert store.mark_shard_end(seen) is False  # the checkpoint moved since
    assert store.mark_shard_end(moved) is True
    assert store.get("parent").checkpoint == Position(SHARD_END)
    assert store.get("missing") is None


def test_a_claim_renews_takes_or_releases_a_row_only_at_the_counter_it_was_read_at(store):
    assert store.start_at("shard-1", Position(TRIM_HORIZON), parent_shard_ids=["shard-0"])
    [seen] = store.leases()
    assert (seen.owner, seen.counter, seen.parent_shard_ids) == ("", 1, frozenset({"shard-0"}))
    taken = store.claim(seen, "w1")
    assert (taken.owner, taken.counter, taken.owner_switches) == ("w1", 2, 1)
    renewed = store.claim(taken, "w1")
    assert (renewed.counter, renewed.owner_switches) == (3, 1)  # a renewal is no owner switch
    with pytest.raises(LeaseLost):
        store.claim(taken, "w2")  # read at counter 2: someone (w1's renewal) wrote since
    released = store.claim(renewed, "")
    assert store.get("shard-1").owner == "" and released.counter == 4


def test_a_begin_under_a_held_lease_is_fenced_and_finds_its_predecessors_delivery(store):
    store.begin("shard-1", "w0", "100")  # w0 marks a delivery and dies
    [seen] = store.leases()
    held = store.claim(seen, "w1")
    lease, crashed = store.begin("shard-1", "w1", "100", held=held)
    assert crashed and lease.counter == held.counter + 1 and lease.inflight == "100"
    with pytest.raises(LeaseLost):  # `held` is one write behind now
        store.begin("shard-1", "w1", "100", held=held)
    assert store.get("shard-1").owner == "w1"


def test_claims_ride_with_a_checkpoint_only_under_the_version_they_were_read_at(store):
    """Issue 39, property 4: a redrive row's claims (`_redrive_claims`), the same in both tables."""
    redrive_key = "shard-1#redrive#5"
    assert store.start_at(redrive_key, Position("4"), applied='{"v":1}')
    assert store.get(redrive_key).applied_aggregates == '{"v":1}'
    redriving = store.take(redrive_key, "redrive")
    # The redrive's claim rides in its own checkpoint's write.
    mine = Claim(redrive_key, 0, "redriveClaims", '{"p.0":[2,2]}')
    redriving = store.checkpoint(redriving, Position("6"), claims=[mine])
    assert (redriving.apply_version, redriving.redrive_claims) == (1, '{"p.0":[2,2]}')
    assert store.get(redrive_key) == redriving
    # The group's claim, read before the redrive's, is refused with everything of its checkpoint.
    group = store.take("shard-1", "group")
    stale = Claim(redrive_key, 0, "groupClaims", '{"p.0":[2,2]}')
    with pytest.raises(ClaimsMoved):
        store.checkpoint_with(group, Position("9"), [put("a")], claims=[stale])
    with pytest.raises(ClaimsMoved):
        store.checkpoint(group, Position("9"), claims=[stale])
    assert store.get("shard-1").checkpoint == group.checkpoint
    assert store.get(redrive_key) == redriving
    # Read again, it lands in the redrive row without touching the redrive's lease.
    fresh = Claim(redrive_key, 1, "groupClaims", '{"p.1":[1,1]}')
    group = store.checkpoint_with(group, Position("9"), [put("a")], claims=[fresh])
    row = store.get(redrive_key)
    assert (row.apply_version, row.group_claims, row.redrive_claims) == (2, '{"p.1":[1,1]}', '{"p.0":[2,2]}')
    assert (row.owner, row.counter, row.checkpoint) == ("redrive", redriving.counter, Position("6"))
    # The redrive's next claim, under the version it read, is refused; its lease still holds.
    again = Claim(redrive_key, 1, "redriveClaims", '{"p.0":[2,3]}')
    with pytest.raises(ClaimsMoved):
        store.checkpoint(redriving, Position("7"), claims=[again])
    redriving = store.checkpoint(redriving, Position("7"), claims=[replace(again, version=2)])
    assert (redriving.apply_version, store.get(redrive_key).redrive_claims) == (3, '{"p.0":[2,3]}')
