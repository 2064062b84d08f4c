"""Kinesis's write path on the endpoint: PutRecord and PutRecords under the stream's record size
and each shard's write budget, answered per record as Kinesis answers, with the metrics it publishes.

`install()` patches moto's backend in the endpoint's process, after `fixes.apply` (whose shard
models and state it writes through).
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any, NamedTuple

from moto.core.exceptions import JsonRESTError
from moto.kinesis import exceptions as kinesis_errors
from moto.kinesis import models

from ...cloudwatch.usage import payload_units
from ...limits import THROTTLED, KiB, MiB, rate_exceeded_message
from ..metering import USAGE
from ..service_metrics import SERVICE_METRICS
from .fixes import (
    NAMESPACE,
    STATE,
    InternalFailure,
    ThroughputExceeded,
    data_size,
    max_record_size,
    open_shard_for,
    record_hash_key,
)

__all__ = ["RecordTooLarge", "install"]


class RecordTooLarge(JsonRESTError):
    """Kinesis's refusal of a record over the stream's MaxRecordSizeInKiB (the request is refused)."""

    def __init__(self, where: str, limit: int) -> None:
        super().__init__(
            "ValidationException",
            f"1 validation error detected: Value at '{where}' failed to satisfy constraint: Member must "
            f"have length less than or equal to {limit}",
        )


def _entry_size(entry: dict[str, Any]) -> int:
    return data_size(entry.get("Data", "")) + len(str(entry.get("PartitionKey", "")).encode("utf-8"))


def _admit(stream: models.Stream, entries: list[dict[str, Any]]) -> list[tuple[models.Shard | None, bool]]:
    """Each entry's shard and whether the shard's write budget admits it (spending it)."""
    shards = [
        open_shard_for(stream, record_hash_key(entry.get("PartitionKey"), entry.get("ExplicitHashKey")))
        for entry in entries
    ]
    limits = STATE.limits
    if limits is None or not STATE.writes_limited:
        return [(shard, True) for shard in shards]
    charges: list[tuple[Hashable | None, int]] = [
        ((stream.arn, shard.shard_id) if shard is not None else None, _entry_size(entry))
        for shard, entry in zip(shards, entries, strict=True)
    ]
    return list(zip(shards, limits.admit_writes(charges), strict=True))


def _write(
    backend: models.KinesisBackend, stream: models.Stream, entries: list[dict[str, Any]]
) -> list[tuple[str, str] | Refused]:
    """Write the admitted entries; each answer is (shard id, sequence number) or a `Refused`.

    A chaos profile's refusals come first and are not charged to the shard's budget."""
    answers: list[tuple[str, str] | Refused] = []
    account = backend.account_id
    faults = [STATE.entry_fault() if STATE.entry_fault else None for _ in entries]
    candidates = [entry for entry, fault in zip(entries, faults, strict=True) if fault is None]
    admissions = iter(_admit(stream, candidates))
    for entry, fault in zip(entries, faults, strict=True):
        if fault is None:
            shard, admitted = next(admissions)
            fault = None if shard is None or admitted else THROTTLED
        else:
            shard = open_shard_for(
                stream, record_hash_key(entry.get("PartitionKey"), entry.get("ExplicitHashKey"))
            )
        if fault is not None:
            answers.append(_refusal(account, stream, shard, fault))
            continue
        # None when the entry has none: moto declares a str, and its own put_records passes None so too
        explicit_hash_key: str = entry.get("ExplicitHashKey")  # type: ignore[assignment]
        sequence, shard_id = stream.put_record(entry["PartitionKey"], explicit_hash_key, entry["Data"])
        STATE.count(account, stream.stream_name, shard_id, 0)
        STATE.count(account, stream.stream_name, shard_id, 1, _entry_size(entry))
        answers.append((shard_id, sequence))
    if any(not isinstance(answer, Refused) for answer in answers):
        STATE.changed()  # the subscriptions to these shards push them now
    return answers


def _refusal(account: str, stream: models.Stream, shard: models.Shard | None, code: str) -> Refused:
    if code != THROTTLED:
        return Refused(code, "Internal service failure.")
    shard_id = shard.shard_id if shard is not None else None
    if shard_id is not None:
        STATE.count(account, stream.stream_name, shard_id, 2)
    return Refused(THROTTLED, rate_exceeded_message(shard_id, stream.stream_name, account))


class Refused(NamedTuple):
    """A PutRecords entry refused (nothing written), with Kinesis's code and message."""

    code: str
    message: str


