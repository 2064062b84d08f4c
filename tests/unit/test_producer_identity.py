"""The producer's identity, end to end in process: every Kinesis record an aggregate with an id,
sealed aggregates resent identical, released ones renumbered, floors that wait for the unsettled.

The real `Producer` sends to `ScriptedKinesis` (in memory, two shards) on a fake clock that moves
only when the producer sleeps or a request takes time; `script` says what each PutRecords does.
"""

from __future__ import annotations

import random
import threading
from typing import Any

from botocore.exceptions import ReadTimeoutError
from hypothesis import given, settings
from hypothesis import strategies as st

from shardline.errors import EXPIRED
from shardline.kinesis import MAX_HASH_KEY, UserRecord, hash_key
from shardline.kinesis._shard_map import HashRange
from shardline.kpl._decode import decode_aggregate
from shardline.kpl._identity import AggregateId, new_producer_id
from shardline.producer import Producer, ProducerConfig
from shardline.producer._buffered import BufferedRecord
from shardline.producer._lanes import Lanes, _Lane
from shardline.producer._queues import ShardQueue
from shardline.producer._reducer import Reducer
from tests.support.fakes import FakeClock, four_shards

LOST = "lost"  # served, reply lost
REFUSED = "refused"  # every entry answered InternalFailure (nothing written)
OK = "ok"


class ScriptedKinesis:
    """Four shards in memory; each PutRecords does the next scripted action (then OK), taking
    `took` seconds of the fake clock. `sent` is every request's entries; `stream` what landed."""

    def __init__(self, clock: FakeClock, *script: str, took: float = 0.01) -> None:
        self.clock = clock
        self.script = list(script)
        self.took = took
        self.shards = four_shards()
        self.sent: list[list[dict[str, Any]]] = []
        self.stream: list[tuple[str, str, dict[str, Any]]] = []  # (shard, sequence, entry)

    def list_shards(self, **_: Any) -> dict[str, Any]:
        return {"Shards": self.shards}

    def put_records(self, *, StreamName: str, Records: list[dict[str, Any]]) -> dict[str, Any]:
        self.clock.now += self.took
        self.sent.append(Records)
        action = self.script.pop(0) if self.script else OK
        if action == REFUSED:
            failed = {"ErrorCode": "InternalFailure", "ErrorMessage": "injected"}
            return {"FailedRecordCount": len(Records), "Records": [failed] * len(Records)}
        answers = []
        for entry in Records:
            key = (
                int(entry["ExplicitHashKey"])
                if "ExplicitHashKey" in entry
                else hash_key(UserRecord(entry["PartitionKey"], b""))
            )
            [shard] = [
                s
                for s in self.shards
                if int(s["HashKeyRange"]["StartingHashKey"]) <= key <= int(s["HashKeyRange"]["EndingHashKey"])
            ]
            sequence = str(1000 + len(self.stream))
            self.stream.append((shard["ShardId"], sequence, entry))
            answers.append({"ShardId": shard["ShardId"], "SequenceNumber": sequence})
        if action == LOST:
            raise ReadTimeoutError(endpoint_url="(injected: the reply was lost)")
        return {"FailedRecordCount": 0, "Records": answers}


def ids(entries: list[dict[str, Any]]) -> list[AggregateId]:
    found = []
    for entry in entries:
        _, aggregate_id = decode_aggregate(entry["Data"])
        assert aggregate_id is not None, "every Kinesis record carries an aggregate id"
        found.append(AggregateId.parse(aggregate_id))
    return found


def producer(client: ScriptedKinesis, clock: FakeClock, **config: Any) -> Producer:
    settings = ProducerConfig(retry_base_delay=0.05, retry_max_delay=0.1, **config)
    return Producer(client, "s", config=settings, clock=clock, sleep=clock.sleep, rng=random.Random(7))


def test_every_kinesis_record_is_an_aggregate_with_an_id_and_a_lone_record_keeps_its_keys():
    clock = FakeClock()
    client = ScriptedKinesis(clock)
    lone = UserRecord("lone-key", b"alone", str(3 * 2**126 + 5), id="order-7")
    sending = producer(client, clock)
    results = sending.put_many([lone])
    results += sending.put_many([UserRecord(f"k{i}", b"x" * 10) for i in range(20)])

    assert all(result.success for result in results)
    entries = [entry for request in client.sent for entry in request]
    [lone_entry] = [entry for entry in entries if entry["PartitionKey"] == "lone-key"]
    assert lone_entry["ExplicitHashKey"] == lone.explicit_hash_key, "routed exactly as before"
    records, _ = decode_aggregate(lone_entry["Data"])
    assert records == [lone] and results[0].sub_sequence_number == 0
    found = ids(entries)
    assert len({aggregate_id.producer for aggregate_id in found}) == 1
    assert {aggregate_id.lane for aggregate_id in found} <= {"0", "1", "2", "3"}  # the shards' digits
    assert [(a.lane, a.counter, a.floor) for a in found[:1]] == [("3", 1, 1)]
    assert all(a.counter == a.floor for a in found), "each built when every earlier one was settled"
    assert {a.counter for a in found if a.lane == "3"} == {1, 2} and len(found) == 5


