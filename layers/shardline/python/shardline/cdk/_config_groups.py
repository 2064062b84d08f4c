"""The streams and consumer groups of the pipeline configuration (`shardline.streams[i]`,
`shardline.consumerGroups[i]`), read and checked key by key; the mapping's refusals are
`shardline.cdk._group_rules`', which the `ConsumerGroup` construct applies to its props too.

A group is driven one way: by Lambda (`"driver": "lambda"`, the default: a function behind an
event-source mapping) or by workers (`"driver": "workers"`: `shardline worker` tasks on Fargate,
sharing the shards through the lease table, set by its `"workers"` object). Each driver refuses the
other's keys, naming the group and the key."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from shardline.cdk._config_reader import ConfigError, Reader, principal_arns
from shardline.cdk._group_rules import (
    MAX_STREAM_CONSUMERS,
    MIN_MAX_ATTEMPTS,
    STARTING_POSITIONS,
    Egress,
    check_egress,
    check_fargate_size,
    check_handler_object,
    check_image_uri,
    check_max_attempts,
    check_max_record_age,
    check_parallelization,
    check_retry_attempts,
    check_worker_starting_position,
    config_key,
    default_max_record_age,
    group_reservation,
)
from shardline.consumer._failure_text import FAILURE_DETAIL_CHOICES
from shardline.consumer._sink_writes import sink_writes_problem

SINKS = ("events", "counter")
SINK_HOLDS = ("records", "counts")
STREAM_ARN = re.compile(r"^arn:aws[a-z-]*:kinesis:[a-z0-9-]+:\d{12}:stream/[a-zA-Z0-9_.-]{1,128}$")
KEY_ARN = re.compile(r"^arn:aws[a-z-]*:kms:[a-z0-9-]+:\d{12}:key/[a-zA-Z0-9-]{1,128}$")


@dataclass(frozen=True)
class StreamConfig:
    name: str
    shards: int | None  # None: on-demand
    retention_hours: int
    encryption: str  # "customer-managed" (a KMS key of ours) or "aws-managed"
    max_record_size_kib: int
    explicit_hash_keys: bool = False  # may API callers choose a record's shard? (off unless asked)
    #: `arn`: an existing stream (not created; its writers and readers only get grants), and
    #: `keyArn` its customer-managed KMS key if it has one.
    arn: str | None = None
    key_arn: str | None = None


DRIVERS = ("lambda", "workers")
#: What a Lambda-driven group's keys set (its function and event-source mapping): a group driven
#: by workers refuses each of them.
LAMBDA_ONLY_KEYS = {
    "batchSize": "the event-source mapping's batch size",
    "batchingWindowSeconds": "the event-source mapping's batching window",
    "parallelization": "the event-source mapping's concurrent batches per shard",
    "retryAttempts": "the event-source mapping's retries",
    "maxRecordAgeSeconds": "the event-source mapping's record age",
    "memoryMb": "the function's memory (a worker's is workers.memoryMb)",
    "timeoutSeconds": "the function's timeout",
    "reservedConcurrency": "the function's reserved concurrency (workers: workers.count)",
    "startingPositionTimestamp": "AT_TIMESTAMP, which the mapping takes and a worker does not "
    "(INITIAL_POSITION is TRIM_HORIZON or LATEST)",
}


@dataclass(frozen=True)
class WorkersConfig:
    """A group's `"workers"` object: its Fargate service and what each worker is told."""

    count: int = 2  # tasks (each one `shardline worker` process)
    cpu: int = 512  # Fargate CPU units (1024 a vCPU)
    memory_mb: int = 1024
    lease_duration_seconds: int = 10  # LEASE_DURATION_SECONDS: a lease not renewed for this long is free
    max_leases_per_worker: int | None = None  # MAX_LEASES_PER_WORKER (None: as many as balance gives)
    handler_object: str = "app:function"  # SHARDLINE_HANDLER: module:attribute in the handler's folder
    #: `<repository>@sha256:<digest>`: the image a previous stage built, promoted (None: built here)
    image: str | None = None
    egress: Egress = "internet"  # or "vpc-endpoints": no public IP, VPC endpoints only


