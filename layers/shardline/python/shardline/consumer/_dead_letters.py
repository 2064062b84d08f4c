"""The dead-letter queue of a consumer group: poison records, whole, in SQS.

Unlike the event-source mapping's on-failure destination (metadata only), each message carries
the user record itself — base64 payload, keys, sequence numbers — and the last error, so it can
be inspected and replayed.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from shardline.consumer._deaggregation import ConsumedRecord

if TYPE_CHECKING:  # annotations only: the Protocols cost nothing at import
    from shardline.protocols import SQSClient


class DeadLetterQueue:
    """Sends poison records to the SQS queue at `queue_url`."""

    def __init__(
        self, sqs_client: SQSClient, queue_url: str, *, clock: Callable[[], float] = time.time
    ) -> None:
        self._sqs = sqs_client
        self.queue_url = queue_url
        self._clock = clock

    def send(self, record: ConsumedRecord, *, group: str, error: str, attempts: int) -> None:
        self._sqs.send_message(
            QueueUrl=self.queue_url,
            MessageBody=json.dumps(dead_letter_message(record, group, error, attempts, self._clock())),
        )


def dead_letter_message(
    record: ConsumedRecord, group: str, error: str, attempts: int, now: float
) -> dict[str, Any]:
    """The JSON body of a dead letter."""
    return {
        "group": group,
        "stream": record.stream,
        "shardId": record.shard_id,
        "sequenceNumber": record.sequence_number,
        "subSequenceNumber": record.sub_sequence_number,
        "partitionKey": record.partition_key,
        "explicitHashKey": record.explicit_hash_key,
        "data": base64.b64encode(record.data).decode("ascii"),
        "approximateArrivalTimestamp": record.approximate_arrival,
        "error": error,
        "attempts": attempts,
        "deadLetteredAt": now,
    }
