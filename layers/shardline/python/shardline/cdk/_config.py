"""The pipeline configuration (the `shardline` context of cdk.json), validated with clear errors.

Every error names the key it is about, e.g. `shardline.consumerGroups[1].stream: unknown stream
'orders' (known: events)`, and fails synth before anything is built.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from shardline.cdk._config_api import (
    DEFAULT_MAX_BODY_BYTES,
    LAMBDA_SYNC_PAYLOAD,
    MAX_BODY_BYTES,
    ApiClient,
    ApiConfig,
    producer_reservation,
    read_api,
)
from shardline.cdk._config_groups import (
    DRIVERS,
    SINKS,
    ConsumerGroupConfig,
    StreamConfig,
    WorkersConfig,
    check_fan_out,
    read_group,
    read_stream,
)
from shardline.cdk._config_reader import NAME, ConfigError, Reader, logical_id
from shardline.cdk._group_rules import (
    MAX_STREAM_CONSUMERS,
    MIN_MAX_ATTEMPTS,
    ON_DEMAND_SHARDS_RESERVED,
    STARTING_POSITIONS,
    group_reservation,
)

__all__ = [
    "DEFAULT_CONCURRENCY_BUDGET",
    "DEFAULT_MAX_BODY_BYTES",
    "DRIVERS",
    "LAMBDA_SYNC_PAYLOAD",
    "MAX_BODY_BYTES",
    "MAX_STREAM_CONSUMERS",
    "MIN_MAX_ATTEMPTS",
    "NAME",
    "ON_DEMAND_SHARDS_RESERVED",
    "PRODUCTION_STAGES",
    "SINKS",
    "STAGE",
    "STARTING_POSITIONS",
    "UNRESERVED_MINIMUM",
    "AlarmsConfig",
    "ApiClient",
    "ApiConfig",
    "ConfigError",
    "ConsumerGroupConfig",
    "PipelineConfig",
    "StreamConfig",
    "WorkersConfig",
    "group_reservation",
    "load",
    "logical_id",
    "producer_reservation",
]

STAGE = re.compile(r"^[a-z][a-z0-9-]{0,15}$")
#: Stages whose data outlives the stack unless `retainData` says otherwise.
PRODUCTION_STAGES = ("prod", "production")
#: Lambda keeps 100 concurrent executions of an account's quota unreserved; the default quota is 1,000.
UNRESERVED_MINIMUM = 100
DEFAULT_CONCURRENCY_BUDGET = 1000 - UNRESERVED_MINIMUM


@dataclass(frozen=True)
class AlarmsConfig:
    emails: tuple[str, ...] = ()  # subscribed to the alarm topic (each confirms by email)
    topic_arns: tuple[str, ...] = ()  # existing topics (a pager, chat) that get every alarm and OK
    #: `enabled: false`: no alarms and no alarm topic (a team that alarms its own way); the dashboard stays.
    enabled: bool = True


@dataclass(frozen=True)
class PipelineConfig:
    """The whole pipeline. `stage` (e.g. dev, prod) names everything physical, so stages live side by
    side in one account and region: the stack, streams, API, dashboard and metrics namespace."""

    stack_name: str
    stage: str
    retain_data: bool  # keep streams and tables (with deletion protection) when the stack goes
    log_retention_days: int
    streams: tuple[StreamConfig, ...]
    api: ApiConfig
    consumer_groups: tuple[ConsumerGroupConfig, ...]
    alarms: AlarmsConfig = AlarmsConfig()
    concurrency_budget: int = DEFAULT_CONCURRENCY_BUDGET  # what this stage may reserve in its account
    #: The folder the consumer groups' handler folders (`handler`) are relative to:
    #: the CDK app's own folder (where cdk.json is), whoever's app it is.
    code_root: Path = field(default_factory=Path.cwd)

    @property
    def prefix(self) -> str:
        """`<stackName>-<stage>`: the stack's name and the start of every physical name."""
        return f"{self.stack_name}-{self.stage}"

    @property
    def metrics_namespace(self) -> str:
        return f"{self.stack_name}/{self.stage}"

    def stream(self, name: str) -> StreamConfig:
        return next(stream for stream in self.streams if stream.name == name)


EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")
SNS_TOPIC_ARN = re.compile(r"^arn:aws[a-z-]*:sns:[a-z0-9-]+:\d{12}:[A-Za-z0-9_.-]{1,256}$")


def _alarms(data: Any) -> AlarmsConfig:
    read = Reader(data, "shardline.alarms")
    enabled = read.data.get("enabled", True)
    if not isinstance(enabled, bool):
        raise ConfigError(f"shardline.alarms.enabled: must be true or false, got {enabled!r}")
    if not enabled and (read.data.get("emails") or read.data.get("topicArns")):
        raise ConfigError(
            "shardline.alarms.enabled: false, yet emails or topicArns are given: nobody would be told"
        )
    emails = read.list("emails")
    for index, email in enumerate(emails):
        if not isinstance(email, str) or not EMAIL.match(email):
            raise ConfigError(f"shardline.alarms.emails[{index}]: not an email address: {email!r}")
    arns = read.list("topicArns")
    for index, arn in enumerate(arns):
        if not isinstance(arn, str) or not SNS_TOPIC_ARN.match(arn):
            raise ConfigError(f"shardline.alarms.topicArns[{index}]: not an SNS topic ARN: {arn!r}")
    return AlarmsConfig(emails=tuple(emails), topic_arns=tuple(arns), enabled=enabled)


