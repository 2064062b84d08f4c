"""SubscribeToShard on the local endpoint, through boto3's own `subscribe_to_shard` (botocore reads the
event stream): what arrives, in what order, from where, for how long, what is refused, what ends a
subscription, and whose budget it spends (moto implements no SubscribeToShard).

The event-stream encoder's own checks: test_event_stream.py.
"""

from __future__ import annotations

import datetime
import itertools
import re
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from botocore.exceptions import ClientError, EventStreamError

from local.limits import CONSUMER_HEADER
from tests.support.endpoint import THROTTLED, MiB, get_json, new_stream, read_shard, shard_ids, sized
from tests.support.integration import kinesis_client, wait_active

pytestmark = pytest.mark.integration
SUBSCRIPTION_S = 7.0  # the endpoint's, for these tests (Kinesis: 300); long enough for a heartbeat
TRIM = {"Type": "TRIM_HORIZON"}


@pytest.fixture(scope="module")
def endpoint(local_endpoint: str) -> Iterator[str]:
    """The endpoint, its subscriptions lasting SUBSCRIPTION_S (the knob; the 5 s rules stay)."""
    get_json(f"{local_endpoint}/_shardline/limits", "PUT", {"subscription_seconds": SUBSCRIPTION_S})
    yield local_endpoint
    get_json(f"{local_endpoint}/_shardline/limits", "PUT", {"subscription_seconds": 300})


def register(client: Any, name: str, consumer: str = "efo") -> str:
    arn = client.describe_stream_summary(StreamName=name)["StreamDescriptionSummary"]["StreamARN"]
    return str(
        client.register_stream_consumer(StreamARN=arn, ConsumerName=consumer)["Consumer"]["ConsumerARN"]
    )


def take(
    answer: dict[str, Any], enough: Callable[[list[dict]], bool], times: list[float] | None = None
) -> list[dict]:
    """The SubscribeToShardEvents of a subscribe_to_shard answer until `enough(events)` or the stream's
    end; then the stream is closed. `times` gets each event's arrival (time.monotonic())."""
    events: list[dict] = []
    try:
        for message in answer["EventStream"]:
            events.append(message["SubscribeToShardEvent"])
            if times is not None:
                times.append(time.monotonic())
            if enough(events):
                break
    finally:
        answer["EventStream"].close()
    return events


def records_of(events: list[dict]) -> list[dict]:
    return [record for event in events for record in event["Records"]]


def has(count: int) -> Callable[[list[dict]], bool]:
    return lambda events: len(records_of(events)) >= count


def error_of(call: Callable[..., Any], **kwargs: Any) -> tuple[str, str]:
    with pytest.raises(ClientError) as raised:
        call(**kwargs)
    return raised.value.response["Error"]["Code"], raised.value.response["Error"]["Message"]


def test_records_put_before_and_after_subscribing_arrive_in_order_as_get_records_shows_them(endpoint):
    client, name = new_stream(endpoint, prefix="efo")
    (shard,) = shard_ids(client, name)
    arn = register(client, name)
    client.put_records(
        StreamName=name, Records=[{"Data": f"before-{i}".encode(), "PartitionKey": f"k{i}"} for i in range(3)]
    )
    answer = client.subscribe_to_shard(ConsumerARN=arn, ShardId=shard, StartingPosition=TRIM)
    assert answer["ResponseMetadata"]["HTTPHeaders"]["content-type"] == "application/vnd.amazon.eventstream"
    for i in range(2):
        client.put_record(StreamName=name, Data=f"after-{i}".encode(), PartitionKey="k")
    events = take(answer, has(5))

    stored, _ = read_shard(client, name, shard)
    assert records_of(events) == stored  # sequence numbers, data, keys and arrival timestamps alike
    assert [r["Data"] for r in stored] == [b"before-0", b"before-1", b"before-2", b"after-0", b"after-1"]
    assert events[0]["Records"][:3] == stored[:3], "what was there goes in the first event"
    for event in events:
        continuation = int(event["ContinuationSequenceNumber"])
        assert continuation % 2 == 1 and continuation > int(event["Records"][-1]["SequenceNumber"])
        assert event["MillisBehindLatest"] == 0 and "ChildShards" not in event


