"""The key attributes of the sink tables a handler writes to, learned with DescribeTable.

A `Put` names its key inside its item, so telling two writes to one item apart (DynamoDB
refuses a transaction that touches an item twice: `_transaction`) needs the table's key schema.
This is no part of the lease semantics: `LeaseTable.sink_key` answers from here because the
lease table's DynamoDB client is the one that reaches the sink tables too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from botocore.exceptions import ClientError

from shardline.consumer._lease_codec import error_code

if TYPE_CHECKING:  # annotations only: the Protocols cost nothing at import
    from shardline.protocols import DynamoDBClient


class SinkKeySchemas:
    """Sink tables' key attribute names, each table described once and remembered."""

    def __init__(self, dynamodb_client: DynamoDBClient) -> None:
        self._client = dynamodb_client
        self._keys: dict[str, tuple[str, ...] | None] = {}

    def __call__(self, table_name: str) -> tuple[str, ...] | None:
        """The key attributes of a sink table (DescribeTable, once per table), or None when the
        role may not describe it (then a `Put` is told apart from others by its whole item).
        A table that does not exist raises: the shard stalls on it (`_stalls`)."""
        if table_name not in self._keys:
            try:
                schema = self._client.describe_table(TableName=table_name)["Table"]["KeySchema"]
            except ClientError as exc:
                if error_code(exc) == "ResourceNotFoundException":
                    raise
                if error_code(exc) in ("AccessDeniedException", "AccessDenied"):
                    self._keys[table_name] = None
                return None  # throttled or unavailable: asked again next time
            self._keys[table_name] = tuple(str(key["AttributeName"]) for key in schema)
        return self._keys[table_name]
