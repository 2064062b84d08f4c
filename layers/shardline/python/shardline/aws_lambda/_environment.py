"""The environment contract of shardline's Lambda functions, declared once.

The CDK app renders each function's environment with `to_environ()`; the function reads it back
with `from_environ()`; an infra test parses every synthesized function's variables with the same
classes. A missing or malformed variable raises `ConfigurationError` naming it and its value.

| function | variable | type | default |
|---|---|---|---|
| producer | `SHARDLINE_STREAMS` | JSON `{"<route>": {"streamName", "maxRecordSize"?}}` | `{}` |
| producer | `MAX_RECORDS_PER_REQUEST` | int >= 1 | 500 |
| producer | `MAX_BODY_BYTES` | int >= 1 (the body as the Lambda event holds it, escaped) | 6000000 |
| producer | `THROTTLED_GIVE_UP_SECONDS` | float >= 0: a shard throttling this long answers 503 | 3 |
| producer | `IDEMPOTENCY_TABLE` | str: the ids' payload hashes (another body: 422) | none (unchecked) |
| producer | `IDEMPOTENCY_TTL_SECONDS` | int >= 1: how long a payload hash is kept | 16 days |
| producer | `PER_CALLER_RATE` | float >= 0: each IAM caller's requests/s (`_http_rate`); 0: no limit | 0 |
| consumer | `SHARDLINE_GROUP`, `LEASE_TABLE` | non-empty str | required |
| consumer | `SINK_TABLE` | str: the table its checkpoint transaction writes | none (a group without a sink) |
| consumer | `SHARDLINE_SINKS` | JSON list of `SinkDeclaration`s: what each sink holds | none declared |
| consumer | `DLQ_URL` | str | none (poison records then block) |
| consumer | `DLQ_BUCKET` | str | none (a dead letter over SQS's 1 MiB then fails) |
| consumer | `MAX_ATTEMPTS` | int >= 2 | 3 |
| consumer | `CHECKPOINT_INTERVAL`, `TIME_MARGIN` | float >= 0 (seconds) | 5, 2 |
| consumer | `FAILURE_DETAIL` | `fingerprint` or `message` (see `_failure_text`) | `fingerprint` |
| consumer | `SINK_TTL_DAYS` | int >= 1 (the handler's: how long its sink items live) | none (kept) |
| consumer | `SHARDLINE_GUARD_TTL_SECONDS` | int >= 1 (seconds a client-id guard lives) | 1382400 (16 days) |
| consumer | `SHARDLINE_STARTING_POSITION` | `TRIM_HORIZON`, `LATEST`, `AT_TIMESTAMP` | `TRIM_HORIZON` |
| consumer | `SHARDLINE_STARTING_POSITION_TIMESTAMP` | float epoch seconds, with `AT_TIMESTAMP` | none |
| consumer | `SHARDLINE_MAX_RECORD_AGE_SECONDS` | int >= 1 (the mapping's record age) | none (no limit) |

`SHARDLINE_GUARD_TTL_SECONDS`: how long after its record's arrival a `once` guard must live — the
stream's retention + the dead-letter queue's + a day (`shardline.consumer._once.guard_ttl_seconds`),
rendered by the constructs; unset, 16 days: right for a 24 h stream and a 14-day DLQ only.

`SHARDLINE_STARTING_POSITION`, `..._TIMESTAMP`, `SHARDLINE_MAX_RECORD_AGE_SECONDS`: where the group's
mapping starts and the oldest record it delivers, as the constructs configure it; they decide whether
a child shard delivered before its parent has a lease row waits for it (`shardline.consumer._resharding`).

Powertools reads its own variables (`POWERTOOLS_SERVICE_NAME`, `POWERTOOLS_METRICS_NAMESPACE`, ...).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from shardline.consumer._failure_text import FAILURE_DETAIL_CHOICES
from shardline.consumer._once import DEFAULT_GUARD_TTL_SECONDS
from shardline.consumer._resharding import STARTING_POSITIONS
from shardline.errors import ConfigurationError

DEFAULT_MAX_RECORDS_PER_REQUEST = 500
#: Lambda takes 6 MB (6,291,456 bytes) synchronously, proxy event included: leave room for it.
#: Counted as the body sits in the event (JSON-escaped by API Gateway), not as the client sent it.
DEFAULT_MAX_BODY_BYTES = 6_000_000
#: Seconds a record's shard may keep refusing it for its write limit before the producer function
#: gives it up (503 + Retry-After when nothing was written) instead of holding the request.
DEFAULT_THROTTLED_GIVE_UP_SECONDS = 3.0
#: How long the producer keeps an id's payload hash without a value from the construct: as long as a
#: consumer's client-id guard of the default stream (`consumer._once.DEFAULT_GUARD_TTL_SECONDS`).
DEFAULT_IDEMPOTENCY_TTL_SECONDS = DEFAULT_GUARD_TTL_SECONDS

#: Variables Powertools reads; a function may set them beside the contract's own.
POWERTOOLS_VARIABLES = frozenset(
    {
        "POWERTOOLS_SERVICE_NAME",
        "POWERTOOLS_METRICS_NAMESPACE",
        "POWERTOOLS_TRACE_DISABLED",
        "POWERTOOLS_LOG_LEVEL",
        "POWERTOOLS_LOGGER_LOG_EVENT",
    }
)


@dataclass(frozen=True)
class ProducerEnvironment:
    """The producer function's variables (`SHARDLINE_STREAMS` stays JSON text: the HTTP settings
    parse and check it, naming the route at fault)."""

    streams_json: str = "{}"
    max_records_per_request: int = DEFAULT_MAX_RECORDS_PER_REQUEST
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    throttled_give_up_seconds: float = DEFAULT_THROTTLED_GIVE_UP_SECONDS
    idempotency_table: str = ""  # "": ids' payloads are not checked
    idempotency_ttl_seconds: int = DEFAULT_IDEMPOTENCY_TTL_SECONDS
    per_caller_rate: float = 0.0  # each IAM caller's requests per second; 0: not limited

    VARIABLES = (
        "SHARDLINE_STREAMS",
        "MAX_RECORDS_PER_REQUEST",
        "MAX_BODY_BYTES",
        "THROTTLED_GIVE_UP_SECONDS",
        "IDEMPOTENCY_TABLE",
        "IDEMPOTENCY_TTL_SECONDS",
        "PER_CALLER_RATE",
    )

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] | None = None) -> ProducerEnvironment:
        env = os.environ if environ is None else environ
        return cls(
            streams_json=env.get("SHARDLINE_STREAMS", "").strip() or "{}",
            max_records_per_request=_int(env, "MAX_RECORDS_PER_REQUEST", DEFAULT_MAX_RECORDS_PER_REQUEST),
            max_body_bytes=_int(env, "MAX_BODY_BYTES", DEFAULT_MAX_BODY_BYTES),
            throttled_give_up_seconds=_seconds(
                env, "THROTTLED_GIVE_UP_SECONDS", DEFAULT_THROTTLED_GIVE_UP_SECONDS
            ),
            idempotency_table=env.get("IDEMPOTENCY_TABLE", "").strip(),
            idempotency_ttl_seconds=_int(env, "IDEMPOTENCY_TTL_SECONDS", DEFAULT_IDEMPOTENCY_TTL_SECONDS),
            per_caller_rate=_seconds(env, "PER_CALLER_RATE", 0.0, unit="requests per second"),
        )

    def to_environ(self) -> dict[str, str]:
        environ = {
            "SHARDLINE_STREAMS": self.streams_json,
            "MAX_RECORDS_PER_REQUEST": str(self.max_records_per_request),
            "MAX_BODY_BYTES": str(self.max_body_bytes),
            "THROTTLED_GIVE_UP_SECONDS": f"{self.throttled_give_up_seconds:g}",
            "IDEMPOTENCY_TTL_SECONDS": str(self.idempotency_ttl_seconds),
        }
        if self.idempotency_table:
            environ["IDEMPOTENCY_TABLE"] = self.idempotency_table
        if self.per_caller_rate:
            environ["PER_CALLER_RATE"] = f"{self.per_caller_rate:g}"
        return environ


SinkHolds = Literal["records", "counts"]


def sink_problem(holds: Any, id_attribute: Any, key_attribute: Any, count_attribute: Any) -> str | None:
    """What is wrong with a sink's declaration (`SinkDeclaration`, `shardline.cdk.Sink`), or None."""
    if holds not in get_args(SinkHolds):
        return f"holds must be records or counts, got {holds!r}"
    for name, value in (
        ("id_attribute", id_attribute),
        ("key_attribute", key_attribute),
        ("count_attribute", count_attribute),
    ):
        if not isinstance(value, str) or not value:
            return f"{name} must be a non-empty string, got {value!r}"
    return None


