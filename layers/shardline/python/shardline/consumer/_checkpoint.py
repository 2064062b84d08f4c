"""The checkpoint invariant of one shard run: what may be committed, with which sink writes, blamed on whom.

`Checkpoint` is the one place that moves a shard's checkpoint. It keeps the lease as this run
holds it, the last record done (its handler returned, or it was dead-lettered) and the sink
writes of the records done since the last checkpoint (`PendingTransaction`), and it commits
them together: the checkpoint only moves forward, only under the lease it was taken with, and
only past records that are done, with their writes in the same transaction — their idempotent
puts (`_idempotent`) landed just before it.

When DynamoDB refuses the writes, the refusal is blamed on the record whose write it was
(`PendingTransaction.owner`; when DynamoDB does not say which write, on the half of the pending
records that is refused, narrowed in O(log n) transactions): what precedes it commits, a record
whose `once` guard's condition failed is already applied and is passed — unless the refusing
guard (or id-keyed put) keeps another payload's hash: a conflict (`ClientIdConflict`, counted
`ClientIdConflicts`), dead-lettered at once — and any other refusal is
handed to the failure policy (`give_up`, `_failure_policy`) — which dead-letters the record (it
is passed too) or has the run stop and retry from it (`RetryFrom`). A batch handler's one list of
writes for several records cannot be blamed on one of them: the run reruns them (`Rerun`).

It also says when a careful record runs alone (`starting`, `returned`: `_careful`), since whether
a death is the record's doing depends on what the checkpoint has passed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from shardline.consumer._careful import CarefulSpans
from shardline.consumer._deaggregation import ConsumedRecord, KinesisRecord, sub_record_count
from shardline.consumer._dedup_run import DedupRun
from shardline.consumer._guard_refusals import Refusal, guard_conflicts, guard_refused, guarded_ids, refusing
from shardline.consumer._lease_store import MAX_TRANSACTION_ITEMS, Claim, ClaimsMoved, Lease, LeaseStore
from shardline.consumer._metrics import ConsumerMetrics
from shardline.consumer._once import conflict_of, is_once_guard
from shardline.consumer._redrive_claims import Arbiters
from shardline.consumer._settings import ConsumerSettings
from shardline.consumer._transaction import PendingTransaction, RecordWrites
from shardline.errors import ClientIdConflict, SinkConflict, SinkRejected
from shardline.kinesis._positions import Position

#: Commits tried again in one run after a redrive row's claims moved with nothing in conflict.
MAX_CLAIM_RETRIES = 8

#: The failure policy's verdict on a record whose writes DynamoDB refused: True when it went to
#: the dead-letter queue (the checkpoint may pass it), False when it must run again.
GiveUp = Callable[[ConsumedRecord, BaseException, Mapping[str, Any] | None], bool]


class RetryFrom(Exception):
    """Stop this run: the mapping retries the shard from `sequence`."""

    def __init__(self, sequence: str) -> None:
        super().__init__(sequence)
        self.sequence = sequence


class Rerun(Exception):
    """A batch handler's one list of writes for `records` was refused: run them again — without
    the records at `applied` (their `once` guards are there: already applied) and at `conflicts`
    (their guards keep another payload: each is dead-lettered alone), else in halves."""

    def __init__(
        self,
        records: list[ConsumedRecord],
        applied: frozenset[Position] = frozenset(),
        conflicts: Mapping[Position, ClientIdConflict] | None = None,
    ) -> None:
        super().__init__(len(records))
        self.records = records
        self.applied = applied
        self.conflicts: Mapping[Position, ClientIdConflict] = conflicts or {}


class PutRefused(Exception):
    """DynamoDB refused one of `culprit`'s idempotent puts as invalid, or its condition (`conflict`:
    its id holds another payload)."""

    def __init__(
        self, culprit: RecordWrites, refusal: Refusal, conflict: ClientIdConflict | None = None
    ) -> None:
        super().__init__(str(refusal))
        self.culprit, self.refusal, self.conflict = culprit, refusal, conflict


def _retry_it(record: ConsumedRecord, exc: BaseException, details: Mapping[str, Any] | None) -> bool:
    """Without a failure policy a refused record is never given up: it runs again."""
    return False


class Checkpoint:
    """The deferred checkpoint of one shard run: the lease, the last record done, the writes
    waiting for the next commit, and the in-flight mark (`marked`) the run's last write removes."""

    def __init__(
        self,
        table: LeaseStore,
        metrics: ConsumerMetrics,
        settings: ConsumerSettings,
        clock: Callable[[], float],
        *,
        give_up: GiveUp = _retry_it,
    ) -> None:
        self.table = table
        self.metrics = metrics
        self.settings = settings
        self.clock = clock
        self.give_up = give_up  # set by the failure policy that owns the record's fate
        self.lease: Lease | None = None
        self.done: ConsumedRecord | None = None  # the last record done (handler returned, or DLQ)
        self.pending = PendingTransaction(table.sink_key)  # writes of the records since the checkpoint
        self.since_checkpoint = 0
        self.checkpointed_at = clock()
        self.marked = False  # our in-flight mark is in the lease row
        self.careful: CarefulSpans | None = None  # after a crash: doubling spans (`_careful`)
        self.dedup: DedupRun | None = None  # the applied-aggregate state, from the lease row
        self.arbiters: Arbiters | None = None  # redrive rows whose claims ride along (`_redrive_claims`)
        self.fresh: list[ConsumedRecord] = []  # the run's records past the checkpoint it began at
        #: User records per aggregate, by sequence number, as de-aggregation counted them: the
        #: tail's count without decoding the last aggregate again (`pass_tail`).
        self.sub_counts: dict[str, int] = {}
        self.claim_retries = 0

    # -- what is done --------------------------------------------------------------------------

    def done_with(self, record: ConsumedRecord, writes: list[Mapping[str, Any]], covering: int = 1) -> None:
        """`record`'s handler returned: its writes wait for the checkpoint that passes it. With
        `covering` > 1 the writes are those of the `covering` records up to `record`, done with it."""
        if writes:
            if not self.pending.fits(writes) or not self._room_for_claims(writes):
                self.commit()  # what is done so far; these writes start the next one
            self.pending.add(record, writes, self.done, covering)
        self.done = record
        self.since_checkpoint += covering

    def forget_since_checkpoint(self) -> None:
        """Nothing since the checkpoint counts as done (a refused one-list chunk runs again)."""
        self.pending.clear()
        self.done = None
        self.since_checkpoint = 0

    def pass_tail(self, last: KinesisRecord) -> None:
        """Every record of the batch is done: the checkpoint passes the last user record of its
        last Kinesis record — even where no handler ran (an empty aggregate, a copy skipped whole,
        members outside the shard's range) — so a closed shard's checkpoint reads as finished."""
        count = self.sub_counts.get(last.sequence_number)
        if count is None:
            count = sub_record_count(last.data)
        sub = count - 1 if count > 1 else None
        tail = Position(last.sequence_number, sub or 0)
        if self.done is None or self.done.position < tail:
            self.done = ConsumedRecord(
                last.stream, last.shard_id, last.sequence_number, sub, last.partition_key, None, b"", 0.0
            )

    def first_uncommitted(self, records: Sequence[KinesisRecord]) -> str:
        """After a lost lease or a stall: the first Kinesis record not covered by our last checkpoint."""
        checkpoint = self.lease.checkpoint if self.lease is not None else None
        for record in records:
            sequence = record.sequence_number
            if checkpoint is None or checkpoint.is_sentinel or int(sequence) >= int(checkpoint.sequence):
                return sequence
        return records[-1].sequence_number

    # -- committing ----------------------------------------------------------------------------

    def commit(self, *, release: bool = False) -> None:
        """Checkpoint at the last record done, with the pending sink writes, in one transaction.

        Writes DynamoDB refuses are blamed on their record: what precedes it commits, it fails
        (or, a failed condition with `sink_conflicts="skip"`, is taken as applied), and what
        follows it commits after — unless it must be retried, which stops the run (`RetryFrom`).
        A batch handler's one list of writes for several records is run again in halves (`Rerun`).
        """
        while self.done is not None and self.lease is not None and self.done.position > self.lease.checkpoint:
            position = self.done.position
            try:
                self._land_puts()
            except PutRefused as refused:
                self._reject(refused.culprit, refused.refusal, False, conflict=refused.conflict)
                continue
            claims = self._claims_at(position)
            try:
                self.lease = self.table.checkpoint_with(
                    self.lease,
                    position,
                    self.pending.writes,
                    release=release and self.marked,
                    applied=self._applied_at(position),
                    careful_span=self._span_after(position, release),
                    claims=claims,
                )
            except (SinkConflict, SinkRejected) as refused:
                if not self._skip_applied(refused):
                    self._blame(refused)
                continue
            except ClaimsMoved:
                self._claims_moved()
                continue
            self._committed(position, claims)
            self.pending.clear()
            self.since_checkpoint = 0
            self.checkpointed_at = self.clock()
            self.metrics.count("CheckpointsWritten")
            self.marked = self.marked and not release
            return

    def _land_puts(self) -> None:
        """Write the idempotent puts of the records done since the checkpoint, before it moves
        past them (`_idempotent`). A put DynamoDB refuses is blamed on its record (`PutRefused`)."""
        groups = self.pending.unlanded()
        if not groups:
            return
        puts = [put for group in groups for put in group.puts]
        try:
            self.table.put_idempotent(puts)
        except (SinkRejected, SinkConflict) as refused:
            if not refused.indexes:
                raise
            index = refused.indexes[0]
            for group in groups:
                if index < len(group.puts):
                    conflict = None
                    if isinstance(refused, SinkConflict):
                        refusing = refused.items[0] if refused.items else None
                        conflict = conflict_of(group.puts[index], refusing, group.record.scoped_id)
                    raise PutRefused(group, refused, conflict) from refused
                index -= len(group.puts)
            raise
        self.pending.mark_landed(groups)
        self.metrics.count("IdempotentPutsWritten", len(puts))

    def _blame(self, refused: Refusal) -> None:
        """Pin a refusal on the record whose writes caused it, and deal with that record."""
        culprit = self.pending.owner(refused.indexes[0]) if refused.indexes else None
        pending: PendingTransaction | None = self.pending
        if culprit is None:
            culprit, refused = self._isolate(refused)
            pending = None
        if culprit is not None:
            guarded = guard_refused(refused, culprit, pending)
            ids = guarded_ids(refused, culprit, pending)
            conflicts = guard_conflicts(refused, culprit, pending)
            conflict = next(iter(conflicts.values()), None) if culprit.covering == 1 else None
            self._reject(culprit, refused, guarded, ids, conflict=conflict, conflicts=conflicts)

    def _span_after(self, position: Position, release: bool) -> int | None:
        """The careful span a checkpoint at `position` writes (None: not careful, or done)."""
        if self.careful is None or release:
            return None
        return self.careful.span_after(position)

    def _skip_applied(self, refused: Refusal) -> bool:
        """Every write DynamoDB blamed is a `once` guard of its own record: those records are
        already applied — or, where the refusing guard keeps another payload's hash, in conflict.
        Drop all the copies' writes at once (a re-posted batch costs one more round trip, not one
        per record), dead-letter the first conflict (`_reject`), and let the rest commit; False if
        any blamed write is not such a guard (then the refusal is handled record by record)."""
        pending = self.pending
        if not isinstance(refused, SinkConflict) or not refused.indexes:
            return False
        applied: list[RecordWrites] = []
        conflicts: list[tuple[RecordWrites, ClientIdConflict]] = []
        for at, index in enumerate(refused.indexes):
            if index >= len(pending.writes) or not is_once_guard(pending.writes[index]):
                return False
            owner = pending.owner(index)
            if owner.covering != 1:
                return False  # a batch handler's one list: whose guard it is, is unknown
            conflict = conflict_of(pending.writes[index], refusing(refused, at), owner.record.scoped_id)
            if conflict is not None:
                conflicts.append((owner, conflict))  # not a copy: dead-lettered, never skipped
            else:
                applied.append(owner)
        in_conflict = [owner for owner, _ in conflicts]
        applied = [a for a in applied if all(a is not c for c in in_conflict)]
        pending.keep(group for group in pending.groups if all(group is not a for a in applied))
        self.metrics.count("ClientIdDuplicatesSkipped", len({id(a) for a in applied}))
        if conflicts:
            owner, conflict = conflicts[0]  # the others are refused again by the next commit
            self._reject(owner, refused, False, conflict=conflict)
        return True

    def _isolate(self, refused: Refusal) -> tuple[RecordWrites | None, Refusal]:
        """DynamoDB did not say which write it refused: commit the first half of the pending
        records, then the next, narrowing to the half that is refused, until DynamoDB names a write
        or one record's writes are refused alone — O(log n) transactions, not n. Returns the
        refused record's writes (None if all committed) and the refusal."""
        remaining = list(self.pending.groups)  # not committed yet
        search = len(remaining)  # the refusal lies in remaining[:search]
        while remaining:
            size = max(1, search // 2)
            half = remaining[:size]
            position = half[-1].record.position
            assert self.lease is not None
            claims = self._claims_at(position)
            try:
                self.lease = self.table.checkpoint_with(
                    self.lease,
                    position,
                    [write for group in half for write in group.writes],
                    applied=self._applied_at(position),
                    careful_span=self._span_after(position, False),
                    claims=claims,
                )
            except ClaimsMoved:
                self._claims_moved()
                continue
            except (SinkConflict, SinkRejected) as alone:
                self.pending.keep(remaining)  # half is its prefix: DynamoDB's indexes hold
                if alone.indexes or size == 1:
                    return (self.pending.owner(alone.indexes[0]) if alone.indexes else half[0]), alone
                search = size
                continue
            self._committed(position, claims)
            self.metrics.count("CheckpointsWritten")
            remaining = remaining[size:]
            search = search - size if search > size else len(remaining)
        self.pending.clear()
        return None, refused

    def _applied_at(self, position: Position) -> str | None:
        """The applied-aggregate state a checkpoint at `position` writes (None: leave it)."""
        return self.dedup.state_at(position) if self.dedup is not None else None

    def _room_for_claims(self, writes: list[Mapping[str, Any]]) -> bool:
        """Do `writes` leave room, in the checkpoint's transaction, for an item per redrive row
        whose claims ride along (`_redrive_claims`)?"""
        if not self.arbiters:
            return True
        return len(self.pending.writes) + len(writes) + self.arbiters.rows <= MAX_TRANSACTION_ITEMS - 1

    def _claims_at(self, position: Position) -> list[Claim]:
        """The redrive rows' claims a checkpoint at `position` writes (`_redrive_claims`)."""
        if not self.arbiters or self.dedup is None:
            return []
        return self.arbiters.claims(self.dedup.claimed_through(position))

    def _claims_moved(self) -> None:
        """A redrive row's claims moved since this run read them: re-read them. If the other run
        has applied an aggregate this run admitted, stop at the first record not committed (the
        next delivery skips that aggregate); else the commit is tried again under the new versions
        — at most `MAX_CLAIM_RETRIES` times, then the run stops there all the same."""
        assert self.arbiters is not None and self.dedup is not None
        self.claim_retries += 1
        self.metrics.count("RedriveClaimsMoved")
        if self.arbiters.refresh(self.table, self.dedup.admitted()) or self.claim_retries > MAX_CLAIM_RETRIES:
            self.pending.clear()
            raise RetryFrom(self._first_not_committed())

    def _first_not_committed(self) -> str:
        checkpoint = self.lease.checkpoint if self.lease is not None else None
        for record in self.fresh:
            if checkpoint is None or record.position > checkpoint:
                return record.sequence_number
        return self.fresh[-1].sequence_number

    def _committed(self, position: Position, claims: list[Claim] | None = None) -> None:
        if claims and self.arbiters is not None:
            self.arbiters.landed(claims)
        if self.dedup is not None:
            self.dedup.committed(position)

    def _reject(
        self,
        culprit: RecordWrites,
        refused: Refusal,
        guarded: bool,
        guarded_ids: frozenset[str] | None = None,
        *,
        conflict: ClientIdConflict | None = None,
        conflicts: Mapping[str, ClientIdConflict] | None = None,
    ) -> None:
        """Commit what precedes `culprit`, then pass it (already applied, or dead-lettered: a
        `conflict` at once) or stop the run at it; a batch handler's one list is rerun instead
        (`Rerun`), its records' `conflicts` (by scoped id) each dead-lettered alone."""
        groups = self.pending.groups
        at = groups.index(culprit)
        done, after = self.done, groups[at + 1 :]
        self.pending.keep(groups[:at])
        self.done = culprit.before
        self.commit()  # the records before the culprit
        if culprit.covering > 1:  # a batch handler's one list: pin it on one record
            covered = self._covered(culprit)
            ids, conflicts = guarded_ids or frozenset(), conflicts or {}
            applied, found = set(), {}
            for r in covered:
                scoped_id = r.scoped_id
                if scoped_id is None or scoped_id not in ids:
                    continue
                known = conflicts.get(scoped_id)
                if known is None or r.payload_hash == known.applied_hash:
                    applied.add(r.position)  # a copy of what was applied
                else:
                    found[r.position] = ClientIdConflict(scoped_id, known.applied_hash, r.payload_hash)
            raise Rerun(covered, frozenset(applied), found)
        metrics = self.metrics
        if conflict is not None:
            metrics.count("ClientIdConflicts")  # dead-lettered at once, both hashes in the letter
            writes = [*culprit.puts, *culprit.writes]
            details = {"clientIdConflict": conflict.details(), "refusedWrites": writes}
            if not self.give_up(culprit.record, conflict, details):
                self.pending.clear()
                raise RetryFrom(culprit.record.sequence_number)
        elif guarded:
            metrics.count("ClientIdDuplicatesSkipped")  # its `once` guard is there: already applied
        elif isinstance(refused, SinkConflict) and self.settings.sink_conflicts == "skip":
            metrics.count("SinkConflictsSkipped")  # its effect is already there
        else:
            metrics.count("SinkWritesRefused")
            writes = [*culprit.puts, *culprit.writes]
            details = {"refusedWrites": writes, "reasons": list(getattr(refused, "reasons", ()))}
            if not self.give_up(culprit.record, refused, details):
                self.pending.clear()
                raise RetryFrom(culprit.record.sequence_number)
        self.pending.keep(after)
        self.done = done

    def _covered(self, writes: RecordWrites) -> list[ConsumedRecord]:
        """The records a batch handler's one list of writes was for: `covering` records up to
        `writes.record`, in this run's new records."""
        end = next(index for index, record in enumerate(self.fresh) if record is writes.record)
        return self.fresh[end - writes.covering + 1 : end + 1]

    # -- a careful record alone (`_careful`) ----------------------------------------------------

    def starting(self, record: ConsumedRecord) -> None:
        """A careful record is about to run alone: say so, so that a death from here on may be
        pinned on it — and a death before (in shardline's own calls) is not (`_careful`)."""
        if self.alone(record):
            assert self.lease is not None
            self.lease = self.table.mark_careful(self.lease, 1, started=True)

    def returned(self, record: ConsumedRecord) -> None:
        """A careful record that ran alone returned: say so before its commit, so that a death in
        the commit is not taken for its own (`_careful`)."""
        if self.alone(record):
            assert self.lease is not None
            self.lease = self.table.mark_careful(self.lease, 1, returned=True)

    def alone(self, record: ConsumedRecord) -> bool:
        """Is `record` the one record of a careful span of one (the first past the checkpoint)?"""
        lease = self.lease
        return (
            self.careful is not None
            and lease is not None
            and lease.careful_span == 1
            and record.position > lease.checkpoint
            and (self.done is None or self.done.position <= lease.checkpoint)
        )
