"""A lease row as DynamoDB stores it: the item's columns, and the requests that write them.

Columns the KCL reads and writes: `leaseKey` (hash key: the shard id, or `<stream>:<shard id>`
for a group that reads several streams), `leaseOwner`, `leaseCounter`, `checkpoint`,
`checkpointSubSequenceNumber`, `ownerSwitchesSinceCheckpoint`, `parentShardId` (string set),
`childShardIds` (string set). Columns of ours: `failedSequenceNumber`,
`failedSubSequenceNumber`, `failedAttempts` and `lastError` (the record that keeps failing, for
poison-record handling), `inflightSequenceNumber` (the first sequence number of a delivery that
began and has not answered yet: still there when the next delivery begins, the process died),
`appliedAggregates` (the shardline aggregates applied in this shard within the dedup horizon,
compact JSON: `_dedup`; set by the checkpoint's own write, never by a write of its own),
`lastFailureAt` and `lastErrorDetails` (when the failing record last failed, for its backoff, and
what DynamoDB refused), `carefulSpan`, `spanStarted` and `spanReturned` (after a crash: how
many records past the checkpoint the delivery runs before its next checkpoint, and whether a lone
record's handler started and returned — `_careful`), `stalledSince`, `stalledCause`,
`stalledSequence` and `stalls` (the shard is stalled on a failure of its environment, not of a
record — `_stalls`), `skippedByMapping` (JSON: batches the mapping discarded while the shard was
stalled, for a redrive) and `updatedAt` (epoch seconds of the last write).

Only encoding lives here — attribute values, update expressions, cancellation reasons read
back; when to write what is `LeaseTable`'s (`_leases`). Sequence numbers are strings: DynamoDB
numbers cannot hold Kinesis's 56 digits.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from botocore.exceptions import ClientError

from shardline.consumer._lease_store import CLAIM_FIELDS, Claim, Lease
from shardline.errors import SinkConflict, SinkRejected
from shardline.kinesis._positions import SHARD_END, TRIM_HORIZON, Position

CONDITION_FAILED = "ConditionalCheckFailedException"
TRANSACTION_CANCELED = "TransactionCanceledException"
CANCELED_BY_CONDITION = "ConditionalCheckFailed"  # a cancellation reason of TransactWriteItems
CANCELED_AS_INVALID = "ValidationError"  # another: that item is malformed (e.g. over 400 KB)
VALIDATION_EXCEPTION = "ValidationException"  # a request refused outright, before any write
STALL_ATTRIBUTES = ("stalledSince", "stalledCause", "stalledSequence", "stalls")
CAREFUL_ATTRIBUTES = ("carefulSpan", "spanStarted", "spanReturned")
FAILURE_ATTRIBUTES = (
    "failedSequenceNumber",
    "failedSubSequenceNumber",
    "failedAttempts",
    "lastError",
    "lastFailureAt",
    "lastErrorDetails",
)

Values = dict[str, Any]


def error_code(exc: ClientError) -> str:
    """The error code of a botocore `ClientError`."""
    return str(exc.response.get("Error", {}).get("Code", ""))


def key(lease_key: str) -> dict[str, Any]:
    """The item key of a lease row."""
    return {"leaseKey": {"S": lease_key}}


def stamp(now: float) -> dict[str, str]:
    """`updatedAt`'s value: whole epoch seconds."""
    return {"N": str(int(now))}


def lease_of(item: Mapping[str, Any]) -> Lease:
    """The lease a stored item holds (absent columns read as their defaults)."""
    failed_at = None
    if "failedSequenceNumber" in item:
        failed_at = Position(item["failedSequenceNumber"]["S"], int(item["failedSubSequenceNumber"]["N"]))
    return Lease(
        key=item["leaseKey"]["S"],
        owner=item.get("leaseOwner", {}).get("S", ""),
        counter=int(item["leaseCounter"]["N"]),
        checkpoint=Position(
            item["checkpoint"]["S"], int(item.get("checkpointSubSequenceNumber", {"N": "0"})["N"])
        ),
        owner_switches=int(item.get("ownerSwitchesSinceCheckpoint", {"N": "0"})["N"]),
        parent_shard_ids=frozenset(item.get("parentShardId", {}).get("SS", ())),
        child_shard_ids=frozenset(item.get("childShardIds", {}).get("SS", ())),
        failed_at=failed_at,
        failed_attempts=int(item.get("failedAttempts", {"N": "0"})["N"]),
        last_error=item.get("lastError", {}).get("S"),
        inflight=item.get("inflightSequenceNumber", {}).get("S"),
        applied_aggregates=item.get("appliedAggregates", {}).get("S"),
        failed_time=_number(item, "lastFailureAt"),
        last_error_details=item.get("lastErrorDetails", {}).get("S"),
        careful_span=int(item["carefulSpan"]["N"]) if "carefulSpan" in item else None,
        span_started=bool(item.get("spanStarted", {}).get("BOOL", False)),
        span_returned=bool(item.get("spanReturned", {}).get("BOOL", False)),
        stalled_since=_number(item, "stalledSince"),
        stalled_cause=item.get("stalledCause", {}).get("S"),
        stalled_sequence=item.get("stalledSequence", {}).get("S"),
        stalls=int(item.get("stalls", {"N": "0"})["N"]),
        skipped_by_mapping=item.get("skippedByMapping", {}).get("S"),
        apply_version=int(item.get("applyVersion", {"N": "0"})["N"]),
        group_claims=item.get("groupClaims", {}).get("S"),
        redrive_claims=item.get("redriveClaims", {}).get("S"),
    )


