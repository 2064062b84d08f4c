"""`_shard_reader.ShardReader`: a worker's reads of one shard — throttling backed off, an expired
iterator fetched again after the last record read (nothing skipped, nothing twice), flow control by
the bounded queue, the shard's end. The Kinesis client is a script of answers (the faults are the
point: the endpoint's own read limits are exercised by tests/integration/test_worker_group.py)."""

from __future__ import annotations

import queue
import time
from datetime import UTC, datetime
from typing import Any

from botocore.exceptions import ClientError

from shardline.consumer._shard_reader import Batch, End, ShardReader
from shardline.kinesis import TRIM_HORIZON, Position


def record(sequence: int) -> dict[str, Any]:
    return {
        "SequenceNumber": str(sequence),
        "PartitionKey": "k",
        "Data": f"r{sequence}".encode(),
        "ApproximateArrivalTimestamp": datetime(2026, 1, 1, tzinfo=UTC),
    }


def refused(code: str) -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": code}}, "GetRecords")


class ScriptedKinesis:
    """GetRecords answers from a script of pages of sequence numbers (or errors); iterators say
    where they start, so a test sees what the reader asked for."""

    def __init__(self, script: list[Any]) -> None:
        self.script = script
        self.iterators: list[dict[str, Any]] = []
        self.calls = 0

    def get_shard_iterator(self, **request: Any) -> dict[str, str]:
        self.iterators.append(request)
        return {"ShardIterator": f"it-{len(self.iterators)}"}

    def get_records(self, **request: Any) -> dict[str, Any]:
        self.calls += 1
        step = self.script.pop(0)
        if isinstance(step, Exception):
            raise step
        if step == "end":
            return {"Records": [], "NextShardIterator": None, "MillisBehindLatest": 0}
        return {"Records": [record(n) for n in step], "NextShardIterator": "next", "MillisBehindLatest": 0}

    def list_shards(self, **request: Any) -> dict[str, Any]:
        return {"Shards": []}


START = Position(TRIM_HORIZON)


def read_all(kinesis: ScriptedKinesis, start: Position = START) -> list[Batch | End]:
    out: queue.Queue[Batch | End] = queue.Queue()
    reader = ShardReader(
        kinesis, "s", "shard-0", "shard-0", start, out, generation=3, min_interval=0.001, idle_interval=0.001
    )
    reader.start()
    items: list[Batch | End] = []
    while not items or not isinstance(items[-1], End):
        item = out.get(timeout=10)
        items.append(item)
        reader.processed()
    reader.join(timeout=10)
    return items


def test_an_expired_iterator_is_fetched_again_after_the_last_record_read_and_throttling_is_backed_off():
    kinesis = ScriptedKinesis(
        [[1, 2], refused("ProvisionedThroughputExceededException"), [3], refused("ExpiredIteratorException"),
         [4, 5], "end"]
    )  # fmt: skip
    items = read_all(kinesis)
    batches = [item for item in items if isinstance(item, Batch)]
    assert [[r.sequence_number for r in b.records] for b in batches] == [["1", "2"], ["3"], ["4", "5"]]
    assert isinstance(items[-1], End) and all(item.generation == 3 for item in items)
    assert kinesis.iterators[0]["ShardIteratorType"] == "TRIM_HORIZON"
    # After the expiry: after the last record handed on, never again from the start.
    assert kinesis.iterators[1] == {
        "StreamName": "s",
        "ShardId": "shard-0",
        "ShardIteratorType": "AFTER_SEQUENCE_NUMBER",
        "StartingSequenceNumber": "3",
    }
    assert batches[0].records[0].data == b"r1" and batches[0].records[0].approximate_arrival > 0


def test_a_checkpoint_is_read_from_its_own_kinesis_record_for_the_rest_of_an_aggregate():
    kinesis = ScriptedKinesis(["end"])
    read_all(kinesis, Position("49000", 7))
    assert kinesis.iterators[0]["ShardIteratorType"] == "AT_SEQUENCE_NUMBER"
    assert kinesis.iterators[0]["StartingSequenceNumber"] == "49000"


def test_a_slow_handler_holds_the_reads_back():
    kinesis = ScriptedKinesis([[n] for n in range(10)] + ["end"])
    out: queue.Queue[Batch | End] = queue.Queue()
    reader = ShardReader(
        kinesis, "s", "shard-0", "shard-0", Position(TRIM_HORIZON), out, generation=1,
        max_pending=2, min_interval=0.001,
    )  # fmt: skip
    reader.start()
    deadline = time.monotonic() + 5
    while out.qsize() < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.2)  # room for a third read, had it not waited
    assert out.qsize() == 2 and kinesis.calls <= 3  # the third answer waits for room
    reader.processed()
    deadline = time.monotonic() + 5
    while out.qsize() < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert out.qsize() == 3
    reader.stop()
    reader.join(timeout=5)
    assert not reader.is_alive()


def test_a_stopped_reader_hands_nothing_more_on():
    kinesis = ScriptedKinesis([[n] for n in range(100)])
    out: queue.Queue[Batch | End] = queue.Queue()
    reader = ShardReader(
        kinesis, "s", "shard-0", "shard-0", Position(TRIM_HORIZON), out, generation=1, max_pending=1,
        min_interval=0.001,
    )  # fmt: skip
    reader.start()
    out.get(timeout=5)
    reader.stop()
    reader.join(timeout=5)
    assert not reader.is_alive() and out.empty()
    assert kinesis.calls <= 3  # it stopped reading, too