def test_a_lost_reply_is_resent_identical_and_a_newer_aggregates_floor_waits_for_it():
    clock = FakeClock()
    client = ScriptedKinesis(clock, LOST)
    # One Kinesis record per request and one request at a time: the order of sends is fixed.
    sending = producer(client, clock, collection_max_count=1, max_concurrency=1, aggregation_max_count=10)
    records = [UserRecord("same-key", f"{i}".encode()) for i in range(30)]  # one shard, 3 aggregates

    results = sending.put_many(records)

    first, second, third, resent = (request[0] for request in client.sent)
    assert resent == first, "the identical entry: same bytes, same keys, same id"
    # Built while the first was unsettled (its reply lost, not yet resent): their floor waits at 1.
    assert [(a.counter, a.floor) for a in ids([first, second, third])] == [(1, 1), (2, 1), (3, 1)]
    for index, result in enumerate(results[:10]):
        assert result.success and [a.error_code for a in result.attempts] == ["Internal", None]
        assert (result.sequence_number, result.sub_sequence_number) == ("1003", index)
    assert all(result.success and len(result.attempts) == 1 for result in results[10:])
    metrics = sending.metrics.snapshot()
    assert (metrics["AggregatesSealed"], metrics["SealedAggregatesResent"]) == (1, 1)
    assert sending.put_many([UserRecord("same-key", b"later")])[0].success
    assert [(a.counter, a.floor) for a in ids(client.sent[-1])] == [(4, 4)], "all settled since"


def test_a_refused_aggregate_is_released_and_its_records_go_in_a_new_aggregate():
    clock = FakeClock()
    client = ScriptedKinesis(clock, REFUSED)
    records = [UserRecord("same-key", f"{i}".encode()) for i in range(5)]

    results = producer(client, clock).put_many(records)

    assert all(r.success and [a.error_code for a in r.attempts] == ["InternalFailure", None] for r in results)
    [refused], *later = client.sent
    assert ids([refused]) and ids([refused])[0].counter == 1
    renumbered = ids([entry for request in later for entry in request])
    assert all(entry != refused for request in later for entry in request), "not sealed: never resent"
    assert all(a.counter >= 2 and a.floor >= 2 for a in renumbered), "1 never went in: settled at once"


def test_records_of_a_sealed_aggregate_fail_unconfirmed_at_their_deadline_and_no_request_starts_after_it():
    clock = FakeClock()
    client = ScriptedKinesis(clock, *[LOST] * 100, took=0.4)
    sending = producer(client, clock)

    results = sending.put_many([UserRecord("k", f"{i}".encode()) for i in range(5)], deadline=1.0)

    assert clock.now <= 1.0 + 0.4, "back by the deadline plus the request in flight at it"
    assert len(client.sent) >= 2 and all(request == client.sent[0] for request in client.sent)
    for result in results:
        assert not result.success and result.error_code == EXPIRED and result.unconfirmed
        assert {a.error_code for a in result.attempts[:-1]} == {"Internal"}
    assert sending.metrics.snapshot()["UserRecordsNotLanded"] == 5


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.text(min_size=1, max_size=40),
            st.integers(0, 3000),
            st.one_of(st.none(), st.integers(0, MAX_HASH_KEY)),
            st.one_of(
                st.none(),
                st.text(
                    alphabet=st.characters(min_codepoint=0x21, max_codepoint=0x7E), min_size=1, max_size=128
                ),
            ),
        ),
        min_size=1,
        max_size=30,
    ),
    st.integers(0, 2**40),
)
def test_the_size_bound_of_the_next_aggregate_holds_with_its_ids(specs, counter):
    """`size_bound` never under-counts what `take` builds: keys, explicit hash keys, record ids and
    the aggregate's own id (with a large counter) included."""
    lanes = Lanes(new_producer_id(), clock=lambda: 0.0)
    lanes._lanes["12"] = state = _Lane()
    state.next = counter + 1
    reducer = Reducer(lanes=lanes, max_size=1024 * 1024, max_count=1000)
    queue = ShardQueue(HashRange(0, MAX_HASH_KEY))
    for sequence, (key, size, explicit, record_id) in enumerate(specs):
        record = UserRecord(key, bytes(size), None if explicit is None else str(explicit), record_id)
        member = BufferedRecord(record, None, sequence, 0.0, 1.0)
        member.assign(record)
        queue.push(member)
    bound = reducer.size_bound(queue)
    kinesis_record = reducer.take(queue, "shardId-000000000012", "12")
    assert len(kinesis_record.members) == len(specs), "all fit: one aggregate"
    assert kinesis_record.size <= bound


def test_a_sealed_aggregate_is_resent_whole_for_the_records_whose_deadline_has_not_passed():
    clock = FakeClock()
    client = ScriptedKinesis(clock, LOST, LOST, LOST, took=0.4)
    sending = producer(client, clock)
    mine = sending.put(UserRecord("k", b"mine"))  # this thread's: its flush has a deadline
    theirs: list[Any] = []
    other = threading.Thread(target=lambda: theirs.append(sending.put(UserRecord("k", b"theirs"))))
    other.start()
    other.join()

    sending.flush(deadline=1.0)  # both records in one aggregate; every reply lost until the deadline

    result = mine.result(0)
    assert not result.success and result.error_code == EXPIRED and result.unconfirmed
    assert not theirs[0].done(), "the other thread's record is not expired by this deadline"
    sending.flush()
    assert theirs[0].result(0).success and theirs[0].result(0).sub_sequence_number == 1
    assert len(client.sent) == 4 and all(request == client.sent[0] for request in client.sent)
    _, sequence, entry = client.stream[-1]
    assert entry == client.sent[0][0] and theirs[0].result(0).sequence_number == sequence