WORKERS_KEYS = (
    "count", "cpu", "memoryMb", "leaseDurationSeconds", "maxLeasesPerWorker", "handlerObject", "image",
    "egress",
)  # fmt: skip


@dataclass(frozen=True)
class ConsumerGroupConfig:
    name: str
    stream: str
    handler: str  # folder under functions/
    sink: str  # "events" or "counter" (the examples' key schemas), or "custom" (`sink_keys`)
    batch_size: int
    batching_window_seconds: int
    starting_position: str
    parallelization: int
    retry_attempts: int
    max_record_age_seconds: int
    max_attempts: int
    checkpoint_interval_seconds: float
    memory_mb: int
    timeout_seconds: int
    reserved_concurrency: int = 4
    #: `failureDetail`: what the lease row, the dead letter and the log keep of a handler's exception
    #: (`fingerprint`: its type and a hash of its message; `message`: the message too, bounded).
    failure_detail: str = "fingerprint"  # the group function's (see `group_reservation`)
    #: `startingPositionTimestamp` (AT_TIMESTAMP): where a new group begins, epoch seconds, instead of
    #: replaying the stream's whole retention (TRIM_HORIZON) or skipping all of it (LATEST).
    starting_position_timestamp: float | None = None
    #: A custom sink's key schema: (partition (name, type), sort (name, type) or None); types S, N or B.
    sink_keys: tuple[tuple[str, str], tuple[str, str] | None] | None = None
    #: `sinkTtlDays`: days an example sink keeps an item after its record's arrival (`expiresAt`;
    #: the counter: after its key's last record). Default 30: the sinks hold payloads and keys,
    #: which should not outlive their use by default; a month covers reconciling a billing
    #: period and matches the logs' default retention. At most 36500 (100 years: "keep").
    sink_ttl_days: int = 30
    # Who may read (and redrive) the group's dead letters; none: whoever IAM allows in this account.
    dead_letter_readers: tuple[str, ...] = ()
    #: `enhancedFanOut`: the group reads through a stream consumer of its own (dedicated throughput).
    enhanced_fan_out: bool = False
    #: What a custom sink holds (`sink.holds`: records or counts; None: undeclared) and its attributes
    #: (`idAttribute`, `keyAttribute`, `countAttribute`); the examples' sinks declare theirs.
    sink_holds: str | None = None
    sink_attributes: tuple[tuple[str, str], ...] = ()
    #: What a custom sink's handler writes (`sink.writes`, `Sink.writes`); None: every kind.
    sink_writes: tuple[str, ...] | None = None
    #: `driver`: "lambda" (a function behind an event-source mapping: the settings above) or
    #: "workers" (`workers`; the function's and the mapping's settings above keep their defaults, unused).
    driver: str = "lambda"
    workers: WorkersConfig | None = None


def read_stream(data: Any, path: str) -> StreamConfig:
    read = Reader(data, path)
    if "arn" in read.data:
        return _existing_stream(read, path)
    shards = read.data.get("shards", 4)
    if shards != "on-demand":
        shards = read.int("shards", low=1, high=500)
    return StreamConfig(
        name=read.name("name"),
        shards=None if shards == "on-demand" else shards,
        retention_hours=read.int("retentionHours", 24, low=24, high=8760),
        encryption=read.str("encryption", "customer-managed", choices=("customer-managed", "aws-managed")),
        max_record_size_kib=read.int("maxRecordSizeKiB", 1024, low=1024, high=10240),
        explicit_hash_keys=read.bool("explicitHashKeys", False),
    )


