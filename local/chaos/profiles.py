"""Chaos profiles for the local runtime: what goes wrong, how often, and when.

    profile = load_profile("heavy")          # a built-in name (none, light, heavy), or a file path
    profile.endpoint                         # EndpointFaults: applied by the AWS endpoint to every client
    profile.workers                          # WorkerFaults: applied around the functions' invocations
    profile.reshards                         # (Reshard(at_s=20, action="split"), ...)

`python -m local up --chaos heavy` (or `--chaos my-profile.toml`) runs the app under a profile; each
injected fault is counted where it happens and shown by `status`. A custom profile is a TOML or JSON
file with the keys of the dataclasses below; `extends` names a profile to start from, so a file only
says what differs:

    extends = "heavy"
    seed = 7

    [endpoint]
    lost_response_rate = { kinesis = 0.02 }

    [workers]
    kill_every = 50

    [[reshards]]
    at_s = 15
    action = "split"

Rates are shares of calls (or of PutRecords entries) in [0, 1]. Observers (`status`, `send`'s verdict,
the runtime's own resharding) are exempt: their clients carry `OBSERVER_AGENT` in their user agent.
A bad key or value raises `ProfileError` naming it.
"""

from __future__ import annotations

import dataclasses
import json
import random
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

#: In the User-Agent of clients the endpoint never injects a fault into (observers, not subjects).
OBSERVER_AGENT = "shardline-observer"

SERVICES = ("kinesis", "dynamodb", "sqs")
#: The request-level errors injected per service, as each service names them.
REQUEST_ERROR_CODES = ("InternalFailure", "ServiceUnavailable", "ThrottlingException")
#: Where a worker is killed relative to its commit (its first DynamoDB write of `commit_operations`).
KILL_POINTS = ("before_commit", "during_commit", "after_commit")
#: In `WorkerFaults.functions`: every function that is the target of an event-source mapping.
CONSUMERS = "@consumers"
#: The environment variable that makes a Lambda process a producer function (its streams).
PRODUCER_MARKER = "SHARDLINE_STREAMS"


class ProfileError(ValueError):
    """A chaos profile that cannot be used; the message names the profile and the key."""


@dataclass(frozen=True)
class Latency:
    """Added before a call is served: `fixed_ms`, plus a Pareto tail (`tail_scale_ms` × (Pareto(α) − 1)),
    capped at `max_ms`. With α = 1.5 most calls get a few ms and one in a hundred gets tens of times more."""

    fixed_ms: float = 0.0
    tail_scale_ms: float = 0.0
    tail_alpha: float = 1.5
    max_ms: float = 2000.0

    def sample_ms(self, rng: random.Random) -> float:
        tail = self.tail_scale_ms * (rng.paretovariate(self.tail_alpha) - 1) if self.tail_scale_ms else 0.0
        return min(self.max_ms, self.fixed_ms + tail)

    @property
    def active(self) -> bool:
        return self.fixed_ms > 0 or self.tail_scale_ms > 0


