"""What the endpoint's DynamoDB keeps per item stored, and that repeated calls keep nothing.

The endpoint's code path (moto's DynamoDB with `local.endpoint.metering` and `local.endpoint.dynamodb`
applied, model objects untracked, as `local.endpoint.server.serve` sets it up) runs in a child
process under `mock_aws`, so this process's moto stays unpatched; the child counts moto's
`DynamoType` objects alive (`gc`) and the bytes allocated (`tracemalloc`) before and after each
kind of call, and answers them as JSON.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[3]
SINK_ITEMS, GUARDS, REPEATS = 2000, 2000, 300
#: A sink item's attributes, as functions/event_sink writes them (client ids): pk, sk, partitionKey,
#: sequenceNumber, data, approximateArrival, expiresAt.
SINK_ATTRIBUTES = 7


def _sink_item(i: int) -> dict[str, Any]:
    return {
        "pk": {"S": f"id#run-000001-{i:012d}"},
        "sk": {"S": "id"},
        "partitionKey": {"S": f"key-{i % 1000}"},
        "sequenceNumber": {"S": f"4963{i:052d}"},
        "data": {"B": b"x" * 100},
        "approximateArrival": {"N": "1790000000.123"},
        "expiresAt": {"N": "1790086400"},
    }


def _guarded_transaction(first: int, count: int) -> list[dict[str, Any]]:
    """A key counter's checkpoint transaction: a guard Put per record (a ~300-character key, put if
    absent), an `ADD` on each of 49 of 100 counters, the lease's checkpoint."""
    guards = [
        {"Put": {"TableName": "counter", "ConditionExpression": "attribute_not_exists(pk)",
                 "Item": {"pk": {"S": f"once#{'k' * 280}#{i:012d}"}, "sk": {"S": "once"}}}}
        for i in range(first, first + count)
    ]  # fmt: skip
    adds = [
        {"Update": {"TableName": "counter",
                    "Key": {"pk": {"S": f"count#{(first + j) % 100}"}, "sk": {"S": "count"}},
                    "UpdateExpression": "ADD #count :n", "ExpressionAttributeNames": {"#count": "count"},
                    "ExpressionAttributeValues": {":n": {"N": "1"}}}}
        for j in range(49)
    ]  # fmt: skip
    checkpoint = {"Update": {"TableName": "leases", "Key": {"leaseKey": {"S": "shard-1"}},
                             "UpdateExpression": "SET checkpoint = :c",
                             "ExpressionAttributeValues": {":c": {"S": f"4963{first:052d}"}}}}  # fmt: skip
    return [*guards, *adds, checkpoint]


def probe() -> None:
    """In the child: each kind of call's DynamoType objects and bytes kept, printed as JSON."""
    import gc
    import tracemalloc

    import boto3
    from moto import mock_aws
    from moto.dynamodb.models.dynamo_type import DynamoType

    from local.app.model import ACCOUNT, REGION
    from local.endpoint import dynamodb, metering, server

    os.environ.update(MOTO_ACCOUNT_ID=ACCOUNT, AWS_ACCESS_KEY_ID="test", AWS_SECRET_ACCESS_KEY="test")
    metering.install()  # in `serve`'s order
    dynamodb.apply()
    server._stop_tracking_model_instances()
    with mock_aws():
        db = boto3.client("dynamodb", region_name=REGION)
        for table, key in (("sink", ("pk", "sk")), ("counter", ("pk", "sk")), ("leases", ("leaseKey",))):
            db.create_table(
                TableName=table,
                KeySchema=[{"AttributeName": n, "KeyType": ("HASH", "RANGE")[k]} for k, n in enumerate(key)],
                AttributeDefinitions=[{"AttributeName": n, "AttributeType": "S"} for n in key],
                BillingMode="PAY_PER_REQUEST",
            )

        def write_sink(first: int, count: int) -> None:
            for start in range(first, first + count, 25):
                items = [{"PutRequest": {"Item": _sink_item(i)}} for i in range(start, start + 25)]
                assert not db.batch_write_item(RequestItems={"sink": items}).get("UnprocessedItems")

        def write_guards(first: int, count: int) -> None:
            for start in range(first, first + count, 50):
                db.transact_write_items(TransactItems=_guarded_transaction(start, 50))

        def repeat(first_call: int, count: int) -> None:
            """`count` UpdateItems of the same counters; every 10th, a BatchGetItem of 100 sink items
            and one of 100 sink items not written (yet: a verifier polling for them)."""
            for i in range(first_call, first_call + count):
                db.update_item(**_guarded_transaction(i, 0)[i % 49]["Update"])
                if i % 10 == 0:
                    for first, found in ((i * 10 % SINK_ITEMS, 100), (10**8 + i * 100, 0)):
                        keys = [
                            {"pk": _sink_item(j)["pk"], "sk": {"S": "id"}} for j in range(first, first + 100)
                        ]
                        read = db.batch_get_item(RequestItems={"sink": {"Keys": keys}})["Responses"]["sink"]
                        assert len(read) == found

        def dynamo_types() -> int:
            gc.collect()
            return sum(type(o) is DynamoType for o in gc.get_objects())

        def kept(call: Any, *args: int) -> tuple[int, int]:
            objects, size = dynamo_types(), tracemalloc.get_traced_memory()[0]
            call(*args)
            return dynamo_types() - objects, tracemalloc.get_traced_memory()[0] - size

        write_sink(10**9, 100)  # warm: every path's modules imported, the client's and moto's caches filled
        write_guards(10**9, 100)
        write_sink(0, SINK_ITEMS // 2)
        repeat(10**6, 50)
        tracemalloc.start()
        answer = {
            "sink": kept(write_sink, SINK_ITEMS // 2, SINK_ITEMS),
            "guards": kept(write_guards, 0, GUARDS),
            "repeats": kept(repeat, 0, REPEATS),
        }
    print(json.dumps(answer))


@pytest.fixture(scope="module")
def kept() -> dict[str, list[int]]:
    script = "from tests.local.endpoint.test_dynamodb_memory import probe; probe()"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    answer: dict[str, list[int]] = json.loads(done.stdout.strip().splitlines()[-1])
    return answer


def test_a_stored_item_holds_one_dynamo_type_per_attribute(kept):
    # moto built each key twice (the item's `hash_key`/`range_key` and its key attributes), and a
    # look-up before the write (the metering's, the transaction's) made a third copy of the hash
    # key, the new partition's key: 10 DynamoType objects (~880 bytes) for a 7-attribute sink item,
    # 5 for a 2-attribute guard item
    objects, size = kept["sink"]
    assert objects / SINK_ITEMS <= SINK_ATTRIBUTES + 0.25, f"{objects / SINK_ITEMS:.2f} per sink item"
    assert size / SINK_ITEMS < 2600, f"{size / SINK_ITEMS:.0f} bytes per sink item"
    objects, size = kept["guards"]
    assert objects / GUARDS <= 2.25, f"{objects / GUARDS:.2f} per guard item"
    assert size / GUARDS < 2000, f"{size / GUARDS:.0f} bytes per guard item"


def test_updates_of_the_same_items_and_reads_keep_nothing(kept):
    # a read of an item not written added an empty partition for good: ~300 bytes a key
    objects, size = kept["repeats"]
    assert objects <= 20, f"{objects} DynamoType objects kept over {REPEATS} updates and 60 BatchGetItems"
    assert size / REPEATS < 200, f"{size / REPEATS:.0f} bytes kept per update"
