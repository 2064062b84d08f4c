"""Producer settings, with the KPL's defaults where the KPL has one."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from shardline.errors import PERMANENT_ERROR_CODES, ConfigurationError
from shardline.kinesis._limits import DEFAULT_LIMITS, PUT_PAYLOAD_UNIT, Limits


@dataclass(frozen=True)  # no slots: a few instances, and slots=True builds the class twice (cold starts)
class ProducerConfig:
    """How the producer aggregates, collects, paces and retries.

    - `aggregation_max_size`: cap of one Kinesis record built by aggregation, counted as Kinesis
      meters it (data plus partition key). The default, two 25 KiB PUT payload units, is the KPL's.
    - `collection_max_count` / `collection_max_size`: one PutRecords request.
    - `rate_limit`: percent of a shard's write limits the per-shard token buckets allow (KPL: 150).
    - `record_ttl`: seconds a record may wait, retries included, before it fails as `Expired`.
    - `fail_if_throttled`: fail throttled records at once instead of retrying them.
    - `retry_base_delay` / `retry_max_delay`: exponential backoff with full jitter between attempts.
    - `max_concurrency`: PutRecords requests in flight at once (to different shards); records
      of unknown shard are spread over as many lanes by hash key.
    - `permanent_error_codes`: request-level errors failed at once rather than retried.
    - `retry_wrong_shard`: resend the members of an aggregate that landed in a shard whose hash
      range does not hold them (a stale map across a reshard), as the KPL does for the KCL, which
      drops such records — the first copy stays in the stream. False: they are done where they
      landed, for consumers that deliver them (shardline's), so none is written twice.
    - `reconcile_timeout`: seconds a PutRecords that got no reply (or a 5xx) may spend reading the
      shards back to learn which records landed, before any is retried (records it cannot settle
      fail as `OutcomeUnknown`); 0 retries them blindly, as the KPL does (copies possible).
    - `max_buffered_records` / `max_buffered_bytes`: the bound on unresolved records (data plus
      partition key). Past it `put()` waits for room (sending meanwhile, as a flush would) or,
      with `when_buffer_full="raise"`, raises `BufferFull`.
    """

    aggregation_enabled: bool = True
    aggregation_max_size: int = 2 * PUT_PAYLOAD_UNIT
    aggregation_max_count: int = 4_294_967_295
    collection_max_count: int = DEFAULT_LIMITS.max_records_per_request
    collection_max_size: int = DEFAULT_LIMITS.max_request_size
    rate_limit: float = 150.0
    record_ttl: float = 30.0
    fail_if_throttled: bool = False
    retry_base_delay: float = 0.05
    retry_max_delay: float = 2.0
    max_concurrency: int = 8
    limits: Limits = DEFAULT_LIMITS
    permanent_error_codes: frozenset[str] = field(default=PERMANENT_ERROR_CODES)
    reconcile_timeout: float = 5.0
    retry_wrong_shard: bool = True
    max_buffered_records: int = 100_000
    max_buffered_bytes: int = 128 * 1024 * 1024
    when_buffer_full: Literal["wait", "raise"] = "wait"

    def __post_init__(self) -> None:
        limits = self.limits
        if not 1 <= self.aggregation_max_size <= limits.max_record_size:
            raise ConfigurationError(f"aggregation_max_size must be within 1..{limits.max_record_size}")
        if not 1 <= self.collection_max_count <= limits.max_records_per_request:
            raise ConfigurationError(
                f"collection_max_count must be within 1..{limits.max_records_per_request}"
            )
        if not limits.max_record_size <= self.collection_max_size <= limits.max_request_size:
            raise ConfigurationError(
                f"collection_max_size must be within {limits.max_record_size}..{limits.max_request_size}"
            )
        if self.aggregation_max_count < 1 or self.max_concurrency < 1:
            raise ConfigurationError("aggregation_max_count and max_concurrency must be at least 1")
        if self.rate_limit <= 0 or self.record_ttl <= 0:
            raise ConfigurationError("rate_limit and record_ttl must be positive")
        if self.reconcile_timeout < 0:
            raise ConfigurationError("reconcile_timeout must be >= 0")
        if self.max_buffered_records < 1 or self.max_buffered_bytes < limits.max_record_size:
            raise ConfigurationError(
                "max_buffered_records must be at least 1 and max_buffered_bytes at least one record "
                f"({limits.max_record_size} bytes)"
            )
        if self.when_buffer_full not in ("wait", "raise"):
            raise ConfigurationError(
                f"when_buffer_full must be 'wait' or 'raise', got {self.when_buffer_full!r}"
            )
        if not 0 < self.retry_base_delay <= self.retry_max_delay:
            raise ConfigurationError("retry delays must satisfy 0 < retry_base_delay <= retry_max_delay")
