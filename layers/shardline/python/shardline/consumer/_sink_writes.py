"""What each kind of sink write a handler returns makes the consumer call, as IAM actions on the sink table.

A handler returns TransactWriteItems entries (`{"Put": ...}`, `{"Update": ...}`, `{"Delete": ...}`,
`{"ConditionCheck": ...}`), `once(...)` guards and `idempotent_put(...)` puts; the consumer writes
them with the calls below, and IAM authorises each call by these actions on the table named:

- A transactional entry rides in the checkpoint's TransactWriteItems, which IAM authorises per item:
  Put -> dynamodb:PutItem, Update -> UpdateItem, Delete -> DeleteItem, ConditionCheck ->
  ConditionCheckItem (no operation of its own). A `once` guard is a conditional Put.
- An `idempotent_put` without `payload_hash` is written with BatchWriteItem (`_idempotent._write_chunk`),
  one PutItem at a time when DynamoDB refuses a call as invalid (`_write_one_by_one`); with
  `payload_hash`, as conditional Puts in TransactWriteItems of their own (`_write_conditional`), one
  PutItem at a time when refused as invalid. Either way: BatchWriteItem and PutItem.
- Every sink table: DescribeTable, once, for its key schema (`_sink_keys`: which entries name one item).

This table lives beside the code that makes the calls, so a change to a call changes it here, and
both drivers' constructs (`shardline.cdk`: Lambda and worker groups) grant from it alone: the same
writes get the same actions whichever driver runs them. tests/infra/test_sink_writes.py records the
calls the example handlers make against a DynamoDB server and checks them against these grants.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Literal, get_args

__all__ = [
    "ALL_SINK_WRITES",
    "SINK_TABLE_ACTIONS",
    "SINK_WRITE_ACTIONS",
    "SinkWrite",
    "sink_actions",
    "sink_writes_problem",
]

#: A kind of sink write, named as the handler returns it (the TransactWriteItems entry's key, or the
#: `shardline.consumer` function that builds it).
SinkWrite = Literal["Put", "Update", "Delete", "ConditionCheck", "once", "idempotent_put"]
ALL_SINK_WRITES: tuple[SinkWrite, ...] = get_args(SinkWrite)

#: Sink write kind -> the DynamoDB actions its calls need on the sink table.
SINK_WRITE_ACTIONS: Mapping[SinkWrite, tuple[str, ...]] = {
    "Put": ("dynamodb:PutItem",),
    "Update": ("dynamodb:UpdateItem",),
    "Delete": ("dynamodb:DeleteItem",),
    "ConditionCheck": ("dynamodb:ConditionCheckItem",),
    "once": ("dynamodb:PutItem",),
    "idempotent_put": ("dynamodb:BatchWriteItem", "dynamodb:PutItem"),
}
#: What the consumer calls on every sink table, whatever is written to it.
SINK_TABLE_ACTIONS: tuple[str, ...] = ("dynamodb:DescribeTable",)


def sink_writes_problem(writes: object) -> str | None:
    """Why `writes` is no declaration of sink writes (a non-empty sequence of `SinkWrite`), or None."""
    if isinstance(writes, str) or not isinstance(writes, Iterable):
        return f"writes must be a sequence of {', '.join(ALL_SINK_WRITES)}, got {writes!r}"
    listed = list(writes)
    if not listed:
        return "writes must name at least one kind of write"
    unknown = [kind for kind in listed if kind not in ALL_SINK_WRITES]
    if unknown:
        return f"writes: unknown kind {unknown[0]!r} (one of {', '.join(ALL_SINK_WRITES)})"
    return None


def sink_actions(writes: Iterable[SinkWrite]) -> tuple[str, ...]:
    """The DynamoDB actions a sink table written with `writes` needs, sorted: the union of the
    kinds' actions and `SINK_TABLE_ACTIONS`."""
    actions = set(SINK_TABLE_ACTIONS)
    for kind in writes:
        actions.update(SINK_WRITE_ACTIONS[kind])
    return tuple(sorted(actions))
