"""A Python Lambda function the way every shardline function is built."""

from __future__ import annotations

from aws_cdk import Duration, RemovalPolicy
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from constructs import Construct

from shardline.cdk._config import PipelineConfig
from shardline.cdk._layers import ARCHITECTURE, RUNTIME, Layers

_R = logs.RetentionDays
_RETENTION = {
    1: _R.ONE_DAY, 3: _R.THREE_DAYS, 5: _R.FIVE_DAYS, 7: _R.ONE_WEEK, 14: _R.TWO_WEEKS, 30: _R.ONE_MONTH,
    60: _R.TWO_MONTHS, 90: _R.THREE_MONTHS, 120: _R.FOUR_MONTHS, 150: _R.FIVE_MONTHS, 180: _R.SIX_MONTHS,
    365: _R.ONE_YEAR, 400: _R.THIRTEEN_MONTHS, 545: _R.EIGHTEEN_MONTHS, 731: _R.TWO_YEARS,
    1827: _R.FIVE_YEARS, 3653: _R.TEN_YEARS,
}  # fmt: skip


def python_function(
    scope: Construct,
    construct_id: str,
    *,
    folder: str,
    layers: Layers,
    environment: dict[str, str],
    memory_mb: int,
    timeout_seconds: int,
    reserved_concurrency: int,
    pipeline: PipelineConfig,
    log_key: kms.IKey,
) -> lambda_.Function:
    """arm64, the current Python runtime, both layers, X-Ray, and an explicit log group, written in
    Lambda's JSON log format: every line has a `level`, so the dashboard's "Recent errors" query
    (`filter level = 'ERROR'`) sees the consumers' errors and the runtime's, not only Powertools'.
    `reserved_concurrency` is both its share and its ceiling: it cannot starve the account's other
    functions, nor be starved by them (`shardline.cdk._config.producer_reservation`, `group_reservation`).
    The log group is encrypted with `log_key`; the role may write its own log group only."""
    log_group = logs.LogGroup(
        scope,
        f"{construct_id}Logs",
        retention=log_retention(pipeline.log_retention_days),
        removal_policy=log_removal(pipeline),
        encryption_key=log_key,
    )
    return lambda_.Function(
        scope,
        construct_id,
        runtime=RUNTIME,
        architecture=ARCHITECTURE,
        handler="app.handler",
        # A relative folder is the app's (code_root); an absolute one, shardline's own (the producer).
        code=lambda_.Code.from_asset(str(pipeline.code_root / folder), exclude=["**/__pycache__"]),
        layers=[layers.shardline, layers.powertools],
        memory_size=memory_mb,
        timeout=Duration.seconds(timeout_seconds),
        reserved_concurrent_executions=reserved_concurrency,
        tracing=lambda_.Tracing.ACTIVE,
        log_group=log_group,
        role=execution_role(scope, f"{construct_id}ServiceRole", log_group),
        logging_format=lambda_.LoggingFormat.JSON,
        environment={"POWERTOOLS_METRICS_NAMESPACE": pipeline.metrics_namespace, **environment},
    )


def log_removal(pipeline: PipelineConfig) -> RemovalPolicy:
    """What happens to a log group when its stack goes: kept with a stage's data (prod), which is
    what an incident review or an audit reads; deleted with a dev stage."""
    return RemovalPolicy.RETAIN if pipeline.retain_data else RemovalPolicy.DESTROY


def log_retention(days: int) -> logs.RetentionDays:
    """The shortest allowed retention of at least `days` days."""
    return _RETENTION[min(allowed for allowed in _RETENTION if allowed >= days)]


def execution_role(scope: Construct, construct_id: str, log_group: logs.ILogGroup) -> iam.Role:
    """A function's role, writing only its own log group: what AWSLambdaBasicExecutionRole grants
    (CreateLogGroup, CreateLogStream, PutLogEvents on every log group) narrowed to the one group the
    template creates for it (its ARN ends in `:*`, its log streams)."""
    role = iam.Role(scope, construct_id, assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"))
    role.add_to_policy(
        iam.PolicyStatement(
            actions=["logs:CreateLogStream", "logs:PutLogEvents"], resources=[log_group.log_group_arn]
        )
    )
    return role
