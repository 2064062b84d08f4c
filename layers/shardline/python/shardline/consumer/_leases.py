"""The lease/checkpoint table of a consumer group: one DynamoDB row per shard, KCL-compatible.

    table = LeaseTable(boto3.client("dynamodb"), "orders-consumer-leases")
    lease = table.take("shardId-000000000001", owner=context.aws_request_id)
    lease = table.checkpoint(lease, Position(record.sequence_number, record.sub_sequence_number))

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

Every write is conditional on `leaseCounter` and increments it (as the KCL's lease renewals
do), setting `leaseOwner`: whoever writes next under a counter it did not see gets `LeaseLost`.
`take` claims a lease with a write of its own; `begin` claims it and marks a delivery in flight
in the same write (a batch that succeeds then costs two writes, and no read); `hold` only reads
it, and the holder's first checkpoint claims it — a batch that succeeds costs one write. A
checkpoint only moves forward (compare-and-swap against the stored position; DynamoDB numbers
cannot hold 56-digit sequence numbers, so the order is checked here). A write whose reply was
lost is re-read and accepted if it landed.
"""

from __future__ import annotations

import hashlib
import random
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from shardline.errors import LeaseLost, SinkConflict, SinkRejected
from shardline.kinesis._positions import SHARD_END, TRIM_HORIZON, Position

if TYPE_CHECKING:  # annotations only: the Protocols cost nothing at import
    from shardline.protocols import DynamoDBClient

CONDITION_FAILED = "ConditionalCheckFailedException"
TRANSACTION_CANCELED = "TransactionCanceledException"
CANCELED_BY_CONDITION = "ConditionalCheckFailed"  # a cancellation reason of TransactWriteItems
CANCELED_AS_INVALID = "ValidationError"  # another: that item is malformed (e.g. over 400 KB)
VALIDATION_EXCEPTION = "ValidationException"  # a request refused outright, before any write
MAX_TRANSACTION_ITEMS = 100
MAX_TRANSACTION_BYTES = 4_000_000  # DynamoDB's 4 MB per transaction, with headroom for the checkpoint
_TAKE_ATTEMPTS = 5
#: Cancellation reasons that say nothing about the items: the same transaction may succeed again.
TRANSIENT_REASONS = frozenset(
    {"None", "TransactionConflict", "ThrottlingError", "ProvisionedThroughputExceeded"}
)
TRANSIENT_ATTEMPTS = 4
TRANSIENT_BACKOFF_S = 0.02
#: Bounds on the text a lease row keeps about a failure (DynamoDB items are at most 400 KB).
MAX_ERROR_CHARS = 1000
MAX_DETAILS_CHARS = 4000
_STALL_ATTRIBUTES = ("stalledSince", "stalledCause", "stalledSequence", "stalls")
_CAREFUL_ATTRIBUTES = ("carefulSpan", "spanStarted", "spanReturned")
#: A lease's fields once careful running ended.
NOT_CAREFUL: dict[str, Any] = {"careful_span": None, "span_started": False, "span_returned": False}
#: A lease's fields once its stall ended.
NOT_STALLED: dict[str, Any] = {
    "stalled_since": None,
    "stalled_cause": None,
    "stalled_sequence": None,
    "stalls": 0,
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


def _lease_of(item: Mapping[str, Any]) -> Lease:
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
    )


def _number(item: Mapping[str, Any], name: str) -> float | None:
    return float(item[name]["N"]) if name in item else None


def _code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


