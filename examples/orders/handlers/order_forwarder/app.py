"""Consumer group `order-forwarder`: each order event forwarded to a FIFO queue, in order per tenant.

The group has no sink table: its effect is a message. SQS and the checkpoint share no transaction,
so an event whose checkpoint did not land is sent again; the FIFO queue drops the copy by its
deduplication id (the order id, or the record's position), within its 5-minute window. The group
declares no sink, so `shardline local send` checks it by its lag and its errors.

Environment: ORDERS_QUEUE_URL, besides shardline's own.
"""

from __future__ import annotations

import os
from typing import Any

from shardline.aws_lambda import ConsumerEnvironment, ConsumerFunction
from shardline.consumer import ConsumedRecord, client_config

MAX_MESSAGE_BYTES = 256 * 1024  # SQS's limit for one message
_sqs: list[Any] = []  # made at the first record, reused while the function is warm


def queue() -> Any:
    if not _sqs:
        import boto3  # in the Lambda runtime

        margin = ConsumerEnvironment.from_environ().time_margin
        _sqs.append(boto3.client("sqs", config=client_config(margin)))
    return _sqs[0]


def forward(record: ConsumedRecord) -> list[dict[str, Any]]:
    """Send the event on; no sink writes."""
    if len(record.data) > MAX_MESSAGE_BYTES:
        raise ValueError(f"record {record.sequence_number}: {len(record.data)} bytes do not fit in a message")
    position = f"{record.shard_id}-{record.sequence_number}-{record.sub_sequence_number or 0}"
    queue().send_message(
        QueueUrl=os.environ["ORDERS_QUEUE_URL"],
        MessageBody=record.data.decode(),
        MessageGroupId=record.partition_key,
        MessageDeduplicationId=(record.id or position)[:128],
    )
    return []


handler = ConsumerFunction(handler=forward).handler