@dataclass(frozen=True)
class EndpointFaults:
    """Faults the AWS endpoint injects, beyond the Kinesis limits it enforces.

    - `put_records_throttle_rate` / `put_records_failure_rate`: share of PutRecords entries refused with
      ProvisionedThroughputExceededException / InternalFailure (refused entries are not written).
    - `request_error_rate[service]`: share of calls answered with one of `REQUEST_ERROR_CODES`
      (in the service's own shape), having done nothing.
    - `lost_response_rate[service]`: share of calls served (the effect happens) whose response is
      never delivered: the connection is closed after `lost_response_delay_s`.
    - `lost_request_rate[service]`: share of calls lost before they are served: nothing happens and
      the connection is closed without a response (the client cannot tell it from a lost response).
    - `slow_put_records_rate`: share of PutRecords calls held `slow_put_records_s` seconds (longer
      than the producer function's 5 s read timeout) and then served: the write lands after the
      client gave up on it, maybe after its retry landed.
    - `brownout_every_s`: a brownout of `brownout_s` seconds begins every `brownout_every_s` seconds
      of PutRecords traffic (the first at a random point of the first interval, then 0.5 to 1.5
      intervals after the last one ended; 0: never); in it every PutRecords is answered 503
      ServiceUnavailable, having written nothing.
    - `producer_reads_denied`: GetRecords, GetShardIterator and SubscribeToShard of a producer
      function (a Lambda process whose environment has `PRODUCER_MARKER`) are answered
      AccessDeniedException, as its write-only role would have them.
    - `latency`: added to every call of the subjects.
    - `dynamodb_transaction_canceled_rate`: share of TransactWriteItems on `dynamodb_tables` answered
      TransactionCanceledException (reason TransactionConflict), having written nothing.
    - `dynamodb_throttling_rate`: share of reads and writes on `dynamodb_tables` answered with
      ThrottlingException / ProvisionedThroughputExceededException, having done nothing.
    - `dynamodb_tables`: glob patterns of table names (default: every table).
    - `sqs_send_error_rate`: share of SendMessage / SendMessageBatch calls failed, sending nothing.
    """

    put_records_throttle_rate: float = 0.0
    put_records_failure_rate: float = 0.0
    request_error_rate: dict[str, float] = field(default_factory=dict)
    lost_response_rate: dict[str, float] = field(default_factory=dict)
    lost_response_delay_s: float = 0.0
    lost_request_rate: dict[str, float] = field(default_factory=dict)
    slow_put_records_rate: float = 0.0
    slow_put_records_s: float = 6.0
    brownout_every_s: float = 0.0
    brownout_s: float = 2.0
    producer_reads_denied: bool = False
    latency: Latency = field(default_factory=Latency)
    dynamodb_transaction_canceled_rate: float = 0.0
    dynamodb_throttling_rate: float = 0.0
    dynamodb_tables: tuple[str, ...] = ("*",)
    sqs_send_error_rate: float = 0.0

    @property
    def active(self) -> bool:
        rates = (
            self.put_records_throttle_rate,
            self.put_records_failure_rate,
            self.dynamodb_transaction_canceled_rate,
            self.dynamodb_throttling_rate,
            self.sqs_send_error_rate,
            self.slow_put_records_rate,
            self.brownout_every_s,
            *self.request_error_rate.values(),
            *self.lost_response_rate.values(),
            *self.lost_request_rate.values(),
        )
        return any(rates) or self.latency.active or self.producer_reads_denied


@dataclass(frozen=True)
class WorkerFaults:
    """Faults injected around the functions' invocations (counted per function by the runtime).

    - `functions`: glob patterns of function names, or `@consumers` (the mappings' targets).
    - `kill_every`: every Nth invocation of a chosen function is SIGKILLed mid-invocation, at the next
      point of `KILL_POINTS` in turn (the turn is shared by all functions, so a run reaches each
      point). "before" dies just before sending its commit, "during" while the commit is in flight
      (it may or may not land), "after" just after the commit answered, before the function returns.
    - `commit_operations`: the DynamoDB operations that count as the commit.
    - `hang_every`: every Nth invocation never returns: the runtime kills it at the function's timeout.
    - `oom_every`: every Nth invocation allocates memory until it passes the function's memory size,
      and is killed as Lambda kills it (Runtime.OutOfMemory).
    - `task_kill_every_s`: every that many seconds, one process of a worker consumer group (an ECS
      task: `local.ecs`), chosen at random, is SIGKILLed wherever it is — mid-batch, mid-commit,
      mid-renewal; the service starts another, as ECS replaces a stopped task.
    """

    functions: tuple[str, ...] = (CONSUMERS,)
    kill_every: int = 0
    commit_operations: tuple[str, ...] = ("TransactWriteItems",)
    hang_every: int = 0
    oom_every: int = 0
    task_kill_every_s: float = 0.0

    @property
    def active(self) -> bool:
        return bool(self.kill_every or self.hang_every or self.oom_every or self.task_kill_every_s)


@dataclass(frozen=True)
class Reshard:
    """A split (of the open shard with the most records written, at its hash range's middle) or a
    merge (of the two adjacent open shards with the fewest records), `at_s` seconds after the
    stream's first record was written; `stream` None: every stream."""

    at_s: float
    action: Literal["split", "merge"]
    stream: str | None = None


