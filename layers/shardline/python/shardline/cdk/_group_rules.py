"""A consumer group's mapping settings: shardline's defaults and the refusals that hold whether the
group comes from the configuration (`shardline.consumerGroups[i]`, camelCase keys) or is built as a
`ConsumerGroup` (snake_case props), each naming the setting at fault in its own spelling."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Literal

from shardline.cdk._config_reader import ConfigError
from shardline.consumer._failure_text import FAILURE_DETAIL_CHOICES

#: shardline's attempts per record: a record is dead-lettered only on evidence against it (its own
#: failure when it runs alone), which takes a second attempt after whatever failed first.
MIN_MAX_ATTEMPTS = 2
STARTING_POSITIONS = ("TRIM_HORIZON", "LATEST", "AT_TIMESTAMP")
#: A record age this far below the stream's retention: a batch given up at that age still points at
#: records the stream holds (the on-failure message is metadata only, redriven from the stream).
RECORD_AGE_MARGIN_S = 3600
MAX_RECORD_AGE_S = 604800
#: Kinesis registers at most 20 enhanced fan-out consumers per stream (On-demand Standard and
#: Provisioned; RegisterStreamConsumer), and creates at most 5 at a time.
MAX_STREAM_CONSUMERS = 20
CONSUMER_NAME = re.compile(r"^[a-zA-Z0-9_.-]{1,128}$")

#: Names a setting in an error: (configuration key, construct prop) -> the message's prefix.
Where = Callable[[str, str], str]


def config_key(path: str) -> Where:
    """Errors about `path`'s keys (`shardline.consumerGroups[0].retryAttempts: ...`)."""
    return lambda key, _prop: f"{path}.{key}"


def construct_prop(kind: str, name: str) -> Where:
    """Errors about a construct's props (`ConsumerGroup 'orders': retry_attempts: ...`)."""
    return lambda _key, prop: f"{kind} {name!r}: {prop}"


def within(where: Where, key: str, prop: str, value: float, low: float, high: float) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not low <= value <= high:
        raise ConfigError(f"{where(key, prop)}: must be within {low}..{high}, got {value!r}")


def check_failure_detail(where: Where, failure_detail: str) -> None:
    if failure_detail not in FAILURE_DETAIL_CHOICES:
        raise ConfigError(
            f"{where('failureDetail', 'failure_detail')}: must be one of {', '.join(FAILURE_DETAIL_CHOICES)} "
            f"(what the lease row, the dead letter and the log keep of a handler's exception), "
            f"got {failure_detail!r}"
        )


#: The prop that sets each variable of a group's environment contract; a variable not listed is set
#: from what the construct makes (its tables, queues, bucket) or derives.
VARIABLE_PROPS: dict[str, str] = {
    "SHARDLINE_GROUP": "name",
    "POWERTOOLS_SERVICE_NAME": "name",
    "SHARDLINE_STREAM": "stream",
    "SHARDLINE_HANDLER": "handler_object",
    "POWERTOOLS_METRICS_NAMESPACE": "metrics_namespace",
    "MAX_ATTEMPTS": "max_attempts",
    "CHECKPOINT_INTERVAL": "checkpoint_interval_seconds",
    "TIME_MARGIN": "time_margin_seconds",
    "FAILURE_DETAIL": "failure_detail",
    "SINK_TTL_DAYS": "sink_ttl_days",
    "SHARDLINE_SINKS": "sinks",
    "SHARDLINE_STARTING_POSITION": "starting_position",
    "INITIAL_POSITION": "starting_position",
    "SHARDLINE_STARTING_POSITION_TIMESTAMP": "starting_position_timestamp",
    "SHARDLINE_MAX_RECORD_AGE_SECONDS": "max_record_age_seconds",
    "LEASE_DURATION_SECONDS": "lease_duration_seconds",
    "MAX_LEASES_PER_WORKER": "max_leases_per_worker",
    "STREAM_CONSUMER_ARN": "enhanced_fan_out",
}


def refuse_own_variables(owner: str, where: str, overridden: list[str]) -> None:
    """Refuse extra environment that would override shardline's, naming the prop that sets each."""
    if not overridden:
        return
    named = [
        f"{variable} (set by {VARIABLE_PROPS[variable]}=)"
        if variable in VARIABLE_PROPS
        else f"{variable} (set from what the construct makes or derives)"
        for variable in overridden
    ]
    raise ValueError(f"{owner}: {where}: {', '.join(named)} are shardline's own; set them through its props")


def default_max_record_age(retention_hours: int) -> int:
    """The longest record age the mapping may give a batch up at: below the retention by the margin."""
    return min(MAX_RECORD_AGE_S, retention_hours * 3600 - RECORD_AGE_MARGIN_S)


