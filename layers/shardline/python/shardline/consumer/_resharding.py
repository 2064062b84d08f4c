"""Parent-before-child ordering across reshards, and the dedup state handed down the lineage.

Nothing in Lambda guarantees that a child shard's batches wait for its parents. `ShardLineage`
learns each shard's parents and hash range from ListShards, and decides whether a child may run:
every parent must be finished. A parent with a lease row is finished at SHARD_END; it is marked
SHARD_END here once it is closed and nothing is left after its checkpoint (probed with GetRecords
from the checkpoint). A parent whose last batch the mapping gave up (the group stalled on it, or
waited for the parent's own parents) never gets there by itself — nothing more comes on it — so
it is also finished once the redrives of those batches (`_redrive`: rows `<key>#redrive#<first
sequence number>`, each from the first record past the row's checkpoint or the redrive row before
it; the first also keyed by the stalled sequence or the failed record) have applied them to the
closed shard's end; its final state is its row's and the redrive rows'. Until then its children
wait, as they would for the mapping. A parent no longer listed (trimmed past retention) with no
row is finished.

A shard that received nothing has no row under the Lambda driver (the mapping never invokes for
it) and, under the worker, a row marked SHARD_END that never checkpointed. Either way it passes
its parents through: it is finished when its own parents are (followed up the lineage, through
any chain of such shards), and its state is theirs. A parent without a row that does hold
records has not run yet when the mapping will deliver it: the child waits for it, as for a parent
with a row, or a copy in both would be applied twice. Whether the mapping will deliver it follows
from where the group starts (`GroupStart`: the mapping's starting position, rendered by the
constructs into SHARDLINE_STARTING_POSITION, SHARDLINE_STARTING_POSITION_TIMESTAMP and
SHARDLINE_MAX_RECORD_AGE_SECONDS; `KinesisConsumer`'s `starting_position`, default TRIM_HORIZON):

- TRIM_HORIZON: the mapping reads every shard from its oldest record, closed parents included,
  so a parent without a row that still holds a record it would deliver — one younger than the
  mapping's maximum record age, when it has one — is waited for. One that holds none (never had
  any, or all trimmed past retention, or all too old for the mapping, which discards them
  without an invocation) is finished. Guaranteed: a resend's copy in a child is applied once
  whichever of parent and child the mapping delivers first. Cost: a child waits (its batch
  retried, `BatchesWaitingForParent`) until the parent ran; never longer than the parent's
  youngest record takes to pass the maximum record age, or to be trimmed when there is none.
  Ages are read on this process's clock against Kinesis's arrival times: a parent's record that
  passes the maximum age while its child waits is the mapping's to discard (to its on-failure
  destination, then a redrive), and the child then runs.
- AT_TIMESTAMP: the same, for the records at or after the timestamp (probed with an AT_TIMESTAMP
  iterator): a parent closed before it holds none and is never delivered, so it never blocks.
- LATEST: the mapping reads the shards open when it was created, from their tip; when that was
  is not known here. A parent without a row is waited for only when something above it has a
  row (the group has read that lineage, so the mapping holds an iterator on it); otherwise it is
  finished at once, so a parent closed before the group existed (never delivered) cannot block.
  Not guaranteed: a parent open when the mapping was created, with records after that moment,
  delivered after its child, and nothing above it with a row (a group created at LATEST just
  before a reshard): a copy of an aggregate in both is then applied twice. Where that matters,
  start the group AT_TIMESTAMP (the time it is created) instead.

Under the worker (`Worker`) every listed shard gets a row at discovery, before any of its
children runs: a parent without a row is one no longer listed, and the starting position
changes nothing.

A finished parent's applied-aggregate state (`_dedup`, its row's `appliedAggregates`, or its
parents' when it has none of its own) is final: `inherited` hands the parents' states (their
union, and what a merged child needs of aggregates a parent applied only in part, clipped to each
range down the lineage) to a child whose row has none yet, so a copy of an aggregate applied
anywhere above, landing in the child after any chain of reshards, is skipped there too. A row
that has a state started from its own parents' and kept them: the walk stops there. Each lease
key is resolved once per process (GetItem, and a probe for a parent without a row), then cached.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from botocore.exceptions import ClientError

from shardline.consumer._deaggregation import sub_record_count
from shardline.consumer._dedup import AppliedAggregates
from shardline.consumer._lease_store import Lease, LeaseStore
from shardline.consumer._redrive_claims import REDRIVE_SUFFIX
from shardline.errors import ConfigurationError
from shardline.kinesis._positions import AT_TIMESTAMP, LATEST, SHARD_END, TRIM_HORIZON, Position
from shardline.kinesis._shard_map import HashRange

if TYPE_CHECKING:  # annotations only: the Protocols cost nothing at import
    from shardline.protocols import KinesisReadClient

__all__ = ["STARTING_POSITIONS", "GroupStart", "ShardLineage"]

logger = logging.getLogger(__name__)

#: Where a consumer group's mapping may start reading (Lambda's StartingPosition).
STARTING_POSITIONS = (TRIM_HORIZON, LATEST, AT_TIMESTAMP)

_PROBE_PAGES = 20
#: Reshards followed up from a child through shards that received nothing (a bound, not a limit
#: any stream reaches: each level is a reshard of the stream within its retention).
_MAX_DEPTH = 64
#: Given-up batches followed from a row's checkpoint to its shard's end (`_redriven_tail`).
_MAX_TAIL_BATCHES = 50


def _shard_id(key: str) -> str:
    """The shard id of a lease key (`<shard id>` or `<stream>:<shard id>`)."""
    return key.rsplit(":", 1)[-1]


@dataclass(frozen=True, slots=True)
class GroupStart:
    """Where the group's mapping starts reading a shard, and the oldest record it delivers: what
    decides whether a parent without a lease row will still be delivered (module docstring).

    `position`: TRIM_HORIZON, LATEST or AT_TIMESTAMP; `timestamp`: epoch seconds, exactly with
    AT_TIMESTAMP; `max_record_age`: the mapping's MaximumRecordAgeInSeconds (None: no limit)."""

    position: str = TRIM_HORIZON
    timestamp: float | None = None
    max_record_age: float | None = None

    def __post_init__(self) -> None:
        if self.position not in STARTING_POSITIONS:
            raise ConfigurationError(
                f"starting_position must be one of {', '.join(STARTING_POSITIONS)}, got {self.position!r}"
            )
        if (self.position == AT_TIMESTAMP) != (self.timestamp is not None):
            raise ConfigurationError(
                "starting_position_timestamp is given exactly with AT_TIMESTAMP, got "
                f"{self.position} and {self.timestamp!r}"
            )
        for name, value in (
            ("starting_position_timestamp", self.timestamp),
            ("max_record_age", self.max_record_age),
        ):
            if value is not None and not (math.isfinite(value) and value >= 0):
                raise ConfigurationError(f"{name} must be a finite number of seconds >= 0, got {value!r}")


