"""The baseline's producer handler (bench/baseline/handlers/producer), in-process with a fake Kinesis:
each record its own PutRecords entry, only failed entries sent again, and answers `send` reads."""

from __future__ import annotations

import base64
import importlib.util
import json
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from botocore.exceptions import ClientError

from local.commands.send import entry_outcome

HANDLER = Path(__file__).resolve().parents[4] / "bench" / "baseline" / "handlers" / "producer" / "producer.py"


class FakeKinesis:
    """PutRecords that fails the entries whose data is in `fail` (for `times` calls), or raises."""

    def __init__(self, fail: set[bytes] = frozenset(), times: int = 1, raises: Exception | None = None):
        self.fail, self.times, self.raises = set(fail), times, raises
        self.calls: list[list[dict[str, Any]]] = []

    def put_records(self, StreamName: str, Records: list[dict[str, Any]]) -> dict[str, Any]:
        assert StreamName == "the-stream"
        self.calls.append(Records)
        if self.raises is not None:
            raise self.raises
        failing = len(self.calls) <= self.times
        out = []
        for n, record in enumerate(Records):
            if failing and record["Data"] in self.fail:
                out.append(
                    {"ErrorCode": "ProvisionedThroughputExceededException", "ErrorMessage": "slow down"}
                )
            else:
                out.append({"ShardId": "shardId-000000000000", "SequenceNumber": f"{len(self.calls)}{n:05d}"})
        return {"FailedRecordCount": sum("ErrorCode" in o for o in out), "Records": out}


@pytest.fixture
def producer(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.setenv("SHARDLINE_STREAMS", json.dumps({"events": {"streamName": "the-stream"}}))
    spec = importlib.util.spec_from_file_location("baseline_producer", HANDLER)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setattr(module.time, "sleep", lambda seconds: None)
    return module


def post(module: ModuleType, kinesis: FakeKinesis, records: Any, route: str = "events") -> tuple[int, Any]:
    module._kinesis = kinesis
    event = {"pathParameters": {"stream": route}, "body": json.dumps({"records": records}), "headers": {}}
    answer = module.handler(event, None)
    return answer["statusCode"], json.loads(answer["body"])


def record(n: int, **extra: Any) -> dict[str, Any]:
    return {
        "partitionKey": f"k{n % 3}",
        "data": base64.b64encode(b"r%d" % n).decode(),
        "id": f"id-{n}",
        **extra,
    }


def test_each_record_is_its_own_entry_and_the_answer_is_what_send_accepts(producer):
    kinesis = FakeKinesis()
    status, body = post(producer, kinesis, [record(n) for n in range(5)])
    assert status == 200 and body["failedRecordCount"] == 0
    (call,) = kinesis.calls
    assert [r["Data"] for r in call] == [b"r%d" % n for n in range(5)]  # unaggregated, as sent
    assert [r["PartitionKey"] for r in call] == [f"k{n % 3}" for n in range(5)]
    assert [e["id"] for e in body["records"]] == [f"id-{n}" for n in range(5)]
    assert all(entry_outcome(e, f"id-{n}") == "accepted" for n, e in enumerate(body["records"]))


def test_only_the_failed_entries_are_sent_again(producer):
    kinesis = FakeKinesis(fail={b"r1", b"r3"}, times=1)
    status, body = post(producer, kinesis, [record(n) for n in range(5)])
    assert status == 200
    assert [r["Data"] for r in kinesis.calls[1]] == [b"r1", b"r3"]
    assert [e["attempts"] for e in body["records"]] == [1, 2, 1, 2, 1]


def test_entries_still_failing_after_three_attempts_are_a_207_to_resend(producer):
    kinesis = FakeKinesis(fail={b"r2"}, times=10)
    status, body = post(producer, kinesis, [record(n) for n in range(3)])
    assert status == 207 and body["failedRecordCount"] == 1 and len(kinesis.calls) == 3
    failed = body["records"][2]
    assert failed["written"] is False and failed["retry"] == "resend" and failed["id"] == "id-2"
    assert entry_outcome(failed, "id-2") == "not_written"


def test_a_call_failing_whole_is_a_503_to_post_again(producer):
    error = ClientError({"Error": {"Code": "ProvisionedThroughputExceededException"}}, "PutRecords")
    kinesis = FakeKinesis(raises=error)
    status, _ = post(producer, kinesis, [record(0)])
    assert status == 503 and len(kinesis.calls) == 3


@pytest.mark.parametrize(
    ("records", "field"),
    [
        ([{"partitionKey": "", "data": "AA=="}], "partitionKey"),
        ([{"partitionKey": "k", "data": "not base64!"}], "data"),
        ([{"partitionKey": "k", "data": "AA==", "id": "has space"}], "id"),
        ([record(1), record(1)], "id"),
    ],
)
def test_an_invalid_record_is_a_400_naming_the_field_and_nothing_is_sent(producer, records, field):
    kinesis = FakeKinesis()
    status, body = post(producer, kinesis, records)
    assert status == 400 and body["errors"][0]["field"] == field and not kinesis.calls


def test_an_unknown_stream_is_a_404(producer):
    kinesis = FakeKinesis()
    assert post(producer, kinesis, [record(0)], route="other")[0] == 404 and not kinesis.calls
