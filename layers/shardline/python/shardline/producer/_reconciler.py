"""Reconciler: settles a PutRecords call that got no reply, by reading the shards back.

A call that got no reply (connection closed or reset, read timeout) or a 5xx may have written
every record of it. Retrying it blindly would put a copy of each into the stream, and consumers
would apply both. So before anything is retried, `read_back` looks for each Kinesis record of
the batch where it could have landed and says, per record:

| found                                   | entry                                          |
|-----------------------------------------|------------------------------------------------|
| in a shard, with its data and key       | a success: that shard and sequence number       |
| nowhere, and every shard read past the call's end | the call's error: retried as before   |
| cannot tell (reads failing until the budget ends) | `OutcomeUnknown`: failed, never retried |

Where it looks: the shard each record was predicted for (every open shard for a record without a
prediction), from `AT_TIMESTAMP` the call's start less `CLOCK_SKEW_S`, until a record that arrived
after the call's end plus `CLOCK_SKEW_S`, or the shard's tip; a closed shard read to its end is
followed into its children (the write may have come after the reshard). A record matches on its
partition key and data bytes (an aggregate's bytes, for an aggregated record), the earliest match
first; identical bytes written by someone else within those seconds could be taken for it.

The reads cost only on an unanswered call, and are bounded: `budget_s` seconds of the caller's
clock, `MAX_CALLS` calls in all.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from botocore.exceptions import ClientError

from shardline.errors import OUTCOME_UNKNOWN
from shardline.producer._buffered import KinesisRecord

#: How far the service's clock may be from ours, either way.
CLOCK_SKEW_S = 2.0
#: GetShardIterator and GetRecords calls one reconciliation may make, at most.
MAX_CALLS = 200
_RETRY_PAUSE_S = 0.1


def read_back(
    client: Any,
    stream_name: str,
    records: Sequence[KinesisRecord],
    *,
    wall_started: float,
    wall_ended: float,
    budget_s: float,
    clock: Callable[[], float],
    error_code: str,
    error_message: str,
    sleep: Callable[[float], None] = time.sleep,
) -> list[Mapping[str, Any]]:
    """One PutRecords response entry per record of `records` (see the module's table)."""
    reader = _Reader(client, stream_name, clock() + budget_s, clock, sleep)
    wanted: dict[tuple[str, bytes], list[int]] = {}
    for index, record in enumerate(records):
        entry = record.entry()
        wanted.setdefault((str(entry["PartitionKey"]), bytes(entry["Data"])), []).append(index)  # type: ignore[call-overload]
    found: dict[int, Mapping[str, Any]] = {}
    predicted = sorted({r.predicted_shard for r in records if r.predicted_shard is not None})
    unpredicted = any(r.predicted_shard is None for r in records) or not predicted
    shards = reader.open_shards() if unpredicted else predicted
    complete = shards is not None
    to_read = list(shards or [])
    seen: set[str] = set()
    while to_read and wanted:
        shard_id = to_read.pop(0)
        if shard_id in seen:
            continue
        seen.add(shard_id)
        children = reader.scan(
            shard_id, wall_started - CLOCK_SKEW_S, wall_ended + CLOCK_SKEW_S, wanted, found
        )
        if children is None:
            complete = False  # this shard could not be read through: its records stay unknown
        else:
            to_read += children
    entries: list[Mapping[str, Any]] = []
    for index in range(len(records)):
        if index in found:
            entries.append(found[index])
        elif complete:
            entries.append(
                {"ErrorCode": error_code, "ErrorMessage": f"{error_message} (read back: not written)"}
            )
        else:
            entries.append(
                {"ErrorCode": OUTCOME_UNKNOWN, "ErrorMessage": f"{error_message}; {reader.problem}"}
            )
    return entries


class _Reader:
    """GetShardIterator/GetRecords within a time and call budget, retrying what fails."""

    def __init__(
        self,
        client: Any,
        stream_name: str,
        until: float,
        clock: Callable[[], float],
        sleep: Callable[[float], None],
    ) -> None:
        self.client, self.stream_name, self.until, self.clock, self.sleep = (
            client,
            stream_name,
            until,
            clock,
            sleep,
        )
        self.calls = 0
        self.problem = "the shards could not be read back in time: the records may be in the stream"

    def call(self, method: str, **kwargs: Any) -> Mapping[str, Any] | None:
        """The answer, or None once the budget is spent (errors are retried until then)."""
        while self.calls < MAX_CALLS and self.clock() < self.until:
            self.calls += 1
            try:
                return getattr(self.client, method)(**kwargs)  # type: ignore[no-any-return]
            except ClientError as error:
                code = error.response.get("Error", {}).get("Code", "")
                self.problem = f"reading back: {code}"
            except Exception as error:  # a dropped connection, a timeout: try again
                self.problem = f"reading back: {type(error).__name__}"
            self.sleep(_RETRY_PAUSE_S)
        return None

    def open_shards(self) -> list[str] | None:
        answer = self.call("list_shards", StreamName=self.stream_name, ShardFilter={"Type": "AT_LATEST"})
        return None if answer is None else [shard["ShardId"] for shard in answer.get("Shards", [])]

    def scan(
        self,
        shard_id: str,
        since: float,
        until: float,
        wanted: dict[tuple[str, bytes], list[int]],
        found: dict[int, Mapping[str, Any]],
    ) -> list[str] | None:
        """Match the shard's records arrived in [since, until]; the children to follow, or None if
        the shard could not be read through."""
        answer = self.call(
            "get_shard_iterator",
            StreamName=self.stream_name,
            ShardId=shard_id,
            ShardIteratorType="AT_TIMESTAMP",
            Timestamp=datetime.fromtimestamp(since, UTC),
        )
        iterator = None if answer is None else answer.get("ShardIterator")
        while iterator is not None and wanted:
            page = self.call("get_records", ShardIterator=iterator, Limit=10_000)
            if page is None:
                return None
            for record in page.get("Records", []):
                if _arrival(record) > until:
                    return []  # past the call's end: it is not in this shard
                indexes = wanted.get((record["PartitionKey"], bytes(record["Data"])))
                if indexes:
                    found[indexes.pop(0)] = {"ShardId": shard_id, "SequenceNumber": record["SequenceNumber"]}
                    if not indexes:
                        del wanted[(record["PartitionKey"], bytes(record["Data"]))]
            iterator = page.get("NextShardIterator")
            if iterator is None:  # a closed shard, read to its end: the write may be in a child
                return [child["ShardId"] for child in page.get("ChildShards", [])]
            if not page.get("Records") and page.get("MillisBehindLatest", 0) == 0:
                return []  # the tip: nothing more has arrived
        return [] if answer is not None else None


def _arrival(record: Mapping[str, Any]) -> float:
    stamp = record.get("ApproximateArrivalTimestamp")
    if isinstance(stamp, datetime):
        return stamp.timestamp()
    return float(stamp) if stamp is not None else 0.0
