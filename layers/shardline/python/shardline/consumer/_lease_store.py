"""What a consumer needs of its lease table: the `Lease` row and the `LeaseStore` protocol.

Two tables implement `LeaseStore`: `LeaseTable` (`_leases`: one DynamoDB row per shard,
KCL-compatible; its item encoding is `_lease_codec`, its sink key lookups `_sink_keys`) and
`shardline.testing.InMemoryLeaseTable` (rows in a dict, for handler tests). Neither subclasses
the other; the protocol is the contract, and the same tests run against both.

`LeaseTable` keeps its name (it is what users construct: `LeaseTable(dynamodb, name)`); the
protocol is new, named for what it stores. The semantics every implementation keeps:

- every write is fenced: conditional on the stored `counter` (`leaseCounter`), which it
  increments, claiming the row for `lease.owner`; a write under a counter it did not see raises
  `LeaseLost` (the lease was taken);
- a checkpoint only moves forward (a position at or below the stored one changes nothing) and
  ends the stall and the careful span the row shows, and the failure it passes;
- `checkpoint_with` commits the checkpoint and the sink writes together, or neither, raising
  `SinkConflict` (a write's own condition failed) or `SinkRejected` (a write DynamoDB refuses
  as invalid) with the indexes of the writes to blame, when known;
- each method returns the lease as the row now holds it (the caller's next write goes under it);
- a checkpoint's `claims` (`Claim`: a redrive row's record of what a run applied, `_redrive_claims`)
  land with it or not at all: each is conditional on the redrive row's `applyVersion` as read, which
  it increments, and `ClaimsMoved` says a redrive row's claims moved since (nothing was written).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol, runtime_checkable

from shardline.kinesis._positions import Position

#: DynamoDB's limits on one transaction: the checkpoint is one of the items.
MAX_TRANSACTION_ITEMS = 100
MAX_TRANSACTION_BYTES = 4_000_000  # DynamoDB's 4 MB per transaction, with headroom for the checkpoint
#: Bounds on the text a lease row keeps about a failure (DynamoDB items are at most 400 KB).
MAX_ERROR_CHARS = 1000
MAX_DETAILS_CHARS = 4000
#: A lease's fields once careful running ended.
NOT_CAREFUL: dict[str, Any] = {"careful_span": None, "span_started": False, "span_returned": False}
#: A lease's fields once its stall ended.
NOT_STALLED: dict[str, Any] = {
    "stalled_since": None,
    "stalled_cause": None,
    "stalled_sequence": None,
    "stalls": 0,
}
#: A lease's fields once the checkpoint passed its failing record.
NO_FAILURE: dict[str, Any] = {
    "failed_at": None,
    "failed_attempts": 0,
    "last_error": None,
    "failed_time": None,
    "last_error_details": None,
}


@dataclass(frozen=True, slots=True)
class Lease:
    """One row of the table as this invocation holds it."""

    key: str
    owner: str
    counter: int
    checkpoint: Position
    owner_switches: int = 0
    parent_shard_ids: frozenset[str] = frozenset()
    child_shard_ids: frozenset[str] = frozenset()
    failed_at: Position | None = None
    failed_attempts: int = 0
    last_error: str | None = None
    inflight: str | None = None  # first sequence number of a delivery that has not answered
    applied_aggregates: str | None = None  # `appliedAggregates`: the dedup state (`_dedup`)
    failed_time: float | None = None  # `lastFailureAt`: when `failed_at` last failed (table clock)
    last_error_details: str | None = None  # `lastErrorDetails`: JSON, bounded
    careful_span: int | None = None  # `carefulSpan`: records run past the checkpoint before the next one
    span_started: bool = False  # `spanStarted`: a lone careful record's handler started
    span_returned: bool = False  # `spanReturned`: ... and returned
    stalled_since: float | None = None  # `stalledSince`: the shard stalls on its environment
    stalled_cause: str | None = None
    stalled_sequence: str | None = None  # the sequence number the stalled delivery retries from
    stalls: int = 0  # consecutive stalled deliveries
    skipped_by_mapping: str | None = None  # JSON list of batches the mapping discarded while stalled
    # A redrive row's claims (`_redrive_claims`): what the redrive and the group's run applied.
    apply_version: int = 0  # `applyVersion`: incremented by every write of the claims
    group_claims: str | None = None  # `groupClaims`: aggregates the group's run applied
    redrive_claims: str | None = None  # `redriveClaims`: aggregates the redrive applied


#: A redrive row's claim attributes, and the `Lease` fields they are read into.
CLAIM_FIELDS = {"groupClaims": "group_claims", "redriveClaims": "redrive_claims"}


@dataclass(frozen=True, slots=True)
class Claim:
    """A write of one run's claims into a redrive row, riding with that run's checkpoint: SET
    `attribute` (`groupClaims` or `redriveClaims`) to `claims`, on condition that the row's
    `applyVersion` is still `version` (0: never written), which it increments."""

    key: str
    version: int
    attribute: str
    claims: str


class ClaimsMoved(Exception):
    """A redrive row's `applyVersion` moved since the run read it: the checkpoint did not land.
    The run re-reads the row's claims before it writes again (`_redrive_claims`)."""

    def __init__(self, key: str) -> None:
        super().__init__(f"the claims of redrive row {key} moved since they were read")
        self.key = key


def claimed(lease: Lease, claims: Sequence[Claim]) -> Lease:
    """`lease` after its checkpoint landed with `claims`: those on its own row are now its own."""
    for claim in claims:
        if claim.key == lease.key:
            lease = with_claim(lease, claim)
    return lease


