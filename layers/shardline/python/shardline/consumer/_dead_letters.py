"""The dead-letter queue of a consumer group: poison records, whole, in SQS (or S3 when too large).

Unlike the event-source mapping's on-failure destination (metadata only), each message carries
the user record itself — base64 payload, keys, sequence numbers, and its ids when it has them
(`aggregateId`; `recordId` with its `scopedId` and `idDerived`; `caller`) — and the last error,
so it can be inspected and replayed. A client id re-used with another payload (`ClientIdConflict`)
says both payload hashes in `details.clientIdConflict`. The error
is the bounded account of `_failure_text` (`error`, and `errorType`, `errorFingerprint`, and
`errorMessage` only when the group opted in): the handler's exception text is not copied. A
message that would exceed SQS's 1 MiB goes to the group's S3 bucket, and SQS carries a pointer
to it (the SQS extended-client pattern).

Every dead letter has an `id` derived from the group and the record's position (stream, shard,
sequence and sub-sequence number): sending one twice — a crash between SendMessage and the
checkpoint — sends the same id, which a FIFO queue deduplicates and a reader of a standard
queue can. The message format is versioned (`version`, now 1) and documented in the README.
"""

from __future__ import annotations

import base64
import hashlib
import json
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from shardline.consumer._deaggregation import ConsumedRecord
from shardline.consumer._failure_text import FailureText

if TYPE_CHECKING:  # annotations only: the Protocols cost nothing at import
    from shardline.protocols import S3Client, SQSClient

#: The version of the dead-letter message format.
DEAD_LETTER_VERSION = 1
#: SQS's limit on a message (body and attributes).
MAX_SQS_MESSAGE_BYTES = 1_048_576
_ATTRIBUTES_ROOM = 1024  # the id attribute, with room to spare
#: The SQS message attribute that carries a dead letter's id.
ID_ATTRIBUTE = "DeadLetterId"


class DeadLetterQueue:
    """Sends poison records to the SQS queue at `queue_url`; with `s3` and `bucket`, a dead letter
    too large for SQS is stored in the bucket and the queue gets a pointer to it."""

    def __init__(
        self,
        sqs_client: SQSClient,
        queue_url: str,
        *,
        s3: S3Client | None = None,
        bucket: str | None = None,
        clock: Callable[[], float] = time.time,
        max_message_bytes: int = MAX_SQS_MESSAGE_BYTES,
    ) -> None:
        if (s3 is None) != (bucket is None):
            raise ValueError("give both s3 and bucket, or neither")
        self._sqs = sqs_client
        self.queue_url = queue_url
        self._s3 = s3
        self.bucket = bucket
        self._clock = clock
        self.max_message_bytes = max_message_bytes

    def send(
        self,
        record: ConsumedRecord,
        *,
        group: str,
        error: str,
        attempts: int,
        details: Mapping[str, Any] | None = None,
    ) -> str:
        """Send `record` with why it failed; returns the dead letter's id. `details` (JSON
        values) say more about the failure, e.g. the sink write DynamoDB refused."""
        message = dead_letter_message(record, group, error, attempts, self._clock(), details)
        body = json.dumps(message, default=_jsonable)
        if len(body.encode()) > self.max_message_bytes - _ATTRIBUTES_ROOM:
            body = json.dumps(self._pointer(message, body))
        request: dict[str, Any] = {
            "QueueUrl": self.queue_url,
            "MessageBody": body,
            "MessageAttributes": {ID_ATTRIBUTE: {"DataType": "String", "StringValue": message["id"]}},
        }
        if self.queue_url.endswith(".fifo"):  # in shard order, sent once however often retried
            request["MessageGroupId"] = f"{group}/{record.stream}/{record.shard_id}"[-128:]
            request["MessageDeduplicationId"] = message["id"]
        self._sqs.send_message(**request)
        return str(message["id"])

    def _pointer(self, message: dict[str, Any], body: str) -> dict[str, Any]:
        """The SQS message for a dead letter too large for SQS: the record's fields without its
        data and details, and where the whole message is (or why it is nowhere)."""
        pointer = {name: value for name, value in message.items() if name != "details"}
        pointer["data"] = None
        if self._s3 is None or self.bucket is None:
            pointer["dataOmitted"] = (
                f"the dead letter is {len(body.encode())} bytes, over SQS's limit, and the queue has no "
                "bucket: read the record from the stream by its sequence number while it is retained"
            )
            return pointer
        key = f"{message['group']}/{message['stream']}/{message['shardId']}/{message['id']}.json"
        self._s3.put_object(Bucket=self.bucket, Key=key, Body=body.encode(), ContentType="application/json")
        pointer["payloadLocation"] = {"bucket": self.bucket, "key": key}
        return pointer


def _jsonable(value: object) -> str:
    """JSON for what `details` may hold besides JSON values: binary (base64), anything else (str)."""
    if isinstance(value, bytes | bytearray | memoryview):
        return base64.b64encode(value).decode("ascii")
    return str(value)


def dead_letter_id(group: str, record: ConsumedRecord) -> str:
    """The id of `record`'s dead letter in `group`: the same for every send of that record."""
    position = [group, record.stream, record.shard_id, record.sequence_number, record.sub_sequence_number]
    return hashlib.sha256(json.dumps(position).encode()).hexdigest()


def dead_letter_message(
    record: ConsumedRecord,
    group: str,
    error: str,
    attempts: int,
    now: float,
    details: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The JSON body of a dead letter (format `DEAD_LETTER_VERSION`)."""
    message = {
        "version": DEAD_LETTER_VERSION,
        "id": dead_letter_id(group, record),
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
    parsed = FailureText.parse(error)  # an exception's bounded account (`_failure_text`); not a crash's note
    if parsed is not None:
        message |= parsed.fields()
    if record.aggregate_id is not None:  # the ids it arrived with, when it has them
        message["aggregateId"] = record.aggregate_id
    if record.id is not None:
        message["recordId"] = record.id
        message["scopedId"] = record.scoped_id  # the id as its caller's: what the sinks key by
        if record.id_derived:
            message["idDerived"] = True
    if record.caller is not None:
        message["caller"] = record.caller
    if details:
        message["details"] = dict(details)
    return message
