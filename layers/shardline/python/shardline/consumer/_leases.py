"""The lease/checkpoint table of a consumer group: one DynamoDB row per shard, KCL-compatible.

    table = LeaseTable(boto3.client("dynamodb"), "orders-consumer-leases")
    lease = table.take("shardId-000000000001", owner=context.aws_request_id)
    lease = table.checkpoint(lease, Position(record.sequence_number, record.sub_sequence_number))

The row's columns and their encoding are `_lease_codec`'s; the sink tables' key lookups,
`_sink_keys`'s. `LeaseTable` implements `LeaseStore` (`_lease_store`, the protocol the consumer
needs, which `shardline.testing.InMemoryLeaseTable` implements too): this module says when to
write what.

Every write is conditional on `leaseCounter` and increments it (as the KCL's lease renewals
do), setting `leaseOwner`: whoever writes next under a counter it did not see gets `LeaseLost`.
`take` claims a lease with a write of its own; `begin` claims it and marks a delivery in flight
in the same write (a batch that succeeds then costs two writes, and no read); `hold` only reads
it, and the holder's first checkpoint claims it — a batch that succeeds costs one write. A
checkpoint only moves forward (compare-and-swap against the stored position; DynamoDB numbers
cannot hold 56-digit sequence numbers, so the order is checked here). A write whose reply was
lost is re-read and accepted if it landed. A checkpoint's claims in a redrive row
(`_redrive_claims`) go in its own UpdateItem when the row is its own, else in its transaction as
one Update more (UpdateItem on the same table: no other grant), each conditional on the row's
`applyVersion`.
"""

from __future__ import annotations

import hashlib
import random
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from shardline.consumer import _lease_codec as codec
from shardline.consumer._idempotent import land
from shardline.consumer._lease_codec import (
    CANCELED_BY_CONDITION,
    CAREFUL_ATTRIBUTES,
    CONDITION_FAILED,
    STALL_ATTRIBUTES,
    TRANSACTION_CANCELED,
    VALIDATION_EXCEPTION,
    error_code,
)
from shardline.consumer._lease_store import (
    MAX_DETAILS_CHARS,
    MAX_ERROR_CHARS,
    MAX_TRANSACTION_ITEMS,
    NOT_CAREFUL,
    NOT_STALLED,
    Claim,
    ClaimsMoved,
    Lease,
    advanced,
    claimed,
)
from shardline.consumer._sink_keys import SinkKeySchemas
from shardline.consumer._transaction import item_of
from shardline.errors import LeaseLost, SinkRejected
from shardline.kinesis._positions import TRIM_HORIZON, Position

if TYPE_CHECKING:  # annotations only: the Protocols cost nothing at import
    from shardline.consumer._lease_store import LeaseStore
    from shardline.protocols import DynamoDBClient

_TAKE_ATTEMPTS = 5
#: Cancellation reasons that say nothing about the items: the same transaction may succeed again.
TRANSIENT_REASONS = frozenset(
    {"None", "TransactionConflict", "ThrottlingError", "ProvisionedThroughputExceeded"}
)
TRANSIENT_ATTEMPTS = 4
TRANSIENT_BACKOFF_S = 0.02


