"""Decoding a Lambda Kinesis event (base64 included) into user records: shardline against its peers."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from bench import peers
from bench.report import Row
from bench.timing import best_of
from shardline.testing import event_record

STREAM = "events"
SHARD_ID = "shardId-000000000000"


def lambda_event(
    payloads: Sequence[bytes],
    first_sequence: int = 49_590_338_271_490_256_608_559_692_538_361_571_095_921_575_989_136_588_898,
) -> dict[str, Any]:
    """A Kinesis event as the event-source mapping hands it to a Lambda function, one record per
    payload (already KPL-encoded): `shardline.testing.event_record` on GetRecords-shaped records."""
    return {
        "Records": [
            event_record(
                STREAM,
                SHARD_ID,
                {
                    "PartitionKey": "a",
                    "Data": payload,
                    "SequenceNumber": str(first_sequence + index * 1_000_000),
                    "ApproximateArrivalTimestamp": 1_718_000_000.123 + index * 0.01,
                },
            )
            for index, payload in enumerate(payloads)
        ]
    }


def event_bytes(event: dict[str, Any]) -> int:
    """Approximate size of the event's JSON: dominated by the base64 data."""
    return sum(len(record["kinesis"]["data"]) + 600 for record in event["Records"])


def sanity(event: dict[str, Any], expected: list[tuple[str, bytes]]) -> list[str]:
    """Outside timing: every contender turns the event into the expected user records."""
    return [
        f"Lambda event: {name} yields other records"
        for name, decode in peers.lambda_decoders(event).items()
        if peers.user_data(decode()) != expected
    ]


def measure(
    label: str, event: dict[str, Any], record_count: int, repeats: int
) -> tuple[list[Row], dict[str, Any]]:
    """User records per second through each contender's Lambda path; informational rows (no target)."""
    rates = {name: record_count / s for name, s in best_of(peers.lambda_decoders(event), repeats).items()}
    rows = [
        Row(f"Lambda event decode, {label}", "rec/s", rates[peers.SHARDLINE], peer, rates[peer])
        for peer in peers.PEERS
    ]
    details = {
        "kinesis_records": len(event["Records"]),
        "user_records": record_count,
        "event_bytes_approx": event_bytes(event),
        "records_per_s": rates,
    }
    return rows, details