def with_claim(row: Lease, claim: Claim) -> Lease:
    """`row` (the claim's) once `claim` landed in it."""
    if claim.attribute == "groupClaims":
        return replace(row, apply_version=claim.version + 1, group_claims=claim.claims)
    return replace(row, apply_version=claim.version + 1, redrive_claims=claim.claims)


def advanced(
    lease: Lease,
    position: Position,
    release: bool = False,
    applied: str | None = None,
    careful_span: int | None = None,
) -> Lease:
    """`lease` after its checkpoint moved to `position` (as `LeaseStore.checkpoint` documents)."""
    if lease.failed_at is not None and lease.failed_at <= position:
        lease = replace(lease, **NO_FAILURE)
    if release:
        lease = replace(lease, inflight=None)
    if applied is not None:
        lease = replace(lease, applied_aggregates=applied or None)
    return replace(
        lease,
        counter=lease.counter + 1,
        checkpoint=position,
        owner_switches=0,
        careful_span=careful_span,
        span_started=False,
        span_returned=False,
        **NOT_STALLED,
    )


@runtime_checkable
class LeaseStore(Protocol):
    """Leases and checkpoints of one consumer group (see `LeaseTable` for each method's contract)."""

    def now(self) -> float:
        """The group's wall clock (epoch seconds): rows are stamped with it, backoffs measured in it."""
        ...

    def sleep(self, seconds: float) -> None:
        """Wait `seconds` on the group's clock (a failed record's backoff, a stalled shard's)."""
        ...

    def get(self, key: str) -> Lease | None:
        """The row for `key` (strongly consistent), or None."""
        ...

    def take(self, key: str, owner: str, *, parent_shard_ids: Iterable[str] = ()) -> Lease:
        """Take the lease of `key` for `owner` with a write of its own (creating the row)."""
        ...

    def hold(self, key: str, owner: str, *, parent_shard_ids: Iterable[str] = ()) -> Lease:
        """The lease of `key` as `owner` will claim it with its first write."""
        ...

    def begin(
        self,
        key: str,
        owner: str,
        delivery: str,
        *,
        parent_shard_ids: Iterable[str] = (),
        held: Lease | None = None,
    ) -> tuple[Lease, bool]:
        """Take the lease and mark `delivery` in flight; whether an earlier one never answered.
        `held`: a worker's lease: the write is fenced on its counter instead of taking the row."""
        ...

    def release(self, lease: Lease, *, careful_done: bool = False) -> Lease:
        """Remove the in-flight mark and end the stall (and, `careful_done`, careful running)."""
        ...

    def checkpoint(
        self,
        lease: Lease,
        position: Position,
        *,
        release: bool = False,
        applied: str | None = None,
        careful_span: int | None = None,
        claims: Sequence[Claim] = (),
    ) -> Lease:
        """Move the checkpoint forward to `position` under `lease` (with `claims`, atomically)."""
        ...

    def checkpoint_with(
        self,
        lease: Lease,
        position: Position,
        writes: Sequence[Mapping[str, Any]],
        *,
        release: bool = False,
        applied: str | None = None,
        careful_span: int | None = None,
        claims: Sequence[Claim] = (),
    ) -> Lease:
        """Checkpoint and apply `writes` (TransactWriteItems entries) and `claims` in one transaction."""
        ...

    def put_idempotent(self, puts: Sequence[Mapping[str, Any]]) -> int:
        """Write `puts` (`idempotent_put` entries) with BatchWriteItem, before a checkpoint passes
        their records; returns the calls made. `SinkRejected` names the index of a refused put."""
        ...

    def record_failure(
        self,
        lease: Lease,
        position: Position,
        error: str,
        *,
        release: bool = False,
        details: str | None = None,
    ) -> Lease:
        """Count one more failed attempt at `position` (a new position starts at 1)."""
        ...

    def mark_careful(
        self,
        lease: Lease,
        span: int,
        *,
        started: bool = False,
        returned: bool = False,
        release: bool = False,
    ) -> Lease:
        """Run carefully from the checkpoint on: `span` records before the next checkpoint."""
        ...

    def stall(self, lease: Lease, cause: str, sequence: str, *, release: bool = False) -> Lease:
        """Note that the shard stalls on its environment, and where the mapping retries."""
        ...

    def note_skipped(self, lease: Lease, skipped: str) -> Lease:
        """Replace `skippedByMapping` with `skipped` (JSON) and end the stall."""
        ...

    def start_at(
        self,
        key: str,
        checkpoint: Position,
        *,
        parent_shard_ids: Iterable[str] = (),
        applied: str | None = None,
    ) -> bool:
        """Create the row of `key` at `checkpoint` (owned by no one), with the applied-aggregate
        state `applied`; False if it exists."""
        ...

    def leases(self) -> list[Lease]:
        """Every row of the table (strongly consistent)."""
        ...

    def claim(self, seen: Lease, owner: str) -> Lease:
        """Claim the row as `seen` was read for `owner` (renew, take, or release with ""), if its
        counter is still `seen`'s; increments it. `LeaseLost` otherwise."""
        ...

    def mark_shard_end(self, seen: Lease) -> bool:
        """Set a closed shard's checkpoint to SHARD_END if it is still where `seen` found it."""
        ...

    def sink_key(self, table_name: str) -> tuple[str, ...] | None:
        """The key attributes of a sink table whose writes ride with a checkpoint, or None when
        unknown (`_transaction` then tells a `Put` apart from others by its whole item)."""
        ...