class LeaseTable:
    """Leases and checkpoints of one consumer group, in one DynamoDB table (a `LeaseStore`)."""

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
        self._sink_keys = SinkKeySchemas(dynamodb_client)

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
        item = self._client.get_item(TableName=self.table_name, Key=codec.key(key), ConsistentRead=True).get(
            "Item"
        )
        return codec.lease_of(item) if item else None

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
                    Key=codec.key(key),
                    UpdateExpression=codec.TAKE_EXPRESSION,
                    ConditionExpression=codec.TAKE_CONDITION,
                    ExpressionAttributeValues=codec.take_values(current, taken, codec.stamp(self._clock())),
                )
                return taken
            except ClientError as exc:
                if error_code(exc) != CONDITION_FAILED:
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
        self,
        key: str,
        owner: str,
        delivery: str,
        *,
        parent_shard_ids: Iterable[str] = (),
        held: Lease | None = None,
    ) -> tuple[Lease, bool]:
        """Take the lease of `key` for `owner` and mark the delivery starting at sequence number
        `delivery` in flight, in one unconditional write (creating the row at TRIM_HORIZON).

        Returns the lease and whether an earlier delivery starting at the same sequence number
        began and never answered: its process died (a timeout, out of memory) — Lambda retries
        a batch from where it started. The mark is removed by a write with `release=True`. A mark
        of the same `owner` is this very call's, retried by the SDK after a lost reply: no crash.

        `held`: the lease as a worker holds it (`claim`): the write is then fenced on its counter
        (`LeaseLost` if it was taken) instead of taking the row from whoever has it.
        """
        if held is not None:
            self._fenced(held, {"inflightSequenceNumber": ":delivery"}, {":delivery": {"S": delivery}})
            lease = replace(held, counter=held.counter + 1, inflight=delivery)
            return lease, held.inflight == delivery
        parents = sorted(parent_shard_ids)
        expression, values = codec.begin_update(owner, delivery, parents, codec.stamp(self._clock()))
        old = self._client.update_item(
            TableName=self.table_name,
            Key=codec.key(key),
            UpdateExpression=expression,
            ExpressionAttributeValues=values,
            ReturnValues="ALL_OLD",
        ).get("Attributes")
        if not old:
            return Lease(
                key, owner, 1, Position(TRIM_HORIZON), 1, frozenset(parents), inflight=delivery
            ), False
        before = codec.lease_of(old)
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
            removes += STALL_ATTRIBUTES
            ended.update(NOT_STALLED)
        if careful_done and lease.careful_span is not None:
            removes += CAREFUL_ATTRIBUTES
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
        assignments, values, removes = codec.careful_update(lease, span, started, returned, release)
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
        assignments, values = codec.stall_update(cause, sequence, now)
        self._fenced(lease, assignments, values, ["inflightSequenceNumber"] if release else [])
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
        self._fenced(lease, {"skippedByMapping": ":skipped"}, {":skipped": {"S": skipped}}, STALL_ATTRIBUTES)
        return replace(lease, counter=lease.counter + 1, skipped_by_mapping=skipped, **NOT_STALLED)

    def start_at(
        self,
        key: str,
        checkpoint: Position,
        *,
        parent_shard_ids: Iterable[str] = (),
        applied: str | None = None,
    ) -> bool:
        """Create the row of `key` at `checkpoint` (owned by no one) with the applied-aggregate
        state `applied` (a redrive row: `_redrive_claims`); False if it exists."""
        parents = frozenset(parent_shard_ids)
        return self._write_new(
            Lease(key, "", 1, checkpoint, parent_shard_ids=parents, applied_aggregates=applied)
        )

    def leases(self) -> list[Lease]:
        """Every row of the table, read with a consistent Scan (a worker's view of its group)."""
        rows: list[Lease] = []
        request: dict[str, Any] = {"TableName": self.table_name, "ConsistentRead": True}
        while True:
            page = self._client.scan(**request)
            rows += [codec.lease_of(item) for item in page.get("Items", ())]
            if not page.get("LastEvaluatedKey"):
                return rows
            request["ExclusiveStartKey"] = page["LastEvaluatedKey"]

    def claim(self, seen: Lease, owner: str) -> Lease:
        """Claim the row as `seen` was read, for `owner`, on condition that no one wrote it since
        (its counter is still `seen`'s), incrementing the counter: a worker's renewal (its own
        owner), its take of an expired or unowned lease (its owner), or its release ("": owned by
        no one). `LeaseLost` if the counter moved. A claim whose reply was lost is re-read and
        accepted if it landed."""
        switches = seen.owner_switches + (owner != seen.owner)
        claimed = replace(seen, owner=owner, counter=seen.counter + 1, owner_switches=switches)
        try:
            self._client.update_item(
                TableName=self.table_name,
                Key=codec.key(seen.key),
                UpdateExpression=codec.TAKE_EXPRESSION,
                ConditionExpression=codec.TAKE_CONDITION,
                ExpressionAttributeValues=codec.take_values(seen, claimed, codec.stamp(self._clock())),
            )
        except ClientError as exc:
            if error_code(exc) != CONDITION_FAILED:
                raise
            stored = self.get(seen.key)
            if stored is None or (stored.counter, stored.owner) != (claimed.counter, owner):
                raise LeaseLost(f"lease {seen.key} was written by another owner since it was read") from exc
        return claimed

    def sink_key(self, table_name: str) -> tuple[str, ...] | None:
        """The key attributes of a sink table (DescribeTable, once per table), or None when the
        role may not describe it (then a `Put` is told apart from others by its whole item).
        A table that does not exist raises: the shard stalls on it (`_stalls`)."""
        return self._sink_keys(table_name)

    def _write_new(self, lease: Lease) -> bool:
        item = codec.new_item(lease, codec.stamp(self._clock()))
        try:
            self._client.put_item(
                TableName=self.table_name, Item=item, ConditionExpression="attribute_not_exists(leaseKey)"
            )
            return True
        except ClientError as exc:
            if error_code(exc) != CONDITION_FAILED:
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
        claims: Sequence[Claim] = (),
    ) -> Lease:
        """Move the checkpoint forward to `position` under `lease`. Returns the updated lease.

        A position at or below the current checkpoint changes nothing. Raises `LeaseLost` if the
        lease was taken since. `release=True` also removes the delivery's in-flight mark.
        `applied` (None: unchanged) is the applied-aggregate state at `position` (`_dedup`),
        written by the same write ("" removes it). `careful_span`: the span of a careful run
        that starts past `position` (`_careful`; None ends careful running). A checkpoint that
        moves ends a stall and clears the failure it passes. `claims` (`_redrive_claims`) land
        with it — on the row's own item, or on other rows in one transaction — or `ClaimsMoved`.
        """
        if position <= lease.checkpoint:
            return lease
        if any(claim.key != lease.key for claim in claims):
            return self._transaction(lease, position, (), release, applied, careful_span, claims)
        own = next(iter(claims), None)
        update = codec.checkpoint_update(
            self.table_name, lease, position, codec.stamp(self._clock()), release, applied, careful_span, own
        )
        try:
            self._client.update_item(**update)
        except ClientError as exc:
            if error_code(exc) != CONDITION_FAILED:
                return self._confirm_landed(lease, position, exc, applied, careful_span, claims)
            return self._confirm_landed(
                lease,
                position,
                LeaseLost(f"lease {lease.key} was taken by another owner"),
                applied,
                careful_span,
                claims,
            )
        except Exception as exc:  # timeout, reset: did it land?
            return self._confirm_landed(lease, position, exc, applied, careful_span, claims)
        return claimed(advanced(lease, position, release, applied, careful_span), claims)

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
        """Checkpoint and apply `writes` (TransactWriteItems entries) in one transaction: both or neither.

        At most `MAX_TRANSACTION_ITEMS - 1` writes (and claims on other rows). Raises `LeaseLost`
        when the lease was taken, `SinkConflict` when one of `writes` failed its own condition,
        `SinkRejected` when DynamoDB refused one as invalid — each saying which writes, when
        DynamoDB did — and `ClaimsMoved` when a redrive row's claims moved. `applied`,
        `careful_span` and `claims`: as in `checkpoint`, in the same transaction.
        Any other refusal (a missing or forbidden table, throttling) raises as botocore raised it.
        """
        if not writes:
            return self.checkpoint(
                lease, position, release=release, applied=applied, careful_span=careful_span, claims=claims
            )
        if position <= lease.checkpoint:
            raise ValueError(f"writes must come with a forward checkpoint: {position} <= {lease.checkpoint}")
        return self._transaction(lease, position, writes, release, applied, careful_span, claims)

    def _transaction(
        self,
        lease: Lease,
        position: Position,
        writes: Sequence[Mapping[str, Any]],
        release: bool,
        applied: str | None,
        careful_span: int | None,
        claims: Sequence[Claim],
    ) -> Lease:
        """The checkpoint, its claims on other rows and `writes` in one TransactWriteItems."""
        own = next((claim for claim in claims if claim.key == lease.key), None)
        others = [codec.claim_update(self.table_name, claim) for claim in claims if claim.key != lease.key]
        if len(writes) + len(others) > MAX_TRANSACTION_ITEMS - 1:
            raise ValueError(f"at most {MAX_TRANSACTION_ITEMS - 1} writes ride with one checkpoint")
        update = codec.checkpoint_update(
            self.table_name, lease, position, codec.stamp(self._clock()), release, applied, careful_span, own
        )
        del update["ReturnValues"]
        # Idempotent retries of this very transaction (same lease, position, claims and writes) only.
        identity = f"{self.table_name}|{lease.key}|{lease.counter}|{position!r}|{claims!r}|{writes!r}"
        token = hashlib.sha256(identity.encode()).hexdigest()
        try:
            self._transact(
                [{"Update": update}, *({"Update": other} for other in others), *writes], token[:36]
            )
        except ClientError as exc:
            if error_code(exc) == VALIDATION_EXCEPTION:  # refused before anything was written
                message = exc.response.get("Error", {}).get("Message", "")
                self._confirm_held(lease, exc)  # a lost lease comes first: the caller must stop
                raise SinkRejected(f"DynamoDB refused the sink writes: {message}") from exc
            if error_code(exc) == TRANSACTION_CANCELED:
                reasons = exc.response.get("CancellationReasons") or []
                codes = [reason.get("Code", "None") for reason in reasons]
                if codes and codes[0] == CANCELED_BY_CONDITION:
                    return self._confirm_landed(
                        lease,
                        position,
                        LeaseLost(f"lease {lease.key} was taken"),
                        applied,
                        careful_span,
                        claims,
                    )
                moved = [
                    claim.key
                    for claim, code in zip((c for c in claims if c.key != lease.key), codes[1:], strict=False)
                    if code == CANCELED_BY_CONDITION
                ]
                if moved:
                    raise ClaimsMoved(moved[0]) from exc
                codec.raise_for_sink_writes(reasons, exc, 1 + len(others))
            return self._confirm_landed(lease, position, exc, applied, careful_span, claims)
        except Exception as exc:
            return self._confirm_landed(lease, position, exc, applied, careful_span, claims)
        return claimed(advanced(lease, position, release, applied, careful_span), claims)

    def put_idempotent(self, puts: Sequence[Mapping[str, Any]]) -> int:
        """Write `puts` (`idempotent_put` entries) into their sink tables with BatchWriteItem
        (`_idempotent.land`); returns the calls made."""
        return land(self._client, puts, lambda put: item_of(put, self.sink_key), sleep=self.sleep)

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
                transient = error_code(exc) == TRANSACTION_CANCELED and codes <= TRANSIENT_REASONS
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
        assignments, values, removes = codec.failure_update(
            lease, position, error, attempts, details, now, release
        )
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
                **codec.shard_end_update(self.table_name, seen, codec.stamp(self._clock()))
            )
            return True
        except ClientError as exc:
            if error_code(exc) == CONDITION_FAILED:
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
        update = codec.fenced_update(
            self.table_name, lease, assignments, values, removes, codec.stamp(self._clock())
        )
        try:
            self._client.update_item(**update)
        except ClientError as exc:
            if error_code(exc) == CONDITION_FAILED:
                raise LeaseLost(f"lease {lease.key} was taken by another owner") from exc
            raise

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
        claims: Sequence[Claim] = (),
    ) -> Lease:
        """After a failed or unanswered write: accept it if the row shows it landed, else raise
        (`ClaimsMoved` when the lease holds but its own claims moved)."""
        stored = self.get(lease.key)
        if stored is not None and (stored.counter, stored.owner, stored.checkpoint) == (
            lease.counter + 1,
            lease.owner,
            position,
        ):  # it landed; the reply was lost
            return claimed(advanced(lease, position, stored.inflight is None, applied, careful_span), claims)
        if stored is None or stored.counter != lease.counter:
            raise LeaseLost(f"lease {lease.key} was taken by another owner") from error
        own = next((claim for claim in claims if claim.key == lease.key), None)
        if own is not None and stored.apply_version != own.version:
            raise ClaimsMoved(lease.key) from error
        raise error


if TYPE_CHECKING:  # mypy proves the DynamoDB table is a `LeaseStore`, as the in-memory one is

    def _is_a_lease_store(table: LeaseTable) -> LeaseStore:
        return table
