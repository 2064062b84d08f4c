"""A team's handler: each record, once, as an item keyed by its id (the caller's), with the key it
came under and the length of its data. The same module serves a Lambda group (`handler`) and a
worker group (`function`, `shardline worker --handler app:function`)."""

from __future__ import annotations

from functools import partial
from typing import Any

from shardline.aws_lambda import ConsumerFunction
from shardline.consumer import ConsumedRecord


def item(table: str, record: ConsumedRecord) -> list[dict[str, Any]]:
    if record.id is None:
        raise ValueError(f"record {record.sequence_number}: no id to key its item by")
    row = {
        "recordId": {"S": record.id},
        "partitionKey": {"S": record.partition_key},
        "bytes": {"N": str(len(record.data))},
    }
    return [{"Put": {"TableName": table, "Item": row}}]


function = ConsumerFunction(lambda table: partial(item, table))
handler = function.handler