@pytest.mark.parametrize("kind", ["AFTER_SEQUENCE_NUMBER", "AT_SEQUENCE_NUMBER"])
def test_a_subscription_ends_on_time_and_its_continuation_loses_and_repeats_nothing(endpoint, kind):
    client, name = new_stream(endpoint, prefix="efo")
    (shard,) = shard_ids(client, name)
    arn = register(client, name)
    client.put_records(StreamName=name, Records=[{"Data": b"early", "PartitionKey": "k"}] * 2)

    def write() -> None:
        for i in range(4):
            client.put_record(StreamName=name, Data=f"during-{i}".encode(), PartitionKey="k")
            time.sleep(0.1)

    began = time.monotonic()
    answer = client.subscribe_to_shard(ConsumerARN=arn, ShardId=shard, StartingPosition=TRIM)
    writer = threading.Thread(target=write)
    writer.start()
    times: list[float] = []
    first = take(answer, lambda _: False, times)  # to its end
    lasted = time.monotonic() - began
    writer.join()
    assert SUBSCRIPTION_S - 0.5 <= lasted < SUBSCRIPTION_S + 3
    gaps = [later - earlier for earlier, later in itertools.pairwise(times)]
    quiet = [
        (before, after)
        for (before, after), gap in zip(itertools.pairwise(first), gaps, strict=True)
        if not after["Records"] and gap >= 4.5
    ]
    assert quiet, "no empty event after 5 quiet seconds"
    assert all(a["ContinuationSequenceNumber"] == b["ContinuationSequenceNumber"] for a, b in quiet)

    client.put_records(
        StreamName=name, Records=[{"Data": f"later-{i}".encode(), "PartitionKey": "k"} for i in range(3)]
    )
    position = {"Type": kind, "SequenceNumber": first[-1]["ContinuationSequenceNumber"]}
    second = take(
        client.subscribe_to_shard(ConsumerARN=arn, ShardId=shard, StartingPosition=position), has(3)
    )

    stored, _ = read_shard(client, name, shard)
    assert records_of(first) + records_of(second) == stored and len(stored) == 9


def test_each_starting_position_starts_where_its_type_says(endpoint):
    client, name = new_stream(endpoint, prefix="efo")
    (shard,) = shard_ids(client, name)
    client.put_records(
        StreamName=name, Records=[{"Data": f"r{i}".encode(), "PartitionKey": "k"} for i in range(3)]
    )
    time.sleep(0.05)
    moment = datetime.datetime.now(datetime.UTC)
    time.sleep(0.05)
    client.put_records(
        StreamName=name, Records=[{"Data": f"r{i}".encode(), "PartitionKey": "k"} for i in (3, 4)]
    )
    stored, _ = read_shard(client, name, shard)
    third = stored[2]["SequenceNumber"]
    positions = {
        "trim": (TRIM, stored),
        "at-sequence": ({"Type": "AT_SEQUENCE_NUMBER", "SequenceNumber": third}, stored[2:]),
        "after-sequence": ({"Type": "AFTER_SEQUENCE_NUMBER", "SequenceNumber": third}, stored[3:]),
        "at-timestamp": ({"Type": "AT_TIMESTAMP", "Timestamp": moment}, stored[3:]),
        "latest": ({"Type": "LATEST"}, []),
    }
    for consumer, (position, expected) in positions.items():
        arn = register(client, name, consumer)
        answer = client.subscribe_to_shard(ConsumerARN=arn, ShardId=shard, StartingPosition=position)
        assert take(answer, lambda _: True)[0]["Records"] == expected, consumer

    answer = client.subscribe_to_shard(
        ConsumerARN=register(client, name, "latest-then"), ShardId=shard, StartingPosition={"Type": "LATEST"}
    )
    client.put_record(StreamName=name, Data=b"r5", PartitionKey="k")
    assert [r["Data"] for r in records_of(take(answer, has(1)))] == [b"r5"]