def _merged(row: Lease | None, tail: list[Lease]) -> str | None:
    """The final state of a shard whose tail redrives applied: its row's and the redrive rows'."""
    states = (row.applied_aggregates if row is not None else None, *(r.applied_aggregates for r in tail))
    return AppliedAggregates.merge(AppliedAggregates.parse(s) for s in states if s).serialize() or None


class ShardLineage:
    """Parents, hash ranges and parent completion, from ListShards and the lease table."""

    def __init__(
        self,
        kinesis: KinesisReadClient,
        table: LeaseStore,
        start: GroupStart | None = None,
        *,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self._kinesis = kinesis
        self._table = table
        self._start = start or GroupStart()
        self._wall_clock = wall_clock  # epoch seconds, for the maximum record age
        self._shards: dict[str, dict[str, Mapping[str, Any]]] = {}  # stream -> shard id -> shard
        self._finished: set[str] = set()  # lease keys seen finished (final: no re-read)
        self._final_states: dict[str, str] = {}  # finished lease key -> its final state, if any
        self._consumed: set[str] = set()  # finished lease keys with a row in their lineage

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
        """True if every parent is finished (marking those found exhausted at SHARD_END): see
        the module docstring for what finished means, through shards that received nothing."""
        return all([self._resolve(stream, key, _MAX_DEPTH) for key in parent_keys])

    def inherited(self, stream: str, shard_id: str, parent_keys: Iterable[str]) -> str | None:
        """The applied-aggregate state child `shard_id` starts from: its finished parents' final
        states (after `parents_finished` said True for them) with their hash ranges
        (`AppliedAggregates.inherit`), serialized; None when they had none."""
        return self._inherit(stream, shard_id, parent_keys)

    def _inherit(self, stream: str, shard_id: str, parent_keys: Iterable[str]) -> str | None:
        parents = [
            (
                AppliedAggregates.parse(self._final_states[key]),
                self.hash_range(stream, _shard_id(key)),
            )
            for key in parent_keys
            if key in self._final_states
        ]
        if not parents:
            return None
        child = self.hash_range(stream, shard_id)
        return AppliedAggregates.inherit(parents, child).serialize() or None

    def _resolve(self, stream: str, key: str, depth: int) -> bool:
        """Is the shard of lease key `key` finished? If so, its final state is in `_final_states`
        (when it has one) and `_consumed` says whether a row is in its lineage."""
        if key in self._finished:
            return True
        if depth <= 0:
            logger.warning("shard %s: lineage deeper than %d reshards; not followed further", key, _MAX_DEPTH)
            self._finished.add(key)
            return True
        shard_id = _shard_id(key)
        row = self._table.get(key)
        tail = self._row_end(stream, shard_id, row)
        if tail is False:
            return False
        parents = tuple(row.parent_shard_ids) if row is not None and row.parent_shard_ids else ()
        if tail is not None:  # its row's state, and what the redrive of its tail applied
            state: str | None = _merged(row, tail)
        elif row is not None and row.applied_aggregates:
            state = row.applied_aggregates  # it started from its parents' and kept them
        elif row is None and self._shard(stream, shard_id) is None:
            state = None  # no row, and no longer listed (trimmed past retention): nothing known
        else:
            # No row (it received no records, or none this group was given), or a row that never
            # checkpointed a state: its state is its parents' (their union, through its range).
            parents = parents or self.parents(stream, shard_id)
            keys = [key[: len(key) - len(shard_id)] + parent for parent in parents]
            if not all([self._resolve(stream, parent_key, depth - 1) for parent_key in keys]):
                return False
            if row is None and self._awaited(stream, shard_id, any(k in self._consumed for k in keys)):
                # Its records are this group's and nothing has run them yet: a child must wait
                # for them, or a copy in both would be applied twice.
                return False
            state = self._inherit(stream, shard_id, keys)
            if row is not None or any(k in self._consumed for k in keys):
                self._consumed.add(key)
        if row is not None:
            self._consumed.add(key)
        self._finished.add(key)
        if state:
            self._final_states[key] = state
        return True

    def _row_end(self, stream: str, shard_id: str, row: Lease | None) -> list[Lease] | Literal[False] | None:
        """Is the shard's row finished? None: yes, at SHARD_END (or it has no row); redrive rows:
        yes, its tail was given up and redrives applied it (`_redriven_tail`); False: no."""
        if row is None or row.checkpoint.sequence == SHARD_END:
            return None
        if self._exhausted(stream, shard_id, row.checkpoint) and self._table.mark_shard_end(row):
            return None
        return self._redriven_tail(stream, shard_id, row) or False

    def _redriven_tail(self, stream: str, shard_id: str, row: Lease) -> list[Lease] | None:
        """The redrive rows of the batches from the first record past `row`'s checkpoint (the first
        one also keyed by its `stalledSequence`, or the record that failed) to the closed shard's
        end, each begun where the one before it stopped, when they applied everything there: the
        mapping gave the shard's last batches up (the group stalled on them, or waited for this
        shard's own parents), and nothing will come to move the row. None otherwise."""
        failed = (
            row.failed_at.sequence if row.failed_at is not None and row.checkpoint < row.failed_at else None
        )
        tail: list[Lease] = []
        position = row.checkpoint
        for _ in range(_MAX_TAIL_BATCHES):
            closed, first = self._after(stream, shard_id, position)
            if not closed or (first is None and not tail):
                return None
            if first is None:
                return tail  # the last redrive reached the shard's end
            starts = (first,) if tail else (first, row.stalled_sequence, failed)
            found = [
                self._table.get(row.key + REDRIVE_SUFFIX + start) for start in dict.fromkeys(starts) if start
            ]
            redriven = next((r for r in found if r is not None and position < r.checkpoint), None)
            if redriven is None or redriven.checkpoint.is_sentinel:
                return None
            tail.append(redriven)
            position = redriven.checkpoint
        return None

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

    def _awaited(self, stream: str, shard_id: str, lineage_read: bool) -> bool:
        """Will the mapping still deliver records of this shard, which has no row? (`GroupStart`:
        `lineage_read`, something above it has a row.)"""
        start = self._start
        since = start.timestamp
        now = self._wall_clock()
        if start.max_record_age is not None:
            since = max(since or 0.0, now - start.max_record_age)
        if since is not None and since > now:
            return False  # a group starting later: nothing a closed shard holds is delivered
        if start.position == TRIM_HORIZON or lineage_read:
            if since is None:
                return not self._exhausted(stream, shard_id, Position(TRIM_HORIZON))
            return not self._exhausted(stream, shard_id, Position(AT_TIMESTAMP), since=since)
        if start.position == AT_TIMESTAMP:
            return not self._exhausted(stream, shard_id, Position(AT_TIMESTAMP), since=since)
        return False  # LATEST, a lineage the group never read: see the module docstring

    def _exhausted(
        self, stream: str, shard_id: str, checkpoint: Position, *, since: float | None = None
    ) -> bool:
        """Is the shard closed with nothing after `checkpoint` (a sequence number, TRIM_HORIZON,
        or AT_TIMESTAMP with `since`, epoch seconds: nothing that arrived at or after it)?"""
        return self._after(stream, shard_id, checkpoint, since=since) == (True, None)

    def _after(
        self, stream: str, shard_id: str, checkpoint: Position, *, since: float | None = None
    ) -> tuple[bool, str | None]:
        """(Is the shard closed?, the sequence number of its first record past `checkpoint`: None
        if it has none, or the probe did not reach one). No longer listed: (True, None)."""
        self._shards.pop(stream, None)  # a parent may have closed since the listing was cached
        shard = self._shard(stream, shard_id)
        if shard is None:
            return True, None  # no longer listed: trimmed past retention
        if shard.get("SequenceNumberRange", {}).get("EndingSequenceNumber") is None:
            return False, None
        request: dict[str, Any] = {"StreamName": stream, "ShardId": shard_id}
        if checkpoint.sequence == AT_TIMESTAMP:
            request.update(ShardIteratorType=AT_TIMESTAMP, Timestamp=since)
        elif checkpoint.is_sentinel:
            request["ShardIteratorType"] = "TRIM_HORIZON"
        else:
            request.update(ShardIteratorType="AT_SEQUENCE_NUMBER", StartingSequenceNumber=checkpoint.sequence)
        try:
            iterator = self._kinesis.get_shard_iterator(**request)["ShardIterator"]
        except ClientError as exc:
            return bool(exc.response.get("Error", {}).get("Code") == "ResourceNotFoundException"), None
        for _ in range(_PROBE_PAGES):
            response = self._kinesis.get_records(ShardIterator=iterator, Limit=100)
            for record in response.get("Records", ()):
                sequence = str(record["SequenceNumber"])
                if checkpoint.is_sentinel or int(sequence) > int(checkpoint.sequence):
                    return True, sequence
                if sub_record_count(record["Data"]) > checkpoint.sub_sequence + 1:
                    return True, sequence  # the checkpoint stopped inside this aggregate
            iterator = response.get("NextShardIterator")
            if not iterator:
                return True, None
        return False, None
