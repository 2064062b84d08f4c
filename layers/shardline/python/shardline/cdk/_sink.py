"""A table a consumer group writes (`Sink`): the team's own `dynamodb.ITable`, any key schema, or one
the group creates; and what it holds, declared for whoever checks the group (`SHARDLINE_SINKS`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_iam as iam

from shardline.aws_lambda import SinkDeclaration
from shardline.aws_lambda._environment import SinkHolds, sink_problem
from shardline.consumer._sink_writes import ALL_SINK_WRITES, SinkWrite, sink_actions, sink_writes_problem

__all__ = ["Sink", "SinkHolds", "SinkWrite"]


class Sink:
    """A consumer group's sink: `Sink(table, holds="records", id_attribute="orderEventId")`.

    `table` is the team's own table (any key schema; the group is granted the sink actions on it,
    and Decrypt on its KMS key through DynamoDB, nothing more), or None with `partition_key` (and
    `sort_key`, `table_props`): the group creates it, encrypted with the group's key, with point-in-time
    recovery and `time_to_live_attribute` (`Sink.create`).

    `holds` says what it holds, for whoever checks the group (the local runtime's `send` verdict):
    `"records"` (one item per user record, its id in `id_attribute`), `"counts"` (one item per
    partition key `key_attribute`, counted in `count_attribute`), or None (undeclared: the group is
    then checked by its lag and errors alone).

    `writes` says what the handler returns for this table (`SinkWrite`: "Put", "Update", "Delete",
    "ConditionCheck" entries, "once" guards, "idempotent_put" puts); the group's role is granted
    exactly the DynamoDB actions the consumer calls for those (`shardline.consumer._sink_writes`),
    plus DescribeTable, on this table. Default: every kind the consumer's API can produce."""

    def __init__(
        self,
        table: dynamodb.ITable | None = None,
        *,
        holds: SinkHolds | None = None,
        id_attribute: str = "recordId",
        key_attribute: str = "partitionKey",
        count_attribute: str = "count",
        partition_key: dynamodb.Attribute | None = None,
        sort_key: dynamodb.Attribute | None = None,
        time_to_live_attribute: str | None = None,
        table_props: Mapping[str, Any] | None = None,
        writes: Sequence[SinkWrite] = ALL_SINK_WRITES,
    ) -> None:
        if (table is None) == (partition_key is None):
            raise ValueError("Sink: give either a table or, for one the group creates, its partition_key")
        if table is not None and (sort_key or time_to_live_attribute or table_props):
            raise ValueError("Sink: sort_key, time_to_live_attribute and table_props are for a created table")
        # The declaration's own checks (None: undeclared, the attributes still checked).
        problem = sink_problem(holds or "records", id_attribute, key_attribute, count_attribute)
        if problem:
            raise ValueError(f"Sink: {problem}")
        problem = sink_writes_problem(writes)
        if problem:
            named = table.node.path if table is not None else f"created, partition key {partition_key.name}"  # type: ignore[union-attr]
            raise ValueError(f"Sink ({named}): {problem}")
        self.writes: tuple[SinkWrite, ...] = tuple(dict.fromkeys(writes))
        self.table = table
        self.holds = holds
        self.id_attribute = id_attribute
        self.key_attribute = key_attribute
        self.count_attribute = count_attribute
        self.partition_key = partition_key
        self.sort_key = sort_key
        self.time_to_live_attribute = time_to_live_attribute
        self.table_props = dict(table_props or {})

    @classmethod
    def create(
        cls,
        partition_key: dynamodb.Attribute,
        sort_key: dynamodb.Attribute | None = None,
        *,
        holds: SinkHolds | None = None,
        id_attribute: str = "recordId",
        key_attribute: str = "partitionKey",
        count_attribute: str = "count",
        time_to_live_attribute: str | None = None,
        table_props: Mapping[str, Any] | None = None,
        writes: Sequence[SinkWrite] = ALL_SINK_WRITES,
    ) -> Sink:
        """A sink table the group creates (encrypted with its key, point-in-time recovery, its
        removal policy; `table_props` merged over those)."""
        return cls(
            None,
            holds=holds,
            id_attribute=id_attribute,
            key_attribute=key_attribute,
            count_attribute=count_attribute,
            partition_key=partition_key,
            sort_key=sort_key,
            time_to_live_attribute=time_to_live_attribute,
            table_props=table_props,
            writes=writes,
        )

    @property
    def actions(self) -> tuple[str, ...]:
        """The DynamoDB actions the group's role gets on this sink's table: those of `writes`."""
        return sink_actions(self.writes)

    def grant(self, table: dynamodb.ITable, grantee: iam.IGrantable) -> None:
        """Grant `grantee` (the group's role) exactly this sink's actions on `table` (its table)."""
        table.grant(grantee, *self.actions)

    def declaration(self, table_name: str) -> SinkDeclaration | None:
        """What this sink holds, under `table_name`, for the function's `SHARDLINE_SINKS`."""
        if self.holds is None:
            return None
        return SinkDeclaration(
            table=table_name,
            holds=self.holds,
            id_attribute=self.id_attribute,
            key_attribute=self.key_attribute,
            count_attribute=self.count_attribute,
        )
