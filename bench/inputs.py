"""Deterministic benchmark inputs: partition keys, user records, batches that fill one KPL aggregate."""

from __future__ import annotations

import random
from collections.abc import Sequence

from shardline.kinesis import UserRecord
from shardline.kpl import AggregateBuilder

#: The KPL's default AggregationMaxSize (bytes as Kinesis meters a record: data + partition key).
KPL_AGGREGATION_MAX_SIZE = 51_200
#: Partition key an aggregate is sent with (shardline and aiokpl use "a"); it counts toward the size.
AGGREGATE_PARTITION_KEY = "a"


def partition_keys(rng: random.Random, count: int) -> list[str]:
    """`count` distinct partition keys shaped like user ids (21 ASCII characters)."""
    keys: dict[str, None] = {}
    while len(keys) < count:
        keys[f"user-{rng.getrandbits(64):016x}"] = None
    return list(keys)


def user_records(rng: random.Random, keys: Sequence[str], count: int, data_size: int) -> list[UserRecord]:
    """`count` records of `data_size` random bytes, each with a key drawn from `keys`."""
    return [UserRecord(rng.choice(keys), rng.randbytes(data_size)) for _ in range(count)]


def aggregate_batches(
    rng: random.Random,
    keys: Sequence[str],
    data_size: int,
    batch_count: int,
    max_size: int = KPL_AGGREGATION_MAX_SIZE,
) -> list[list[UserRecord]]:
    """`batch_count` consecutive batches of fresh records, each as many as fit one aggregate.

    A batch is closed when the next record would push the aggregate, metered with its partition
    key "a", past `max_size` bytes: the same rule shardline's reducer and the KPL apply.
    """
    cap = max_size - len(AGGREGATE_PARTITION_KEY)
    batches: list[list[UserRecord]] = []
    batch: list[UserRecord] = []
    builder = AggregateBuilder()
    while len(batches) < batch_count:
        record = UserRecord(rng.choice(keys), rng.randbytes(data_size))
        if batch and builder.size_with(record) > cap:
            batches.append(batch)
            batch, builder = [], AggregateBuilder()
        builder.add(record)
        batch.append(record)
    return batches