class LeaseTable:
    """Leases and checkpoints of one consumer group, in one DynamoDB table."""

    def __init__(
        self,
        dynamodb_client: DynamoDBClient,
        table_name: str,
        *,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._client = dynamodb_client
        self.table_name = table_name
        self._clock = clock
        self._sleep = sleep
        self._sink_keys: dict[str, tuple[str, ...] | None] = {}

    def now(self) -> float:
        """The group's wall clock (epoch seconds): rows are stamped with it, backoffs measured in it."""
        return self._clock()

    def sleep(self, seconds: float) -> None:
        """Wait `seconds` on the group's clock (a failed record's backoff, a stalled shard's)."""
        if seconds > 0:
            self._sleep(seconds)

    @staticmethod
    def create(dynamodb_client: DynamoDBClient, table_name: str) -> None:
        """Create the table (PAY_PER_REQUEST, hash key `leaseKey`): for tests and the local runtime;
        deployed tables come from the CDK app."""
        dynamodb_client.create_table(
            TableName=table_name,
            KeySchema=[{"AttributeName": "leaseKey", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "leaseKey", "AttributeType": "S"}],
            BillingMode="PAY_PER_REQUEST",
        )
        dynamodb_client.get_waiter("table_exists").wait(TableName=table_name)

    def get(self, key: str) -> Lease | None:
        """The row for `key` (strongly consistent), or None."""
        item = self._client.get_item(TableName=self.table_name, Key=self._key(key), ConsistentRead=True).get(
            "Item"
        )
        return _lease_of(item) if item else None

    # -- leases ----------------------------------------------------------------------------

    def take(self, key: str, owner: str, *, parent_shard_ids: Iterable[str] = ()) -> Lease:
        """Take the lease of `key` for `owner`, incrementing `leaseCounter` (which fences any
        previous holder). Creates the row at TRIM_HORIZON if there is none."""
        for _ in range(_TAKE_ATTEMPTS):
            current = self.get(key)
            if current is None:
                lease = Lease(
                    key, owner, 1, Position(TRIM_HORIZON), parent_shard_ids=frozenset(parent_shard_ids)
                )
                if self._write_new(lease):
                    return lease
                continue
            switches = current.owner_switches + (current.owner != owner)
            taken = replace(current, owner=owner, counter=current.counter + 1, owner_switches=switches)
            try:
                self._client.update_item(
                    TableName=self.table_name,
                    Key=self._key(key),
                    UpdateExpression="SET leaseOwner = :owner, leaseCounter = :next, "
                    "ownerSwitchesSinceCheckpoint = :switches, updatedAt = :now",
                    ConditionExpression="leaseCounter = :seen",
                    ExpressionAttributeValues={
                        ":owner": {"S": owner},
                        ":next": {"N": str(taken.counter)},
                        ":switches": {"N": str(switches)},
                        ":now": self._now(),
                        ":seen": {"N": str(current.counter)},
                    },
                )
                return taken
            except ClientError as exc:
                if _code(exc) != CONDITION_FAILED:
                    raise
        raise LeaseLost(f"lease {key}: could not take it in {_TAKE_ATTEMPTS} attempts (contended)")

    def hold(self, key: str, owner: str, *, parent_shard_ids: Iterable[str] = ()) -> Lease:
        """The lease of `key` as `owner` will claim it with its first write (no write now, unless
        the row does not exist yet). Two holders of the same counter: the first to write wins."""
        for _ in range(_TAKE_ATTEMPTS):
            current = self.get(key)
            if current is not None:
                return replace(current, owner=owner)
            lease = Lease(key, owner, 1, Position(TRIM_HORIZON), parent_shard_ids=frozenset(parent_shard_ids))
            if self._write_new(lease):
                return lease
        raise LeaseLost(f"lease {key}: could not create it in {_TAKE_ATTEMPTS} attempts (contended)")

    def begin(
        self, key: str, owner: str, delivery: str, *, parent_shard_ids: Iterable[str] = ()
    ) -> tuple[Lease, bool]:
        """Take the lease of `key` for `owner` and mark the delivery starting at sequence number
        `delivery` in flight, in one unconditional write (creating the row at TRIM_HORIZON).

        Returns the lease and whether an earlier delivery starting at the same sequence number
        began and never answered: its process died (a timeout, out of memory) — Lambda retries
        a batch from where it started. The mark is removed by a write with `release=True`. A mark
        of the same `owner` is this very call's, retried by the SDK after a lost reply: no crash.
        """
        parents = sorted(parent_shard_ids)
        expression = (
            "SET leaseOwner = :owner, leaseCounter = if_not_exists(leaseCounter, :zero) + :one, "
            "checkpoint = if_not_exists(checkpoint, :trim), "
            "checkpointSubSequenceNumber = if_not_exists(checkpointSubSequenceNumber, :zero), "
            "ownerSwitchesSinceCheckpoint = if_not_exists(ownerSwitchesSinceCheckpoint, :zero) + :one, "
            "inflightSequenceNumber = :delivery, updatedAt = :now"
        )
        values: dict[str, Any] = {
            ":owner": {"S": owner},
            ":zero": {"N": "0"},
            ":one": {"N": "1"},
            ":trim": {"S": TRIM_HORIZON},
            ":delivery": {"S": delivery},
            ":now": self._now(),
        }
        if parents:
            expression += ", parentShardId = if_not_exists(parentShardId, :parents)"
            values[":parents"] = {"SS": parents}
        old = self._client.update_item(
            TableName=self.table_name,
            Key=self._key(key),
            UpdateExpression=expression,
            ExpressionAttributeValues=values,
            ReturnValues="ALL_OLD",
        ).get("Attributes")
        if not old:
            return Lease(
                key, owner, 1, Position(TRIM_HORIZON), 1, frozenset(parents), inflight=delivery
            ), False
        before = _lease_of(old)
        lease = replace(
            before,
            owner=owner,
            counter=before.counter + 1,
            owner_switches=before.owner_switches + 1,
            parent_shard_ids=before.parent_shard_ids or frozenset(parents),
            inflight=delivery,
        )
        return lease, before.inflight == delivery and before.owner != owner

    def release(self, lease: Lease, *, careful_done: bool = False) -> Lease:
        """Remove the in-flight mark of `lease`'s delivery (it answered without a checkpoint),
        and end the stall `lease` shows (the delivery reached DynamoDB and answered: whatever
        stalled it is gone, though the checkpoint had nothing to pass). `careful_done=True`: the
        delivery went through its whole batch, careful running ends (`_careful`). Raises
        `LeaseLost` if the lease was taken since."""
        ended: dict[str, Any] = {}
        removes = ["inflightSequenceNumber"]
        if lease.stalled_since is not None or lease.stalls > 0:
            removes += _STALL_ATTRIBUTES
            ended.update(NOT_STALLED)
        if careful_done and lease.careful_span is not None:
            removes += _CAREFUL_ATTRIBUTES
            ended.update(NOT_CAREFUL)
        self._fenced(lease, {}, {}, removes)
        return replace(lease, counter=lease.counter + 1, inflight=None, **ended)

    def mark_careful(
        self,
        lease: Lease,
        span: int,
        *,
        started: bool = False,
        returned: bool = False,
        release: bool = False,
    ) -> Lease:
        """Run carefully from the checkpoint on (`_careful`): `span` records before the next
        checkpoint. `started=True`: the lone record's handler starts now (a death from here on
        may be its doing); `returned=True`: it returned (a death now is not its doing); neither:
        a new span, nothing started. `release=True` also removes the in-flight mark."""
        assignments = {"carefulSpan": ":span"}
        values: dict[str, Any] = {":span": {"N": str(span)}}
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
        self._fenced(lease, assignments, values, removes)
        return replace(
            lease,
            counter=lease.counter + 1,
            careful_span=span,
            span_started=started or (returned and lease.span_started),
            span_returned=returned,
            inflight=None if release else lease.inflight,
        )

    def stall(self, lease: Lease, cause: str, sequence: str, *, release: bool = False) -> Lease:
        """Note that the shard stalls on its environment (`_stalls`): since when (kept from the
        first stalled delivery), why, where the mapping retries, how many deliveries in a row."""
        cause = cause[:MAX_ERROR_CHARS] or "-"
        now = self.now()
        self._fenced(
            lease,
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
            ["inflightSequenceNumber"] if release else [],
        )
        return replace(
            lease,
            counter=lease.counter + 1,
            stalled_since=lease.stalled_since if lease.stalled_since is not None else now,
            stalled_cause=cause,
            stalled_sequence=sequence,
            stalls=lease.stalls + 1,
            inflight=None if release else lease.inflight,
        )

    def note_skipped(self, lease: Lease, skipped: str) -> Lease:
        """Replace `skippedByMapping` with `skipped` (JSON) and end the stall: the mapping has moved
        past the stalled batch."""
        self._fenced(lease, {"skippedByMapping": ":skipped"}, {":skipped": {"S": skipped}}, _STALL_ATTRIBUTES)
        return replace(lease, counter=lease.counter + 1, skipped_by_mapping=skipped, **NOT_STALLED)

    def start_at(self, key: str, checkpoint: Position) -> bool:
        """Create the row of `key` at `checkpoint` (owned by no one); False if it exists."""
        return self._write_new(Lease(key, "", 1, checkpoint))

    def sink_key(self, table_name: str) -> tuple[str, ...] | None:
        """The key attributes of a sink table (DescribeTable, once per table), or None when the
        role may not describe it (then a `Put` is told apart from others by its whole item).
        A table that does not exist raises: the shard stalls on it (`_stalls`)."""
        if table_name not in self._sink_keys:
            try:
                schema = self._client.describe_table(TableName=table_name)["Table"]["KeySchema"]
            except ClientError as exc:
                if _code(exc) == "ResourceNotFoundException":
                    raise
                if _code(exc) in ("AccessDeniedException", "AccessDenied"):
                    self._sink_keys[table_name] = None
                return None  # throttled or unavailable: asked again next time
            self._sink_keys[table_name] = tuple(str(key["AttributeName"]) for key in schema)
        return self._sink_keys[table_name]

    def _write_new(self, lease: Lease) -> bool:
        item = {
            **self._key(lease.key),
            "leaseOwner": {"S": lease.owner},
            "leaseCounter": {"N": "1"},
            "checkpoint": {"S": lease.checkpoint.sequence},
            "checkpointSubSequenceNumber": {"N": str(lease.checkpoint.sub_sequence)},
            "ownerSwitchesSinceCheckpoint": {"N": "0"},
            "updatedAt": self._now(),
        }
        if lease.parent_shard_ids:
            item["parentShardId"] = {"SS": sorted(lease.parent_shard_ids)}
        try:
            self._client.put_item(
                TableName=self.table_name, Item=item, ConditionExpression="attribute_not_exists(leaseKey)"
            )
            return True
        except ClientError as exc:
            if _code(exc) != CONDITION_FAILED:
                raise
            return False

    # -- checkpoints -----------------------------------------------------------------------

    def checkpoint(
        self,
        lease: Lease,
        position: Position,
        *,
        release: bool = False,
        applied: str | None = None,
        careful_span: int | None = None,
    ) -> Lease:
        """Move the checkpoint forward to `position` under `lease`. Returns the updated lease.

        A position at or below the current checkpoint changes nothing. Raises `LeaseLost` if the
        lease was taken since. `release=True` also removes the delivery's in-flight mark.
        `applied` (None: unchanged) is the applied-aggregate state at `position` (`_dedup`),
        written by the same write ("" removes it). `careful_span`: the span of a careful run
        that starts past `position` (`_careful`; None ends careful running). A checkpoint that
        moves ends a stall and clears the failure it passes.
        """
        if position <= lease.checkpoint:
            return lease
        update = self._checkpoint_update(lease, position, release, applied, careful_span)
        try:
            self._client.update_item(**update)
        except ClientError as exc:
            if _code(exc) != CONDITION_FAILED:
                return self._confirm_landed(lease, position, exc, applied, careful_span)
            return self._confirm_landed(
                lease,
                position,
                LeaseLost(f"lease {lease.key} was taken by another owner"),
                applied,
                careful_span,
            )
        except Exception as exc:  # timeout, reset: did it land?
            return self._confirm_landed(lease, position, exc, applied, careful_span)
        return self._advanced(lease, position, release, applied, careful_span)

    def checkpoint_with(
        self,
        lease: Lease,
        position: Position,
        writes: Sequence[Mapping[str, Any]],
        *,
        release: bool = False,
        applied: str | None = None,
        careful_span: int | None = None,
    ) -> Lease:
        """Checkpoint and apply `writes` (TransactWriteItems entries) in one transaction: both or neither.

        At most `MAX_TRANSACTION_ITEMS - 1` writes. Raises `LeaseLost` when the lease was taken,
        `SinkConflict` when one of `writes` failed its own condition, `SinkRejected` when DynamoDB
        refused one as invalid — each saying which writes, when DynamoDB did. `applied` and
        `careful_span`: as in `checkpoint`, in the checkpoint's own item of the transaction.
        Any other refusal (a missing or forbidden table, throttling) raises as botocore raised it.
        """
        if not writes:
            return self.checkpoint(
                lease, position, release=release, applied=applied, careful_span=careful_span
            )
        if len(writes) > MAX_TRANSACTION_ITEMS - 1:
            raise ValueError(f"at most {MAX_TRANSACTION_ITEMS - 1} writes ride with one checkpoint")
        if position <= lease.checkpoint:
            raise ValueError(f"writes must come with a forward checkpoint: {position} <= {lease.checkpoint}")
        update = self._checkpoint_update(lease, position, release, applied, careful_span)
        del update["ReturnValues"]
        # Idempotent retries of this very transaction (same lease, position and writes) only.
        identity = f"{self.table_name}|{lease.key}|{lease.counter}|{position!r}|{writes!r}"
        token = hashlib.sha256(identity.encode()).hexdigest()
        try:
            self._transact([{"Update": update}, *writes], token[:36])
        except ClientError as exc:
            if _code(exc) == VALIDATION_EXCEPTION:  # refused before anything was written
                message = exc.response.get("Error", {}).get("Message", "")
                self._confirm_held(lease, exc)  # a lost lease comes first: the caller must stop
                raise SinkRejected(f"DynamoDB refused the sink writes: {message}") from exc
            if _code(exc) == TRANSACTION_CANCELED:
                reasons = exc.response.get("CancellationReasons") or []
                codes = [reason.get("Code", "None") for reason in reasons]
                if codes and codes[0] == CANCELED_BY_CONDITION:
                    return self._confirm_landed(
                        lease, position, LeaseLost(f"lease {lease.key} was taken"), applied, careful_span
                    )
                _raise_for_sink_writes(reasons, exc)
            return self._confirm_landed(lease, position, exc, applied, careful_span)
        except Exception as exc:
            return self._confirm_landed(lease, position, exc, applied, careful_span)
        return self._advanced(lease, position, release, applied, careful_span)

    def _transact(self, items: list[Mapping[str, Any]], token: str) -> None:
        """TransactWriteItems, again (up to `TRANSIENT_ATTEMPTS` times, with jittered backoff) while
        DynamoDB cancels it for transient reasons only (a conflicting transaction, throttling):
        a cancelled transaction wrote nothing, so trying it again cannot apply it twice."""
        for attempt in range(1, TRANSIENT_ATTEMPTS + 1):
            try:
                self._client.transact_write_items(TransactItems=items, ClientRequestToken=token)
                return
            except ClientError as exc:
                reasons = exc.response.get("CancellationReasons") or []
                codes = {str(reason.get("Code", "None")) for reason in reasons}
                transient = _code(exc) == TRANSACTION_CANCELED and codes <= TRANSIENT_REASONS
                if not transient or attempt == TRANSIENT_ATTEMPTS:
                    raise
                time.sleep(random.uniform(0, TRANSIENT_BACKOFF_S * 2**attempt))

    def record_failure(
        self,
        lease: Lease,
        position: Position,
        error: str,
        *,
        release: bool = False,
        details: str | None = None,
    ) -> Lease:
        """Count one more failed attempt at `position` (a new position starts at 1), stamped with
        the table's clock (its backoff starts now). `details` (JSON, bounded) say more, e.g. the
        sink writes DynamoDB refused. `release=True` also removes the delivery's in-flight mark."""
        attempts = lease.failed_attempts + 1 if lease.failed_at == position else 1
        error = error[:MAX_ERROR_CHARS] or "-"
        details = details[:MAX_DETAILS_CHARS] if details else None
        now = self.now()
        assignments = {
            "failedSequenceNumber": ":seq",
            "failedSubSequenceNumber": ":sub",
            "failedAttempts": ":n",
            "lastError": ":error",
            "lastFailureAt": ":at",
        }
        values: dict[str, Any] = {
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
        self._fenced(lease, assignments, values, removes)
        return replace(
            lease,
            counter=lease.counter + 1,
            failed_at=position,
            failed_attempts=attempts,
            last_error=error,
            failed_time=now,
            last_error_details=details,
            span_started=False,
            inflight=None if release else lease.inflight,
        )

    def mark_shard_end(self, seen: Lease) -> bool:
        """Set a (parent) shard's checkpoint to SHARD_END if it is still where `seen` found it.

        For a closed shard whose checkpoint is at its last record. Not fenced by the lease
        counter (the caller does not hold that lease) but by compare-and-swap on the position.
        """
        try:
            self._client.update_item(
                TableName=self.table_name,
                Key=self._key(seen.key),
                UpdateExpression="SET checkpoint = :end, checkpointSubSequenceNumber = :zero, "
                "updatedAt = :now",
                ConditionExpression="checkpoint = :seq AND checkpointSubSequenceNumber = :sub",
                ExpressionAttributeValues={
                    ":end": {"S": SHARD_END},
                    ":zero": {"N": "0"},
                    ":now": self._now(),
                    ":seq": {"S": seen.checkpoint.sequence},
                    ":sub": {"N": str(seen.checkpoint.sub_sequence)},
                },
            )
            return True
        except ClientError as exc:
            if _code(exc) == CONDITION_FAILED:
                return False
            raise

    # -- helpers ---------------------------------------------------------------------------

    def _fenced(
        self,
        lease: Lease,
        assignments: Mapping[str, str],
        values: Mapping[str, Any],
        removes: Iterable[str] = (),
    ) -> None:
        """UpdateItem of `lease`'s row under its counter, claiming it (owner, counter + 1): SET
        each attribute to its expression, REMOVE `removes`. `LeaseLost` if the lease was taken."""
        expression = "SET leaseOwner = :owner, leaseCounter = :next, updatedAt = :now"
        expression += "".join(f", {name} = {value}" for name, value in assignments.items())
        removed = list(removes)
        if removed:
            expression += " REMOVE " + ", ".join(removed)
        try:
            self._client.update_item(
                TableName=self.table_name,
                Key=self._key(lease.key),
                UpdateExpression=expression,
                ConditionExpression="leaseCounter = :counter",
                ExpressionAttributeValues={
                    ":owner": {"S": lease.owner},
                    ":next": {"N": str(lease.counter + 1)},
                    ":now": self._now(),
                    ":counter": {"N": str(lease.counter)},
                    **values,
                },
            )
        except ClientError as exc:
            if _code(exc) == CONDITION_FAILED:
                raise LeaseLost(f"lease {lease.key} was taken by another owner") from exc
            raise

    def _checkpoint_update(
        self,
        lease: Lease,
        position: Position,
        release: bool = False,
        applied: str | None = None,
        careful_span: int | None = None,
    ) -> dict[str, Any]:
        removed = []
        if lease.failed_at is not None and lease.failed_at <= position:
            removed += ["failedSequenceNumber", "failedSubSequenceNumber", "failedAttempts", "lastError"]
            removed += ["lastFailureAt", "lastErrorDetails"]
        if release:
            removed.append("inflightSequenceNumber")
        if lease.stalled_since is not None or lease.stalls:
            removed += _STALL_ATTRIBUTES
        if lease.span_started:
            removed.append("spanStarted")
        if lease.span_returned:
            removed.append("spanReturned")
        expression = (
            "SET checkpoint = :seq, checkpointSubSequenceNumber = :sub, "
            "ownerSwitchesSinceCheckpoint = :zero, updatedAt = :now, "
            "leaseOwner = :owner, leaseCounter = :next"
        )
        values: dict[str, Any] = {}
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
        if removed:
            expression += " REMOVE " + ", ".join(removed)
        return {
            "TableName": self.table_name,
            "Key": self._key(lease.key),
            "UpdateExpression": expression,
            "ConditionExpression": "leaseCounter = :counter AND checkpoint = :old_seq "
            "AND checkpointSubSequenceNumber = :old_sub",
            "ExpressionAttributeValues": {
                ":seq": {"S": position.sequence},
                ":sub": {"N": str(position.sub_sequence)},
                ":zero": {"N": "0"},
                ":now": self._now(),
                ":counter": {"N": str(lease.counter)},
                ":owner": {"S": lease.owner},
                ":next": {"N": str(lease.counter + 1)},
                ":old_seq": {"S": lease.checkpoint.sequence},
                ":old_sub": {"N": str(lease.checkpoint.sub_sequence)},
                **values,
            },
            "ReturnValues": "NONE",
        }

    def _advanced(
        self,
        lease: Lease,
        position: Position,
        release: bool = False,
        applied: str | None = None,
        careful_span: int | None = None,
    ) -> Lease:
        if lease.failed_at is not None and lease.failed_at <= position:
            lease = replace(
                lease,
                failed_at=None,
                failed_attempts=0,
                last_error=None,
                failed_time=None,
                last_error_details=None,
            )
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

    def _confirm_held(self, lease: Lease, error: Exception) -> None:
        """Raise `LeaseLost` if the row shows `lease` was taken since."""
        stored = self.get(lease.key)
        if stored is None or stored.counter != lease.counter:
            raise LeaseLost(f"lease {lease.key} was taken by another owner") from error

    def _confirm_landed(
        self,
        lease: Lease,
        position: Position,
        error: Exception,
        applied: str | None = None,
        careful_span: int | None = None,
    ) -> Lease:
        """After a failed or unanswered write: accept it if the row shows it landed, else raise."""
        stored = self.get(lease.key)
        if stored is not None and (stored.counter, stored.owner, stored.checkpoint) == (
            lease.counter + 1,
            lease.owner,
            position,
        ):  # it landed; the reply was lost
            return self._advanced(lease, position, stored.inflight is None, applied, careful_span)
        if stored is None or stored.counter != lease.counter:
            raise LeaseLost(f"lease {lease.key} was taken by another owner") from error
        raise error

    def _key(self, key: str) -> dict[str, Any]:
        return {"leaseKey": {"S": key}}

    def _now(self) -> dict[str, str]:
        return {"N": str(int(self._clock()))}


def _raise_for_sink_writes(reasons: Sequence[Mapping[str, Any]], error: ClientError) -> None:
    """`SinkConflict` or `SinkRejected` naming the sink writes a cancelled transaction blames
    (reason 0 is the checkpoint's); nothing if the cancellation was not about them."""
    codes = [str(reason.get("Code", "None")) for reason in reasons]
    failed = tuple(index - 1 for index, code in enumerate(codes) if index and code == CANCELED_BY_CONDITION)
    if failed:
        why = tuple(str(reasons[index + 1].get("Message", CANCELED_BY_CONDITION)) for index in failed)
        raise SinkConflict(f"sink writes {list(failed)} failed their condition", failed, why) from error
    invalid = tuple(index - 1 for index, code in enumerate(codes) if index and code == CANCELED_AS_INVALID)
    if invalid:
        raise SinkRejected(f"DynamoDB refused sink writes {list(invalid)} as invalid", invalid) from error
