"""Forged aggregates: a KPL aggregate whose members carry keys Kinesis would refuse — an empty
partition key, one over 256 UTF-16 code units, a hash key outside the 128-bit space — is not what a
KPL builds (it validates every key): it is refused by the decoder and passed through whole, as one
record, counted and logged, never unpacked into records whose keys never went through Kinesis's
checks. (The producer side: every record goes inside an aggregate of shardline's own, so a record
whose data is an aggregate reaches consumers as that one record — tests/integration and tests/e2e.)
"""

from __future__ import annotations

import logging
from typing import Any

import pytest

from shardline.consumer import ConsumedRecord, KinesisConsumer
from shardline.errors import AggregationError
from shardline.kinesis import UserRecord
from shardline.kpl import decode, encode
from shardline.testing import FakeLambdaContext, InMemoryLeaseTable, kinesis_event

FORGERIES = {
    "empty partition keys": [UserRecord("", b"x") for _ in range(1000)],
    "300-character partition keys": [UserRecord("k" * 300, b"x") for _ in range(1000)],
    "129 emoji (258 UTF-16 code units)": [UserRecord("😀" * 129, b"x")],
    "a hash key past 2**128": [UserRecord("k", b"x", str(2**128))],
}


@pytest.mark.parametrize("members", FORGERIES.values(), ids=FORGERIES.keys())
def test_1_an_aggregate_with_keys_kinesis_refuses_is_passed_through_whole_and_reported(
    members: list[UserRecord], caplog: pytest.LogCaptureFixture
) -> None:
    forged = encode(members)
    with pytest.raises(AggregationError, match=r"(partition|hash) key"):
        decode(forged)
    seen: list[ConsumedRecord] = []
    consumer = KinesisConsumer("g", InMemoryLeaseTable())

    @consumer.handler
    def handle(record: ConsumedRecord) -> list[dict[str, Any]]:
        seen.append(record)
        return []

    event = kinesis_event([UserRecord("tenant-a", forged)], aggregate=False)  # sent as a plain record
    with caplog.at_level(logging.WARNING, logger="shardline.consumer._deaggregation"):
        assert consumer.process(event, FakeLambdaContext()) == {"batchItemFailures": []}
    assert [(r.partition_key, r.data, r.sub_sequence_number) for r in seen] == [("tenant-a", forged, None)]
    assert consumer.metrics.snapshot()["CorruptAggregatesPassedThrough"] == 1
    sequence = event["Records"][0]["kinesis"]["sequenceNumber"]
    assert any(sequence in message and "passed through whole" in message for message in caplog.messages)


def test_1_keys_at_kinesis_limits_still_decode() -> None:
    members = [
        UserRecord("k" * 256, b"1"),
        UserRecord("😀" * 128, b"2"),
        UserRecord("k", b"3", str(2**128 - 1)),
    ]
    assert decode(encode(members)) == members


def test_1_inside_a_shardline_aggregate_a_forged_aggregate_is_one_users_record() -> None:
    forged = encode([UserRecord("", b"x") for _ in range(20_000)])
    seen: list[ConsumedRecord] = []
    consumer = KinesisConsumer("g", InMemoryLeaseTable())
    consumer.handler(lambda record: seen.append(record) or [])
    event = kinesis_event([UserRecord("tenant-a", forged)], producer="p1")  # as shardline's producer sends it
    consumer.process(event, FakeLambdaContext())
    assert [(r.partition_key, r.data) for r in seen] == [("tenant-a", forged)]
    assert consumer.metrics.snapshot()["UserRecords"] == 1