def load(context: Any, stage: str | None = None, *, code_root: Path | None = None) -> PipelineConfig:
    """Validate the `shardline` context value and return the pipeline configuration; `stage` (from
    `cdk deploy -c stage=...`) overrides the configured one; `code_root` is the folder the handlers'
    folders are relative to (default: the working folder, where `cdk` runs the app)."""
    read = Reader(context, "shardline")
    stage = read.str("stage", "dev") if stage is None else stage
    if not STAGE.match(stage):
        raise ConfigError(f"shardline.stage: must be 1-16 lowercase letters, digits or '-', got {stage!r}")
    retain_data = read.data.get("retainData", stage in PRODUCTION_STAGES)
    if not isinstance(retain_data, bool):
        raise ConfigError(f"shardline.retainData: must be true or false, got {retain_data!r}")
    streams: dict[str, StreamConfig] = {}
    for index, data in enumerate(read.list("streams")):
        stream = read_stream(data, f"shardline.streams[{index}]")
        if stream.name in streams:
            raise ConfigError(f"shardline.streams[{index}].name: duplicate stream {stream.name!r}")
        streams[stream.name] = stream
    if not streams:
        raise ConfigError("shardline.streams: declare at least one stream")
    groups: list[ConsumerGroupConfig] = []
    for index, data in enumerate(read.list("consumerGroups")):
        group = read_group(data, f"shardline.consumerGroups[{index}]", streams)
        for first, existing in enumerate(groups):
            if existing.name == group.name:
                raise ConfigError(
                    f"shardline.consumerGroups[{index}].name: duplicate group {group.name!r} (also "
                    f"shardline.consumerGroups[{first}], driven by {existing.driver}; this one by "
                    f"{group.driver}): a group has one lease table and is driven one way, by Lambda or "
                    "by workers"
                )
        groups.append(group)
    check_fan_out(groups)
    if "powertoolsLayerVersion" in read.data:
        raise ConfigError(
            "shardline.powertoolsLayerVersion: no longer read: the Powertools layer deployed is the version "
            "shardline was tested with (POWERTOOLS_VERSION), resolved from its public SSM parameter; "
            "remove the key"
        )
    config = PipelineConfig(
        stack_name=read.name("stackName") if "stackName" in read.data else "shardline",
        stage=stage,
        retain_data=retain_data,
        log_retention_days=read.int("logRetentionDays", 30, low=1, high=3653),
        streams=tuple(streams.values()),
        api=read_api(read.data.get("api", {})),
        consumer_groups=tuple(groups),
        alarms=_alarms(read.data.get("alarms", {})),
        concurrency_budget=read.int("concurrencyBudget", DEFAULT_CONCURRENCY_BUDGET, low=1, high=1_000_000),
        code_root=Path.cwd() if code_root is None else code_root,
    )
    _check_reservations(config)
    _check_api_callers(config)
    return config


def _check_api_callers(config: PipelineConfig) -> None:
    """A stage that retains data does not take its API's writers from the whole account: with IAM
    auth, its resource policy must name them (`allowedPrincipals`) or their organization
    (`allowedOrganization`); without, it admits every principal of the account an identity policy
    allows (issue 40's security review)."""
    api = config.api
    if (
        config.retain_data
        and api.auth == "iam"
        and not api.allowed_principals
        and not api.allowed_organization
    ):
        raise ConfigError(
            f"shardline.api: stage {config.stage!r} retains its data, yet its API would admit every "
            "principal of the account: set shardline.api.allowedPrincipals (the roles or accounts that "
            "may write) or shardline.api.allowedOrganization"
        )


def _check_reservations(config: PipelineConfig) -> None:
    """Refuse a producer reservation the consumer groups' cannot coexist with: Lambda refuses to
    reserve past the account's quota less its unreserved minimum, and this stage has only its
    budget of it (other stages and functions in the account have theirs)."""
    groups = {
        group.name: group.reserved_concurrency for group in config.consumer_groups if group.driver == "lambda"
    }
    total = config.api.reserved_concurrency + sum(groups.values())
    if total > config.concurrency_budget:
        shares = ", ".join(f"{name} {count}" for name, count in groups.items()) or "none"
        raise ConfigError(
            f"shardline.api.reservedConcurrency: {config.api.reserved_concurrency} cannot coexist with "
            f"the consumer groups' reservations ({shares}): together {total}, over "
            f"shardline.concurrencyBudget ({config.concurrency_budget}, what this stage may reserve of the "
            f"account's Lambda quota less the {UNRESERVED_MINIMUM} Lambda keeps unreserved); lower "
            "throttleRate or throttledGiveUpSeconds, set reservedConcurrency, or raise the budget "
            "after raising the account's quota"
        )


#: The public name (`shardline.cdk.load_config`).
load_config = load
