"""Consumer group `order-writer`: each order event, once, as an item of the orders table.

The orders table is keyed by tenant and order id (`tenantId` S, `orderId` S). A client posts an
order event with the tenant as its partition key and the order id as its record id (the HTTP
`id`), so replaying the event writes the very same item: the sink is idempotent, and shardline
commits it in the same transaction as the checkpoint. The group declares what the table holds
(`Sink(..., holds="records", id_attribute="orderId")`), so `shardline local send` checks every
accepted record is there once.

An event without an id, or too large for an item, fails; after MAX_ATTEMPTS it is in the
group's dead-letter queue, whole.
"""

from __future__ import annotations

import json
from functools import partial
from typing import Any

from shardline.aws_lambda import ConsumerFunction
from shardline.consumer import ConsumedRecord

MAX_BODY_BYTES = 350 * 1024  # under DynamoDB's 400 KB item, with room for the keys


def order_item(table: str, record: ConsumedRecord) -> list[dict[str, Any]]:
    """The order's item: one Put, committed with the checkpoint."""
    if record.id is None:
        raise ValueError(
            f"record {record.sequence_number}: an order event needs its order id as the record id"
        )
    if len(record.data) > MAX_BODY_BYTES:
        raise ValueError(f"order {record.id}: {len(record.data)} bytes do not fit in an item")
    event = json.loads(record.data)
    status = event.get("status", "received") if isinstance(event, dict) else "received"
    item = {
        "tenantId": {"S": record.partition_key},
        "orderId": {"S": record.id},
        "status": {"S": str(status)},
        "event": {"S": record.data.decode()},
        "receivedAt": {"N": f"{record.approximate_arrival:.3f}"},
    }
    return [{"Put": {"TableName": table, "Item": item}}]


handler = ConsumerFunction(lambda table: partial(order_item, table)).handler
