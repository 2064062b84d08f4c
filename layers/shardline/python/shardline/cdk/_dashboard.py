"""The dashboard of whatever `Monitoring` is given: what stalls first, traffic in, the producer (with
an API), the streams' health, each consumer group (driven by Lambda or by workers), and recent errors."""

from __future__ import annotations

from aws_cdk import aws_cloudwatch as cw
from aws_cdk import aws_dynamodb as dynamodb
from constructs import Construct

from shardline.cdk._consumer_group import ConsumerGroup
from shardline.cdk._metrics import FIVE_MINUTES, ONE_MINUTE, kinesis, lambda_metric, shardline, task_count
from shardline.cdk._producer_api import ProducerApi
from shardline.cdk._stream import Stream
from shardline.cdk._worker_group import WorkerGroup

Group = ConsumerGroup | WorkerGroup


def dashboard(
    scope: Construct,
    name: str | None,
    streams: list[Stream],
    api: ProducerApi | None,
    groups: list[Group],
    api_dimensions: dict[str, str],
) -> cw.Dashboard:
    """The page: what stalls first, then traffic in, the producer (with an API), the streams'
    health, each group, and recent errors."""
    dashboard = cw.Dashboard(scope, "Dashboard", dashboard_name=name)
    dashboard.add_widgets(*_overview(streams, api, groups, api_dimensions))
    for group in groups:
        dashboard.add_widgets(
            *(_worker_widgets(group) if isinstance(group, WorkerGroup) else _lambda_widgets(group))
        )
    log_groups = ([] if api is None else [api.function.log_group.log_group_name]) + [
        (g.log_group if isinstance(g, WorkerGroup) else g.function.log_group).log_group_name for g in groups
    ]
    if log_groups:
        dashboard.add_widgets(
            cw.LogQueryWidget(
                title="Recent errors",
                log_group_names=log_groups,
                query_lines=[
                    "fields @timestamp, @log, level, message",
                    "filter level = 'ERROR'",
                    "sort @timestamp desc",
                    "limit 50",
                ],
                width=24,
            )
        )
    return dashboard


def _records(group: Group, dimensions: dict[str, str]) -> list[cw.IWidget]:
    """What a group did with its records: processed, skipped as duplicates or copies, dead-lettered."""
    graph = cw.GraphWidget
    name, namespace = group.name, group.metrics_namespace
    return [
        graph(
            title=f"{name}: processed, duplicates skipped, DLQ",
            left=[
                shardline(namespace, m, dimensions)
                for m in ("RecordsProcessed", "DuplicatesSkipped", "RecordsSentToDLQ")
            ],
            width=6,
        ),
        graph(
            # Copies of one aggregate (producer retries) and re-posted client ids, applied once; lanes
            # evicted from the dedup state past its bound (their late copies would apply again).
            title=f"{name}: copies and client ids skipped, lanes evicted",
            left=[
                shardline(namespace, m, dimensions)
                for m in (
                    "AggregateCopiesSkipped",
                    "OutOfRangeRecordsSkipped",
                    "ClientIdDuplicatesSkipped",
                    "DedupLanesEvicted",
                )
            ],
            width=6,
        ),
    ]


def _lease_throttles(group: Group, *operations: dynamodb.Operation, width: int) -> cw.IWidget:
    return cw.GraphWidget(
        title=f"{group.name}: lease table throttles",
        left=[
            group.leases.metric_throttled_requests_for_operations(operations=[op], period=FIVE_MINUTES)
            for op in operations
        ],
        width=width,
    )


def _lambda_widgets(group: ConsumerGroup) -> list[cw.IWidget]:
    name = group.name
    namespace = group.metrics_namespace
    dimensions = {"service": f"shardline-{name}", "ConsumerGroup": name}
    return [
        *_records(group, dimensions),
        cw.GraphWidget(
            title=f"{name}: lag",
            left=[
                shardline(namespace, "MillisBehindLatest", dimensions, "Maximum"),
                lambda_metric("IteratorAge", group.function.function_name, "Maximum"),
            ],
            width=6,
        ),
        _lease_throttles(
            group,
            dynamodb.Operation.GET_ITEM,
            dynamodb.Operation.UPDATE_ITEM,
            dynamodb.Operation.TRANSACT_WRITE_ITEMS,
            width=6,
        ),
    ]