def check_max_attempts(where: Where, max_attempts: int) -> None:
    if (
        isinstance(max_attempts, int)
        and not isinstance(max_attempts, bool)
        and max_attempts < MIN_MAX_ATTEMPTS
    ):
        raise ConfigError(
            f"{where('maxAttempts', 'max_attempts')}: must be at least {MIN_MAX_ATTEMPTS}, "
            f"got {max_attempts}: "
            "a record is dead-lettered only on evidence against it, and a crash or an overlapping delivery "
            "counts against a record only once the record has run again, alone; with one attempt the "
            "first record of any crashed delivery would be dead-lettered without that second run"
        )


def check_parallelization(where: Where, parallelization: int) -> None:
    if parallelization != 1:
        raise ConfigError(
            f"{where('parallelization', 'parallelization')}: must be 1, got {parallelization}: shardline "
            "keeps one checkpoint per shard and its producer packs many partition keys into one Kinesis "
            "record, so the mapping must deliver one batch per shard at a time (concurrent batches of "
            "one shard would skip each other's records as already processed)"
        )


def check_retry_attempts(where: Where, retry_attempts: int, max_attempts: int) -> None:
    if 0 <= retry_attempts <= max_attempts:
        raise ConfigError(
            f"{where('retryAttempts', 'retry_attempts')}: {retry_attempts} must be -1 (until the record "
            f"age) or above maxAttempts ({max_attempts}): otherwise the mapping discards a batch "
            "(metadata only) before shardline dead-letters its poison record whole (a record whose "
            "delivery kills the function is dead-lettered on the delivery after its last attempt)"
        )


def check_max_record_age(where: Where, max_record_age: int, retention_hours: int) -> None:
    retention_seconds = retention_hours * 3600
    if max_record_age >= retention_seconds:
        raise ConfigError(
            f"{where('maxRecordAgeSeconds', 'max_record_age_seconds')}: {max_record_age} must be below "
            f"the stream's retention ({retention_seconds} s): a batch given up at that age points at "
            "records already trimmed"
        )


def check_starting_position(where: Where, position: str, timestamp: float | None) -> None:
    """AT_TIMESTAMP exactly with a timestamp (the mapping refuses either without the other)."""
    if position not in STARTING_POSITIONS:
        raise ConfigError(
            f"{where('startingPosition', 'starting_position')}: must be one of "
            f"{', '.join(STARTING_POSITIONS)}, got {position!r}"
        )
    at = where("startingPositionTimestamp", "starting_position_timestamp")
    if position != "AT_TIMESTAMP" and timestamp is not None:
        raise ConfigError(f"{at}: only with AT_TIMESTAMP as the startingPosition")
    if position == "AT_TIMESTAMP" and timestamp is None:
        raise ConfigError(
            f"{at}: required with AT_TIMESTAMP, an ISO 8601 time with its offset such as "
            "2026-11-01T00:00:00Z (a construct takes epoch seconds or a datetime with its offset)"
        )


def check_consumer_name(where: Where, consumer_name: str) -> None:
    if not CONSUMER_NAME.match(consumer_name):
        raise ConfigError(
            f"{where('enhancedFanOut', 'consumer_name')}: {consumer_name!r} is no Kinesis consumer name "
            "(1-128 letters, digits, '_', '.' or '-')"
        )


def check_stream_consumers(where: Where, consumer_name: str, registered: list[str]) -> None:
    """One more enhanced fan-out consumer on a stream with `registered` ones (by name)."""
    if consumer_name in registered:
        raise ConfigError(
            f"{where('enhancedFanOut', 'consumer_name')}: the stream already has a consumer named "
            f"{consumer_name!r} (a consumer's name is unique on its stream)"
        )
    if len(registered) >= MAX_STREAM_CONSUMERS:
        raise ConfigError(
            f"{where('enhancedFanOut', 'enhanced_fan_out')}: the stream already has {len(registered)} "
            f"enhanced fan-out consumers, Kinesis's most per stream ({MAX_STREAM_CONSUMERS}); let this "
            "group share the stream's read throughput instead"
        )


#: Fargate's task sizes: each CPU (units, 1024 a vCPU) and the memory it takes (MiB).
FARGATE_MEMORY_MB: dict[int, tuple[int, ...]] = {
    256: (512, 1024, 2048),
    512: tuple(range(1024, 4097, 1024)),
    1024: tuple(range(2048, 8193, 1024)),
    2048: tuple(range(4096, 16385, 1024)),
    4096: tuple(range(8192, 30721, 1024)),
}
#: Where a worker starts reading a shard with no checkpoint (the worker's INITIAL_POSITION).
WORKER_STARTING_POSITIONS = ("TRIM_HORIZON", "LATEST")
#: What a worker runs (SHARDLINE_HANDLER): `module:attribute`, imported from the handler's folder.
HANDLER_OBJECT = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]*:[A-Za-z_][A-Za-z0-9_.]*$")


