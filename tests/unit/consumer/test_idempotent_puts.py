"""Idempotent puts (`_idempotent`): written with BatchWriteItem before the checkpoint moves past
their records, never in its transaction; a crash between rewrites the same items; a refused put is
blamed on its record; throttling that outlasts the retries stalls the shard with nothing passed.

The consumer-level cases run on the in-memory lease table; `land`'s retries on a DynamoDB client
whose BatchWriteItem leaves items unprocessed (the fault, scripted); the wire on the local endpoint.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from shardline.consumer import LeaseTable, SinkRejected, idempotent_put, is_idempotent_put
from shardline.consumer._idempotent import ATTEMPTS, land
from shardline.consumer._transaction import MAX_PENDING_PUTS, checked_writes, item_of
from shardline.errors import DependencyUnavailable
from shardline.kinesis import TRIM_HORIZON, Position
from shardline.testing import InMemoryLeaseTable, LeaseWrite
from tests.support.shard_parts import KEY, SINK, GiveUps, checkpoint, record, sink_ids


class Crash(BaseException):
    """The process dies (not an Exception: nothing catches it)."""


def item_put(item_id: str, data: str = "x") -> dict[str, Any]:
    return idempotent_put(SINK, {"id": {"S": item_id}, "data": {"S": data}})


def counter_update(name: str) -> dict[str, Any]:
    return {
        "Update": {
            "TableName": SINK,
            "Key": {"id": {"S": name}},
            "UpdateExpression": "ADD #n :one",
            "ExpressionAttributeNames": {"#n": "n"},
            "ExpressionAttributeValues": {":one": {"N": "1"}},
        }
    }


def test_idempotent_puts_land_in_batch_calls_before_a_checkpoint_that_has_no_transaction():
    part = checkpoint()
    table = part.table
    for n in range(1, 31):
        part.done_with(record(n), [item_put(f"r{n}")])
    part.commit()
    assert sorted(sink_ids(table)) == sorted(f"r{n}" for n in range(1, 31))
    assert table.row(KEY).checkpoint == record(30).position
    assert table.writes[LeaseWrite.IDEMPOTENT] == 2  # 30 puts, 25 a call
    assert table.writes[LeaseWrite.TRANSACTION] == 0  # nothing rode with the checkpoint
    assert table.writes[LeaseWrite.CHECKPOINT] == 1
    assert part.metrics.snapshot()["IdempotentPutsWritten"] == 30


def test_puts_waiting_for_one_checkpoint_are_bounded_so_a_commit_stays_short():
    part = checkpoint()
    table = part.table
    for n in range(1, 2 * MAX_PENDING_PUTS + 11):
        part.done_with(record(n), [item_put(f"r{n}")])
        assert part.pending.puts <= MAX_PENDING_PUTS
    assert table.row(KEY).checkpoint == record(2 * MAX_PENDING_PUTS).position  # committed twice on the way
    part.commit()
    assert len(sink_ids(table)) == 2 * MAX_PENDING_PUTS + 10
    assert table.writes[LeaseWrite.CHECKPOINT] == 3
    assert table.writes[LeaseWrite.IDEMPOTENT] == 2 * -(-MAX_PENDING_PUTS // 25) + 1


def test_a_crash_after_the_puts_landed_rewrites_the_same_items_and_the_checkpoint_then_passes_them():
    table = InMemoryLeaseTable(key_schema={SINK: ["id"]}, start=0.0)
    first = checkpoint(table)
    for n in (1, 2, 3):
        first.done_with(record(n), [item_put(f"r{n}", data=f"d{n}")])
    table.fail_next("checkpoint_with", Crash())
    with pytest.raises(Crash):
        first.commit()
    assert sorted(sink_ids(table)) == ["r1", "r2", "r3"]  # landed; the checkpoint did not
    assert table.row(KEY).checkpoint == Position(TRIM_HORIZON)
    replay = checkpoint(table)
    for n in (1, 2, 3):
        replay.done_with(record(n), [item_put(f"r{n}", data=f"d{n}")])
    replay.commit()
    assert sorted(sink_ids(table)) == ["r1", "r2", "r3"]
    assert [item["data"]["S"] for item in table.items(SINK)] == ["d1", "d2", "d3"]
    assert table.row(KEY).checkpoint == record(3).position


def test_a_refused_put_is_blamed_on_its_record_which_is_dead_lettered_and_the_others_land():
    give_up = GiveUps(True)
    part = checkpoint(give_up=give_up)
    table = part.table
    for n in (1, 2, 3):
        part.done_with(record(n), [item_put(f"r{n}")])
    table.fail_next("put_idempotent", SinkRejected("DynamoDB refused idempotent put 1", (1,)))
    part.commit()
    ((blamed, error, details),) = give_up.calls
    assert blamed == record(2) and isinstance(error, SinkRejected)
    assert details["refusedWrites"] == [item_put("r2")]
    assert sorted(sink_ids(table)) == ["r1", "r3"]
    assert table.row(KEY).checkpoint == record(3).position
    assert part.metrics.snapshot()["SinkWritesRefused"] == 1


def test_puts_that_do_not_land_move_no_checkpoint():
    part = checkpoint()
    table = part.table
    part.done_with(record(1), [item_put("r1")])
    table.fail_next("put_idempotent", DependencyUnavailable("throttled"))
    with pytest.raises(DependencyUnavailable):
        part.commit()
    assert table.row(KEY).checkpoint == Position(TRIM_HORIZON)
    part.commit()  # the next try lands them, then checkpoints
    assert sink_ids(table) == ["r1"] and table.row(KEY).checkpoint == record(1).position


def test_transactional_writes_beside_idempotent_puts_ride_with_the_checkpoint_after_the_puts_landed():
    part = checkpoint()
    table = part.table
    part.done_with(record(1), [item_put("r1"), counter_update("count")])
    part.done_with(record(2), [item_put("r2"), counter_update("count")])
    assert part.pending.writes == [counter_update("count")]  # the second starts a transaction of its own
    part.commit()
    assert table.item(SINK, {"id": {"S": "count"}})["n"] == {"N": "2"}
    assert sorted(sink_ids(table)) == ["count", "r1", "r2"]
    assert table.writes[LeaseWrite.TRANSACTION] == 2
    assert table.writes[LeaseWrite.IDEMPOTENT] == 2  # each transaction's puts landed before it


def test_an_idempotent_put_is_checked_as_a_put_and_may_carry_no_condition():
    keys = {SINK: ("id",)}.get
    assert checked_writes([item_put("a")], keys) == [item_put("a")]
    with_condition = item_put("a")
    with_condition["IdempotentPut"]["ConditionExpression"] = "attribute_not_exists(id)"
    with pytest.raises(ValueError, match="sink write 0: IdempotentPut takes TableName and Item only"):
        checked_writes([with_condition], keys)
    with pytest.raises(ValueError, match="IdempotentPut into sink lacks key attribute 'id'"):
        checked_writes([idempotent_put(SINK, {"data": {"S": "x"}})], keys)
    with pytest.raises(ValueError, match="touches an item another write of the same record touches"):
        checked_writes([item_put("a"), {"Put": {"TableName": SINK, "Item": {"id": {"S": "a"}}}}], keys)
    assert is_idempotent_put(item_put("a")) and not is_idempotent_put({"Put": {}})
    with pytest.raises(ValueError, match="table_name"):
        idempotent_put("", {"id": {"S": "a"}})


class ThrottlingClient:
    """A DynamoDB client whose BatchWriteItem leaves the last item of each call unprocessed the
    first `throttled` times (the fault), and keeps what it wrote."""

    def __init__(self, throttled: int) -> None:
        self.throttled = throttled
        self.calls: list[int] = []
        self.items: dict[str, Mapping[str, Any]] = {}

    def batch_write_item(self, *, RequestItems: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
        (entries,) = RequestItems.values()
        self.calls.append(len(entries))
        landed, left = (entries[:-1], entries[-1:]) if self.throttled > 0 else (entries, [])
        self.throttled -= 1
        for entry in landed:
            item = entry["PutRequest"]["Item"]
            self.items[item["id"]["S"]] = item
        return {"UnprocessedItems": {SINK: left} if left else {}}


def _land(client: ThrottlingClient, puts: list[dict[str, Any]]) -> int:
    keys = {SINK: ("id",)}.get
    return land(client, puts, lambda put: item_of(put, keys), sleep=lambda seconds: None)  # type: ignore[arg-type]


def test_unprocessed_items_are_sent_again_until_they_land():
    client = ThrottlingClient(throttled=2)
    assert _land(client, [item_put(f"r{n}") for n in range(3)]) == 3
    assert client.calls == [3, 1, 1] and sorted(client.items) == ["r0", "r1", "r2"]


def test_throttling_that_outlasts_the_retries_raises_dependency_unavailable_naming_the_table():
    client = ThrottlingClient(throttled=ATTEMPTS)
    with pytest.raises(
        DependencyUnavailable, match=f"1 idempotent puts unprocessed after {ATTEMPTS} .*: sink"
    ):
        _land(client, [item_put("r0"), item_put("r1")])


def test_two_puts_of_one_item_in_one_call_keep_the_last_and_calls_hold_25_items():
    client = ThrottlingClient(throttled=0)
    puts = [item_put(f"r{n}") for n in range(30)] + [item_put("r3", data="later")]
    assert _land(client, puts) == 2
    assert client.calls == [25, 5]
    assert client.items["r3"]["data"] == {"S": "later"}


def test_on_the_local_endpoint_puts_land_and_a_refused_one_is_named_by_its_index(local_endpoint_no_limits):
    from local.app.provision import client

    dynamodb = client("dynamodb", local_endpoint_no_limits)
    LeaseTable.create(dynamodb, "idempotent-leases")
    dynamodb.create_table(
        TableName="idempotent-sink",
        KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    table = LeaseTable(dynamodb, "idempotent-leases")
    puts = [idempotent_put("idempotent-sink", {"id": {"S": f"r{n}"}, "n": {"N": str(n)}}) for n in range(40)]
    assert table.put_idempotent([*puts, puts[7]]) == 2
    stored = dynamodb.scan(TableName="idempotent-sink")["Items"]
    assert sorted(int(item["n"]["N"]) for item in stored) == list(range(40))
    wrong_type = idempotent_put("idempotent-sink", {"id": {"N": "1"}})  # the key is a string
    with pytest.raises(SinkRejected) as refused:
        table.put_idempotent([puts[0], wrong_type, puts[1]])
    assert refused.value.indexes == (1,)
