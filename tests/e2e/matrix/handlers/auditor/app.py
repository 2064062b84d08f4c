"""A team's handler with no sink: it only reads (a group checked by its lag and its errors)."""

from __future__ import annotations

from typing import Any

from shardline.aws_lambda import ConsumerFunction
from shardline.consumer import ConsumedRecord


def audit(record: ConsumedRecord) -> list[dict[str, Any]]:
    if not record.data:
        raise ValueError(f"record {record.sequence_number}: empty")
    return []


function = ConsumerFunction(handler=audit)
handler = function.handler
