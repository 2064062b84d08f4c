"""The Kinesis actions answered here rather than by moto's responses (`install`, after `fixes.apply`).

PutRecords and GetRecords are answered as JSON directly: moto's model-driven serializer took two
thirds of a 500-entry request's time, and re-encoded every record's base64. GetRecords also
applies the read limits, ends a closed shard with `ChildShards`, and honours `Limit` and 10 MiB.
Every action runs under `STATE.lock`.

ListShards: moto 5.2.5 ignores `ShardFilter` and `ExclusiveStartShardId` and lists every shard. Here:
AT_LATEST lists the open shards; AT_TRIM_HORIZON and AT_TIMESTAMP the shards open at that time
(the stream's first shards when it predates the stream); FROM_TRIM_HORIZON and FROM_TIMESTAMP
those still open at that time and every one after; AFTER_SHARD_ID (like ExclusiveStartShardId)
those whose id sorts after the given one. Pages are `MaxResults` long; the NextToken carries the
stream and filter, and Kinesis refuses a StreamName (or filter) beside it.
"""

from __future__ import annotations

import base64
import datetime
import functools
import inspect
import json
import time
from typing import Any

from moto.core.exceptions import JsonRESTError
from moto.core.responses import ActionResult
from moto.kinesis import exceptions as kinesis_errors
from moto.kinesis import models, responses, utils

from ...limits import CONSUMER_HEADER, rate_exceeded_message
from ..metering import USAGE
from ..service_metrics import SERVICE_METRICS
from .fixes import (
    MAX_GET_RECORDS,
    NAMESPACE,
    STATE,
    ThroughputExceeded,
    fixed,
    read_after,
)

_FILTERS = (
    "AFTER_SHARD_ID",
    "AT_TRIM_HORIZON",
    "FROM_TRIM_HORIZON",
    "AT_LATEST",
    "AT_TIMESTAMP",
    "FROM_TIMESTAMP",
)


def install(response_class: type[responses.KinesisResponse]) -> None:
    """Replace moto's ListShards, PutRecords and GetRecords; lock every action (idempotent)."""
    if getattr(response_class, "_shardline_installed", False):
        return
    response_class._shardline_installed = True  # type: ignore[attr-defined]
    response_class.list_shards = list_shards  # type: ignore[method-assign]
    # answered as (body, headers), which moto's dispatch takes as it takes moto's own ActionResult
    response_class.put_records = _put_records  # type: ignore[method-assign, assignment]
    response_class.get_records = _get_records  # type: ignore[method-assign, assignment]
    _serialize_every_action(response_class)


def _put_records(self: responses.KinesisResponse) -> tuple[str, dict[str, Any]]:
    # Answered as JSON here: moto's model-driven serializer took most of a 500-entry request's time.
    answer = self.kinesis_backend.put_records(
        self._get_param("StreamARN"), self._get_param("StreamName"), self._get_param("Records")
    )
    return _json(answer)