def _existing_stream(read: Reader, path: str) -> StreamConfig:
    """A stream that exists already (`arn`): what it has is told (`retentionHours`,
    `maxRecordSizeKiB`, `keyArn`), not chosen; `shards` and `encryption` would be a new stream's."""
    arn = read.str("arn")
    if not STREAM_ARN.match(arn):
        raise ConfigError(
            f"{path}.arn: not a Kinesis stream ARN (arn:aws:kinesis:<region>:<account>:stream/<name>): "
            f"{arn!r}"
        )
    for key in ("shards", "encryption"):
        if key in read.data:
            raise ConfigError(
                f"{path}.{key}: a new stream's setting; the stream at {path}.arn exists already"
            )
    key_arn = read.data.get("keyArn")
    if key_arn is not None and (not isinstance(key_arn, str) or not KEY_ARN.match(key_arn)):
        raise ConfigError(
            f"{path}.keyArn: not a KMS key ARN (arn:aws:kms:<region>:<account>:key/<id>): {key_arn!r}"
        )
    return StreamConfig(
        name=read.name("name"),
        shards=None,
        retention_hours=read.int("retentionHours", 24, low=24, high=8760),
        encryption="customer-managed" if key_arn else "aws-managed",
        max_record_size_kib=read.int("maxRecordSizeKiB", 1024, low=1024, high=10240),
        explicit_hash_keys=read.bool("explicitHashKeys", False),
        arn=arn,
        key_arn=key_arn,
    )


def read_group(data: Any, path: str, streams: dict[str, StreamConfig]) -> ConsumerGroupConfig:
    read = Reader(data, path)
    name = read.name("name")
    driver, workers = _driver(read, path, name)
    stream = read.str("stream")
    if stream not in streams:
        raise ConfigError(f"{path}.stream: unknown stream {stream!r} (known: {', '.join(streams) or 'none'})")
    retention_hours = streams[stream].retention_hours
    where = config_key(path)
    given = read.data.get("maxAttempts")
    check_max_attempts(where, given)  # type: ignore[arg-type]  # checked for an int first
    max_attempts = read.int("maxAttempts", 3, low=MIN_MAX_ATTEMPTS, high=100)
    parallelization = read.int("parallelization", 1, low=1, high=10)
    check_parallelization(where, parallelization)
    retry_attempts = read.int("retryAttempts", -1, low=-1, high=10000)
    check_retry_attempts(where, retry_attempts, max_attempts)
    max_record_age = read.int(
        "maxRecordAgeSeconds", default_max_record_age(retention_hours), low=60, high=604800
    )
    check_max_record_age(where, max_record_age, retention_hours)
    starting_position = read.str("startingPosition", "TRIM_HORIZON", choices=STARTING_POSITIONS)
    if workers is not None:
        check_worker_starting_position(where, starting_position)
    shards = streams[stream].shards
    reservation = (
        read.int("reservedConcurrency", group_reservation(shards, parallelization), low=1, high=10000)
        if workers is None
        else 0  # no function
    )
    return ConsumerGroupConfig(
        name=name,
        stream=stream,
        handler=read.str("handler"),
        sink="custom"
        if isinstance(read.data.get("sink"), dict)
        else read.str("sink", "events", choices=SINKS),
        sink_keys=_sink_keys(read.data.get("sink"), f"{path}.sink"),
        sink_holds=_sink_holds(read.data.get("sink"), f"{path}.sink"),
        sink_attributes=_sink_attributes(read.data.get("sink"), f"{path}.sink"),
        sink_writes=_sink_writes(read.data.get("sink"), f"{path}.sink"),
        batch_size=read.int("batchSize", 100, low=1, high=10000),
        batching_window_seconds=read.int("batchingWindowSeconds", 1, low=0, high=300),
        starting_position=starting_position,
        starting_position_timestamp=_starting_timestamp(read, path, starting_position),
        parallelization=parallelization,
        retry_attempts=retry_attempts,
        max_record_age_seconds=max_record_age,
        max_attempts=max_attempts,
        checkpoint_interval_seconds=read.number("checkpointIntervalSeconds", 5.0, low=0.1, high=900),
        failure_detail=read.str("failureDetail", "fingerprint", choices=FAILURE_DETAIL_CHOICES),
        memory_mb=read.int("memoryMb", 512, low=128, high=10240),
        timeout_seconds=read.int("timeoutSeconds", 60, low=3, high=900),
        reserved_concurrency=reservation,
        sink_ttl_days=read.int("sinkTtlDays", 30, low=1, high=36500),
        dead_letter_readers=principal_arns(read, "deadLetterReaders"),
        enhanced_fan_out=read.bool("enhancedFanOut", False),
        driver=driver,
        workers=workers,
    )


