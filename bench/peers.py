"""The same codec jobs done by each contender: shardline, aiokpl and aws-kinesis-agg, behind one shape.

Each function takes inputs prepared outside the timed region and returns what the library
natively returns, so a benchmark times the library call and nothing of ours.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Sequence
from importlib.metadata import version
from typing import Any

import aiokpl.aggregation as aiokpl_aggregation
from aws_kinesis_agg.aggregator import RecordAggregator
from aws_kinesis_agg.deaggregator import deaggregate_records, iter_deaggregate_records

from shardline import kpl
from shardline.kinesis import UserRecord

SHARDLINE = "shardline"
AIOKPL = "aiokpl"
AWS_KINESIS_AGG = "aws-kinesis-agg"
PEERS = (AIOKPL, AWS_KINESIS_AGG)

Encoder = Callable[[], list[bytes]]
Decoder = Callable[[], list[Any]]


def versions() -> dict[str, str]:
    """Installed versions of the peers and of protobuf (aws-kinesis-agg parses with it)."""
    from google.protobuf.internal import api_implementation

    return {
        "aiokpl": version("aiokpl"),
        "aws_kinesis_agg": version("aws-kinesis-agg"),
        "protobuf": version("protobuf"),
        "protobuf_backend": api_implementation.Type(),
    }


# -- encoding: one aggregate per batch ------------------------------------------------------


def encoders(batches: Sequence[Sequence[UserRecord]]) -> dict[str, Encoder]:
    """Callables that encode every batch into one aggregate, per contender."""
    aiokpl_batches = [
        [aiokpl_aggregation.UserRecord(r.partition_key, r.data, r.explicit_hash_key) for r in batch]
        for batch in batches
    ]

    def shardline_encode() -> list[bytes]:
        encode = kpl.encode
        return [encode(batch) for batch in batches]

    def aiokpl_encode() -> list[bytes]:
        encode = aiokpl_aggregation.encode_aggregated
        return [encode(batch) for batch in aiokpl_batches]

    def kinesis_agg_encode() -> list[bytes]:
        aggregator = RecordAggregator()
        payloads: list[bytes] = []
        for batch in batches:
            for record in batch:
                full = aggregator.add_user_record(record.partition_key, record.data, record.explicit_hash_key)
                if full is not None:  # never with the default 1 MiB cap and ~50 KiB batches
                    payloads.append(full.get_contents()[2])
            payloads.append(aggregator.clear_and_get().get_contents()[2])
        return payloads

    return {SHARDLINE: shardline_encode, AIOKPL: aiokpl_encode, AWS_KINESIS_AGG: kinesis_agg_encode}


# -- decoding: aggregates as a boto3 GetRecords consumer sees them ------------------------


def decoders(payloads: Sequence[bytes]) -> dict[str, Decoder]:
    """Callables that decode every payload into user records, per contender."""
    boto3_records = [
        {
            "Data": payload,
            "PartitionKey": "a",
            "SequenceNumber": str(index + 1),
            "ApproximateArrivalTimestamp": 1.0,
        }
        for index, payload in enumerate(payloads)
    ]

    def shardline_decode() -> list[Any]:
        decode = kpl.decode
        out: list[Any] = []
        for payload in payloads:
            out.extend(decode(payload))
        return out

    def aiokpl_decode() -> list[Any]:
        decode = aiokpl_aggregation.decode_aggregated
        out: list[Any] = []
        for payload in payloads:
            out.extend(decode(payload))
        return out

    def kinesis_agg_decode() -> list[Any]:
        return list(iter_deaggregate_records(boto3_records, data_format="Boto3"))

    return {SHARDLINE: shardline_decode, AIOKPL: aiokpl_decode, AWS_KINESIS_AGG: kinesis_agg_decode}


# -- decoding a Lambda Kinesis event (base64 included) ------------------------------------


def lambda_decoders(event: dict[str, Any]) -> dict[str, Decoder]:
    """Callables that turn a Lambda Kinesis event into user records, per contender.

    shardline and aiokpl base64-decode each record's data and decode it; aws-kinesis-agg runs
    its native Lambda path, `deaggregate_records(event["Records"])`.
    """
    records = event["Records"]

    def shardline_event() -> list[Any]:
        decode = kpl.decode
        b64decode = base64.b64decode
        out: list[Any] = []
        for record in records:
            out.extend(decode(b64decode(record["kinesis"]["data"])))
        return out

    def aiokpl_event() -> list[Any]:
        decode = aiokpl_aggregation.decode_aggregated
        b64decode = base64.b64decode
        out: list[Any] = []
        for record in records:
            out.extend(decode(b64decode(record["kinesis"]["data"])))
        return out

    def kinesis_agg_event() -> list[Any]:
        users: list[Any] = deaggregate_records(records)
        return users

    return {SHARDLINE: shardline_event, AIOKPL: aiokpl_event, AWS_KINESIS_AGG: kinesis_agg_event}


def user_data(decoded: Sequence[Any]) -> list[tuple[str, bytes]]:
    """(partition key, data) of each decoded record, whatever shape its library returns."""
    out: list[tuple[str, bytes]] = []
    for item in decoded:
        if isinstance(item, dict):  # aws-kinesis-agg: a Lambda-shaped record, data base64 again
            kinesis = item["kinesis"]
            out.append((kinesis["partitionKey"], base64.b64decode(kinesis["data"])))
        else:  # shardline UserRecord, aiokpl DecodedRecord
            out.append((item.partition_key, bytes(item.data)))
    return out