def check_handler_object(where: Where, handler_object: str) -> None:
    if not isinstance(handler_object, str) or not HANDLER_OBJECT.match(handler_object):
        raise ConfigError(
            f"{where('handlerObject', 'handler_object')}: must be module:attribute in the handler's "
            f"folder (app:function: a ConsumerFunction, a KinesisConsumer or a record handler), "
            f"got {handler_object!r}"
        )


def check_worker_starting_position(where: Where, position: str) -> None:
    if position not in WORKER_STARTING_POSITIONS:
        raise ConfigError(
            f"{where('startingPosition', 'starting_position')}: a worker starts a shard without a "
            f"checkpoint at {' or '.join(WORKER_STARTING_POSITIONS)} (its INITIAL_POSITION), got {position!r}"
        )


def check_fargate_size(where: Where, cpu: int, memory_mb: int) -> None:
    """A Fargate task size: `cpu` one of Fargate's, `memory_mb` one that CPU takes."""
    if cpu not in FARGATE_MEMORY_MB:
        raise ConfigError(
            f"{where('cpu', 'cpu')}: must be one of {', '.join(map(str, FARGATE_MEMORY_MB))} "
            f"(Fargate CPU units, 1024 a vCPU), got {cpu!r}"
        )
    allowed = FARGATE_MEMORY_MB[cpu]
    if memory_mb not in allowed:
        sizes = (
            ", ".join(map(str, allowed))
            if cpu == min(FARGATE_MEMORY_MB)
            else f"{allowed[0]}..{allowed[-1]} in steps of 1024"
        )
        raise ConfigError(
            f"{where('memoryMb', 'memory_mb')}: with {cpu} CPU units Fargate takes {sizes} MiB, "
            f"got {memory_mb!r}"
        )


#: On-demand streams start with 4 shards and split as they grow: reserve for this many by default.
ON_DEMAND_SHARDS_RESERVED = 10


def group_reservation(shards: int | None, parallelization: int) -> int:
    """A consumer group's reserved concurrency by default: one execution per shard and concurrent
    batch (`shards × parallelization`), on-demand streams counted as `ON_DEMAND_SHARDS_RESERVED`
    shards. The mapping invokes at most that many at once, so more would only be taken from others."""
    return (ON_DEMAND_SHARDS_RESERVED if shards is None else shards) * parallelization


# -- a worker group's image and egress ------------------------------------------------------

Egress = Literal["internet", "vpc-endpoints"]
EGRESS: tuple[str, ...] = ("internet", "vpc-endpoints")
DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
#: `<registry>/<repository>@sha256:<digest>`; an ECR registry's reference names its account and region.
REFERENCE = re.compile(r"(?P<repository>[^@\s]+)@(?P<digest>\S+)")


def check_digest(where: Where, key: str, prop: str, digest: str) -> str:
    """An image's digest (`sha256:` and 64 hex digits), or a clear error naming the prop."""
    if not isinstance(digest, str) or not DIGEST.fullmatch(digest):
        raise ConfigError(
            f"{where(key, prop)}: {digest!r} is no digest (sha256:<64 hex digits>); promote the image a "
            "stage built by its digest (a tag moves: `docker buildx imagetools inspect <image>` or "
            "`aws ecr describe-images` gives the digest)"
        )
    return digest


def check_image_uri(where: Where, key: str, prop: str, uri: str) -> tuple[str, str]:
    """`repository@sha256:<digest>` -> (repository, digest); a tag-only reference is refused."""
    match = REFERENCE.fullmatch(uri.strip()) if isinstance(uri, str) else None
    if match is None:
        raise ConfigError(
            f"{where(key, prop)}: {uri!r} names a tag, not a digest; give <repository>@sha256:<digest> "
            "(tags move; a digest is the promotion unit: the image the first stage built and tested)"
        )
    repository = match.group("repository")
    if re.search(r":[^/]*$", repository):
        raise ConfigError(f"{where(key, prop)}: {uri!r}: give the repository and its digest, without a tag")
    check_digest(where, key, prop, match.group("digest"))
    return repository, match.group("digest")


def check_egress(where: Where, egress: str) -> Egress:
    if egress not in EGRESS:
        raise ConfigError(
            f"{where('egress', 'egress')}: {egress!r} is none of 'internet' (the default: a public IP, "
            "or the team's subnets with egress) and 'vpc-endpoints' (no public IP, endpoints only)"
        )
    return "vpc-endpoints" if egress == "vpc-endpoints" else "internet"
