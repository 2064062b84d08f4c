"""Where a redrive starts, and when it is refused: its lease row's first position and state, and
the age of the batch's records against their client-id guards (`_redrive`'s module docstring).

`RedriveRefused` (nothing written): the group's row moved past the batch without noting it, so
what the group applied since cannot be told apart from what it settled. `GuardsExpired` (one of
them): a record of the batch with a client id is older than its `once` guard lasts — the guard may
be gone, and the record would be applied twice (issue 39, property 6).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

from shardline.consumer._deaggregation import deaggregate
from shardline.consumer._once import DEFAULT_GUARD_TTL_SECONDS
from shardline.kinesis._positions import TRIM_HORIZON, Position

if TYPE_CHECKING:  # annotations only
    from shardline.consumer._lease_store import Lease

__all__ = [
    "DEFAULT_GUARD_TTL_SECONDS",
    "GUARD_TTL_VARIABLE",
    "BatchInfo",
    "GuardsExpired",
    "RedriveRefused",
    "check_guards",
    "guard_ttl",
    "row_start",
    "start_position",
]

logger = logging.getLogger("shardline.consumer._redrive")

#: The variable `ConsumerEnvironment.guard_ttl_seconds` is read from (the constructs render it).
GUARD_TTL_VARIABLE = "SHARDLINE_GUARD_TTL_SECONDS"


class RedriveRefused(ValueError):
    """The redrive would not be applied once: nothing was written; the message says why and how
    to redrive anyway."""


class GuardsExpired(RedriveRefused):
    """Records of the batch with client ids are older than their `once` guards last."""

    def __init__(self, message: str, age_seconds: float, guard_ttl_seconds: float) -> None:
        super().__init__(message)
        self.age_seconds, self.guard_ttl_seconds = age_seconds, guard_ttl_seconds


class BatchInfo(NamedTuple):
    """The batch an on-failure message points at (`KinesisBatchInfo`)."""

    stream_arn: str
    stream: str
    shard_id: str
    start: str  # sequence number of its first Kinesis record
    end: str | None  # of its last (None: count `size` records)
    size: int | None


def row_start(main: Lease | None, info: BatchInfo, allow_unnoted: bool) -> tuple[Position, str | None]:
    """Where a redrive row the group's run did not create starts, and the applied-aggregate state
    it starts from: the group's, while its checkpoint is not past the batch (its floors then only
    settle what precedes the batch). A note without its row (written before redrive rows were)
    starts from no state; a row moved past the batch with no note is refused (`RedriveRefused`)."""
    position = start_position(main, info)
    if main is None or _noted_checkpoint(main.skipped_by_mapping, info.start) is not None:
        return position, None
    checkpoint = main.checkpoint
    last = int(info.end) if info.end is not None else None
    if checkpoint.is_sentinel or last is None or int(checkpoint.sequence) <= last:
        return position, main.applied_aggregates
    if not allow_unnoted:
        raise RedriveRefused(
            f"redrive of {info.stream}/{info.shard_id} {info.start}..{info.end}: refused: the group's lease "
            f"row {main.key} is past the batch (checkpoint {checkpoint}) and never noted it as discarded "
            "(skippedByMapping), so the copies the group applied since cannot be told apart from those "
            "it only settled; pass allow_unnoted=True to redrive anyway (a copy applied by the group "
            "may then be applied again)"
        )
    return position, None


def guard_ttl(seconds: float | None = None) -> float:
    """How long a client id's `once` guard lasts: `seconds`, else the `SHARDLINE_GUARD_TTL_SECONDS`
    environment variable, else `DEFAULT_GUARD_TTL_SECONDS`."""
    if seconds is None:
        text = os.environ.get(GUARD_TTL_VARIABLE)
        if text is None or not text.strip():
            return float(DEFAULT_GUARD_TTL_SECONDS)
        try:
            seconds = float(text)
        except ValueError:
            raise ValueError(f"{GUARD_TTL_VARIABLE} is not a number of seconds: {text!r}") from None
    if not seconds > 0:
        raise ValueError(f"a guard lifetime is a positive number of seconds, not {seconds!r}")
    return seconds


def check_guards(info: BatchInfo, event_records: list[dict[str, Any]], ttl: float, now: float) -> None:
    """`GuardsExpired` if a record of the batch with a client id is older than its guard lasts."""
    with_ids = [record for record in deaggregate(event_records) if record.id is not None]
    if not with_ids:
        return
    oldest = min(record.approximate_arrival for record in with_ids)
    age = now - oldest
    if age <= ttl:
        return
    expired = sum(1 for record in with_ids if now - record.approximate_arrival > ttl)
    raise GuardsExpired(
        f"redrive of {info.stream}/{info.shard_id} {info.start}..{info.end}: refused: {expired} of its "
        f"{len(with_ids)} records with client ids are up to {_duration(age)} old, older than the "
        f"{_duration(ttl)} their client-id guards last ({GUARD_TTL_VARIABLE}): a record applied "
        "before may have lost its guard and would be applied again. Pass allow_expired_guards=True "
        "to redrive anyway",
        age,
        ttl,
    )


def _duration(seconds: float) -> str:
    if seconds >= 86_400:
        return f"{seconds / 86_400:.1f} days"
    if seconds >= 3_600:
        return f"{seconds / 3_600:.1f} hours"
    return f"{seconds:.0f} s"


def start_position(main: Lease | None, info: BatchInfo) -> Position:
    """Where a redrive's row starts (module docstring): every record above it runs."""
    noted = _noted_checkpoint(main.skipped_by_mapping if main is not None else None, info.start)
    if noted is not None:
        return noted
    start = int(info.start)
    before = Position(str(start - 1)) if start > 0 else Position(TRIM_HORIZON)
    checkpoint = main.checkpoint if main is not None else None
    if (
        checkpoint is not None
        and not checkpoint.is_sentinel
        and info.end is not None
        and before < checkpoint
        and int(checkpoint.sequence) <= int(info.end)
    ):
        return checkpoint
    return before


def _noted_checkpoint(skipped: str | None, start: str) -> Position | None:
    """The checkpoint of the newest `skippedByMapping` entry for the batch starting at `start`."""
    if not skipped:
        return None
    try:
        entries = json.loads(skipped)
        noted = [entry for entry in entries if isinstance(entry, Mapping) and entry.get("start") == start]
        if not noted:
            return None
        return Position(str(noted[-1]["checkpoint"]), int(noted[-1].get("checkpointSub", 0)))
    except (ValueError, TypeError, KeyError) as exc:
        logger.warning("skippedByMapping unreadable (%s): the redrive starts before the batch", exc)
        return None