@dataclass(frozen=True)
class ChaosProfile:
    name: str = "none"
    seed: int | None = None  # None: a different run each time
    endpoint: EndpointFaults = field(default_factory=EndpointFaults)
    workers: WorkerFaults = field(default_factory=WorkerFaults)
    reshards: tuple[Reshard, ...] = ()

    @property
    def active(self) -> bool:
        return self.endpoint.active or self.workers.active or bool(self.reshards)

    def as_dict(self) -> dict[str, Any]:
        """JSON-able; `profile_from_dict(profile.as_dict())` gives the profile back."""
        return dataclasses.asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.as_dict(), sort_keys=True)


_BUILT_IN: dict[str, dict[str, Any]] = {
    "none": {},
    "light": {
        "endpoint": {
            "put_records_throttle_rate": 0.05,
            "put_records_failure_rate": 0.005,
            "request_error_rate": {"kinesis": 0.005, "dynamodb": 0.005, "sqs": 0.005},
            "lost_response_rate": {"kinesis": 0.001, "dynamodb": 0.001, "sqs": 0.001},
            "latency": {"fixed_ms": 1.0, "tail_scale_ms": 2.0},
            "dynamodb_transaction_canceled_rate": 0.005,
            "dynamodb_throttling_rate": 0.005,
            "sqs_send_error_rate": 0.01,
        },
        "workers": {"kill_every": 1000, "task_kill_every_s": 120.0},
    },
    "heavy": {
        "endpoint": {
            "put_records_throttle_rate": 0.30,
            "put_records_failure_rate": 0.01,
            "request_error_rate": {"kinesis": 0.03, "dynamodb": 0.03, "sqs": 0.03},
            "lost_response_rate": {"kinesis": 0.01, "dynamodb": 0.01, "sqs": 0.01},
            "lost_request_rate": {"kinesis": 0.01, "dynamodb": 0.005, "sqs": 0.005},
            "slow_put_records_rate": 0.003,
            "slow_put_records_s": 6.0,
            "brownout_every_s": 30.0,
            "brownout_s": 1.5,
            "producer_reads_denied": True,
            "latency": {"fixed_ms": 2.0, "tail_scale_ms": 5.0},
            "dynamodb_transaction_canceled_rate": 0.02,
            "dynamodb_throttling_rate": 0.03,
            "sqs_send_error_rate": 0.05,
        },
        "workers": {"kill_every": 150, "oom_every": 500, "task_kill_every_s": 20.0},
        "reshards": [{"at_s": 10, "action": "split"}, {"at_s": 25, "action": "merge"}],
    },
}

PROFILE_NAMES = tuple(_BUILT_IN)


def load_profile(name_or_path: str | Path) -> ChaosProfile:
    """A built-in profile by name, or one read from a `.toml` or `.json` file."""
    text = str(name_or_path)
    if text in _BUILT_IN:
        return profile_from_dict({"name": text, **_BUILT_IN[text]})
    path = Path(text)
    if not path.is_file():
        raise ProfileError(f"no chaos profile {text!r}: not one of {', '.join(PROFILE_NAMES)}, nor a file")
    try:
        raw = tomllib.loads(path.read_text()) if path.suffix == ".toml" else json.loads(path.read_text())
    except (ValueError, tomllib.TOMLDecodeError) as error:
        raise ProfileError(f"chaos profile {path}: {error}") from None
    if not isinstance(raw, dict):
        raise ProfileError(f"chaos profile {path}: a table (object) of settings, not {type(raw).__name__}")
    base = raw.pop("extends", "none")
    if base not in _BUILT_IN:
        raise ProfileError(f"chaos profile {path}: extends {base!r}, not one of {', '.join(PROFILE_NAMES)}")
    merged = _merge(_BUILT_IN[base], raw)
    return profile_from_dict({"name": path.stem, **merged}, source=str(path))


