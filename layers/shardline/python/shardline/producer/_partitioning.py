"""Partitioning strategies: which hash key (hence which shard) a record is sent with.

A strategy is called once per record, before its shard is predicted, and returns the record to
send — unchanged, or with an explicit hash key. Strategies for keyless traffic spread records
over the open shards; when the shard map cannot predict, they leave the record as it is and it
goes with its own partition key.

    producer = Producer(client, "events", partitioner=RoundRobin())
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Protocol

from shardline.kinesis._limits import MAX_HASH_KEY
from shardline.kinesis._records import UserRecord
from shardline.kinesis._shard_map import ShardMap


class Partitioner(Protocol):
    """Returns the record to send, possibly with an explicit hash key chosen by the strategy."""

    def assign(self, record: UserRecord, shard_map: ShardMap) -> UserRecord: ...


class ByPartitionKey:
    """The Kinesis rule (default): the explicit hash key if the record has one, else MD5 of its key.
    Records with the same key keep their order within the shard."""

    def assign(self, record: UserRecord, shard_map: ShardMap) -> UserRecord:
        return record


class ByExplicitHashKey:
    """Derive each record's hash key from the record itself, e.g. from a field of its data.

    `hash_key_of` returns an int in 0..2**128-1; it is sent as the record's explicit hash key.
    """

    def __init__(self, hash_key_of: Callable[[UserRecord], int]) -> None:
        self._hash_key_of = hash_key_of

    def assign(self, record: UserRecord, shard_map: ShardMap) -> UserRecord:
        hash_key = self._hash_key_of(record)
        if not isinstance(hash_key, int) or not 0 <= hash_key <= MAX_HASH_KEY:
            raise ValueError(f"hash_key_of returned {hash_key!r}; expected an int within 0..2**128-1")
        return record._replace(explicit_hash_key=str(hash_key))


def _pin_to_shard(record: UserRecord, shard_map: ShardMap, shard_id: str) -> UserRecord:
    hash_range = shard_map.hash_range(shard_id)
    if hash_range is None:
        return record
    return record._replace(explicit_hash_key=str(hash_range.start))


class RoundRobin:
    """Spread records evenly: each record goes to the next open shard in turn."""

    def __init__(self) -> None:
        self._next = 0

    def assign(self, record: UserRecord, shard_map: ShardMap) -> UserRecord:
        shards = shard_map.open_shards()
        if not shards:
            return record
        shard_id = shards[self._next % len(shards)]
        self._next += 1
        return _pin_to_shard(record, shard_map, shard_id)


class RandomShard:
    """Send each record to an open shard chosen at random (seedable for tests)."""

    def __init__(self, rng: random.Random | None = None) -> None:
        self._rng = rng or random.Random()

    def assign(self, record: UserRecord, shard_map: ShardMap) -> UserRecord:
        shards = shard_map.open_shards()
        if not shards:
            return record
        return _pin_to_shard(record, shard_map, self._rng.choice(shards))
