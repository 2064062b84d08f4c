"""Whose `once` guards a cancelled checkpoint transaction refused, and which refusals are conflicts.

DynamoDB names the writes whose condition failed (their indexes among the transaction's sink
writes) and, for a write that asked for it (`ReturnValuesOnConditionCheckFailure=ALL_OLD`: every
`once(..., payload_hash=)` guard), the item that refused it. From those, `_checkpoint` tells a
record already applied (its guard is there, with the same payload hash or none) from a client id
re-used with another payload (`ClientIdConflict`), and, for a batch handler's one list, which
records the refused guards stand for (`record_id=`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from shardline.consumer._once import conflict_of, guarded_id, is_once_guard
from shardline.consumer._transaction import PendingTransaction, RecordWrites
from shardline.errors import ClientIdConflict, SinkConflict, SinkRejected

Refusal = SinkConflict | SinkRejected


def guard_refused(refused: Refusal, culprit: RecordWrites, pending: PendingTransaction | None = None) -> bool:
    """Did the cancelled transaction blame a `once` guard of `culprit` (one record's writes)?
    `refused.indexes` count in `pending.writes`, or, without `pending`, in `culprit.writes`."""
    if not isinstance(refused, SinkConflict) or culprit.covering != 1:
        return False  # a batch handler's one list for several records: whose guard is unknown
    writes = pending.writes if pending is not None else culprit.writes
    return any(
        index < len(writes)
        and is_once_guard(writes[index])
        and (pending is None or pending.owner(index) is culprit)
        for index in refused.indexes
    )


def guarded_ids(
    refused: Refusal, culprit: RecordWrites, pending: PendingTransaction | None = None
) -> frozenset[str] | None:
    """The client ids of a one-list chunk's refused `once(..., record_id=)` guards — None unless
    every write of `culprit` that DynamoDB blamed is such a guard. Indexes as in `guard_refused`."""
    if not isinstance(refused, SinkConflict) or culprit.covering == 1 or not refused.indexes:
        return None
    writes = pending.writes if pending is not None else culprit.writes
    ids = set()
    for index in refused.indexes:
        if index >= len(writes) or (pending is not None and pending.owner(index) is not culprit):
            continue
        record_id = guarded_id(writes[index])
        if record_id is None:
            return None
        ids.add(record_id)
    return frozenset(ids) or None


def refusing(refused: Refusal, at: int) -> Mapping[str, Any] | None:
    """The item that refused the `at`-th write `refused.indexes` names (ALL_OLD), if returned."""
    items = getattr(refused, "items", ())
    return items[at] if at < len(items) else None


def guard_conflicts(
    refused: Refusal, culprit: RecordWrites, pending: PendingTransaction | None = None
) -> dict[str, ClientIdConflict]:
    """The `once` guards of `culprit` whose refusing guard keeps another payload's hash, by the
    scoped id each stands for (the record's; in a one list, the guard's `record_id`). Indexes as
    in `guard_refused`."""
    if not isinstance(refused, SinkConflict):
        return {}
    writes = pending.writes if pending is not None else culprit.writes
    found: dict[str, ClientIdConflict] = {}
    for at, index in enumerate(refused.indexes):
        if index >= len(writes) or not is_once_guard(writes[index]):
            continue
        if pending is not None and pending.owner(index) is not culprit:
            continue
        scoped_id = culprit.record.scoped_id if culprit.covering == 1 else guarded_id(writes[index])
        conflict = conflict_of(writes[index], refusing(refused, at), scoped_id)
        if conflict is not None:
            found[conflict.scoped_id] = conflict
    return found