def _worker_widgets(group: WorkerGroup) -> list[cw.IWidget]:
    """A worker group's records, lag, workers and leases (each worker's LeasesHeld: the fewest and
    the most, which a balanced group keeps within one), and its lease table's throttles."""
    name = group.name
    namespace = group.metrics_namespace
    dimensions = {"service": f"shardline-{name}", "ConsumerGroup": name}
    return [
        *_records(group, dimensions),
        cw.GraphWidget(
            title=f"{name}: lag",
            left=[shardline(namespace, "MillisBehindLatest", dimensions, "Maximum")],
            width=4,
        ),
        cw.GraphWidget(
            title=f"{name}: workers, leases held (fewest, most), lost",
            left=[task_count(group, "RunningTaskCount"), task_count(group, "DesiredTaskCount")],
            right=[
                shardline(namespace, "LeasesHeld", dimensions, "Minimum", label="LeasesHeld fewest"),
                shardline(namespace, "LeasesHeld", dimensions, "Maximum", label="LeasesHeld most"),
                shardline(namespace, "LeaseLosses", dimensions),
            ],
            width=4,
        ),
        _lease_throttles(
            group,
            dynamodb.Operation.GET_ITEM,
            dynamodb.Operation.UPDATE_ITEM,
            dynamodb.Operation.SCAN,
            dynamodb.Operation.TRANSACT_WRITE_ITEMS,
            width=4,
        ),
    ]


#: A Lambda group's signals in the stall widget: a shard that does not move, and what the mapping skipped.
SIGNALS = ("ShardStalls", "BatchesSkippedByMapping")


def _overview(
    streams: list[Stream],
    api: ProducerApi | None,
    groups: list[Group],
    api_dimensions: dict[str, str],
) -> list[cw.IWidget]:
    """The page's first row: title, stalls, traffic, the producer (with an API), stream health."""
    graph = cw.GraphWidget
    widgets: list[cw.IWidget] = [
        cw.TextWidget(markdown="# shardline", width=24, height=1),
        # First, as the page opens: a shard that does not move, and what the mapping skipped.
        graph(
            title="Consumer groups: shards stalled, batches skipped by the mapping",
            left=[
                shardline(
                    g.metrics_namespace,
                    metric,
                    {"service": f"shardline-{g.name}", "ConsumerGroup": g.name},
                    period=ONE_MINUTE,
                    label=f"{g.name} {metric}",
                )
                for g in groups
                # A worker group has no mapping to skip batches.
                for metric in (("ShardStalls",) if isinstance(g, WorkerGroup) else SIGNALS)
            ],
            width=24,
        ),
    ]
    if api is not None:
        widgets.append(
            graph(
                title="Traffic in: API requests",
                left=[
                    cw.Metric(
                        namespace="AWS/ApiGateway",
                        metric_name="Count",
                        dimensions_map=api_dimensions,
                        statistic="Sum",
                        period=FIVE_MINUTES,
                    )
                ],
                width=12,
            )
        )
    widgets.append(
        graph(
            title="Traffic in: Kinesis records",
            left=[kinesis("IncomingRecords", s) for s in streams],
            width=12,
        )
    )
    if api is not None:
        widgets += _producer_widgets(api, streams)
    widgets += [
        graph(
            title="Stream health: iterator age",
            left=[kinesis("GetRecords.IteratorAgeMilliseconds", s, "Maximum") for s in streams],
            width=12,
        ),
        graph(
            title="Stream health: throttled",
            left=[
                m
                for s in streams
                for m in (
                    kinesis("WriteProvisionedThroughputExceeded", s),
                    kinesis("ReadProvisionedThroughputExceeded", s),
                    kinesis("PutRecords.ThrottledRecords", s),
                    kinesis("PutRecords.FailedRecords", s),
                )
            ],
            width=12,
        ),
    ]
    return widgets


def _producer_widgets(api: ProducerApi, streams: list[Stream]) -> list[cw.IWidget]:
    graph = cw.GraphWidget
    namespace = api.metrics_namespace
    # The producer function publishes per stream (dimensions service and StreamName).
    producer = [{"service": "shardline-producer", "StreamName": s.stream_name} for s in streams]
    return [
        graph(
            title="Producer: user records per Kinesis record",
            left=[shardline(namespace, "UserRecordsPerKinesisRecord", p, "Average") for p in producer],
            width=6,
        ),
        graph(
            title="Producer: retries per record",
            left=[shardline(namespace, "RetriesPerRecord", p, "Average") for p in producer],
            width=6,
        ),
        graph(
            title="Producer: errors and expired",
            left=[shardline(namespace, m, p) for p in producer for m in ("AllErrors", "UserRecordExpired")],
            width=6,
        ),
        graph(
            title="Producer: not landed, sealed, resent",
            left=[
                shardline(namespace, m, p)
                for p in producer
                for m in (
                    "UserRecordsNotLanded",
                    "AggregatesSealed",
                    "SealedAggregatesResent",
                    "AggregatesRerouted",
                )
            ],
            width=6,
        ),
    ]
