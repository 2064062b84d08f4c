"""The stream reader of `send`'s verdict on what another producer writes: each record a Kinesis record
of its own, no aggregate to carry its id — known by its payload, never counted as a wrong id."""

from __future__ import annotations

from typing import Any

from local.commands.send import payload, record_id
from local.commands.verify_readers import StreamReader
from shardline.kinesis import UserRecord
from shardline.kpl import encode

RUN = "run-1"


def reader() -> StreamReader:
    return StreamReader(None, "s", RUN, 3, {0: ("shard-0", "100")}, lambda seq: record_id(RUN, seq))


def kinesis_record(data: bytes, sequence: str) -> dict[str, Any]:
    return {"Data": data, "SequenceNumber": sequence}


def test_a_plain_record_is_known_by_its_payload_and_has_no_id_to_be_wrong():
    stream = reader()
    stream._take("shard-0", kinesis_record(payload(RUN, 0, 0.0, 100), "100"))
    stream._take("shard-0", kinesis_record(payload(RUN, 1, 0.0, 100), "101"))
    copies = stream.copies
    assert (copies.kinesis_records, copies.user_records, copies.without_aggregate_id) == (2, 2, 2)
    assert copies.wrong_ids == 0 and copies.backed[0] == 1 and list(copies.copies) == [1, 1, 0]


def test_an_aggregate_carrying_another_id_is_still_a_wrong_id():
    stream = reader()
    users = [
        UserRecord("k", payload(RUN, 0, 0.0, 100), id=record_id(RUN, 0)),
        UserRecord("k", payload(RUN, 1, 0.0, 100), id="not-its-id"),
    ]
    stream._take("shard-0", kinesis_record(encode(users, aggregate_id="p.0.1.0"), "100"))
    assert stream.copies.wrong_ids == 1 and stream.copies.user_records == 2
