"""ListShards as Kinesis answers it, for moto's Kinesis (installed by `local.kinesis_fixes.apply`).

Moto 5.2.5 ignores `ShardFilter` and `ExclusiveStartShardId` and lists every shard. Here:
AT_LATEST lists the open shards; AT_TRIM_HORIZON and AT_TIMESTAMP the shards open at that time
(the stream's first shards when it predates the stream); FROM_TRIM_HORIZON and FROM_TIMESTAMP
those still open at that time and every one after; AFTER_SHARD_ID (like ExclusiveStartShardId)
those whose id sorts after the given one. Pages are `MaxResults` long; the NextToken carries the
stream and filter, and Kinesis refuses a StreamName (or filter) beside it.
"""

from __future__ import annotations

import base64
import datetime
import json
import time
from typing import Any

from moto.core.responses import ActionResult
from moto.kinesis import exceptions as kinesis_errors
from moto.kinesis import models, responses

from local.kinesis_fixes import STATE

_FILTERS = (
    "AFTER_SHARD_ID",
    "AT_TRIM_HORIZON",
    "FROM_TRIM_HORIZON",
    "AT_LATEST",
    "AT_TIMESTAMP",
    "FROM_TIMESTAMP",
)


def list_shards(self: responses.KinesisResponse) -> ActionResult:
    token = self._get_param("NextToken")
    max_results = int(self._get_param("MaxResults", 10000))
    if not 1 <= max_results <= 10000:
        raise kinesis_errors.InvalidArgumentError(f"MaxResults {max_results} is not within 1..10000.")
    if token:
        if self._get_param("StreamName") or self._get_param("ShardFilter"):
            raise kinesis_errors.InvalidArgumentError(
                "NextToken and StreamName (or ShardFilter) cannot be provided together."
            )
        request = json.loads(base64.urlsafe_b64decode(token.encode()))
    else:
        request = {
            "arn": self._get_param("StreamARN"),
            "name": self._get_param("StreamName"),
            "filter": self._get_param("ShardFilter") or {},
            "after": self._get_param("ExclusiveStartShardId"),
        }
    with STATE.lock:
        stream = self.kinesis_backend.describe_stream(stream_arn=request["arn"], stream_name=request["name"])
        shards = [
            shard
            for shard in sorted(stream.shards.values(), key=lambda shard: shard.shard_id)
            if (request["after"] is None or shard.shard_id > request["after"])
            and _selected(stream, shard, request["filter"])
        ]
        page = [shard.to_json() for shard in shards[:max_results]]
    answer: dict[str, Any] = {"Shards": page}
    if len(shards) > max_results:
        follow = {**request, "after": page[-1]["ShardId"]}
        answer["NextToken"] = base64.urlsafe_b64encode(json.dumps(follow).encode()).decode()
    return ActionResult(answer)


def _selected(stream: models.Stream, shard: models.Shard, shard_filter: dict[str, Any]) -> bool:
    kind = shard_filter.get("Type")
    if kind is None:
        return True
    if kind not in _FILTERS:
        raise kinesis_errors.InvalidArgumentError(
            f"ShardFilter Type {kind} is not one of {', '.join(_FILTERS)}."
        )
    if kind == "AT_LATEST":
        return bool(shard.is_open)
    if kind == "AFTER_SHARD_ID":
        if not shard_filter.get("ShardId"):
            raise kinesis_errors.InvalidArgumentError("ShardFilter AFTER_SHARD_ID needs a ShardId.")
        return bool(shard.shard_id > shard_filter["ShardId"])
    if kind in ("AT_TRIM_HORIZON", "FROM_TRIM_HORIZON"):
        moment = time.time() - stream.retention_period_hours * 3600
    else:
        if shard_filter.get("Timestamp") is None:
            raise kinesis_errors.InvalidArgumentError(f"ShardFilter {kind} needs a Timestamp.")
        moment = _seconds(shard_filter["Timestamp"])
    still_open = shard.closed_at is None or shard.closed_at > moment
    if kind.startswith("FROM_"):
        return still_open
    first_shards = min(candidate.created_at for candidate in stream.shards.values())
    if moment < first_shards:  # before the stream: its first shards
        return shard.parent is None and shard.adjacent_parent is None
    return bool(shard.created_at <= moment and still_open)


def _seconds(timestamp: Any) -> float:
    if isinstance(timestamp, datetime.datetime):
        return timestamp.timestamp()
    if isinstance(timestamp, str):
        try:
            return float(timestamp)
        except ValueError:
            return datetime.datetime.fromisoformat(timestamp).timestamp()
    return float(timestamp)
