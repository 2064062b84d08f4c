"""The metrics shardline's alarms and dashboard read: Kinesis's, Lambda's, ECS's (Container Insights,
a worker group's tasks), and the functions' and workers' own (EMF, in their namespace, by `service`
and stream or consumer group)."""

from __future__ import annotations

from aws_cdk import Duration
from aws_cdk import aws_cloudwatch as cw

from shardline.cdk._stream import Stream
from shardline.cdk._worker_group import WorkerGroup

FIVE_MINUTES = Duration.minutes(5)
ONE_MINUTE = Duration.minutes(1)


def kinesis(metric: str, stream: Stream, statistic: str = "Sum") -> cw.Metric:
    return cw.Metric(
        namespace="AWS/Kinesis",
        metric_name=metric,
        dimensions_map={"StreamName": stream.stream_name},
        statistic=statistic,
        period=FIVE_MINUTES,
    )


def lambda_metric(metric: str, function_name: str, statistic: str = "Sum") -> cw.Metric:
    return cw.Metric(
        namespace="AWS/Lambda",
        metric_name=metric,
        dimensions_map={"FunctionName": function_name},
        statistic=statistic,
        period=FIVE_MINUTES,
    )


def shardline(
    namespace: str,
    metric: str,
    dimensions: dict[str, str],
    statistic: str = "Sum",
    *,
    period: Duration = FIVE_MINUTES,
    label: str | None = None,
) -> cw.Metric:
    return cw.Metric(
        namespace=namespace,
        metric_name=metric,
        dimensions_map=dimensions,
        statistic=statistic,
        period=period,
        label=label,
    )


def task_count(group: WorkerGroup, metric: str) -> cw.Metric:
    """A worker group's service's task count (Container Insights: RunningTaskCount, DesiredTaskCount)."""
    return cw.Metric(
        namespace="ECS/ContainerInsights",
        metric_name=metric,
        dimensions_map={
            "ClusterName": group.cluster.cluster_name,
            "ServiceName": group.service.service_name,
        },
        statistic="Minimum" if metric == "RunningTaskCount" else "Maximum",
        period=ONE_MINUTE,
    )


def workers_missing(group: WorkerGroup) -> cw.MathExpression:
    """How many workers the service wants and does not run, minute by minute."""
    return cw.MathExpression(
        expression="desired - running",
        using_metrics={
            "desired": task_count(group, "DesiredTaskCount"),
            "running": task_count(group, "RunningTaskCount"),
        },
        label=f"{group.name} workers missing",
        period=ONE_MINUTE,
    )