def _number(item: Mapping[str, Any], name: str) -> float | None:
    return float(item[name]["N"]) if name in item else None


def new_item(lease: Lease, now: dict[str, str]) -> dict[str, Any]:
    """The item of a new row (counter 1, no switches): `lease`'s key, owner, checkpoint, parents."""
    item = {
        **key(lease.key),
        "leaseOwner": {"S": lease.owner},
        "leaseCounter": {"N": "1"},
        "checkpoint": {"S": lease.checkpoint.sequence},
        "checkpointSubSequenceNumber": {"N": str(lease.checkpoint.sub_sequence)},
        "ownerSwitchesSinceCheckpoint": {"N": "0"},
        "updatedAt": now,
    }
    if lease.parent_shard_ids:
        item["parentShardId"] = {"SS": sorted(lease.parent_shard_ids)}
    if lease.applied_aggregates:
        item["appliedAggregates"] = {"S": lease.applied_aggregates}
    return item


def claim_condition(version: int) -> str:
    """The condition of a write of a redrive row's claims: its `applyVersion` is still `version`."""
    return "attribute_not_exists(applyVersion)" if version == 0 else "applyVersion = :claimed_version"


def claim_values(claim: Claim) -> Values:
    values: Values = {":claims": {"S": claim.claims}, ":next_version": {"N": str(claim.version + 1)}}
    if claim.version:
        values[":claimed_version"] = {"N": str(claim.version)}
    return values


def claim_update(table_name: str, claim: Claim) -> dict[str, Any]:
    """The Update (a TransactWriteItems entry) of another row's claims (`Claim`): it leaves that
    row's lease alone (owner, counter), so its holder's fenced writes are not disturbed."""
    if claim.attribute not in CLAIM_FIELDS:
        raise ValueError(f"a claim writes groupClaims or redriveClaims, not {claim.attribute!r}")
    return {
        "TableName": table_name,
        "Key": key(claim.key),
        "UpdateExpression": f"SET applyVersion = :next_version, {claim.attribute} = :claims",
        "ConditionExpression": f"attribute_exists(leaseKey) AND {claim_condition(claim.version)}",
        "ExpressionAttributeValues": claim_values(claim),
    }


def take_values(current: Lease, taken: Lease, now: dict[str, str]) -> Values:
    """The values of a take's update (`TAKE_EXPRESSION` under `TAKE_CONDITION`)."""
    return {
        ":owner": {"S": taken.owner},
        ":next": {"N": str(taken.counter)},
        ":switches": {"N": str(taken.owner_switches)},
        ":now": now,
        ":seen": {"N": str(current.counter)},
    }


TAKE_EXPRESSION = (
    "SET leaseOwner = :owner, leaseCounter = :next, ownerSwitchesSinceCheckpoint = :switches, "
    "updatedAt = :now"
)
TAKE_CONDITION = "leaseCounter = :seen"


