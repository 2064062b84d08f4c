"""The emulated DynamoDB's ceiling measured alone, for `bench.local_runtime`: what bounds the sinks.

TransactWriteItems of 100 sink-shaped Puts (as functions/event_sink writes) and of 100
`ADD #count :one` Updates on distinct keys (as functions/key_counter writes), from 1 and 4
threads, on a fresh `local.endpoint.handle.Endpoint`; and BatchWriteItem of 25 sink-shaped Puts
(as a sink's non-transactional writes go); items/s.
"""

from __future__ import annotations

import threading
import time
from typing import Any

RECORD_SIZE = 100
#: What each kind of `dynamodb_ceiling`'s figures writes per call.
CALLS = {
    "sink puts": "TransactWriteItems of 100 sink puts",
    "counter updates": "TransactWriteItems of 100 counter updates",
    "batch puts": "BatchWriteItem of 25 sink puts",
}


def _sink_put(table: str, shard: int, position: int) -> dict[str, Any]:
    sequence = f"4963{position:052d}"
    return {
        "Put": {
            "TableName": table,
            "Item": {
                "pk": {"S": f"shardline-dev-events#shardId-{shard:012d}"},
                "sk": {"S": f"{sequence.zfill(129)}#{position % 1000:06d}"},
                "sequenceNumber": {"S": sequence},
                "subSequenceNumber": {"N": str(position % 1000)},
                "partitionKey": {"S": f"run-000000-abcdef-k{position % 100}"},
                "data": {"B": b"x" * RECORD_SIZE},
                "approximateArrival": {"N": f"{time.time():.3f}"},
            },
        }
    }


def _counter_update(table: str, thread: int, index: int) -> dict[str, Any]:
    return {"Update": {
        "TableName": table,
        "Key": {"partitionKey": {"S": f"t{thread}-k{index}"}},
        "UpdateExpression": "ADD #count :one",
        "ExpressionAttributeNames": {"#count": "count"},
        "ExpressionAttributeValues": {":one": {"N": "1"}},
    }}  # fmt: skip


def dynamodb_ceiling(seconds: float) -> dict[str, dict[int, float]]:
    """Items/s written by each of `CALLS`, from 1 and 4 threads, for `seconds` each."""
    from local.app.provision import client
    from local.endpoint.handle import Endpoint

    results: dict[str, dict[int, float]] = {kind: {} for kind in CALLS}
    with Endpoint(port=0) as endpoint:
        dynamodb = client("dynamodb", endpoint.url)
        for table, key in (
            ("sink", [("pk", "HASH"), ("sk", "RANGE")]),
            ("counter", [("partitionKey", "HASH")]),
        ):
            dynamodb.create_table(
                TableName=table,
                KeySchema=[{"AttributeName": n, "KeyType": t} for n, t in key],
                AttributeDefinitions=[{"AttributeName": n, "AttributeType": "S"} for n, _ in key],
                BillingMode="PAY_PER_REQUEST",
            )
        for threads in (1, 4):
            results["sink puts"][threads] = _transact_rate(
                endpoint.url,
                threads,
                seconds,
                lambda t, n: [_sink_put("sink", t, n * 100 + i) for i in range(100)],
            )
            results["counter updates"][threads] = _transact_rate(
                endpoint.url,
                threads,
                seconds,
                lambda t, n: [_counter_update("counter", t, i) for i in range(100)],
            )
            results["batch puts"][threads] = _transact_rate(
                endpoint.url,
                threads,
                seconds,
                lambda t, n: [{"PutRequest": {"Item": _sink_put("sink", t, n * 25 + i)["Put"]["Item"]}}
                              for i in range(25)],
                call=lambda dynamodb, items: dynamodb.batch_write_item(RequestItems={"sink": items}),
            )  # fmt: skip
    return results


def _transact_rate(url: str, threads: int, seconds: float, entries: Any, call: Any = None) -> float:
    """Items/s that `threads` clients write for `seconds`, each call `call(client, entries(thread, n))`
    (by default a TransactWriteItems of them)."""
    from local.app.provision import client

    call = call or (lambda dynamodb, items: dynamodb.transact_write_items(TransactItems=items))

    written = [0] * threads
    offset = time.monotonic_ns()  # distinct sink keys per measurement
    deadline = time.monotonic() + seconds

    def writer(index: int) -> None:
        dynamodb, n = client("dynamodb", url), 0
        while time.monotonic() < deadline:
            items = entries(index, offset // 1000 + n)
            answer = call(dynamodb, items)
            if answer.get("UnprocessedItems"):
                raise RuntimeError(f"the endpoint left items unprocessed: {answer['UnprocessedItems']}")
            written[index] += len(items)
            n += 1

    began = time.monotonic()
    workers = [threading.Thread(target=writer, args=(i,)) for i in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return sum(written) / (time.monotonic() - began)
