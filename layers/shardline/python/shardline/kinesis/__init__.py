"""Kinesis itself, as shardline models it: limits, user records and hash keys, positions, shard maps.

    from shardline.kinesis import UserRecord, hash_key, validate, ShardMap, Position, DEFAULT_LIMITS

- `Limits` / `DEFAULT_LIMITS`: every limit shardline checks, in one place (record size, request
  count and bytes, partition-key length, hash-key range, per-shard write rates).
- `UserRecord`, `hash_key`, `validate` / `find_problems`: what a caller sends, which shard its hash
  key picks, and every problem named by record index and field (`InvalidRecord`).
- `Position` and the sentinels: where a checkpoint points, ordered as the KCL orders them.
- `ShardMap` / `HashRange`: the open shards of a stream, to predict where a hash key lands.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from shardline._lazy import lazy_exports

if TYPE_CHECKING:
    from shardline.errors import InvalidRecord as InvalidRecord
    from shardline.errors import RecordProblem as RecordProblem
    from shardline.kinesis._limits import DEFAULT_LIMITS as DEFAULT_LIMITS
    from shardline.kinesis._limits import MAX_HASH_KEY as MAX_HASH_KEY
    from shardline.kinesis._limits import MAX_MAX_RECORD_SIZE as MAX_MAX_RECORD_SIZE
    from shardline.kinesis._limits import MAX_PARTITION_KEY_LENGTH as MAX_PARTITION_KEY_LENGTH
    from shardline.kinesis._limits import MIN_HASH_KEY as MIN_HASH_KEY
    from shardline.kinesis._limits import MIN_MAX_RECORD_SIZE as MIN_MAX_RECORD_SIZE
    from shardline.kinesis._limits import MIN_PARTITION_KEY_LENGTH as MIN_PARTITION_KEY_LENGTH
    from shardline.kinesis._limits import PUT_PAYLOAD_UNIT as PUT_PAYLOAD_UNIT
    from shardline.kinesis._limits import KiB as KiB
    from shardline.kinesis._limits import Limits as Limits
    from shardline.kinesis._limits import MiB as MiB
    from shardline.kinesis._limits import put_payload_units as put_payload_units
    from shardline.kinesis._positions import AT_TIMESTAMP as AT_TIMESTAMP
    from shardline.kinesis._positions import LATEST as LATEST
    from shardline.kinesis._positions import SHARD_END as SHARD_END
    from shardline.kinesis._positions import TRIM_HORIZON as TRIM_HORIZON
    from shardline.kinesis._positions import Position as Position
    from shardline.kinesis._records import UserRecord as UserRecord
    from shardline.kinesis._records import find_problems as find_problems
    from shardline.kinesis._records import hash_key as hash_key
    from shardline.kinesis._records import md5_hash_key as md5_hash_key
    from shardline.kinesis._records import record_size as record_size
    from shardline.kinesis._records import validate as validate
    from shardline.kinesis._shard_map import HashRange as HashRange
    from shardline.kinesis._shard_map import ShardMap as ShardMap

_EXPORTS = {
    "InvalidRecord": "shardline.errors",
    "RecordProblem": "shardline.errors",
    "DEFAULT_LIMITS": "_limits",
    "MAX_HASH_KEY": "_limits",
    "MAX_MAX_RECORD_SIZE": "_limits",
    "MAX_PARTITION_KEY_LENGTH": "_limits",
    "MIN_HASH_KEY": "_limits",
    "MIN_MAX_RECORD_SIZE": "_limits",
    "MIN_PARTITION_KEY_LENGTH": "_limits",
    "PUT_PAYLOAD_UNIT": "_limits",
    "KiB": "_limits",
    "Limits": "_limits",
    "MiB": "_limits",
    "put_payload_units": "_limits",
    "AT_TIMESTAMP": "_positions",
    "LATEST": "_positions",
    "SHARD_END": "_positions",
    "TRIM_HORIZON": "_positions",
    "Position": "_positions",
    "UserRecord": "_records",
    "find_problems": "_records",
    "hash_key": "_records",
    "md5_hash_key": "_records",
    "record_size": "_records",
    "validate": "_records",
    "HashRange": "_shard_map",
    "ShardMap": "_shard_map",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
