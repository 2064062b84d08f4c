"""Who applied which aggregate of a discarded batch's neighbourhood: the claims a redrive row keeps.

A redrive (`_redrive`) and the group's own run read the same shard. A producer retry's copies of
one aggregate can straddle the batch the mapping discarded — one copy inside it (the redrive's to
apply), one after it (the group's) — so each must skip what the other applied. The redrive row
(`<shard's lease key>#redrive#<first sequence number>`) is where they meet:

- `redriveClaims`: the aggregates the redrive applied (wholly or in part: `Claims`);
- `groupClaims`: the aggregates the group's run applied while the redrive row was open to it;
- `applyVersion`: incremented by every write of either, each such write conditional on the
  version its writer read (`_lease_store.Claim`). A run's claims ride in its checkpoint's own
  write — the redrive's on its own row's item, the group's as one more item of its checkpoint
  transaction — so an aggregate is claimed exactly when its first applied member is committed.

Two redrives of one shard meet in the earlier batch's row: the later one consults it as the
group's run does (its `groupClaims` are the claims of every run but the row's own redrive).

`Arbiters` is one run's view: the redrive's of its own row and of its earlier peers', the group's
of the redrive rows of the batches its row noted (`skippedByMapping`) whose copies may still
arrive: a note carries the arrival time of the first record the group saw past the batch (no record
of the batch arrived later), and a producer sends no copy of an aggregate more than
`RESEND_HORIZON_S` (120 s) after its first send, so a record arriving more than `CLAIM_WINDOW_S`
(that, and room for the clocks of Kinesis's hosts) after the note's arrival is no copy of the
batch's: the group neither consults nor claims past it. What the group claims is so bounded by what
arrives in those five minutes (about 20 bytes an aggregate; `MAX_CLAIMS_BYTES` stops the shard,
loudly, rather than exceed it).

Claims hold aggregate ids only, never a producer's floor: the group's applied-aggregate state
(`appliedAggregates`) settles counters below a floor, and a floor seen past the discarded batch
settles the batch's own aggregates — which the group never applied. So the redrive row starts from
the group's state as it was when the batch was discarded (its checkpoint lay before the batch, so
its floors only settle what precedes it), and learns the rest from `groupClaims`.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from shardline.consumer._lane_ranges import union
from shardline.consumer._lease_store import Claim, Lease, LeaseStore
from shardline.kinesis._positions import Position
from shardline.kpl._identity import AggregateId

__all__ = [
    "CLAIM_WINDOW_S",
    "GROUP_CLAIMS",
    "MAX_CLAIMS_BYTES",
    "REDRIVE_CLAIMS",
    "REDRIVE_SUFFIX",
    "Arbiters",
    "Claims",
    "notes_of",
]

logger = logging.getLogger(__name__)

REDRIVE_SUFFIX = "#redrive#"
GROUP_CLAIMS, REDRIVE_CLAIMS = "groupClaims", "redriveClaims"
#: Seconds (of record arrival) after a discarded batch during which the group consults its redrive row:
#: the producer's RESEND_HORIZON_S (120 s) and room for clock skew between Kinesis's hosts.
CLAIM_WINDOW_S = 300.0
#: The bound on one run's claims in a redrive row (DynamoDB's items are at most 400 KB).
MAX_CLAIMS_BYTES = 250_000


class Claims:
    """A set of aggregate ids: lane key (`<producer>.<lane>`) -> closed counter ranges, flat
    `[a1, b1, a2, b2, ...]` (sorted, disjoint, not adjacent). No floors: only what was applied."""

    __slots__ = ("lanes",)

    def __init__(self, lanes: dict[str, list[int]] | None = None) -> None:
        self.lanes: dict[str, list[int]] = lanes if lanes is not None else {}

    @classmethod
    def parse(cls, text: str | None, where: str = "") -> Claims:
        """The claims a redrive row stores. Unreadable claims raise `ValueError`: what the other
        run applied would be unknown, so nothing may be applied (the shard stalls, loudly)."""
        if not text:
            return cls()
        try:
            value = json.loads(text)
            lanes = {str(key): [int(n) for n in ranges] for key, ranges in value.items()}
            if any(len(ranges) % 2 for ranges in lanes.values()):
                raise ValueError("odd range bounds")
        except (ValueError, TypeError, AttributeError) as exc:
            raise ValueError(f"the claims of redrive row {where} are not readable: {exc}") from None
        return cls(lanes)

    def serialize(self) -> str:
        return json.dumps(self.lanes, separators=(",", ":"), sort_keys=True) if self.lanes else ""

    def has(self, aggregate: AggregateId) -> bool:
        ranges = self.lanes.get(aggregate.key)
        if not ranges:
            return False
        counter = aggregate.counter
        return any(ranges[at] <= counter <= ranges[at + 1] for at in range(0, len(ranges), 2))

    def with_(self, aggregates: Iterable[AggregateId]) -> Claims:
        """These claims and `aggregates`."""
        added: dict[str, list[tuple[int, int]]] = {}
        for aggregate in aggregates:
            if not self.has(aggregate):
                added.setdefault(aggregate.key, []).append((aggregate.counter, aggregate.counter))
        if not added:
            return self
        lanes = dict(self.lanes)
        for key, pairs in added.items():
            old = lanes.get(key, [])
            merged = union([*zip(old[::2], old[1::2], strict=True), *pairs])
            lanes[key] = [bound for pair in merged for bound in pair]
        return Claims(lanes)


@dataclass(slots=True)
class _Arbiter:
    """One redrive row as one run sees it: its version, what this run claimed, what the other did."""

    key: str
    version: int
    attribute: str  # this run's claims attribute
    mine: Claims
    theirs: Claims
    until: float | None = None  # the group's: the last arrival that may be a copy of the batch's
    redrive: bool = False  # is this run the row's own redrive (else: the group's run, or a peer's)

    @classmethod
    def of(cls, row: Lease, redrive: bool, until: float | None = None) -> _Arbiter:
        mine, theirs = (
            (row.redrive_claims, row.group_claims) if redrive else (row.group_claims, row.redrive_claims)
        )
        attribute = REDRIVE_CLAIMS if redrive else GROUP_CLAIMS
        return cls(
            row.key,
            row.apply_version,
            attribute,
            Claims.parse(mine, row.key),
            Claims.parse(theirs, row.key),
            until,
            redrive,
        )


class Arbiters:
    """One run's redrive rows (module docstring): whether the other run applied an aggregate,
    the claims each checkpoint writes, and the rows re-read when a claim's condition fails."""

    def __init__(self, arbiters: list[_Arbiter], redrive: bool) -> None:
        self._arbiters = arbiters
        self._redrive = redrive

    def __bool__(self) -> bool:
        return bool(self._arbiters)

    @property
    def rows(self) -> int:
        """How many redrive rows a checkpoint may write claims into."""
        return len(self._arbiters)

    @classmethod
    def for_redrive(cls, table: LeaseStore, row: Lease, arrival: float) -> Arbiters:
        """A redrive's own row (as its lease was taken), and the rows of the earlier batches its
        shard's row noted whose copies may still arrive in a delivery whose first record arrived
        at `arrival` — as the group's run consults them (`for_group`), claiming in their
        `groupClaims`: two redrives meet in the earlier one's row. A redrive whose own batch was
        not noted (`allow_unnoted`) consults every noted row, as no later redrive knows of it."""
        main_key, _, start = row.key.partition(REDRIVE_SUFFIX)
        main = table.get(main_key)
        notes = notes_of(main)
        noted = any(str(note["start"]) == start for note in notes)
        peers = _noted_arbiters(
            table,
            main_key,
            [n for n in notes if str(n["start"]) != start and (not noted or _before(n, start))],
            arrival,
        )
        return cls([_Arbiter.of(row, True), *peers], True)

    @classmethod
    def for_group(cls, table: LeaseStore, row: Lease, arrival: float) -> Arbiters:
        """The redrive rows of the batches the group's row noted whose copies may still arrive in
        a delivery whose first record arrived at `arrival`. A noted batch whose row is missing (a
        note written before redrive rows were) gets one, at the noted checkpoint."""
        return cls(_noted_arbiters(table, row.key, notes_of(row), arrival), False)

    def applied(self, aggregate: AggregateId) -> bool:
        """Did the other run apply (or begin to apply) `aggregate`?"""
        return any(arbiter.theirs.has(aggregate) for arbiter in self._arbiters)

    def claims(self, applied: list[tuple[AggregateId, float]]) -> list[Claim]:
        """The claims a checkpoint that applies `applied` (aggregates, arrivals) writes: in each
        row, those that may be copies of its batch's (none where nothing is new)."""
        out = []
        for arbiter in self._arbiters:
            until = arbiter.until
            mine = arbiter.mine.with_(a for a, arrival in applied if until is None or arrival <= until)
            if mine is arbiter.mine:
                continue
            text = mine.serialize()
            if len(text) > MAX_CLAIMS_BYTES:
                raise ValueError(
                    f"the claims of redrive row {arbiter.key} would exceed {MAX_CLAIMS_BYTES} bytes"
                )
            out.append(Claim(arbiter.key, arbiter.version, arbiter.attribute, text))
        return out

    def landed(self, claims: list[Claim]) -> None:
        """`claims` landed with a checkpoint."""
        by_key = {claim.key: claim for claim in claims}
        for arbiter in self._arbiters:
            claim = by_key.get(arbiter.key)
            if claim is not None:
                arbiter.version = claim.version + 1
                arbiter.mine = Claims.parse(claim.claims, arbiter.key)

    def refresh(self, table: LeaseStore, admitted: list[AggregateId]) -> bool:
        """A claim's condition failed: re-read the rows. True if the other run has since applied
        an aggregate this run admitted (the run must stop before it applies it: the next delivery
        skips it); False if the claims may be written again under the new versions."""
        conflict = False
        for arbiter in self._arbiters:
            row = table.get(arbiter.key)
            if row is None:
                raise ValueError(f"redrive row {arbiter.key} disappeared while this run used it")
            fresh = _Arbiter.of(row, arbiter.redrive, arbiter.until)
            arbiter.version, arbiter.mine, arbiter.theirs = fresh.version, fresh.mine, fresh.theirs
            conflict = conflict or any(fresh.theirs.has(aggregate) for aggregate in admitted)
        return conflict