def test_unregistered_consumers_unknown_shards_and_bad_positions_are_refused(endpoint):
    client, name = new_stream(endpoint, shards=2, prefix="efo")
    first, second = shard_ids(client, name)
    stream_arn = client.describe_stream_summary(StreamName=name)["StreamDescriptionSummary"]["StreamARN"]
    subscribe = client.subscribe_to_shard
    code, message = error_of(
        subscribe, ConsumerARN=f"{stream_arn}/consumer/nobody", ShardId=first, StartingPosition=TRIM
    )
    assert code == "ResourceNotFoundException" and "nobody" in message
    keep, gone = register(client, name, "keep"), register(client, name, "gone")
    client.deregister_stream_consumer(StreamARN=stream_arn, ConsumerName="gone")
    assert [c["ConsumerName"] for c in client.list_stream_consumers(StreamARN=stream_arn)["Consumers"]] == [
        "keep"
    ]
    assert (
        error_of(subscribe, ConsumerARN=gone, ShardId=first, StartingPosition=TRIM)[0]
        == "ResourceNotFoundException"
    )
    code, message = error_of(
        subscribe, ConsumerARN=keep, ShardId="shardId-000000000009", StartingPosition=TRIM
    )
    assert code == "ResourceNotFoundException" and message.endswith("does not exist")

    other = client.put_record(StreamName=name, Data=b"x", PartitionKey="k", ExplicitHashKey=str(2**128 - 1))
    assert other["ShardId"] == second
    foreign = {"Type": "AT_SEQUENCE_NUMBER", "SequenceNumber": other["SequenceNumber"]}
    code, message = error_of(subscribe, ConsumerARN=keep, ShardId=first, StartingPosition=foreign)
    assert (code, message) == (
        "InvalidArgumentException",
        f"Invalid StartingSequenceNumber. It encodes "
        f"{second}, while it was used in a call to a shard with {first}",
    )
    missing = {"Type": "AFTER_SEQUENCE_NUMBER"}
    code, _ = error_of(subscribe, ConsumerARN=keep, ShardId=first, StartingPosition=missing)
    assert code == "InvalidArgumentException"
    take(
        subscribe(ConsumerARN=keep, ShardId=first, StartingPosition=TRIM), lambda _: True
    )  # refusals claim nothing


def test_a_consumer_still_creating_is_refused_resource_in_use(endpoint):
    client, name = new_stream(endpoint, prefix="efo")
    (shard,) = shard_ids(client, name)
    get_json(f"{endpoint}/_shardline/limits", "PUT", {"consumer_creating_seconds": 60})
    try:
        arn = register(client, name, "young")
    finally:
        get_json(f"{endpoint}/_shardline/limits", "PUT", {"consumer_creating_seconds": 0})
    described = client.describe_stream_consumer(ConsumerARN=arn)["ConsumerDescription"]
    assert described["ConsumerStatus"] == "CREATING"
    code, message = error_of(client.subscribe_to_shard, ConsumerARN=arn, ShardId=shard, StartingPosition=TRIM)
    assert code == "ResourceInUseException"
    assert message.startswith("Consumer young with creation timestamp ") and message.endswith(
        f"under stream: {name} , account 000000000000 is not in ACTIVE status."
    )


