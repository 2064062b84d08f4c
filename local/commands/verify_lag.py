"""The readers of `verify` for a group checked by lag and errors (`verify_groups`: no sink declared):
how far its checkpoints got, and what its mapping sent to its on-failure queue during the run.

A group has caught up with a shard when its lease row (`leaseKey` the shard id, or `<stream>:<shard
id>`) holds a checkpoint at or past the last record the run wrote there — the highest (sequence
number, sub-sequence number) the API answered on that shard — or `SHARD_END`. The consumer moves a
checkpoint only past records whose processing returned, so a record that failed or is still in
flight holds it back.
"""

from __future__ import annotations

import datetime
import json
from typing import Any

from .send import SendReport
from .verify_readers import DeadLetterReader

SHARD_END = "SHARD_END"


def last_positions(report: SendReport) -> dict[str, tuple[int, int]]:
    """Per shard, the last position the API answered for an accepted record of the run."""
    last: dict[str, tuple[int, int]] = {}
    for record in report.accepted.values():
        if record.shard_id and record.sequence_number:
            position = (int(record.sequence_number), record.sub_sequence_number or 0)
            last[record.shard_id] = max(last.get(record.shard_id, position), position)
    return last


class LagReader:
    """A group's lease rows against the run's last positions: `behind` (shard -> where it is) and
    `processed` (accepted records at or before their shard's checkpoint)."""

    def __init__(self, dynamodb: Any, lease_table: str, stream_name: str, report: SendReport) -> None:
        self._dynamodb, self._table, self._stream = dynamodb, lease_table, stream_name
        self._report = report
        self.last = last_positions(report)
        self.behind: dict[str, str] = {}
        self.processed = 0
        self.queries = 0

    def poll(self) -> None:
        checkpoints: dict[str, tuple[int, int] | str] = {}
        request: dict[str, Any] = {"TableName": self._table, "ConsistentRead": True}
        while True:
            page = self._dynamodb.scan(**request)
            self.queries += 1
            for item in page["Items"]:
                key = item.get("leaseKey", {}).get("S", "")
                stream, _, shard = key.rpartition(":")
                if stream and stream != self._stream:
                    continue
                checkpoint = item.get("checkpoint", {}).get("S", "")
                sub = int(item.get("checkpointSubSequenceNumber", {}).get("N", "0"))
                checkpoints[shard] = checkpoint if not checkpoint.isdigit() else (int(checkpoint), sub)
            if "LastEvaluatedKey" not in page:
                break
            request["ExclusiveStartKey"] = page["LastEvaluatedKey"]
        self.behind = {}
        for shard, last in sorted(self.last.items()):
            at = checkpoints.get(shard)
            if at != SHARD_END and not (isinstance(at, tuple) and at >= last):
                self.behind[shard] = f"checkpoint {_text(at)}, the run's last record {last[0]}/{last[1]}"
        self.processed = sum(
            1
            for record in self._report.accepted.values()
            if record.shard_id
            and record.sequence_number
            and _passed(
                checkpoints.get(record.shard_id),
                (int(record.sequence_number), record.sub_sequence_number or 0),
            )
        )


def _passed(at: tuple[int, int] | str | None, position: tuple[int, int]) -> bool:
    return at == SHARD_END or (isinstance(at, tuple) and at >= position)


def _text(at: tuple[int, int] | str | None) -> str:
    if at is None:
        return "none (no lease row)"
    return at if isinstance(at, str) else f"{at[0]}/{at[1]}"


class OnFailureReader(DeadLetterReader):
    """Lambda's on-failure messages (invocation records) for `stream_arn` sent since `since` (epoch s),
    read without consuming them; `messages` by request id."""

    def __init__(self, sqs: Any, url: str, stream_arn: str, since: float) -> None:
        super().__init__(sqs, url, run_id="")
        self._stream_arn, self._since = stream_arn, since
        self.messages: dict[str, dict[str, Any]] = {}

    def _keep(self, body: str) -> None:
        try:
            message = json.loads(body)
            info = message["KinesisBatchInfo"]
            at = datetime.datetime.fromisoformat(message["timestamp"].replace("Z", "+00:00")).timestamp()
        except (ValueError, TypeError, KeyError):
            return
        if info.get("streamArn") == self._stream_arn and at >= self._since:
            self.messages.setdefault(message.get("requestContext", {}).get("requestId", body), message)