def notes_of(row: Lease | None) -> list[Mapping[str, Any]]:
    """The `skippedByMapping` entries of a row (an unreadable list is logged and read as empty)."""
    if row is None or not row.skipped_by_mapping:
        return []
    try:
        entries = json.loads(row.skipped_by_mapping)
    except ValueError as exc:
        logger.warning("skippedByMapping of %s unreadable (%s)", row.key, exc)
        return []
    return [entry for entry in entries if isinstance(entry, Mapping) and "start" in entry]


def _noted_arbiters(
    table: LeaseStore, main_key: str, notes: list[Mapping[str, Any]], arrival: float
) -> list[_Arbiter]:
    """The group's side (`groupClaims`) of the redrive rows of `notes` whose copies may still
    arrive in a delivery whose first record arrived at `arrival`."""
    arbiters = []
    for note in notes:
        anchor = note.get("arrival", note.get("detectedAt"))
        if not isinstance(anchor, int | float) or arrival > anchor + CLAIM_WINDOW_S:
            continue
        key = main_key + REDRIVE_SUFFIX + str(note["start"])
        redrive_row = table.get(key)
        if redrive_row is None:
            noted = Position(str(note["checkpoint"]), int(note.get("checkpointSub", 0)))
            table.start_at(key, noted)
            redrive_row = table.get(key)
        if redrive_row is not None:
            arbiters.append(_Arbiter.of(redrive_row, False, anchor + CLAIM_WINDOW_S))
    return arbiters


def _before(note: Mapping[str, Any], start: str) -> bool:
    """Did the noted batch begin before the sequence number `start`?"""
    noted = str(note["start"])
    return noted.isdigit() and start.isdigit() and int(noted) < int(start)