def profile_from_dict(raw: dict[str, Any], *, source: str = "profile") -> ChaosProfile:
    """A profile from plain data (a file's, or `ChaosProfile.as_dict()`), every key and value checked."""
    raw = dict(raw)
    endpoint = _build(EndpointFaults, raw.pop("endpoint", {}), f"{source}: endpoint")
    workers = _build(WorkerFaults, raw.pop("workers", {}), f"{source}: workers")
    reshards = []
    for index, entry in enumerate(raw.pop("reshards", [])):
        reshard = _build(Reshard, entry, f"{source}: reshards[{index}]")
        if reshard.action not in ("split", "merge"):
            where = f"{source}: reshards[{index}]"
            raise ProfileError(f"{where}.action is {reshard.action!r}, not split or merge")
        if reshard.at_s < 0:
            raise ProfileError(f"{source}: reshards[{index}].at_s must be >= 0, got {reshard.at_s}")
        reshards.append(reshard)
    profile = _build(ChaosProfile, raw, source)
    return dataclasses.replace(profile, endpoint=endpoint, workers=workers, reshards=tuple(reshards))


_Settings = TypeVar("_Settings", bound="DataclassInstance")


def _build(kind: type[_Settings], raw: Any, where: str) -> _Settings:
    if not isinstance(raw, dict):
        raise ProfileError(f"{where}: a table (object) of settings, not {type(raw).__name__}")
    fields = {f.name: f for f in dataclasses.fields(kind)}
    values: dict[str, Any] = {}
    for key, value in raw.items():
        if key not in fields:
            raise ProfileError(f"{where}: unknown key {key!r} (known: {', '.join(fields)})")
        if key in ("endpoint", "workers", "reshards"):
            continue  # built by the caller
        values[key] = _checked(key, value, f"{where}.{key}")
    missing = [name for name, f in fields.items() if name not in raw and _required(f)]
    if missing:
        raise ProfileError(f"{where}: missing {', '.join(missing)}")
    return kind(**values)


def _checked(key: str, value: Any, where: str) -> Any:  # noqa: C901 -- over the gate before it existed; issue 26 cuts it
    """A value of the type its key takes; rates in [0, 1], counts and times >= 0."""
    if key == "latency":
        return _build(Latency, value, where)
    if key in ("request_error_rate", "lost_response_rate", "lost_request_rate"):
        if not isinstance(value, dict):
            raise ProfileError(f"{where}: a table of service -> rate, e.g. {{ kinesis = 0.01 }}")
        for service, rate in value.items():
            if service not in SERVICES:
                raise ProfileError(f"{where}: unknown service {service!r} (known: {', '.join(SERVICES)})")
            _rate(rate, f"{where}.{service}")
        return {service: float(rate) for service, rate in value.items()}
    if key in ("dynamodb_tables", "functions", "commit_operations"):
        if not isinstance(value, list | tuple) or not all(isinstance(item, str) for item in value):
            raise ProfileError(f"{where}: a list of strings")
        return tuple(value)
    if key.endswith("_rate"):
        return _rate(value, where)
    if key == "producer_reads_denied":
        if not isinstance(value, bool):
            raise ProfileError(f"{where}: true or false, got {value!r}")
        return value
    if key.endswith("_every"):
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ProfileError(f"{where}: a whole number >= 0 (0: never), got {value!r}")
        return value
    if key in ("name", "action", "stream"):
        if value is not None and not isinstance(value, str):
            raise ProfileError(f"{where}: a string, got {value!r}")
        return value
    if key == "seed":
        if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
            raise ProfileError(f"{where}: a whole number, got {value!r}")
        return value
    if not isinstance(value, int | float) or isinstance(value, bool) or value < 0:
        raise ProfileError(f"{where}: a number >= 0, got {value!r}")
    return float(value)


def _rate(value: Any, where: str) -> float:
    if not isinstance(value, int | float) or isinstance(value, bool) or not 0 <= value <= 1:
        raise ProfileError(f"{where}: a rate in [0, 1], got {value!r}")
    return float(value)


def _merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def rng_for(profile: ChaosProfile, site: str) -> random.Random:
    """A random source per injection site: reproducible under a seed, independent across sites."""
    return random.Random(None if profile.seed is None else f"{profile.seed}:{site}")


def _required(spec: dataclasses.Field[Any]) -> bool:
    return spec.default is dataclasses.MISSING and spec.default_factory is dataclasses.MISSING