def test_a_second_subscription_within_5_s_is_refused_and_a_later_one_takes_over(endpoint):
    client, name = new_stream(endpoint, prefix="efo")
    (shard,) = shard_ids(client, name)
    arn = register(client, name)
    began = time.monotonic()
    first = client.subscribe_to_shard(ConsumerARN=arn, ShardId=shard, StartingPosition=TRIM)
    events = iter(first["EventStream"])
    next(events)
    code, message = error_of(client.subscribe_to_shard, ConsumerARN=arn, ShardId=shard, StartingPosition=TRIM)
    assert code == "ResourceInUseException"
    assert message == f"Another active subscription exists for this consumer: 000000000000:{name}:{shard}:efo"
    other = register(client, name, "other")  # another consumer's subscription is its own
    take(client.subscribe_to_shard(ConsumerARN=other, ShardId=shard, StartingPosition=TRIM), lambda _: True)

    time.sleep(max(0.0, 5.3 - (time.monotonic() - began)))
    second = client.subscribe_to_shard(ConsumerARN=arn, ShardId=shard, StartingPosition=TRIM)
    with pytest.raises(EventStreamError) as raised:
        for _ in events:
            pass
    assert raised.value.response["Error"]["Code"] == "ResourceInUseException"
    assert time.monotonic() - began < SUBSCRIPTION_S, "the older stream ends at the takeover"
    take(second, lambda _: True)


def test_a_split_parents_subscription_ends_with_its_children_and_no_continuation(endpoint):
    client, name = new_stream(endpoint, prefix="efo")
    (parent,) = shard_ids(client, name)
    arn = register(client, name)
    client.put_records(StreamName=name, Records=[{"Data": d, "PartitionKey": "k"} for d in (b"a", b"b")])
    began = time.monotonic()
    answer = client.subscribe_to_shard(ConsumerARN=arn, ShardId=parent, StartingPosition=TRIM)
    client.split_shard(StreamName=name, ShardToSplit=parent, NewStartingHashKey=str(2**127))
    wait_active(client, name)
    low, high = shard_ids(client, name, ShardFilter={"Type": "AT_LATEST"})
    client.put_record(StreamName=name, Data=b"child", PartitionKey="k")
    events = take(answer, lambda _: False)
    assert time.monotonic() - began < SUBSCRIPTION_S - 1, "the parent's stream ends at its end, not on time"

    *middle, last = events
    assert [r["Data"] for r in records_of(events)] == [b"a", b"b"]
    assert "ContinuationSequenceNumber" not in last
    assert [(c["ShardId"], c["ParentShards"]) for c in last["ChildShards"]] == [
        (low, [parent]),
        (high, [parent]),
    ]
    assert last["ChildShards"][1]["HashKeyRange"] == {
        "StartingHashKey": str(2**127),
        "EndingHashKey": str(2**128 - 1),
    }
    assert all("ChildShards" not in e and "ContinuationSequenceNumber" in e for e in middle)

    late = take(
        client.subscribe_to_shard(
            ConsumerARN=register(client, name, "late"), ShardId=parent, StartingPosition=TRIM
        ),
        lambda _: False,
    )
    assert (
        len(late) == 1 and [r["Data"] for r in late[0]["Records"]] == [b"a", b"b"] and late[0]["ChildShards"]
    )