@dataclass(frozen=True)
class SinkDeclaration:
    """What one of a consumer group's sink tables holds, said so that whoever checks the group
    (the local runtime's `send` verdict) can read it back without knowing the handler:

    - `records`: one item per user record, carrying the record's id (the client's, or the
      producer's) in `id_attribute`; checked for every record once, none twice.
    - `counts`: one item per partition key (`key_attribute`) whose `count_attribute` counts that
      key's records; checked for exact counts.

    A group that declares nothing is checked by its lag and its errors alone.
    """

    table: str
    holds: SinkHolds
    id_attribute: str = "recordId"
    key_attribute: str = "partitionKey"
    count_attribute: str = "count"

    def __post_init__(self) -> None:
        if not isinstance(self.table, str) or not self.table:
            raise ConfigurationError(f"sink {self.table!r}: table must be a non-empty string")
        problem = sink_problem(self.holds, self.id_attribute, self.key_attribute, self.count_attribute)
        if problem:
            raise ConfigurationError(f"sink {self.table!r}: {problem}")

    def to_json(self) -> dict[str, str]:
        if self.holds == "records":
            return {"table": self.table, "holds": "records", "idAttribute": self.id_attribute}
        return {
            "table": self.table,
            "holds": "counts",
            "keyAttribute": self.key_attribute,
            "countAttribute": self.count_attribute,
        }

    @classmethod
    def from_json(cls, item: Any) -> SinkDeclaration:
        if not isinstance(item, Mapping) or not isinstance(item.get("table"), str):
            raise ConfigurationError(f"each entry is an object with a table, got {item!r}")
        names = {
            "idAttribute": "id_attribute",
            "keyAttribute": "key_attribute",
            "countAttribute": "count_attribute",
        }
        unknown = set(item) - {"table", "holds", *names}
        if unknown:
            raise ConfigurationError(
                f"SHARDLINE_SINKS: sink {item['table']!r} has unknown keys {sorted(unknown)}"
            )
        return cls(
            table=item["table"],
            holds=item.get("holds"),  # type: ignore[arg-type]  # checked in __post_init__
            **{names[key]: value for key, value in item.items() if key in names},
        )