def _driver(read: Reader, path: str, name: str) -> tuple[str, WorkersConfig | None]:
    """The group's driver, and its `workers` object when workers drive it; a key of the other
    driver's is refused, naming the group and the key."""
    driver = read.str("driver", "lambda", choices=DRIVERS)
    if driver == "lambda":
        if "workers" in read.data:
            raise ConfigError(
                f"{path}.workers: group {name!r} is driven by Lambda (driver: lambda, the default); "
                "a group is driven one way: set driver to workers, or remove workers"
            )
        return driver, None
    for key, what in LAMBDA_ONLY_KEYS.items():
        if key in read.data:
            raise ConfigError(
                f"{path}.{key}: group {name!r} is driven by workers (driver: workers), and {key} is a "
                f"Lambda-driven group's setting ({what}); a group is driven one way: remove {key}, or "
                "set driver to lambda and remove workers"
            )
    return driver, _workers(read.data.get("workers", {}), f"{path}.workers")


def _workers(data: Any, path: str) -> WorkersConfig:
    """The `workers` object of a group driven by workers, every key checked."""
    read = Reader(data, path)
    unknown = sorted(set(read.data) - set(WORKERS_KEYS))
    if unknown:
        raise ConfigError(f"{path}: unknown keys {unknown} ({', '.join(WORKERS_KEYS)})")
    cpu = read.int("cpu", 512, low=256, high=4096)
    memory_mb = read.int("memoryMb", 1024, low=512, high=30720)
    check_fargate_size(config_key(path), cpu, memory_mb)
    handler_object = read.str("handlerObject", "app:function")
    check_handler_object(config_key(path), handler_object)
    most = read.data.get("maxLeasesPerWorker")
    image = read.data.get("image")
    if image is not None:
        check_image_uri(config_key(path), "image", "image_uri", image)
    return WorkersConfig(
        count=read.int("count", 2, low=1, high=1000),
        cpu=cpu,
        memory_mb=memory_mb,
        lease_duration_seconds=read.int("leaseDurationSeconds", 10, low=3, high=300),
        max_leases_per_worker=None if most is None else read.int("maxLeasesPerWorker", low=1, high=10000),
        handler_object=handler_object,
        image=image,
        egress=check_egress(config_key(path), read.str("egress", "internet")),
    )


def _sink_keys(data: Any, path: str) -> tuple[tuple[str, str], tuple[str, str] | None] | None:
    """A custom sink's key schema, `{"partitionKey": {"name": "tenant", "type": "S"}, "sortKey": {...}}`
    (the sort key optional), or None for the examples' ("events", "counter")."""
    if not isinstance(data, dict):
        return None
    read = Reader(data, path)
    unknown = sorted(set(data) - {"partitionKey", "sortKey", "holds", "writes", *_SINK_ATTRIBUTES})
    if unknown:
        raise ConfigError(
            f"{path}: unknown keys {unknown} (partitionKey, sortKey, holds, writes, "
            f"{', '.join(_SINK_ATTRIBUTES)})"
        )

    def attribute(name: str) -> tuple[str, str]:
        part = Reader(read.data.get(name), f"{path}.{name}")
        return part.str("name"), part.str("type", "S", choices=("S", "N", "B"))

    partition = attribute("partitionKey")
    sort = attribute("sortKey") if "sortKey" in data else None
    if sort is not None and sort[0] == partition[0]:
        raise ConfigError(f"{path}.sortKey.name: {sort[0]!r} is the partition key's name too")
    return partition, sort


