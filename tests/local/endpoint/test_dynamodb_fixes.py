"""The endpoint's DynamoDB: writes atomic across threads, cancelled transactions rolled back item by item."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from botocore.exceptions import ClientError

from local.app.provision import client
from local.endpoint.handle import Endpoint

pytestmark = pytest.mark.integration


def create_pk_sk_table(dynamodb: Any, name: str) -> None:
    """An on-demand table keyed by `pk` and `sk`, both strings."""
    dynamodb.create_table(
        TableName=name,
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
        AttributeDefinitions=[
            {"AttributeName": "pk", "AttributeType": "S"},
            {"AttributeName": "sk", "AttributeType": "S"},
        ],
        BillingMode="PAY_PER_REQUEST",
    )


@pytest.fixture
def table(local_endpoint_no_limits, request):
    dynamodb = client("dynamodb", local_endpoint_no_limits, retries={"max_attempts": 0})
    name = f"fixes-{request.node.name[:40]}"
    create_pk_sk_table(dynamodb, name)
    yield dynamodb, name
    dynamodb.delete_table(TableName=name)


def item(pk: str, sk: str, **extra: dict) -> dict:
    return {"pk": {"S": pk}, "sk": {"S": sk}, **extra}


def scan(dynamodb, name: str) -> list[dict]:
    items = []
    for page in dynamodb.get_paginator("scan").paginate(TableName=name, ConsistentRead=True):
        items += page["Items"]
    return sorted(items, key=lambda i: (i["pk"]["S"], i["sk"]["S"]))


def test_a_cancelled_transaction_leaves_every_item_as_it_was(table):
    dynamodb, name = table
    dynamodb.put_item(TableName=name, Item=item("a", "1", n={"N": "1"}))
    dynamodb.put_item(TableName=name, Item=item("a", "2", n={"N": "2"}))
    before = scan(dynamodb, name)
    with pytest.raises(ClientError) as raised:
        dynamodb.transact_write_items(
            TransactItems=[
                {"Put": {"TableName": name, "Item": item("a", "3", n={"N": "3"})}},  # a new item
                {"Put": {"TableName": name, "Item": item("a", "1", n={"N": "10"})}},  # replaces one
                {
                    "Update": {
                        "TableName": name,
                        "Key": item("a", "2"),
                        "UpdateExpression": "SET n = :n",
                        "ExpressionAttributeValues": {":n": {"N": "20"}},
                    }
                },
                {"Delete": {"TableName": name, "Key": item("b", "1")}},
                {
                    "ConditionCheck": {
                        "TableName": name,
                        "Key": item("a", "9"),
                        "ConditionExpression": "attribute_exists(pk)",  # fails: cancels the lot
                    }
                },
            ]
        )
    assert raised.value.response["Error"]["Code"] == "TransactionCanceledException"
    assert scan(dynamodb, name) == before


def test_a_read_never_sees_the_writes_of_a_transaction_that_is_cancelled(table):
    """moto writes a transaction's items one by one and puts them back when a later condition
    fails: a Query or GetItem in between must not see them (DynamoDB never shows them)."""
    dynamodb, name = table
    assert_reads_never_see_cancelled_writes(dynamodb, name, guard_table=name)


def test_a_read_of_one_table_never_sees_a_cancelled_transaction_that_spans_two(table):
    """The endpoint locks per table: a transaction holds every table it names until it has
    committed or been rolled back, whichever table its failing condition is in."""
    dynamodb, name = table
    guards = f"{name[:40]}-guards"
    create_pk_sk_table(dynamodb, guards)
    try:
        assert_reads_never_see_cancelled_writes(dynamodb, name, guard_table=guards)
    finally:
        dynamodb.delete_table(TableName=guards)


def assert_reads_never_see_cancelled_writes(dynamodb, name: str, *, guard_table: str) -> None:
    dynamodb.put_item(TableName=guard_table, Item=item("guard", "x", shardlineOnce={"N": "1"}))
    seen: list[str] = []
    stop = threading.Event()

    def read() -> None:
        reader = client("dynamodb", table_endpoint(dynamodb))
        while not stop.is_set():
            page = reader.query(
                TableName=name,
                KeyConditionExpression="pk = :pk",
                ExpressionAttributeValues={":pk": {"S": "items"}},
                ConsistentRead=True,
            )
            seen.extend(i["sk"]["S"] for i in page["Items"])
            if reader.get_item(TableName=name, Key=item("items", "0"), ConsistentRead=True).get("Item"):
                seen.append("get:0")

    readers = [threading.Thread(target=read) for _ in range(2)]
    for thread in readers:
        thread.start()
    try:
        for _ in range(60):
            data = {"B": b"x" * 2000}  # moto writes slower: a wider window between write and rollback
            writes = [{"Put": {"TableName": name, "Item": item("items", str(n), d=data)}} for n in range(98)]
            guard = {"Put": {"TableName": guard_table, "Item": item("guard", "x", shardlineOnce={"N": "1"})}}
            guard["Put"]["ConditionExpression"] = "attribute_not_exists(shardlineOnce)"  # fails
            with pytest.raises(ClientError, match="TransactionCanceledException"):
                dynamodb.transact_write_items(TransactItems=[*writes, guard])
    finally:
        stop.set()
        for thread in readers:
            thread.join()
    assert seen == [], f"{len(seen)} reads saw an item of a cancelled transaction, e.g. {seen[:3]}"


def table_endpoint(dynamodb) -> str:
    return dynamodb.meta.endpoint_url


def test_concurrent_transactions_on_a_growing_table_all_land_without_server_errors(table):
    """moto copied the whole table per transaction: with writers alongside, copies failed with
    "dictionary changed size during iteration" (a 500), and each commit slowed as the table grew."""
    dynamodb, name = table
    errors: list[Exception] = []

    def writer(thread: int) -> None:
        mine = client("dynamodb", dynamodb.meta.endpoint_url, retries={"max_attempts": 0})
        try:
            for batch in range(15):
                mine.transact_write_items(
                    TransactItems=[
                        {"Put": {"TableName": name, "Item": item(f"t{thread}", f"{batch:03d}-{i:03d}")}}
                        for i in range(100)
                    ]
                )
        except Exception as error:  # every failure is a finding
            errors.append(error)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert len(scan(dynamodb, name)) == 4 * 15 * 100


def test_two_compare_and_swaps_of_one_item_from_two_threads_never_both_succeed(table):
    dynamodb, name = table
    dynamodb.put_item(TableName=name, Item=item("lease", "1", counter={"N": "0"}))
    successes: list[tuple[int, int]] = []
    lock = threading.Lock()

    def take(thread: int) -> None:
        mine = client("dynamodb", dynamodb.meta.endpoint_url, retries={"max_attempts": 0})
        for _ in range(60):
            current = mine.get_item(TableName=name, Key=item("lease", "1"), ConsistentRead=True)["Item"]
            seen = int(current["counter"]["N"])
            try:
                mine.transact_write_items(
                    TransactItems=[
                        {
                            "Update": {
                                "TableName": name,
                                "Key": item("lease", "1"),
                                "UpdateExpression": "SET #c = :next",
                                "ConditionExpression": "#c = :seen",
                                "ExpressionAttributeNames": {"#c": "counter"},
                                "ExpressionAttributeValues": {
                                    ":seen": {"N": str(seen)},
                                    ":next": {"N": str(seen + 1)},
                                },
                            }
                        }
                    ]
                )
            except ClientError as error:
                assert error.response["Error"]["Code"] == "TransactionCanceledException"
                continue
            with lock:
                successes.append((thread, seen))

    threads = [threading.Thread(target=take, args=(n,)) for n in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    seen_values = [seen for _, seen in successes]
    assert len(seen_values) == len(set(seen_values)), "two swaps succeeded from the same counter value"
    final = dynamodb.get_item(TableName=name, Key=item("lease", "1"), ConsistentRead=True)["Item"]
    assert int(final["counter"]["N"]) == len(successes)


def test_a_query_reads_its_partition_in_key_order_with_conditions_pages_and_indexes(local_endpoint_no_limits):
    """Query answers from the one partition it names (moto sorted the whole table per Query): the same
    answers as DynamoDB gives, including sort-key conditions, pages, reverse order and an index."""
    dynamodb = client("dynamodb", local_endpoint_no_limits)
    name = "fixes-query"
    dynamodb.create_table(
        TableName=name,
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
        AttributeDefinitions=[
            {"AttributeName": "pk", "AttributeType": "S"},
            {"AttributeName": "sk", "AttributeType": "S"},
            {"AttributeName": "tag", "AttributeType": "S"},
        ],
        GlobalSecondaryIndexes=[
            {
                "IndexName": "by-tag",
                "KeySchema": [{"AttributeName": "tag", "KeyType": "HASH"}],
                "Projection": {"ProjectionType": "ALL"},
            }
        ],
        BillingMode="PAY_PER_REQUEST",
    )
    try:
        for partition in ("a", "b", "c"):
            for n in (5, 1, 4, 2, 3):
                dynamodb.put_item(TableName=name, Item=item(partition, f"{n:03d}", tag={"S": f"t{n % 2}"}))

        def keys(**query) -> list[str]:
            answer = dynamodb.query(TableName=name, **query)
            return [f"{i['pk']['S']}{i['sk']['S']}" for i in answer["Items"]]

        whole = {"KeyConditionExpression": "pk = :p", "ExpressionAttributeValues": {":p": {"S": "b"}}}
        assert keys(**whole) == [f"b{n:03d}" for n in range(1, 6)]
        assert keys(**whole, ScanIndexForward=False) == [f"b{n:03d}" for n in range(5, 0, -1)]
        after = {
            "KeyConditionExpression": "pk = :p AND sk > :s",
            "ExpressionAttributeValues": {":p": {"S": "c"}, ":s": {"S": "002"}},
        }
        assert keys(**after) == ["c003", "c004", "c005"]
        first = dynamodb.query(TableName=name, Limit=2, **whole)
        rest = dynamodb.query(TableName=name, ExclusiveStartKey=first["LastEvaluatedKey"], **whole)
        assert [i["sk"]["S"] for i in first["Items"] + rest["Items"]] == [f"{n:03d}" for n in range(1, 6)]
        assert keys(**{**whole, "ExpressionAttributeValues": {":p": {"S": "none"}}}) == []
        by_tag = dynamodb.query(
            TableName=name,
            IndexName="by-tag",
            KeyConditionExpression="tag = :t",
            ExpressionAttributeValues={":t": {"S": "t1"}},
        )
        assert sorted(f"{i['pk']['S']}{i['sk']['S']}" for i in by_tag["Items"]) == sorted(
            f"{p}{n:03d}" for p in "abc" for n in (1, 3, 5)
        )
    finally:
        dynamodb.delete_table(TableName=name)


def _rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmRSS")) / 1024


def test_updates_leave_no_copy_behind_in_the_endpoints_memory(tmp_path):
    # moto kept every model object it created: each update's copy of its item, ~1.3 KB, for good.
    with Endpoint(port=0, limits=False, log_path=tmp_path / "endpoint.log") as endpoint:
        dynamodb = client("dynamodb", endpoint.url)
        dynamodb.create_table(
            TableName="counters",
            KeySchema=[{"AttributeName": "k", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "k", "AttributeType": "S"}],
            BillingMode="PAY_PER_REQUEST",
        )
        add_one = {"UpdateExpression": "ADD c :one", "ExpressionAttributeValues": {":one": {"N": "1"}}}

        def count(transactions: int) -> None:
            for _ in range(transactions):
                keys = [{"k": {"S": f"k{j}"}} for j in range(100)]
                updates = [{"Update": {"TableName": "counters", "Key": key, **add_one}} for key in keys]
                dynamodb.transact_write_items(TransactItems=updates)

        count(50)  # warm: the 100 items exist, moto's parsers are imported
        before = _rss_mib(endpoint.pid)
        count(300)  # 30,000 updates: 38 MiB kept when every copy was tracked
        grown = _rss_mib(endpoint.pid) - before
        assert dynamodb.get_item(TableName="counters", Key={"k": {"S": "k7"}})["Item"]["c"] == {"N": "350"}
    assert grown < 10, f"the endpoint grew {grown:.1f} MiB over 30,000 updates"
