"""Crashes at every step boundary, replayed as the event-source mapping would: nothing is lost,
a transactional sink applies every record exactly once, plain handlers repeat at most
`checkpoint_every` records per crash.

A crash is a `Crash` (a BaseException: nothing in the consumer may catch it) raised before or
after the handler, or before or after a DynamoDB write reaches the server (after = the write
landed but the process died before it heard back); inside the transaction, DynamoDB cancels it.
The ESM stand-in retries the batch.
"""

from __future__ import annotations

import random
from collections import Counter

import pytest
from botocore.exceptions import ClientError

from shardline.consumer import KinesisConsumer
from tests.support.integration import CONSUMER_RECORDS as RECORDS
from tests.support.integration import Pipeline, count_once, n_of


class Crash(BaseException):
    """The Lambda process dies here."""


class CrashingDynamoDB:
    """Wraps a DynamoDB client; each write may crash just before it is sent or just after it landed."""

    WRITES = ("put_item", "update_item", "transact_write_items")

    def __init__(self, client, rng: random.Random, rate: float) -> None:
        self._client = client
        self._rng = rng
        self.rate = rate
        self.crashes: Counter[str] = Counter()

    def __getattr__(self, name):
        attribute = getattr(self._client, name)
        if name not in self.WRITES:
            return attribute

        def write(**kwargs):
            roll = self._rng.random()
            if roll < self.rate / 3 and name == "transact_write_items":
                # Inside the transaction: DynamoDB cancels it (nothing applied) and says so.
                self.crashes["rejected transact_write_items"] += 1
                raise ClientError(
                    {
                        "Error": {"Code": "TransactionCanceledException", "Message": "injected"},
                        "CancellationReasons": [{"Code": "ThrottlingError"}],
                    },
                    "TransactWriteItems",
                )
            if roll < self.rate / 2:
                self.crashes[f"before {name}"] += 1
                raise Crash
            result = attribute(**kwargs)
            if roll < self.rate:
                self.crashes[f"after {name}"] += 1
                raise Crash
            return result

        return write


def crashing_handler(handler, rng: random.Random, rate: float, crashes: Counter):
    def wrapped(record):
        roll = rng.random()
        if roll < rate / 2:
            crashes["before handler"] += 1
            raise Crash
        result = handler(record)
        if roll < rate:
            crashes["after handler"] += 1
            raise Crash
        return result

    return wrapped


def crashing_consumer(
    pipeline: Pipeline, seed: int, rate: float, **options
) -> tuple[KinesisConsumer, Counter]:
    rng = random.Random(seed)
    dynamodb = CrashingDynamoDB(pipeline.dynamodb, rng, rate)
    table = pipeline.lease_table(dynamodb)
    consumer = KinesisConsumer("crash-group", table, kinesis=pipeline.kinesis, **options)
    return consumer, dynamodb.crashes


def test_a_transactional_sink_applies_every_record_exactly_once_through_crashes(moto_server):
    injected: Counter[str] = Counter()
    for seed in (1, 2, 3, 4):
        pipeline = Pipeline(moto_server)
        consumer, crashes = crashing_consumer(pipeline, seed, rate=0.3, checkpoint_every=7)
        consumer.handler(crashing_handler(count_once(pipeline.sink), random.Random(seed * 7), 0.2, crashes))

        pipeline.feed(batch_size=10).drain(consumer.process)

        applied = {int(item["id"]["S"]): int(item["applied"]["N"]) for item in pipeline.sink_items()}
        assert applied == dict.fromkeys(range(RECORDS), 1), f"seed {seed}: {crashes}"
        injected += crashes
    for point in (
        "before handler",
        "after handler",
        "before transact_write_items",
        "after transact_write_items",
    ):
        assert injected[point] > 0, f"no crash was injected {point}"


@pytest.mark.parametrize("seed", [4, 5])
def test_plain_handlers_lose_nothing_and_repeat_at_most_checkpoint_every_per_crash(pipeline, seed):
    checkpoint_every = 4
    consumer, crashes = crashing_consumer(pipeline, seed, rate=0.3, checkpoint_every=checkpoint_every)
    effects: Counter[int] = Counter()
    consumer.handler(crashing_handler(lambda r: effects.update([n_of(r)]), random.Random(seed), 0.2, crashes))

    pipeline.feed(batch_size=10).drain(consumer.process)

    assert set(effects) == set(range(RECORDS)), "no record lost"
    repeats = sum(effects.values()) - RECORDS
    assert repeats <= sum(crashes.values()) * checkpoint_every
    for point in ("before update_item", "after update_item", "after handler"):
        assert crashes[point] > 0, f"no crash was injected {point}"
