"""A Python Lambda function the way every shardline function is built, and the props a team may
override on it (`function_props`), checked after the merge."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from aws_cdk import Duration, RemovalPolicy, Tags
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from constructs import Construct

from shardline.cdk._function_assets import stage_handler
from shardline.cdk._group_rules import refuse_own_variables
from shardline.cdk._layers import ARCHITECTURE, RUNTIME, Layers
from shardline.cdk._staging import release_build_folder

_R = logs.RetentionDays
_RETENTION = {
    1: _R.ONE_DAY, 3: _R.THREE_DAYS, 5: _R.FIVE_DAYS, 7: _R.ONE_WEEK, 14: _R.TWO_WEEKS, 30: _R.ONE_MONTH,
    60: _R.TWO_MONTHS, 90: _R.THREE_MONTHS, 120: _R.FOUR_MONTHS, 150: _R.FIVE_MONTHS, 180: _R.SIX_MONTHS,
    365: _R.ONE_YEAR, 400: _R.THIRTEEN_MONTHS, 545: _R.EIGHTEEN_MONTHS, 731: _R.TWO_YEARS,
    1827: _R.FIVE_YEARS, 3653: _R.TEN_YEARS,
}  # fmt: skip
#: Where a function's handler code may come from: a folder (an asset) or any `lambda_.Code`.
CodeSource = str | Path | lambda_.Code
#: What `function_props` may not change: the layers are built for this runtime and architecture.
FIXED_PROPS = {"runtime": RUNTIME, "architecture": ARCHITECTURE}


def handler_code(code: CodeSource) -> tuple[lambda_.Code, Path | None]:
    """`code` as Lambda code, and the build folder to release once it is bound: a folder becomes an
    asset of its allow-listed files only (`shardline.cdk._function_assets`: its modules and declared
    data files), staged from a private build folder."""
    if isinstance(code, lambda_.Code):
        return code, None
    staged = stage_handler(Path(code))
    return lambda_.Code.from_asset(str(staged)), staged


def python_function(
    scope: Construct,
    construct_id: str,
    *,
    owner: str,
    code: CodeSource,
    handler: str,
    layers: Layers,
    environment: dict[str, str],
    contract: tuple[str, ...],
    memory_mb: int,
    timeout_seconds: int,
    reserved_concurrency: int | None,
    metrics_namespace: str,
    log_key: kms.IKey,
    log_retention_days: int,
    log_removal: RemovalPolicy,
    function_props: Mapping[str, Any] | None = None,
) -> lambda_.Function:
    """arm64, the current Python runtime, both layers, X-Ray, and an explicit log group, written in
    Lambda's JSON log format: every line has a `level`, so the dashboard's "Recent errors" query
    (`filter level = 'ERROR'`) sees the consumers' errors and the runtime's, not only Powertools'.
    `reserved_concurrency` is both its share and its ceiling: it cannot starve the account's other
    functions, nor be starved by them (`shardline.cdk._config.producer_reservation`, `group_reservation`).
    The log group is encrypted with `log_key`; the role may write its own log group only.

    `function_props` (any `lambda_.Function` prop) are merged over these, except the runtime and
    architecture (the layers are built for them) and the environment's `contract` variables (what
    shardline's code reads); its `environment` adds to the function's. `owner` names the construct
    in a refusal."""
    props = dict(function_props or {})
    for name, fixed in FIXED_PROPS.items():
        if name in props and props[name] is not fixed and str(props[name]) != str(fixed):
            raise ValueError(
                f"{owner}: function_props.{name}: must stay {fixed} (shardline's layer is built for it)"
            )
    extra_environment = dict(props.pop("environment", None) or {})
    refuse_own_variables(owner, "function_props.environment", sorted(set(extra_environment) & set(contract)))
    try:
        retention = log_retention(log_retention_days)
    except ValueError as error:
        raise ValueError(f"{owner}: {error}") from None
    log_group = logs.LogGroup(
        scope,
        f"{construct_id}Logs",
        retention=retention,
        removal_policy=log_removal,
        encryption_key=log_key,
    )
    code_asset, staged = handler_code(code)
    defaults: dict[str, Any] = {
        "runtime": RUNTIME,
        "architecture": ARCHITECTURE,
        "handler": handler,
        "code": code_asset,
        "layers": [layers.shardline, layers.powertools],
        "memory_size": memory_mb,
        "timeout": Duration.seconds(timeout_seconds),
        "reserved_concurrent_executions": reserved_concurrency,
        "tracing": lambda_.Tracing.ACTIVE,
        "log_group": log_group,
        "logging_format": lambda_.LoggingFormat.JSON,
    }
    if "role" not in props:
        defaults["role"] = execution_role(scope, f"{construct_id}ServiceRole", log_group)
    function = lambda_.Function(
        scope,
        construct_id,
        **{**defaults, **props},
        environment={"POWERTOOLS_METRICS_NAMESPACE": metrics_namespace, **extra_environment, **environment},
    )
    if staged is not None:
        release_build_folder(function, staged)  # staged into the cloud assembly when the function bound it
    return function


def log_removal(retain: bool) -> RemovalPolicy:
    """What happens to a log group when its stack goes: kept with a stage's data (prod), which is
    what an incident review or an audit reads; deleted with a dev stage."""
    return RemovalPolicy.RETAIN if retain else RemovalPolicy.DESTROY


def log_retention(days: int) -> logs.RetentionDays:
    """The shortest allowed retention of at least `days` days (1..3653)."""
    if not 1 <= days <= max(_RETENTION):
        raise ValueError(f"log_retention_days: must be within 1..{max(_RETENTION)}, got {days}")
    return _RETENTION[min(allowed for allowed in _RETENTION if allowed >= days)]


def execution_role(scope: Construct, construct_id: str, log_group: logs.ILogGroup) -> iam.Role:
    """A function's role, writing only its own log group: what AWSLambdaBasicExecutionRole grants
    (CreateLogGroup, CreateLogStream, PutLogEvents on every log group) narrowed to the one group the
    template creates for it (its ARN ends in `:*`, its log streams).

    Its trust names Lambda alone, without `aws:SourceAccount`/`aws:SourceArn`: Lambda's execution-role
    documentation asks only for the service principal, and documents `aws:SourceArn` only where a
    function is the target (its resource policy), never as sent on the AssumeRole that gives a function
    its credentials; a condition on a key the request lacks would refuse every invocation. The role
    cannot serve another account anyway: only a principal of this account with iam:PassRole on it can
    give it to a function (PassRole does not cross accounts)."""
    role = iam.Role(scope, construct_id, assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"))
    role.add_to_policy(
        iam.PolicyStatement(
            actions=["logs:CreateLogStream", "logs:PutLogEvents"], resources=[log_group.log_group_arn]
        )
    )
    return role


def add_tags(scope: Construct, tags: Mapping[str, str] | None) -> None:
    """A platform team's tags (cost centre, owner, ...) on everything the construct made."""
    for name, value in (tags or {}).items():
        Tags.of(scope).add(name, value)