def begin_update(
    owner: str, delivery: str, parents: Sequence[str], now: dict[str, str]
) -> tuple[str, Values]:
    """A begin's unconditional update: claim the row (creating it at TRIM_HORIZON) and mark
    `delivery` in flight; the parents are written only into a row that has none."""
    expression = (
        "SET leaseOwner = :owner, leaseCounter = if_not_exists(leaseCounter, :zero) + :one, "
        "checkpoint = if_not_exists(checkpoint, :trim), "
        "checkpointSubSequenceNumber = if_not_exists(checkpointSubSequenceNumber, :zero), "
        "ownerSwitchesSinceCheckpoint = if_not_exists(ownerSwitchesSinceCheckpoint, :zero) + :one, "
        "inflightSequenceNumber = :delivery, updatedAt = :now"
    )
    values: Values = {
        ":owner": {"S": owner},
        ":zero": {"N": "0"},
        ":one": {"N": "1"},
        ":trim": {"S": TRIM_HORIZON},
        ":delivery": {"S": delivery},
        ":now": now,
    }
    if parents:
        expression += ", parentShardId = if_not_exists(parentShardId, :parents)"
        values[":parents"] = {"SS": list(parents)}
    return expression, values


def fenced_update(
    table_name: str,
    lease: Lease,
    assignments: Mapping[str, str],
    values: Mapping[str, Any],
    removes: Iterable[str],
    now: dict[str, str],
) -> dict[str, Any]:
    """UpdateItem of `lease`'s row under its counter, claiming it (owner, counter + 1): SET each
    attribute to its expression, REMOVE `removes`."""
    expression = "SET leaseOwner = :owner, leaseCounter = :next, updatedAt = :now"
    expression += "".join(f", {name} = {value}" for name, value in assignments.items())
    removed = list(removes)
    if removed:
        expression += " REMOVE " + ", ".join(removed)
    return {
        "TableName": table_name,
        "Key": key(lease.key),
        "UpdateExpression": expression,
        "ConditionExpression": "leaseCounter = :counter",
        "ExpressionAttributeValues": {
            ":owner": {"S": lease.owner},
            ":next": {"N": str(lease.counter + 1)},
            ":now": now,
            ":counter": {"N": str(lease.counter)},
            **values,
        },
    }


def checkpoint_update(
    table_name: str,
    lease: Lease,
    position: Position,
    now: dict[str, str],
    release: bool = False,
    applied: str | None = None,
    careful_span: int | None = None,
    own: Claim | None = None,
) -> dict[str, Any]:
    """UpdateItem moving `lease`'s checkpoint to `position`, conditional on its counter and on the
    stored position (compare-and-swap), clearing what a moving checkpoint ends; with `own`, the
    row's own claims too (conditional on its `applyVersion`)."""
    removed: list[str] = []
    if lease.failed_at is not None and lease.failed_at <= position:
        removed += FAILURE_ATTRIBUTES
    if release:
        removed.append("inflightSequenceNumber")
    if lease.stalled_since is not None or lease.stalls:
        removed += STALL_ATTRIBUTES
    if lease.span_started:
        removed.append("spanStarted")
    if lease.span_returned:
        removed.append("spanReturned")
    expression = (
        "SET checkpoint = :seq, checkpointSubSequenceNumber = :sub, "
        "ownerSwitchesSinceCheckpoint = :zero, updatedAt = :now, "
        "leaseOwner = :owner, leaseCounter = :next"
    )
    values: Values = {}
    if careful_span is not None:
        expression += ", carefulSpan = :span"
        values[":span"] = {"N": str(careful_span)}
    elif lease.careful_span is not None:
        removed.append("carefulSpan")
    if applied is not None and applied != (lease.applied_aggregates or ""):
        if applied:
            expression += ", appliedAggregates = :applied"
            values[":applied"] = {"S": applied}
        else:
            removed.append("appliedAggregates")
    condition = "leaseCounter = :counter AND checkpoint = :old_seq AND checkpointSubSequenceNumber = :old_sub"
    if own is not None:
        expression += f", applyVersion = :next_version, {own.attribute} = :claims"
        values.update(claim_values(own))
        condition += f" AND {claim_condition(own.version)}"
    if removed:
        expression += " REMOVE " + ", ".join(removed)
    return {
        "TableName": table_name,
        "Key": key(lease.key),
        "UpdateExpression": expression,
        "ConditionExpression": condition,
        "ExpressionAttributeValues": {
            ":seq": {"S": position.sequence},
            ":sub": {"N": str(position.sub_sequence)},
            ":zero": {"N": "0"},
            ":now": now,
            ":counter": {"N": str(lease.counter)},
            ":owner": {"S": lease.owner},
            ":next": {"N": str(lease.counter + 1)},
            ":old_seq": {"S": lease.checkpoint.sequence},
            ":old_sub": {"N": str(lease.checkpoint.sub_sequence)},
            **values,
        },
        "ReturnValues": "NONE",
    }