def _sinks(env: Mapping[str, str]) -> tuple[SinkDeclaration, ...]:
    text = env.get("SHARDLINE_SINKS", "").strip()
    if not text:
        return ()
    try:
        items = json.loads(text)
    except ValueError:
        raise ConfigurationError(f"SHARDLINE_SINKS must be a JSON list, got {text[:200]!r}") from None
    if not isinstance(items, list):
        raise ConfigurationError(f"SHARDLINE_SINKS must be a JSON list, got {text[:200]!r}")
    try:
        return tuple(SinkDeclaration.from_json(item) for item in items)
    except ConfigurationError as error:
        raise ConfigurationError(f"SHARDLINE_SINKS: {error}") from None


@dataclass(frozen=True)
class ConsumerEnvironment:
    """A consumer function's variables."""

    group: str
    lease_table: str
    #: The table the checkpoint transaction writes (None: the group has no sink).
    sink_table: str | None = None
    dlq_url: str | None = None
    max_attempts: int = 3
    checkpoint_interval: float = 5.0
    time_margin: float = 2.0
    dlq_bucket: str | None = None
    #: What shardline writes about a handler's exception (`KinesisConsumer`'s `failure_detail`).
    failure_detail: str = "fingerprint"
    #: Days a handler keeps what it writes to its sink (None: forever); shardline only carries it.
    sink_ttl_days: int | None = None
    #: What the group's sinks hold, declared for whoever checks it (`SinkDeclaration`).
    sinks: tuple[SinkDeclaration, ...] = field(default=())
    #: Seconds after its record's arrival a client-id guard (`once`) must live: as long as a copy
    #: can still be read from the stream or redriven from the DLQ (`_once.guard_ttl_seconds`).
    guard_ttl_seconds: int = DEFAULT_GUARD_TTL_SECONDS
    #: Where the group's mapping starts (`KinesisConsumer`'s `starting_position`), its timestamp
    #: (epoch seconds, AT_TIMESTAMP only) and its maximum record age (seconds; None: no limit).
    starting_position: str = "TRIM_HORIZON"
    starting_position_timestamp: float | None = None
    max_record_age_seconds: int | None = None

    VARIABLES = (
        "SHARDLINE_GROUP",
        "LEASE_TABLE",
        "SINK_TABLE",
        "SHARDLINE_SINKS",
        "DLQ_URL",
        "DLQ_BUCKET",
        "MAX_ATTEMPTS",
        "CHECKPOINT_INTERVAL",
        "TIME_MARGIN",
        "FAILURE_DETAIL",
        "SINK_TTL_DAYS",
        "SHARDLINE_GUARD_TTL_SECONDS",
        "SHARDLINE_STARTING_POSITION",
        "SHARDLINE_STARTING_POSITION_TIMESTAMP",
        "SHARDLINE_MAX_RECORD_AGE_SECONDS",
    )

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] | None = None) -> ConsumerEnvironment:
        env = os.environ if environ is None else environ
        return cls(
            group=_required(env, "SHARDLINE_GROUP"),
            lease_table=_required(env, "LEASE_TABLE"),
            sink_table=env.get("SINK_TABLE", "").strip() or None,
            dlq_url=env.get("DLQ_URL", "").strip() or None,
            dlq_bucket=env.get("DLQ_BUCKET", "").strip() or None,
            max_attempts=_int(env, "MAX_ATTEMPTS", 3, low=2),
            checkpoint_interval=_seconds(env, "CHECKPOINT_INTERVAL", 5.0),
            time_margin=_seconds(env, "TIME_MARGIN", 2.0),
            failure_detail=_choice(env, "FAILURE_DETAIL", FAILURE_DETAIL_CHOICES),
            sink_ttl_days=_int(env, "SINK_TTL_DAYS", 0) or None,
            sinks=_sinks(env),
            guard_ttl_seconds=_int(env, "SHARDLINE_GUARD_TTL_SECONDS", DEFAULT_GUARD_TTL_SECONDS),
            **_start(env),
        )

    def to_environ(self) -> dict[str, str]:
        environ = {
            "SHARDLINE_GROUP": self.group,
            "LEASE_TABLE": self.lease_table,
            "MAX_ATTEMPTS": str(self.max_attempts),
            "CHECKPOINT_INTERVAL": f"{self.checkpoint_interval:g}",
            "TIME_MARGIN": f"{self.time_margin:g}",
            "FAILURE_DETAIL": self.failure_detail,
            "SHARDLINE_GUARD_TTL_SECONDS": str(self.guard_ttl_seconds),
            "SHARDLINE_STARTING_POSITION": self.starting_position,
        }
        if self.starting_position_timestamp is not None:
            environ["SHARDLINE_STARTING_POSITION_TIMESTAMP"] = repr(float(self.starting_position_timestamp))
        if self.max_record_age_seconds is not None:
            environ["SHARDLINE_MAX_RECORD_AGE_SECONDS"] = str(self.max_record_age_seconds)
        if self.sink_table is not None:
            environ["SINK_TABLE"] = self.sink_table
        if self.sinks:
            environ["SHARDLINE_SINKS"] = json.dumps([sink.to_json() for sink in self.sinks])
        if self.sink_ttl_days is not None:
            environ["SINK_TTL_DAYS"] = str(self.sink_ttl_days)
        if self.dlq_url is not None:
            environ["DLQ_URL"] = self.dlq_url
        if self.dlq_bucket is not None:
            environ["DLQ_BUCKET"] = self.dlq_bucket
        return environ