def _backend_put_record(self: models.KinesisBackend, stream_arn: str, stream_name: str, partition_key: str,
                        explicit_hash_key: str, data: str) -> tuple[str, str]:  # fmt: skip
    with STATE.lock:
        stream = self.describe_stream(stream_arn=stream_arn, stream_name=stream_name)
        entry = {"PartitionKey": partition_key, "ExplicitHashKey": explicit_hash_key, "Data": data}
        if _entry_size(entry) > max_record_size(stream):
            # A validation error, never a throttle: a record over the stream's size can never fit.
            raise RecordTooLarge("data", max_record_size(stream))
        (answer,) = _write(self, stream, [entry])
    throttled = int(isinstance(answer, Refused) and answer.code == THROTTLED)
    _put_metrics(stream.stream_name, "PutRecord", [entry], [_entry_size(entry)], [answer], throttled)
    if isinstance(answer, Refused):
        if answer.code == THROTTLED:
            raise ThroughputExceeded(answer.message)
        raise InternalFailure(answer.message)
    return answer[1], answer[0]


def _backend_put_records(self: models.KinesisBackend, stream_arn: str, stream_name: str,
                         records: list[dict[str, Any]]) -> dict[str, Any]:  # fmt: skip
    if len(records) > 500:
        raise kinesis_errors.TooManyRecords
    sizes = [_entry_size(entry) for entry in records]
    with STATE.lock:
        stream = self.describe_stream(stream_arn=stream_arn, stream_name=stream_name)
        largest = max_record_size(stream)
        too_big = next((index for index, size in enumerate(sizes) if size > largest), None)
        if too_big is not None:
            raise RecordTooLarge(f"records.{too_big + 1}.member.data", largest)
        # 5 MiB a request, or one record of the stream's largest size when that is more.
        if sum(sizes) > max(5 * MiB, largest):
            raise kinesis_errors.TotalRecordsSizeExceedsLimit
        answers = _write(self, stream, records)
    results: list[dict[str, str]] = []
    for answer in answers:
        if isinstance(answer, Refused):
            results.append({"ErrorCode": answer.code, "ErrorMessage": answer.message})
        else:
            results.append({"SequenceNumber": answer[1], "ShardId": answer[0]})
    failed = sum(1 for result in results if "ErrorCode" in result)
    throttled = sum(1 for answer in answers if isinstance(answer, Refused) and answer.code == THROTTLED)
    _put_metrics(stream.stream_name, "PutRecords", records, sizes, answers, throttled)
    return {"FailedRecordCount": failed, "Records": results}


def _put_metrics(stream: str, action: str, entries: list[dict[str, Any]], sizes: list[int],
                 answers: list[tuple[str, str] | Refused], throttled: int) -> None:  # fmt: skip
    """What Kinesis publishes for one PutRecord(s) call (stream level; the per-entry sizes given),
    and what it bills: the call, and each record written in PUT payload units (`local.cloudwatch.usage`)."""
    add, dims = SERVICE_METRICS.add, {"StreamName": stream}
    written = [size for size, answer in zip(sizes, answers, strict=True) if not isinstance(answer, Refused)]
    calls = "put_records_calls" if action == "PutRecords" else "put_record_calls"
    units = sum(payload_units(size) for size in written)
    kib = sum(-(-size // KiB) for size in written)  # on-demand mode's data in: each record in whole KiB
    USAGE.add("kinesis", stream, **{calls: 1}, records_written=len(written), bytes_written=sum(written),
              put_payload_units=units, kib_written=kib)  # fmt: skip
    add(NAMESPACE, "IncomingRecords", dims, len(written))
    add(NAMESPACE, "IncomingBytes", dims, sum(written))
    add(NAMESPACE, "WriteProvisionedThroughputExceeded", dims, throttled)
    add(NAMESPACE, f"{action}.Bytes", dims, sum(written))
    add(NAMESPACE, f"{action}.Success", dims, 1)
    if action == "PutRecords":
        add(NAMESPACE, "PutRecords.TotalRecords", dims, len(entries))
        add(NAMESPACE, "PutRecords.SuccessfulRecords", dims, len(written))
        add(NAMESPACE, "PutRecords.ThrottledRecords", dims, throttled)
        add(NAMESPACE, "PutRecords.FailedRecords", dims, len(entries) - len(written) - throttled)


def install() -> None:
    """Answer PutRecord and PutRecords here (idempotent)."""
    models.KinesisBackend.put_record = _backend_put_record  # type: ignore[method-assign]
    models.KinesisBackend.put_records = _backend_put_records  # type: ignore[method-assign]
