"""Parent-before-child ordering across a reshard, for consumers fed by an event-source mapping.

Nothing in Lambda guarantees that a child shard's batches wait for its parents. `ShardLineage`
learns each shard's parents and hash range from ListShards, and decides whether a child may run:
every parent that has a lease row must be at SHARD_END. A parent is marked SHARD_END here once it
is closed and nothing is left after its checkpoint (probed with GetRecords from the checkpoint).
A parent without a row, or no longer listed (trimmed past retention), does not block.

A finished parent's applied-aggregate state (`_dedup`, its row's `appliedAggregates`) is final:
`inherited` hands the parents' states (their union, and what a merged child needs of aggregates
a parent applied only in part) to a child whose row has none yet, so a copy of an aggregate a
parent applied, landing in the child after the reshard, is skipped there too.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from shardline.consumer._deaggregation import sub_record_count
from shardline.consumer._dedup import AppliedAggregates
from shardline.consumer._lease_store import Lease, LeaseStore
from shardline.kinesis._positions import SHARD_END
from shardline.kinesis._shard_map import HashRange

if TYPE_CHECKING:  # annotations only: the Protocols cost nothing at import
    from shardline.protocols import KinesisReadClient

_PROBE_PAGES = 20


class ShardLineage:
    """Parents, hash ranges and parent completion, from ListShards and the lease table."""

    def __init__(self, kinesis: KinesisReadClient, table: LeaseStore) -> None:
        self._kinesis = kinesis
        self._table = table
        self._shards: dict[str, dict[str, Mapping[str, Any]]] = {}  # stream -> shard id -> shard
        self._finished: set[str] = set()  # parent lease keys seen at SHARD_END (final: no re-read)
        self._final_states: dict[str, str] = {}  # finished parent lease key -> its appliedAggregates

    def parents(self, stream: str, shard_id: str) -> tuple[str, ...]:
        shard = self._shard(stream, shard_id)
        if shard is None:
            return ()
        return tuple(p for p in (shard.get("ParentShardId"), shard.get("AdjacentParentShardId")) if p)

    def hash_range(self, stream: str, shard_id: str) -> HashRange | None:
        shard = self._shard(stream, shard_id)
        if shard is None:
            return None
        keys = shard["HashKeyRange"]
        return HashRange(int(keys["StartingHashKey"]), int(keys["EndingHashKey"]))

    def parents_finished(self, stream: str, parent_keys: Iterable[str]) -> bool:
        """True if every parent with a lease row is at SHARD_END (marking finished ones)."""
        for key in parent_keys:
            if key in self._finished:
                continue
            row = self._table.get(key)
            if row is None:
                continue
            if row.checkpoint.sequence != SHARD_END and not (
                self._exhausted(stream, key.rsplit(":", 1)[-1], row) and self._table.mark_shard_end(row)
            ):
                return False
            self._finished.add(key)
            if row.applied_aggregates:
                self._final_states[key] = row.applied_aggregates
        return True

    def inherited(self, stream: str, shard_id: str, parent_keys: Iterable[str]) -> str | None:
        """The applied-aggregate state child `shard_id` starts from: its finished parents' states
        (after `parents_finished` said True for them) with their hash ranges
        (`AppliedAggregates.inherit`), serialized; None when they had none."""
        parents = [
            (
                AppliedAggregates.parse(self._final_states[key]),
                self.hash_range(stream, key.rsplit(":", 1)[-1]),
            )
            for key in parent_keys
            if key in self._final_states
        ]
        if not parents:
            return None
        child = self.hash_range(stream, shard_id)
        return AppliedAggregates.inherit(parents, child).serialize() or None

    def _shard(self, stream: str, shard_id: str) -> Mapping[str, Any] | None:
        shards = self._shards.get(stream)
        if shards is None or shard_id not in shards:
            shards = self._shards[stream] = self._list(stream)
        return shards.get(shard_id)

    def _list(self, stream: str) -> dict[str, Mapping[str, Any]]:
        shards: dict[str, Mapping[str, Any]] = {}
        request: dict[str, Any] = {"StreamName": stream}
        while True:
            response = self._kinesis.list_shards(**request)
            shards.update((shard["ShardId"], shard) for shard in response.get("Shards", ()))
            if not response.get("NextToken"):
                return shards
            request = {"NextToken": response["NextToken"]}

    def _exhausted(self, stream: str, shard_id: str, row: Lease) -> bool:
        """Is the parent closed with nothing after its checkpoint?"""
        self._shards.pop(stream, None)  # a parent may have closed since the listing was cached
        shard = self._shard(stream, shard_id)
        if shard is None:
            return True  # no longer listed: trimmed past retention
        if shard.get("SequenceNumberRange", {}).get("EndingSequenceNumber") is None:
            return False
        checkpoint = row.checkpoint
        request: dict[str, Any] = {"StreamName": stream, "ShardId": shard_id}
        if checkpoint.is_sentinel:
            request["ShardIteratorType"] = "TRIM_HORIZON"
        else:
            request.update(ShardIteratorType="AT_SEQUENCE_NUMBER", StartingSequenceNumber=checkpoint.sequence)
        try:
            iterator = self._kinesis.get_shard_iterator(**request)["ShardIterator"]
        except ClientError as exc:
            return bool(exc.response.get("Error", {}).get("Code") == "ResourceNotFoundException")
        for _ in range(_PROBE_PAGES):
            response = self._kinesis.get_records(ShardIterator=iterator, Limit=100)
            for record in response.get("Records", ()):
                if checkpoint.is_sentinel or int(record["SequenceNumber"]) > int(checkpoint.sequence):
                    return False
                if sub_record_count(record["Data"]) > checkpoint.sub_sequence + 1:
                    return False  # the checkpoint stopped inside this aggregate
            iterator = response.get("NextShardIterator")
            if not iterator:
                return True
        return False