def _json(answer: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    return json.dumps(answer), {"status": 200, "Content-Type": "application/x-amz-json-1.1"}


def _get_records(self: responses.KinesisResponse) -> tuple[str, dict[str, Any]]:
    limit = self._get_param("Limit")
    if limit is not None and not 1 <= int(limit) <= MAX_GET_RECORDS:
        raise kinesis_errors.InvalidArgumentError(f"Limit {limit} is not within 1..{MAX_GET_RECORDS}.")
    stream_name, shard_id, last, *issued = utils.decompose_shard_iterator(self._get_param("ShardIterator"))
    _check_age(int(issued[0]) if issued else None)
    backend = self.kinesis_backend
    account = backend.account_id
    with STATE.lock:
        stream = backend.describe_stream(stream_arn=self._get_param("StreamARN"), stream_name=stream_name)
        shard = stream.get_shard(shard_id)
        STATE.count(account, stream.stream_name, shard_id, 4)
        limits = STATE.limits if STATE.reads_limited else None
        consumer = self.headers.get(CONSUMER_HEADER)
        key: tuple[str, ...] = (stream.arn, shard_id)
        if consumer is not None:  # a registered consumer's read: its own budget (`CONSUMER_HEADER`)
            if not any(c.consumer_name == consumer for c in stream.consumers):
                raise kinesis_errors.ConsumerNotFound(consumer=consumer, account_id=account)
            key = (stream.arn, shard_id, "consumer", consumer)
        admitted = limits is None or (
            limits.admit_subscribed_read(key) if consumer is not None else limits.admit_read(key)
        )
        if not admitted:
            STATE.count(account, stream.stream_name, shard_id, 3)
            throttled = {"StreamName": stream.stream_name}
            SERVICE_METRICS.add(NAMESPACE, "ReadProvisionedThroughputExceeded", throttled, 1)
            raise ThroughputExceeded(rate_exceeded_message(shard_id, stream.stream_name, account))
        records, total, more = read_after(shard, int(last), int(limit or MAX_GET_RECORDS))
        if limits is not None and total:
            limits.charge_read(key, total)
        position = records[-1].sequence_number if records else int(last)
        behind = 0 if not more else int((time.time() - records[-1].created_at) * 1000)
        _get_metrics(stream.stream_name, records, total)
        # billed apart: a registered consumer's reads (enhanced fan-out, per GB), the shared reads
        service, reader = ("kinesis", stream.stream_name) if consumer is None else (
            "kinesis_consumers", f"{stream.stream_name}/{consumer}")  # fmt: skip
        USAGE.add(service, reader, get_records_calls=1, records_read=len(records), bytes_read=total)
        answer: dict[str, Any] = {
            "Records": [record_json(record) for record in records],
            "MillisBehindLatest": behind,
        }
        if not shard.is_open and not more:  # the end of a closed shard: no iterator, its children instead
            answer["ChildShards"] = [child_json(child) for child in stream.shards.values()
                                     if shard.shard_id in (child.parent, child.adjacent_parent)]  # fmt: skip
        else:
            answer["NextShardIterator"] = utils.compose_shard_iterator(stream.stream_name, shard, position)
    return _json(answer)


class ExpiredIterator(JsonRESTError):
    def __init__(self, message: str) -> None:
        super().__init__("ExpiredIteratorException", message)


def _check_age(issued_ms: int | None) -> None:
    """Kinesis refuses an iterator older than five minutes (`State.iterator_ttl_seconds`)."""
    now_ms = int(time.time() * 1000)
    tolerated_ms = int(STATE.iterator_ttl_seconds * 1000)
    if issued_ms is not None and now_ms - issued_ms > tolerated_ms:
        raise ExpiredIterator(
            f"Iterator expired. The iterator was created at time {_clock_text(issued_ms)} while right now "
            f"it is {_clock_text(now_ms)} which is further in the future than the tolerated delay of "
            f"{tolerated_ms} milliseconds."
        )


def _clock_text(epoch_ms: int) -> str:
    return time.strftime("%a %b %d %H:%M:%S UTC %Y", time.gmtime(epoch_ms / 1000))


def _get_metrics(stream: str, records: list[models.Record], total: int) -> None:
    """What Kinesis publishes for one GetRecords call: records, bytes, and the age of the last record."""
    add, dims = SERVICE_METRICS.add, {"StreamName": stream}
    age = (time.time() - records[-1].created_at) * 1000 if records else 0.0
    add(NAMESPACE, "GetRecords.IteratorAgeMilliseconds", dims, max(0.0, age))
    add(NAMESPACE, "GetRecords.Records", dims, len(records))
    add(NAMESPACE, "GetRecords.Bytes", dims, total)
    add(NAMESPACE, "GetRecords.Success", dims, 1)
    add(NAMESPACE, "OutgoingRecords", dims, len(records))
    add(NAMESPACE, "OutgoingBytes", dims, total)


def record_json(record: models.Record) -> dict[str, Any]:
    """A record as Kinesis's JSON carries it: the data stays the base64 it arrived as."""
    return {
        "SequenceNumber": str(record.sequence_number),
        "ApproximateArrivalTimestamp": record.created_at,
        "Data": record.data,
        "PartitionKey": record.partition_key,
    }


def child_json(shard: models.Shard) -> dict[str, Any]:
    """A child of a closed shard as GetRecords and SubscribeToShard name it at the shard's end."""
    return {
        "ShardId": shard.shard_id,
        "ParentShards": [parent for parent in (shard.parent, shard.adjacent_parent) if parent],
        "HashKeyRange": shard.to_json()["HashKeyRange"],
    }


def _serialize_every_action(response_class: type) -> None:
    """Run each Kinesis action under `STATE.lock`: a reshard mid-DescribeStream would break moto's loops.

    The request body is read before the action runs, so no client holds the lock while it sends.
    """
    for name, method in list(vars(response_class).items()):
        if name.startswith("_") or not inspect.isfunction(method):
            continue

        def locked(self: Any, *args: Any, __method: Any = method, **kwargs: Any) -> Any:
            with STATE.lock:
                return __method(self, *args, **kwargs)

        setattr(response_class, name, functools.wraps(method)(locked))


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
        moment = epoch_seconds(shard_filter["Timestamp"])
    closed_at = fixed(shard).closed_at
    still_open = closed_at is None or closed_at > moment
    if kind.startswith("FROM_"):
        return still_open
    first_shards = min(fixed(candidate).created_at for candidate in stream.shards.values())
    if moment < first_shards:  # before the stream: its first shards
        return shard.parent is None and shard.adjacent_parent is None
    return bool(fixed(shard).created_at <= moment and still_open)


def epoch_seconds(timestamp: Any) -> float:
    """A request's timestamp (epoch seconds, as botocore sends it, or ISO 8601) in epoch seconds."""
    if isinstance(timestamp, datetime.datetime):
        return timestamp.timestamp()
    if isinstance(timestamp, str):
        try:
            return float(timestamp)
        except ValueError:
            return datetime.datetime.fromisoformat(timestamp).timestamp()
    return float(timestamp)