def failure_update(
    lease: Lease,
    position: Position,
    error: str,
    attempts: int,
    details: str | None,
    now: float,
    release: bool,
) -> tuple[dict[str, str], Values, list[str]]:
    """The assignments, values and removals of a counted failure (for `fenced_update`)."""
    assignments = {
        "failedSequenceNumber": ":seq",
        "failedSubSequenceNumber": ":sub",
        "failedAttempts": ":n",
        "lastError": ":error",
        "lastFailureAt": ":at",
    }
    values: Values = {
        ":seq": {"S": position.sequence},
        ":sub": {"N": str(position.sub_sequence)},
        ":n": {"N": str(attempts)},
        ":error": {"S": error},
        ":at": {"N": f"{now:.3f}"},
    }
    removes = ["inflightSequenceNumber"] if release else []
    if lease.span_started:  # the started handler is accounted for: a death now is not its
        removes.append("spanStarted")
    if details:
        assignments["lastErrorDetails"] = ":details"
        values[":details"] = {"S": details}
    elif lease.last_error_details is not None:
        removes.append("lastErrorDetails")
    return assignments, values, removes


def careful_update(
    lease: Lease, span: int, started: bool, returned: bool, release: bool
) -> tuple[dict[str, str], Values, list[str]]:
    """The assignments, values and removals of a careful span's mark (for `fenced_update`)."""
    assignments = {"carefulSpan": ":span"}
    values: Values = {":span": {"N": str(span)}}
    removes = ["inflightSequenceNumber"] if release else []
    if started:
        assignments["spanStarted"] = ":true"
    if returned:
        assignments["spanReturned"] = ":true"
    if started or returned:
        values[":true"] = {"BOOL": True}
    if lease.span_started and not (started or returned):
        removes.append("spanStarted")
    if lease.span_returned and not returned:
        removes.append("spanReturned")
    return assignments, values, removes


def stall_update(cause: str, sequence: str, now: float) -> tuple[dict[str, str], Values]:
    """The assignments and values of a stall (`stalledSince` kept from the first one)."""
    return (
        {
            "stalledSince": "if_not_exists(stalledSince, :at)",
            "stalledCause": ":cause",
            "stalledSequence": ":retry",
            "stalls": "if_not_exists(stalls, :zero) + :one",
        },
        {
            ":at": {"N": f"{now:.3f}"},
            ":cause": {"S": cause},
            ":retry": {"S": sequence},
            ":zero": {"N": "0"},
            ":one": {"N": "1"},
        },
    )


def shard_end_update(table_name: str, seen: Lease, now: dict[str, str]) -> dict[str, Any]:
    """UpdateItem setting a closed shard's checkpoint to SHARD_END if it is still where `seen`
    found it (compare-and-swap on the position, not fenced by the counter)."""
    return {
        "TableName": table_name,
        "Key": key(seen.key),
        "UpdateExpression": "SET checkpoint = :end, checkpointSubSequenceNumber = :zero, updatedAt = :now",
        "ConditionExpression": "checkpoint = :seq AND checkpointSubSequenceNumber = :sub",
        "ExpressionAttributeValues": {
            ":end": {"S": SHARD_END},
            ":zero": {"N": "0"},
            ":now": now,
            ":seq": {"S": seen.checkpoint.sequence},
            ":sub": {"N": str(seen.checkpoint.sub_sequence)},
        },
    }


def raise_for_sink_writes(reasons: Sequence[Mapping[str, Any]], error: ClientError, first: int = 1) -> None:
    """`SinkConflict` or `SinkRejected` naming the sink writes a cancelled transaction blames
    (reason 0 is the checkpoint's, the sink writes' start at `first`); nothing if the
    cancellation was not about them."""
    codes = [str(reason.get("Code", "None")) for reason in reasons]
    failed = tuple(
        index - first for index, code in enumerate(codes) if index >= first and code == CANCELED_BY_CONDITION
    )
    if failed:
        why = tuple(str(reasons[index + first].get("Message", CANCELED_BY_CONDITION)) for index in failed)
        items = tuple(reasons[index + first].get("Item") for index in failed)  # ALL_OLD, when asked for
        raise SinkConflict(
            f"sink writes {list(failed)} failed their condition", failed, why, items
        ) from error
    invalid = tuple(
        index - first for index, code in enumerate(codes) if index >= first and code == CANCELED_AS_INVALID
    )
    if invalid:
        raise SinkRejected(f"DynamoDB refused sink writes {list(invalid)} as invalid", invalid) from error