def test_subscribed_reads_spend_the_consumers_own_2_mib_a_second_not_the_shared_budget(endpoint):
    get_json(f"{endpoint}/_shardline/limits", "PUT", {"writes": False})  # to fill the shard at once
    try:
        client, name = new_stream(endpoint, prefix="efo")
        for half in range(2):
            client.put_records(StreamName=name, Records=[sized(f"k{half}{i}", MiB) for i in range(3)])
    finally:
        get_json(f"{endpoint}/_shardline/limits", "PUT", {"writes": True})
    (shard,) = shard_ids(client, name)
    consumers = {consumer: register(client, name, consumer) for consumer in ("one", "two")}
    read: dict[str, tuple[float, list[dict]]] = {}
    # consumer one's own GetRecords spend its budget too: in debt after its last 2 MiB (asked at
    # once, from its own thread: the debt lasts about a second, which a loaded machine can spend
    # waiting for the other subscription)
    named = kinesis_client(endpoint)

    def as_one(request: Any, **_: Any) -> None:
        request.headers[CONSUMER_HEADER] = "one"

    named.meta.events.register("before-sign.kinesis.GetRecords", as_one)
    iterator = named.get_shard_iterator(StreamName=name, ShardId=shard, ShardIteratorType="LATEST")[
        "ShardIterator"
    ]
    in_debt: list[str] = []

    def subscribe(consumer: str) -> None:
        began = time.monotonic()
        answer = client.subscribe_to_shard(
            ConsumerARN=consumers[consumer], ShardId=shard, StartingPosition=TRIM
        )
        events = take(answer, has(6))
        read[consumer] = (time.monotonic() - began, events)
        if consumer == "one":
            try:
                named.get_records(ShardIterator=iterator)
            except ClientError as error:
                in_debt.append(error.response["Error"]["Code"])

    threads = [threading.Thread(target=subscribe, args=(consumer,)) for consumer in consumers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert in_debt == [THROTTLED]

    for consumer, (elapsed, events) in read.items():
        sizes = [sum(len(r["Data"]) + len(r["PartitionKey"]) for r in e["Records"]) for e in events]
        assert len(records_of(events)) == 6 and max(sizes) <= 2 * MiB, consumer
        # 6 MiB at 2 MiB a second, the first 2 at once; each at its own pace (sharing: twice as long)
        assert 1.6 <= elapsed < 4.5, (consumer, elapsed)
    shared = client.get_shard_iterator(StreamName=name, ShardId=shard, ShardIteratorType="TRIM_HORIZON")
    assert len(client.get_records(ShardIterator=shared["ShardIterator"], Limit=1)["Records"]) == 1
    counters = get_json(f"{endpoint}/_shardline/kinesis")["streams"][name]["shards"][shard]
    assert (counters["get_records_calls"], counters["read_throttles"]) == (
        2,
        1,
    )  # the named call's, the shared one
    usage = get_json(f"{endpoint}/_shardline/usage")["services"]["kinesis_consumers"][f"{name}/one"]
    assert (usage["subscriptions"], usage["records_read"], usage["bytes_read"]) == (1, 6, 6 * MiB)


def test_a_registered_consumers_arn_has_kinesiss_shape_and_is_the_one_the_template_resolves(endpoint):
    """Kinesis names a consumer `<stream ARN>/consumer/<name>:<creation time>` (moto left the time
    out), and an app's `Fn::GetAtt [Consumer, ConsumerARN]` (a worker group's STREAM_CONSUMER_ARN)
    resolves locally to the ARN the endpoint registered: a worker subscribes with it."""
    from local.app.model import consumer_arn, consumer_created

    client, name = new_stream(endpoint, 1)
    arn = register(client, name, "workers")
    shape = rf"arn:aws:kinesis:us-east-1:\d{{12}}:stream/{name}/consumer/workers:\d{{10}}"
    assert re.fullmatch(shape, arn), arn
    assert arn == consumer_arn(name, "workers", consumer_created(name, "workers"))
    described = client.describe_stream_consumer(ConsumerARN=arn)["ConsumerDescription"]
    assert described["ConsumerARN"] == arn
    assert int(described["ConsumerCreationTimestamp"].timestamp()) == consumer_created(name, "workers")
    deadline = time.monotonic() + 10
    while described["ConsumerStatus"] != "ACTIVE":
        assert time.monotonic() < deadline
        time.sleep(0.1)
        described = client.describe_stream_consumer(ConsumerARN=arn)["ConsumerDescription"]
    (shard,) = shard_ids(client, name)
    answer = client.subscribe_to_shard(ConsumerARN=arn, ShardId=shard, StartingPosition=TRIM)
    answer["EventStream"].close()
