"""The real KPL's aggregated records (the conformance file) and how other decoders read an aggregate:
what the codec tests compare shardline's bytes and records with."""

from __future__ import annotations

import base64
import json
from pathlib import Path

from aws_kinesis_agg.deaggregator import deaggregate_records  # it puts its folder on sys.path

from shardline.kinesis import UserRecord
from shardline.kpl._identity import AggregateId, new_producer_id

CONFORMANCE_FILE = Path(__file__).resolve().parents[1] / "conformance" / "kpl_aggregated_records.json"
AGGREGATE_ID = AggregateId(new_producer_id(), "3", 0x1F, 0x1C).encode()


def kpl_cases() -> list[tuple[str, list[UserRecord], bytes]]:
    cases = json.loads(CONFORMANCE_FILE.read_text())["cases"]
    return [
        (
            case["name"],
            [
                UserRecord(r["partition_key"], r["data_utf8"].encode(), r.get("explicit_hash_key"))
                for r in case["records"]
            ],
            base64.b64decode(case["aggregated_base64"]),
        )
        for case in cases
    ]


def with_ids(records: list[UserRecord]) -> list[UserRecord]:
    """Every other record gets a client id: tagged and untagged records side by side."""
    return [r._replace(id=f"order-{i}") if i % 2 == 0 else r for i, r in enumerate(records)]


def read_by_aws_kinesis_agg(payload: bytes) -> list[tuple[str, bytes, str | None]]:
    """(partition key, data, explicit hash key) of each user record, as aws-kinesis-agg reads it."""
    event_record = {
        "kinesis": {
            "kinesisSchemaVersion": "1.0",
            "sequenceNumber": "1",
            "partitionKey": "a",
            "approximateArrivalTimestamp": 1.0,
            "data": base64.b64encode(payload).decode(),
        }
    }
    users = deaggregate_records([event_record])
    assert all(user["kinesis"].get("aggregated") for user in users), "read as a plain record"
    fields = [user["kinesis"] for user in users]
    return [(f["partitionKey"], base64.b64decode(f["data"]), f["explicitHashKey"]) for f in fields]


def user_fields(records: list[UserRecord]) -> list[tuple[str, bytes, str | None]]:
    return [(r.partition_key, r.data, r.explicit_hash_key) for r in records]
