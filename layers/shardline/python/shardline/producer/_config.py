"""Producer settings, with the KPL's defaults where the KPL has one; and the resend horizon."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from shardline.errors import PERMANENT_ERROR_CODES, ConfigurationError
from shardline.kinesis._limits import DEFAULT_LIMITS, PUT_PAYLOAD_UNIT, Limits
from shardline.kinesis._records import caller_problem

#: Seconds after its first send within which a sealed aggregate (one whose outcome was once unknown)
#: may be sent again; and seconds after the last send of an aggregate given up unconfirmed before its
#: counter counts as settled (no copy of it can still land). Consumers keep applied ids longer
#: (`shardline.consumer._dedup.DEDUP_HORIZON_S`), so a late copy is still recognised.
RESEND_HORIZON_S = 120.0


@dataclass(frozen=True)  # no slots: a few instances, and slots=True builds the class twice (cold starts)
class ProducerConfig:
    """How the producer aggregates, collects, paces and retries.

    - `aggregation_enabled`: pack the records of one predicted shard into KPL aggregates. Off,
      each user record is still sent as a one-record aggregate (with its own keys), which carries
      the aggregate id consumers deduplicate copies by.
    - `aggregation_max_size`: cap of one Kinesis record built by aggregation, counted as Kinesis
      meters it (data plus partition key). The default, two 25 KiB PUT payload units, is the KPL's.
    - `collection_max_count` / `collection_max_size`: one PutRecords request.
    - `rate_limit`: percent of a shard's write limits the per-shard token buckets allow (KPL: 150).
    - `record_ttl`: seconds a record may wait, retries included, before it fails as `Expired`.
    - `fail_if_throttled`: fail throttled records at once instead of retrying them.
    - `throttled_give_up`: seconds a record may go on being refused for its shard's write limit,
      from the first refusal of an unbroken run of them, before it fails with that refusal's code
      (None: retried until `record_ttl` or the deadline). A service behind a synchronous caller
      sets it, so a shard that keeps throttling answers in seconds instead of holding the caller.
    - `retry_base_delay` / `retry_max_delay`: exponential backoff with full jitter between attempts.
    - `max_concurrency`: PutRecords requests in flight at once (to different shards); records
      of unknown shard are spread over as many lanes by hash key.
    - `permanent_error_codes`: request-level errors failed at once rather than retried.
    - `record_ttl` and the flush deadline also bound resends of a sealed aggregate: an aggregate
      whose outcome was unknown (no reply, a 5xx, a malformed or short response) is sent again
      identical — same id, same bytes — until Kinesis confirms it, while one of its records is
      still within its TTL and deadline, and never later than `RESEND_HORIZON_S` after its first
      send. A record given up that way fails with `unconfirmed=True`: a copy may be in the stream.
    - A record whose aggregate landed in a shard whose hash range does not hold it (a stale map
      across a reshard) is never reported a success there: the same aggregate is re-routed by its
      hash key, and each shardline consumer applies only its own shard's members. (There is no
      option to trust such a landing, nor to read the stream back: `retry_wrong_shard` and
      `reconcile_timeout` are gone.)
    - `caller`: who this producer writes for — the caller of every record whose
      `UserRecord.caller` is None (at most 512 visible ASCII characters). Consumers scope record
      ids by caller, so two callers' equal ids are two identities. The default "" is "this
      deployment's library producers": no `sl.c` tag is written, and every producer left at it
      shares one id space. Give each service or tenant its own when their ids may collide. The
      HTTP producer function stamps each request's authenticated principal on its records instead.
    - `max_buffered_records` / `max_buffered_bytes`: the bound on unresolved records (data plus
      partition key and id). Past it `put()` waits for room (sending meanwhile, as a flush would) or,
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
    throttled_give_up: float | None = None
    retry_base_delay: float = 0.05
    retry_max_delay: float = 2.0
    max_concurrency: int = 8
    limits: Limits = DEFAULT_LIMITS
    permanent_error_codes: frozenset[str] = field(default=PERMANENT_ERROR_CODES)
    max_buffered_records: int = 100_000
    max_buffered_bytes: int = 128 * 1024 * 1024
    when_buffer_full: Literal["wait", "raise"] = "wait"
    caller: str = ""

    def __post_init__(self) -> None:
        limits = self.limits
        wrong = caller_problem(self.caller)
        if wrong is not None:
            raise ConfigurationError(f"caller {wrong}")
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
        if self.throttled_give_up is not None and not self.throttled_give_up >= 0:
            raise ConfigurationError(f"throttled_give_up must be None or >= 0, got {self.throttled_give_up}")
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