def _start(env: Mapping[str, str]) -> dict[str, Any]:
    """Where the mapping starts: the position, its timestamp exactly with AT_TIMESTAMP, the age."""
    position = _choice(env, "SHARDLINE_STARTING_POSITION", STARTING_POSITIONS)
    text = env.get("SHARDLINE_STARTING_POSITION_TIMESTAMP", "").strip()
    if (position == "AT_TIMESTAMP") != bool(text):
        raise ConfigurationError(
            "SHARDLINE_STARTING_POSITION_TIMESTAMP is set exactly when SHARDLINE_STARTING_POSITION is "
            f"AT_TIMESTAMP, got {position!r} and {text!r}"
        )
    return {
        "starting_position": position,
        "starting_position_timestamp": _seconds(env, "SHARDLINE_STARTING_POSITION_TIMESTAMP", 0.0)
        if text
        else None,
        "max_record_age_seconds": _int(env, "SHARDLINE_MAX_RECORD_AGE_SECONDS", 0) or None,
    }


def _required(env: Mapping[str, str], name: str) -> str:
    value = env.get(name, "").strip()
    if not value:
        raise ConfigurationError(f"{name} must be set to a non-empty string")
    return value


def _int(env: Mapping[str, str], name: str, default: int, *, low: int = 1) -> int:
    text = env.get(name, "").strip()
    if not text:
        return default
    try:
        value = int(text)
    except ValueError:
        raise ConfigurationError(f"{name} must be an integer, got {text!r}") from None
    if value < low:
        raise ConfigurationError(f"{name} must be at least {low}, got {value}")
    return value


def _choice(env: Mapping[str, str], name: str, choices: tuple[str, ...]) -> str:
    """The variable, one of `choices` (unset or empty: the first)."""
    value = env.get(name, "").strip() or choices[0]
    if value not in choices:
        raise ConfigurationError(f"{name} must be one of {', '.join(choices)}, got {value!r}")
    return value


def _seconds(env: Mapping[str, str], name: str, default: float, *, unit: str = "seconds") -> float:
    """A finite number >= 0 (of `unit`), or `default` when unset."""
    text = env.get(name, "").strip()
    if not text:
        return default
    try:
        value = float(text)
    except ValueError:
        raise ConfigurationError(f"{name} must be a number of {unit}, got {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise ConfigurationError(f"{name} must be a finite number of {unit} >= 0, got {text!r}")
    return value
