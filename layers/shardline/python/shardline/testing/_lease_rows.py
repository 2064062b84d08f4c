"""The in-memory lease table's rows: each `LeaseStore` operation, fenced as `LeaseTable` fences it.

Every write is fenced exactly as in `LeaseTable` (conditional on the stored `leaseCounter`, which
it increments; checkpoints compare-and-swap on the stored position and only move forward, as
`_lease_store.advanced` documents), and `checkpoint_with` applies the sink writes to in-memory
tables in the same step (`_sink_tables`). A checkpoint keeps the applied-aggregate state it is
given (`Lease.applied_aggregates`), and a `once` guard whose item is already there cancels the
transaction at its index (`SinkConflict`), as DynamoDB's ConditionalCheckFailed does. A
checkpoint's claims (`_lease_store.Claim`) are checked against their rows' `applyVersion` before
anything is written (`ClaimsMoved`), and written with it. The clock
is virtual: `now()` starts at the wall clock and `sleep()` moves it on without waiting. Each
request is billed and may be made to fail through `LeaseRequests` (`_lease_requests`).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from botocore.exceptions import ClientError

from shardline.consumer._idempotent import (
    BATCH_ITEMS,
    IDEMPOTENT_PUT,
    conditional_put,
    is_conditional,
    transaction_chunks,
)
from shardline.consumer._lease_store import (
    MAX_DETAILS_CHARS,
    MAX_ERROR_CHARS,
    MAX_TRANSACTION_ITEMS,
    NO_FAILURE,
    NOT_CAREFUL,
    NOT_STALLED,
    Claim,
    ClaimsMoved,
    Lease,
    advanced,
    claimed,
    with_claim,
)
from shardline.consumer._transaction import item_of
from shardline.errors import LeaseLost, SinkConflict, SinkRejected
from shardline.kinesis._positions import SHARD_END, TRIM_HORIZON, Position
from shardline.testing._lease_requests import LeaseRequests, LeaseWrite
from shardline.testing._sink_tables import SinkTables

#: What every checkpoint that moves changes in the row, as `LeaseTable._checkpoint_update` writes it.
_MOVED = (
    "checkpoint",
    "owner_switches",
    "counter",
    "careful_span",
    "span_started",
    "span_returned",
    *NOT_STALLED,
)


class LeaseRows(LeaseRequests):
    """Lease rows and sink tables in memory, with `LeaseStore`'s semantics (see the module docstring)."""

    def __init__(self, key_schema: Mapping[str, Sequence[str]], start: float | None) -> None:
        super().__init__()
        self._virtual_now = time.time() if start is None else start
        self.slept = 0.0  # seconds the consumer waited on this table's clock
        self._rows: dict[str, Lease] = {}
        self._sinks = SinkTables(key_schema)

    def now(self) -> float:
        """The virtual clock (epoch seconds): it moves only when the consumer sleeps."""
        return self._virtual_now

    def sleep(self, seconds: float) -> None:
        """Move the virtual clock on by `seconds`, without waiting (counted in `slept`)."""
        if seconds > 0:
            self._virtual_now += seconds
            self.slept += seconds

    def sink_key(self, table_name: str) -> tuple[str, ...] | None:
        """The declared key attributes of a sink table (as `LeaseTable` learns them with DescribeTable)."""
        declared = self._sinks.key_schema.get(table_name)
        return tuple(declared) if declared is not None else None

    # -- LeaseStore ---------------------------------------------------------------------------

    def get(self, key: str) -> Lease | None:
        def read() -> Lease | None:
            self.reads += 1
            return self._rows.get(key)

        return self._faulted("get", read)

    def hold(self, key: str, owner: str, *, parent_shard_ids: Iterable[str] = ()) -> Lease:
        def hold() -> Lease:
            current = self.get(key)
            if current is not None:
                return replace(current, owner=owner)
            return self._create(key, owner, parent_shard_ids)

        return self._faulted("hold", hold)

    def take(self, key: str, owner: str, *, parent_shard_ids: Iterable[str] = ()) -> Lease:
        def take() -> Lease:
            current = self.get(key)
            if current is None:
                return self._create(key, owner, parent_shard_ids)
            switches = current.owner_switches + (current.owner != owner)
            lease = replace(current, owner=owner, counter=current.counter + 1, owner_switches=switches)
            self._rows[key] = lease
            self.writes[LeaseWrite.TAKE] += 1
            return lease

        return self._faulted("take", take)

    def begin(
        self,
        key: str,
        owner: str,
        delivery: str,
        *,
        parent_shard_ids: Iterable[str] = (),
        held: Lease | None = None,
    ) -> tuple[Lease, bool]:
        def begin() -> tuple[Lease, bool]:
            if held is not None:  # a worker's lease: fenced on its counter
                stored = self._fence(held, LeaseWrite.BEGIN, compare_checkpoint=False)
                lease = replace(held, counter=held.counter + 1, inflight=delivery)
                self._rows[key] = replace(stored, owner=held.owner, counter=lease.counter, inflight=delivery)
                self.writes[LeaseWrite.BEGIN] += 1
                return lease, held.inflight == delivery
            current = self._rows.get(key)
            self.writes[LeaseWrite.BEGIN] += 1
            if current is None:
                lease = Lease(
                    key, owner, 1, Position(TRIM_HORIZON), 1, frozenset(parent_shard_ids), inflight=delivery
                )
                self._rows[key] = lease
                return lease, False
            lease = replace(
                current,
                owner=owner,
                counter=current.counter + 1,
                owner_switches=current.owner_switches + 1,
                parent_shard_ids=current.parent_shard_ids or frozenset(parent_shard_ids),
                inflight=delivery,
            )
            self._rows[key] = lease
            # A mark of the same owner is this very call's, retried after a lost reply: no crash.
            return lease, current.inflight == delivery and current.owner != owner

        return self._faulted("begin", begin)

    def release(self, lease: Lease, *, careful_done: bool = False) -> Lease:
        def release() -> Lease:
            stored = self._fence(lease, LeaseWrite.RELEASE, compare_checkpoint=False)
            ended: dict[str, Any] = {}
            if lease.stalled_since is not None or lease.stalls:
                ended.update(NOT_STALLED)
            if careful_done and lease.careful_span is not None:
                ended.update(NOT_CAREFUL)
            released = replace(lease, counter=lease.counter + 1, inflight=None, **ended)
            self._rows[lease.key] = replace(
                stored, owner=lease.owner, counter=released.counter, inflight=None, **ended
            )
            self.writes[LeaseWrite.RELEASE] += 1
            return released

        return self._faulted("release", release)

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
        def checkpoint() -> Lease:
            if position <= lease.checkpoint:
                return lease
            kind = (
                LeaseWrite.TRANSACTION if any(c.key != lease.key for c in claims) else LeaseWrite.CHECKPOINT
            )
            self._fence(lease, kind)
            self._check_claims(lease, claims, kind)
            return self._claim(self._advance(lease, position, kind, release, applied, careful_span), claims)

        return self._faulted("checkpoint", checkpoint, lease)

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
        def transaction() -> Lease:
            if not writes:
                return self.checkpoint(
                    lease,
                    position,
                    release=release,
                    applied=applied,
                    careful_span=careful_span,
                    claims=claims,
                )
            if len(writes) + sum(c.key != lease.key for c in claims) > MAX_TRANSACTION_ITEMS - 1:
                raise ValueError(f"at most {MAX_TRANSACTION_ITEMS - 1} writes ride with one checkpoint")
            if position <= lease.checkpoint:
                raise ValueError(
                    f"writes must come with a forward checkpoint: {position} <= {lease.checkpoint}"
                )
            try:
                self._sinks.validate(writes)  # DynamoDB refuses a malformed request before any condition
            except ClientError as refused:
                self.reads += 1  # LeaseTable re-reads the row: a lost lease comes first
                stored = self._rows.get(lease.key)
                if stored is None or stored.counter != lease.counter:
                    raise LeaseLost(f"lease {lease.key} was taken by another owner") from refused
                message = refused.response["Error"]["Message"]
                raise SinkRejected(f"DynamoDB refused the sink writes: {message}") from refused
            self._fence(lease, LeaseWrite.TRANSACTION)  # the checkpoint's condition...
            self._check_claims(lease, claims, LeaseWrite.TRANSACTION)  # ...the claims'...
            try:
                self._sinks.apply(writes)  # ...then the sink writes' own; all or nothing
            except SinkConflict:
                self.writes[LeaseWrite.TRANSACTION] += 1  # cancelled, and billed
                raise
            changed = self._advance(lease, position, LeaseWrite.TRANSACTION, release, applied, careful_span)
            return self._claim(changed, claims)

        return self._faulted("checkpoint_with", transaction, lease)

    def put_idempotent(self, puts: Sequence[Mapping[str, Any]]) -> int:
        def write() -> int:
            plain = [(index, put) for index, put in enumerate(puts) if not is_conditional(put)]
            for index, put in plain:  # as BatchWriteItem, then one by one to name the refused put
                operation = put[IDEMPOTENT_PUT]
                try:
                    self._sinks.apply([{"Put": operation}])
                except ClientError as refused:
                    message = refused.response["Error"]["Message"]
                    raise SinkRejected(
                        f"DynamoDB refused idempotent put {index} into {operation['TableName']}: {message}",
                        (index,),
                    ) from refused
            calls = -(-len(plain) // BATCH_ITEMS)
            self.writes[LeaseWrite.IDEMPOTENT] += calls
            conditional = [
                (index, put[IDEMPOTENT_PUT]["TableName"], put[IDEMPOTENT_PUT]["Item"])
                for index, put in enumerate(puts)
                if is_conditional(put)
            ]
            # as `_idempotent.land` writes them: transactions of id-keyed puts, each all or nothing
            for chunk in transaction_chunks(conditional, lambda put: item_of(put, self.sink_key), puts):
                self.writes[LeaseWrite.IDEMPOTENT] += 1
                calls += 1
                operations = [{"Put": conditional_put(table, item)} for _, table, item in chunk]
                for (index, table, _), operation in zip(chunk, operations, strict=True):
                    try:  # a transaction refused as invalid is written one by one, to name the put
                        self._sinks.validate([operation])
                    except ClientError as refused:
                        message = refused.response["Error"]["Message"]
                        raise SinkRejected(
                            f"DynamoDB refused idempotent put {index} into {table}: {message}", (index,)
                        ) from refused
                try:
                    self._sinks.apply(operations)
                except SinkConflict as refused:
                    index, table, _ = chunk[refused.indexes[0]]
                    raise SinkConflict(
                        f"idempotent put {index} into {table}: its id holds another payload",
                        (index,),
                        refused.reasons[:1],
                        refused.items[:1],
                    ) from refused
            return calls

        return self._faulted("put_idempotent", write)

    def record_failure(
        self,
        lease: Lease,
        position: Position,
        error: str,
        *,
        release: bool = False,
        details: str | None = None,
    ) -> Lease:
        def record() -> Lease:
            stored = self._fence(lease, LeaseWrite.FAILURE, compare_checkpoint=False)
            attempts = lease.failed_attempts + 1 if lease.failed_at == position else 1
            failure: dict[str, Any] = {
                "span_started": False,  # the started handler is accounted for
                "failed_at": position,
                "failed_attempts": attempts,
                "last_error": error[:MAX_ERROR_CHARS] or "-",
                "failed_time": self.now(),
                "last_error_details": details[:MAX_DETAILS_CHARS] if details else None,
            }
            failed = replace(
                lease, counter=lease.counter + 1, inflight=None if release else lease.inflight, **failure
            )
            self._rows[lease.key] = replace(
                stored,
                owner=lease.owner,
                counter=failed.counter,
                inflight=None if release else stored.inflight,
                **failure,
            )
            self.writes[LeaseWrite.FAILURE] += 1
            return failed

        return self._faulted("record_failure", record)

    def mark_careful(
        self,
        lease: Lease,
        span: int,
        *,
        started: bool = False,
        returned: bool = False,
        release: bool = False,
    ) -> Lease:
        def mark() -> Lease:
            stored = self._fence(lease, LeaseWrite.CAREFUL, compare_checkpoint=False)
            careful: dict[str, Any] = {
                "careful_span": span,
                "span_started": started or (returned and stored.span_started),
                "span_returned": returned,
            }
            marked = replace(
                lease,
                counter=lease.counter + 1,
                inflight=None if release else lease.inflight,
                careful_span=span,
                span_started=started or (returned and lease.span_started),
                span_returned=returned,
            )
            self._rows[lease.key] = replace(
                stored,
                owner=lease.owner,
                counter=marked.counter,
                inflight=None if release else stored.inflight,
                **careful,
            )
            self.writes[LeaseWrite.CAREFUL] += 1
            return marked

        return self._faulted("mark_careful", mark)

    def stall(self, lease: Lease, cause: str, sequence: str, *, release: bool = False) -> Lease:
        def stall() -> Lease:
            stored = self._fence(lease, LeaseWrite.STALL, compare_checkpoint=False)
            noted = cause[:MAX_ERROR_CHARS] or "-"
            since = stored.stalled_since if stored.stalled_since is not None else self.now()
            self._rows[lease.key] = replace(
                stored,
                owner=lease.owner,
                counter=lease.counter + 1,
                stalled_since=since,
                stalled_cause=noted,
                stalled_sequence=sequence,
                stalls=stored.stalls + 1,
                inflight=None if release else stored.inflight,
            )
            self.writes[LeaseWrite.STALL] += 1
            return replace(
                lease,
                counter=lease.counter + 1,
                stalled_since=lease.stalled_since if lease.stalled_since is not None else since,
                stalled_cause=noted,
                stalled_sequence=sequence,
                stalls=lease.stalls + 1,
                inflight=None if release else lease.inflight,
            )

        return self._faulted("stall", stall)

    def note_skipped(self, lease: Lease, skipped: str) -> Lease:
        def note() -> Lease:
            stored = self._fence(lease, LeaseWrite.SKIPPED, compare_checkpoint=False)
            noted = {"skipped_by_mapping": skipped, **NOT_STALLED}
            self._rows[lease.key] = replace(stored, owner=lease.owner, counter=lease.counter + 1, **noted)
            self.writes[LeaseWrite.SKIPPED] += 1
            return replace(lease, counter=lease.counter + 1, **noted)

        return self._faulted("note_skipped", note)

    def start_at(
        self,
        key: str,
        checkpoint: Position,
        *,
        parent_shard_ids: Iterable[str] = (),
        applied: str | None = None,
    ) -> bool:
        def create() -> bool:
            self.writes[LeaseWrite.CREATE] += 1  # a conditional put, billed when it fails too
            if key in self._rows:
                return False
            parents = frozenset(parent_shard_ids)
            self._rows[key] = Lease(
                key, "", 1, checkpoint, parent_shard_ids=parents, applied_aggregates=applied
            )
            return True

        return self._faulted("start_at", create)

    def leases(self) -> list[Lease]:
        def scan() -> list[Lease]:
            self.reads += 1
            return list(self._rows.values())

        return self._faulted("leases", scan)

    def claim(self, seen: Lease, owner: str) -> Lease:
        def claim() -> Lease:
            stored = self._rows.get(seen.key)
            self.writes[LeaseWrite.CLAIM] += 1  # conditional: billed whether or not it holds
            if stored is None or stored.counter != seen.counter:
                raise LeaseLost(f"lease {seen.key} was written by another owner since it was read")
            switches = stored.owner_switches + (owner != stored.owner)
            self._rows[seen.key] = replace(
                stored, owner=owner, counter=stored.counter + 1, owner_switches=switches
            )
            return replace(seen, owner=owner, counter=seen.counter + 1, owner_switches=switches)

        return self._faulted("claim", claim)

    def mark_shard_end(self, seen: Lease) -> bool:
        def mark() -> bool:
            stored = self._rows.get(seen.key)
            self.writes[LeaseWrite.SHARD_END] += 1  # conditional: billed whether or not it holds
            if stored is None or stored.checkpoint != seen.checkpoint:
                return False
            self._rows[seen.key] = replace(stored, checkpoint=Position(SHARD_END))
            return True

        return self._faulted("mark_shard_end", mark)

    def _check_claims(self, lease: Lease, claims: Sequence[Claim], kind: LeaseWrite) -> None:
        """Each claim's condition, before anything is written: the row's `applyVersion` is the
        one the claim was made under (`ClaimsMoved`, billed, otherwise; on the lease's own row
        `LeaseTable` re-reads the row to tell it from a lost lease)."""
        for claim in claims:
            stored = self._rows.get(claim.key)
            if stored is None or stored.apply_version != claim.version:
                self.writes[kind] += 1
                self.reads += claim.key == lease.key
                raise ClaimsMoved(claim.key)

    def _claim(self, lease: Lease, claims: Sequence[Claim]) -> Lease:
        """Write `claims` into their rows (the checkpoint's own row included), as one write with it."""
        for claim in claims:
            self._rows[claim.key] = with_claim(self._rows[claim.key], claim)
        return claimed(lease, claims)

    def _confirm(self, lease: Lease, error: Exception) -> None:
        """`LeaseTable._confirm_landed` after a write that did not land: one read, then the lease
        is lost if the counter moved, else the error stands."""
        self.reads += 1
        stored = self._rows.get(lease.key)
        if stored is None or stored.counter != lease.counter:
            raise LeaseLost(f"lease {lease.key} was taken by another owner") from error
        raise error

    def _create(self, key: str, owner: str, parent_shard_ids: Iterable[str]) -> Lease:
        lease = Lease(key, owner, 1, Position(TRIM_HORIZON), parent_shard_ids=frozenset(parent_shard_ids))
        self._rows[key] = lease
        self.writes[LeaseWrite.CREATE] += 1
        return lease

    def _fence(self, lease: Lease, kind: LeaseWrite, *, compare_checkpoint: bool = True) -> Lease:
        """The stored row, if `lease` still holds it (and, for a checkpoint, the stored position is
        the lease's). A write that fails its condition is billed all the same, and after a failed
        checkpoint `LeaseTable` reads the row once (to accept a write whose reply was lost)."""
        stored = self._rows.get(lease.key)
        if (
            stored is None
            or stored.counter != lease.counter
            or (compare_checkpoint and stored.checkpoint != lease.checkpoint)
        ):
            self.writes[kind] += 1
            self.reads += compare_checkpoint
            raise LeaseLost(f"lease {lease.key} was taken by another owner, or its checkpoint moved")
        return stored

    def _advance(
        self,
        lease: Lease,
        position: Position,
        kind: LeaseWrite,
        release: bool = False,
        applied: str | None = None,
        careful_span: int | None = None,
    ) -> Lease:
        stored = self._fence(lease, kind)
        # The lease as `LeaseStore.checkpoint` documents it; the row takes the same changes (and
        # the passed failure's end, the state given, the in-flight mark's end on release).
        changed = advanced(lease, position, release, applied, careful_span)
        passed_failure = lease.failed_at is not None and changed.failed_at is None
        moved = _MOVED + (tuple(NO_FAILURE) if passed_failure else ())
        self._rows[lease.key] = replace(
            stored,
            owner=lease.owner,
            inflight=None if release else stored.inflight,
            applied_aggregates=(
                changed.applied_aggregates if applied is not None else stored.applied_aggregates
            ),
            **{name: getattr(changed, name) for name in moved},
        )
        self.writes[kind] += 1
        return changed
