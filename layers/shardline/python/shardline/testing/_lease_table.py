"""An in-memory lease table: `LeaseTable`'s semantics without DynamoDB, for fast handler tests.

`InMemoryLeaseTable` implements `shardline.consumer.LeaseStore`, the protocol `LeaseTable` (the
DynamoDB table) implements too; it does not subclass `LeaseTable`, and the same tests run
against both (tests/unit/consumer/test_lease_stores.py).

Its jobs are cut in three: this module is what a test constructs and inspects (`row`, `rows`,
the sink tables' `items` and `item`, `place` to set a row up as another invocation left it);
`LeaseRows` (`_lease_rows`), its base, keeps the rows in a dict with every write fenced exactly
as in `LeaseTable` (conditional on the stored `leaseCounter`, which it increments; checkpoints
compare-and-swap on the stored position and only move forward), `checkpoint_with` applying the
sink writes to in-memory tables in the same step (`_sink_tables`), so a test reads what a
handler committed, and a `once` guard whose item is already there cancelling the transaction at
its index (`SinkConflict`), as DynamoDB's ConditionalCheckFailed does (`put_idempotent` writes
idempotent puts one by one, billed as BatchWriteItem calls of 25); its clock is virtual:
`now()` starts at the wall clock and `sleep()` (a failing record's backoff, a stalled shard's)
moves it on without waiting, so a test of backoffs runs in no time and `slept` says how long the
consumer waited. `LeaseRequests` (`_lease_requests`), the base of that, bills the requests —
`reads` counts GetItem calls and `writes` write requests by kind (`LeaseWrite`), as DynamoDB
would (one that fails its condition included) — and `fail_next` injects a failure into the next
call of an operation, before or after its write lands.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from shardline.consumer._lease_store import Lease

if TYPE_CHECKING:
    from shardline.consumer._lease_store import LeaseStore
from shardline.kinesis._positions import Position
from shardline.testing._lease_rows import LeaseRows
from shardline.testing._sink_tables import Item


class InMemoryLeaseTable(LeaseRows):
    """A `LeaseStore` whose rows and sink tables are kept in memory, as `LeaseTable` keeps them in DynamoDB.

    `key_schema` names the key attributes of each sink table a handler `Put`s into, e.g.
    `{"orders": ["id"]}`; declared, it is also checked against the keys of `Update`, `Delete`
    and `ConditionCheck` entries (undeclared, their `Key` is taken as it is). `start`: where the
    virtual clock starts (epoch seconds; default the wall clock).
    """

    def __init__(
        self,
        table_name: str = "leases",
        *,
        key_schema: Mapping[str, Sequence[str]] = {},
        start: float | None = None,
    ) -> None:
        super().__init__(key_schema, start)
        self.table_name = table_name

    # -- inspection and set-up ---------------------------------------------------------------

    def row(self, key: str) -> Lease | None:
        """The stored row, without counting a read."""
        return self._rows.get(key)

    def rows(self) -> dict[str, Lease]:
        """Every stored row by lease key."""
        return dict(self._rows)

    def items(self, table: str) -> list[Item]:
        """Every item a sink table holds, in the order first written."""
        return self._sinks.items(table)

    def item(self, table: str, key: Mapping[str, Mapping[str, Any]]) -> Item | None:
        """The sink item with this key (`{"id": {"S": "o-1"}}`), or None."""
        return self._sinks.item(table, key)

    def place(
        self,
        key: str,
        checkpoint: Position,
        owner: str = "previous-invocation",
        *,
        applied_aggregates: str | None = None,
    ) -> None:
        """Between calls: put `key`'s row at `checkpoint` (with `applied_aggregates`, the dedup
        state), as another invocation left it."""
        current = self._rows.get(key)
        self._rows[key] = Lease(
            key, owner, current.counter if current else 1, checkpoint, applied_aggregates=applied_aggregates
        )


if TYPE_CHECKING:  # mypy proves the in-memory table is a `LeaseStore`, as the DynamoDB one is

    def _is_a_lease_store(table: InMemoryLeaseTable) -> LeaseStore:
        return table
