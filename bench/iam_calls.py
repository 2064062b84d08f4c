"""What naming a request's IAM needs costs per request at the local endpoint (issue 40, performance).

    python -m bench.iam_calls [--repeats 7] [--batch 2000]

For requests signed by botocore (PutRecords of 100 records, TransactWriteItems of 4 items, GetRecords,
SendMessage), prints µs per `local.iam.calls.call_of` and, measured in the same run and loop, µs per
`json.loads` of the same body: the floor any enforcer reading the body pays.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import Any

from bench.timing import best_of
from local.iam.calls import call_of
from local.iam.capture import ACCOUNT, ENDPOINT, REGION, signed_request

Request = tuple[str, str, str, str, dict[str, str], bytes]


def _signed(service: str, method: str, **params: Any) -> Request:
    """(signing service, method, path, query, headers, body) of the request botocore signs."""
    sent = signed_request(service, method, **params)
    return sent.signing_name, sent.method, sent.path, sent.query, sent.headers, sent.body


def requests() -> dict[str, Request]:
    key = {"pk": {"S": "k"}}
    iterator = "Y2FsbHM6c2hhcmRJZC0wMDAwMDAwMDAwMDA6MTIzNDU2Nzg5MDoxNzAwMDAwMDAwMDAw"  # calls:shardId-...:...
    return {
        "PutRecords (100 records of 100 B)": _signed(
            "kinesis",
            "put_records",
            StreamName="events",
            Records=[{"Data": b"x" * 100, "PartitionKey": f"key-{i}"} for i in range(100)],
        ),
        "TransactWriteItems (4 items)": _signed(
            "dynamodb",
            "transact_write_items",
            TransactItems=[
                {"Put": {"TableName": "sink", "Item": key}},
                {
                    "Update": {
                        "TableName": "leases",
                        "Key": key,
                        "UpdateExpression": "SET c = :c",
                        "ExpressionAttributeValues": {":c": {"N": "1"}},
                    }
                },
                {"Put": {"TableName": "sink", "Item": {"pk": {"S": "j"}}}},
                {
                    "ConditionCheck": {
                        "TableName": "leases",
                        "Key": key,
                        "ConditionExpression": "attribute_exists(pk)",
                    }
                },
            ],
        ),
        "GetRecords": _signed("kinesis", "get_records", ShardIterator=iterator, Limit=1000),
        "SendMessage": _signed(
            "sqs", "send_message", QueueUrl=f"{ENDPOINT}/{ACCOUNT}/dead-letters", MessageBody="x" * 512
        ),
    }


def _loop(batch: int, work: Callable[[], object]) -> Callable[[], None]:
    def run() -> None:
        for _ in range(batch):
            work()

    return run


def measure(repeats: int, batch: int) -> list[tuple[str, float, float]]:
    """(request, µs per call_of, µs per json.loads of its body)."""
    rows = []
    for name, (signing, method, path, query, headers, body) in requests().items():

        def calls(
            s: str = signing,
            m: str = method,
            p: str = path,
            q: str = query,
            h: dict[str, str] = headers,
            b: bytes = body,
        ) -> object:
            return call_of(s, m, p, q, h, b, account=ACCOUNT, region=REGION)

        def loads(b: bytes = body) -> object:
            return json.loads(b)

        best = best_of({"call_of": _loop(batch, calls), "json.loads": _loop(batch, loads)}, repeats)
        rows.append((name, best["call_of"] / batch * 1e6, best["json.loads"] / batch * 1e6))
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.iam_calls", description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--batch", type=int, default=2000)
    args = parser.parse_args(argv)
    print(f"{'request':<36} {'call_of µs':>11} {'json.loads µs':>14} {'ratio':>6}")
    for name, calls, loads in measure(args.repeats, args.batch):
        print(f"{name:<36} {calls:>11.1f} {loads:>14.1f} {calls / loads:>6.1f}")


if __name__ == "__main__":
    main()