#: A custom sink's declared attributes: configuration key -> `Sink` prop.
_SINK_ATTRIBUTES = {
    "idAttribute": "id_attribute",
    "keyAttribute": "key_attribute",
    "countAttribute": "count_attribute",
}


def _sink_holds(data: Any, path: str) -> str | None:
    """`sink.holds` of a custom sink: records, counts, or absent (undeclared)."""
    if not isinstance(data, dict) or "holds" not in data:
        return None
    return Reader(data, path).str("holds", choices=SINK_HOLDS)


def _sink_attributes(data: Any, path: str) -> tuple[tuple[str, str], ...]:
    """A custom sink's declared attributes, as (`Sink` prop, attribute name)."""
    if not isinstance(data, dict):
        return ()
    read = Reader(data, path)
    given = tuple((prop, read.name(key)) for key, prop in _SINK_ATTRIBUTES.items() if key in data)
    if given and "holds" not in data:
        raise ConfigError(
            f"{path}.holds: required with {', '.join(k for k in _SINK_ATTRIBUTES if k in data)}"
        )
    return given


def _sink_writes(data: Any, path: str) -> tuple[str, ...] | None:
    """`sink.writes` of a custom sink: what its handler returns for it (`Sink.writes`), or absent."""
    if not isinstance(data, dict) or "writes" not in data:
        return None
    problem = sink_writes_problem(data["writes"])
    if problem:
        raise ConfigError(f"{path}.{problem}")
    return tuple(data["writes"])


def _starting_timestamp(read: Reader, path: str, position: str) -> float | None:
    """`startingPositionTimestamp`: an ISO 8601 time with its offset (`2026-11-01T00:00:00Z`), given
    exactly when the position is AT_TIMESTAMP (the mapping refuses it otherwise)."""
    given = read.data.get("startingPositionTimestamp")
    if position != "AT_TIMESTAMP":
        if given is not None:
            raise ConfigError(
                f"{path}.startingPositionTimestamp: only with AT_TIMESTAMP as the startingPosition"
            )
        return None
    if not isinstance(given, str):
        raise ConfigError(
            f"{path}.startingPositionTimestamp: required with AT_TIMESTAMP, an ISO 8601 time with its "
            f"offset such as 2026-11-01T00:00:00Z, got {given!r}"
        )
    try:
        moment = datetime.fromisoformat(given.replace("Z", "+00:00"))
    except ValueError:
        moment = None
    if moment is None or moment.tzinfo is None:
        raise ConfigError(
            f"{path}.startingPositionTimestamp: not an ISO 8601 time with its offset (Z or +hh:mm): {given!r}"
        )
    return moment.timestamp()


def check_fan_out(groups: list[ConsumerGroupConfig]) -> None:
    """Kinesis registers at most MAX_STREAM_CONSUMERS enhanced fan-out consumers per stream (a
    group's, whichever its driver)."""
    per_stream: dict[str, int] = {}
    for index, group in enumerate(groups):
        if group.enhanced_fan_out:
            per_stream[group.stream] = per_stream.get(group.stream, 0) + 1
            if per_stream[group.stream] > MAX_STREAM_CONSUMERS:
                raise ConfigError(
                    f"shardline.consumerGroups[{index}].enhancedFanOut: stream {group.stream!r} would have "
                    f"more than {MAX_STREAM_CONSUMERS} enhanced fan-out consumers, Kinesis's most per "
                    "stream; "
                    f"let group {group.name!r} share the stream's read throughput instead"
                )
