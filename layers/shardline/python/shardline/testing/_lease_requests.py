"""The in-memory lease table's requests: what it bills, and the failures a test queues for them.

`LeaseRequests` is the base of `InMemoryLeaseTable` (`_lease_table`): its rows (`_lease_rows`)
count each GetItem in `reads` and each write request in `writes` by kind (`LeaseWrite`), as
DynamoDB would bill them (one that fails its condition included), and run every operation
through `_faulted`, which raises the failure `fail_next` queued for it, before or after its
write lands.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from enum import StrEnum
from typing import TypeVar

from shardline.consumer._lease_store import Lease

_T = TypeVar("_T")

#: The operations `fail_next` can make fail (the consumer's commit is `checkpoint_with`).
OPERATIONS = (
    "get",
    "hold",
    "take",
    "begin",
    "release",
    "checkpoint",
    "checkpoint_with",
    "put_idempotent",
    "record_failure",
    "mark_careful",
    "stall",
    "note_skipped",
    "mark_shard_end",
    "start_at",
    "leases",
    "claim",
)
_CONFIRMED = ("checkpoint", "checkpoint_with", "claim")  # LeaseTable re-reads the row when these fail


class LeaseWrite(StrEnum):
    """The kinds of write counted in `InMemoryLeaseTable.writes`, each one conditional request."""

    CREATE = "row creation"  # PutItem of a new row at TRIM_HORIZON, counter 1
    TAKE = "take"  # UpdateItem incrementing leaseCounter
    BEGIN = "begin"  # UpdateItem taking the lease and marking a delivery in flight
    RELEASE = "release"  # UpdateItem removing the in-flight mark
    CHECKPOINT = "checkpoint"  # UpdateItem of the checkpoint
    TRANSACTION = "checkpoint transaction"  # TransactWriteItems: checkpoint + sink writes
    IDEMPOTENT = "idempotent puts"  # BatchWriteItem calls of idempotent puts (no condition)
    FAILURE = "failure"  # UpdateItem counting a failed attempt
    CAREFUL = "careful"  # UpdateItem of the careful span after a crash (`_careful`)
    STALL = "stall"  # UpdateItem noting a stall on the environment (`_stalls`)
    SKIPPED = "skipped by mapping"  # UpdateItem noting a batch the mapping discarded
    SHARD_END = "shard end"  # UpdateItem setting a parent's checkpoint to SHARD_END
    CLAIM = "claim"  # UpdateItem of a worker's renewal, take or release (`LeaseStore.claim`)


class LeaseRequests:
    """The requests of an in-memory lease table: counted, and made to fail on demand."""

    def __init__(self) -> None:
        self._faults: dict[str, list[tuple[BaseException, bool]]] = {}
        self.reads = 0
        self.writes: Counter[str] = Counter()

    @property
    def total_writes(self) -> int:
        return sum(self.writes.values())

    def fail_next(self, operation: str, error: BaseException, *, landed: bool = False) -> None:
        """Make the next call of `operation` raise `error`: before its write is applied, or with
        `landed=True` after it was (the request reached DynamoDB, the reply never came back).

        `LeaseTable` re-reads the row when a checkpoint's reply is lost and accepts a write that
        landed, so after a landed `checkpoint`/`checkpoint_with` only a crash reaches the caller:
        a `BaseException` that is not an `Exception` (the process dying, the function timing out).
        Faults queue up per operation, in order.
        """
        if operation not in OPERATIONS:
            raise ValueError(f"operation {operation!r}: one of {', '.join(OPERATIONS)}")
        if landed and operation in _CONFIRMED and isinstance(error, Exception):
            raise ValueError(
                f"{operation} re-reads the row after an unanswered write and returns normally if it "
                "landed: inject a crash (a BaseException that is not an Exception) instead"
            )
        self._faults.setdefault(operation, []).append((error, landed))

    def _faulted(self, operation: str, call: Callable[[], _T], lease: Lease | None = None) -> _T:
        queued = self._faults.get(operation)
        if not queued:
            return call()
        error, landed = queued.pop(0)
        if landed:
            call()
        elif lease is not None and isinstance(error, Exception):
            self._confirm(lease, error)  # as LeaseTable does after a failed checkpoint write
        raise error

    def _confirm(self, lease: Lease, error: Exception) -> None:
        """After a checkpoint write that did not land: the rows' own check (`LeaseRows._confirm`)."""
        raise NotImplementedError
