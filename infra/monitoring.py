"""Alarms (with the dimensions they need) to one encrypted SNS topic, and the dashboard."""

from __future__ import annotations

from aws_cdk import Aws, Duration
from aws_cdk import aws_cloudwatch as cw
from aws_cdk import aws_cloudwatch_actions as actions
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as subscriptions
from constructs import Construct

from infra.config import AlarmsConfig
from infra.consumer_group import ConsumerGroup
from infra.producer_api import ProducerApi
from infra.stream import Stream

_ALARM_ARNS = f"arn:{Aws.PARTITION}:cloudwatch:{Aws.REGION}:{Aws.ACCOUNT_ID}:alarm:*"
FIVE_MINUTES = Duration.minutes(5)
EVALUATION_PERIODS = 3
DATAPOINTS_TO_ALARM = 2
API_LATENCY_P99_MS = 20_000


def _kinesis(metric: str, stream: Stream, statistic: str = "Sum") -> cw.Metric:
    return cw.Metric(
        namespace="AWS/Kinesis",
        metric_name=metric,
        dimensions_map={"StreamName": stream.name},
        statistic=statistic,
        period=FIVE_MINUTES,
    )


def _lambda(metric: str, function_name: str, statistic: str = "Sum") -> cw.Metric:
    return cw.Metric(
        namespace="AWS/Lambda",
        metric_name=metric,
        dimensions_map={"FunctionName": function_name},
        statistic=statistic,
        period=FIVE_MINUTES,
    )


def _shardline(namespace: str, metric: str, dimensions: dict[str, str], statistic: str = "Sum") -> cw.Metric:
    return cw.Metric(
        namespace=namespace,
        metric_name=metric,
        dimensions_map=dimensions,
        statistic=statistic,
        period=FIVE_MINUTES,
    )


class Monitoring(Construct):
    """`topic` gets every alarm and its return to OK (and so do the configured existing topics);
    `dashboard` shows the pipeline."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        streams: list[Stream],
        api: ProducerApi,
        groups: list[ConsumerGroup],
        key: kms.IKey,
        dashboard_name: str,
        namespace: str,
        alarms: AlarmsConfig,
    ) -> None:
        super().__init__(scope, construct_id)
        self.namespace = namespace  # the functions' EMF namespace: one per stage
        self.topic = sns.Topic(self, "Alarms", master_key=key, enforce_ssl=True)
        # enforce_ssl writes a topic policy holding only a Deny, which replaces SNS's default one:
        # without this statement CloudWatch may not publish and no alarm reaches anyone.
        self.topic.add_to_resource_policy(
            iam.PolicyStatement(
                sid="CloudWatchAlarmsOfThisAccountPublish",
                principals=[iam.ServicePrincipal("cloudwatch.amazonaws.com")],
                actions=["sns:Publish"],
                resources=[self.topic.topic_arn],
                conditions={
                    "StringEquals": {"aws:SourceAccount": Aws.ACCOUNT_ID},
                    "ArnLike": {"aws:SourceArn": _ALARM_ARNS},
                },
            )
        )
        for email in alarms.emails:
            self.topic.add_subscription(subscriptions.EmailSubscription(email))
        self._targets = [actions.SnsAction(self.topic)] + [
            actions.SnsAction(sns.Topic.from_topic_arn(self, f"Existing{index}", arn))
            for index, arn in enumerate(alarms.topic_arns)
        ]
        self.alarms: list[cw.Alarm] = []
        # Alarms only on what loses or delays data, each over several periods and with its runbook
        # line. Throttling that shardline retries anyway is on the dashboard, not a page.
        for stream in streams:
            name = stream.config.name
            half_retention_ms = stream.config.retention_hours * 3600 * 1000 / 2
            self._alarm(
                f"{name}IteratorAge",
                _kinesis("GetRecords.IteratorAgeMilliseconds", stream, "Maximum"),
                half_retention_ms,
                f"{name}: the slowest reader is half a retention period behind; records start to be trimmed "
                "unread at the full period. Runbook: find the lagging group on the dashboard (lag widgets), "
                "check its function errors and duration; add shards or raise the retention.",
            )
            producer = {"service": "shardline-producer", "StreamName": stream.name}
            self._alarm(
                f"{name}ProducerNotLanded",
                _shardline(self.namespace, "UserRecordsNotLanded", producer),
                0,
                f"{name}: the producer could not land records in time (throttled or expired, Kinesis "
                "unavailable, or replies lost and never confirmed) and answered them as failed: each "
                "entry says written false or unconfirmed, and callers must resend them (with their ids). "
                "Runbook: dashboard 'Producer: not landed, sealed, resent' and 'Stream health: "
                "throttled'; add shards if throttled, check Kinesis health if aggregates are sealed; "
                "check callers resend failed entries (API 207/503).",
            )
        self._alarm(
            "ProducerErrors",
            _lambda("Errors", api.function.function_name),
            0,
            "producer function errors: requests answered 5XX. Runbook: the 'Recent errors' widget and the "
            "function's logs (Powertools, correlation id = API request id).",
        )
        api_dimensions = {"ApiName": api.api.rest_api_name, "Stage": api.api.deployment_stage.stage_name}
        self._alarm(
            "Api5xxRate",
            cw.Metric(
                namespace="AWS/ApiGateway",
                metric_name="5XXError",
                dimensions_map=api_dimensions,
                statistic="Average",
                period=FIVE_MINUTES,
            ),
            0.01,
            "producer API: more than 1% of requests answered 5XX, so their records were not written. "
            "Runbook: ProducerErrors and the function's logs; a 503 means every record was throttled.",
        )
        self._alarm(
            "ApiLatencyP99",
            cw.Metric(
                namespace="AWS/ApiGateway",
                metric_name="Latency",
                dimensions_map=api_dimensions,
                statistic="p99",
                period=FIVE_MINUTES,
            ),
            API_LATENCY_P99_MS,
            "producer API: p99 latency above 20 s, near API Gateway's 29 s limit. Runbook: the stream is "
            "throttling (dashboard) or Kinesis is slow; add shards or lower maxRecordsPerRequest.",
        )
        for group in groups:
            name = group.config.name
            function_name = group.function.function_name
            dimensions = {"service": f"shardline-{name}", "ConsumerGroup": name}
            retention_ms = group.stream.config.retention_hours * 3600 * 1000
            self._alarm(
                f"{name}IteratorAge",
                _lambda("IteratorAge", function_name, "Maximum"),
                retention_ms / 2,
                f"{name}: half a retention period behind; at the full period records are trimmed before "
                "this group reads them. Runbook: function errors and duration on the dashboard; a poison "
                "record is dead-lettered after maxAttempts, a slow sink needs capacity.",
            )
            self._alarm(
                f"{name}Errors",
                _lambda("Errors", function_name),
                0,
                f"{name}: invocations failed as a whole (timeouts, crashes): their batches are retried and "
                "the shard waits. Runbook: 'Recent errors'; CrashesDetected in the group's metrics.",
            )
            self._alarm(
                f"{name}RecordsFailed",
                _shardline(self.namespace, "RecordsFailed", dimensions),
                0,
                f"{name}: the handler failed on records (each is retried, then dead-lettered). Runbook: "
                "the function's logs name the record; a fix followed by a DLQ redrive restores them.",
            )
            self._alarm(
                f"{name}DeadLetters",
                group.dead_letters.metric_approximate_number_of_messages_visible(
                    period=FIVE_MINUTES, statistic="Maximum"
                ),
                0,
                f"{name}: poison records wait whole in the DLQ (large ones point at the dead-letter bucket). "
                "Runbook: read one, fix the handler, send them back through the producer API.",
            )
            self._alarm(
                f"{name}MappingFailures",
                group.failures.metric_approximate_number_of_messages_visible(
                    period=FIVE_MINUTES, statistic="Maximum"
                ),
                0,
                f"{name}: the event-source mapping gave up on batches (record age): the queue holds their "
                "shard and sequence ranges only. Runbook: re-read those ranges from the stream if retained.",
            )
            self._alarm(
                f"{name}LeaseLosses",
                _shardline(self.namespace, "LeaseLosses", dimensions),
                0,
                f"{name}: two invocations held one shard's lease. Runbook: check the mapping's "
                "ParallelizationFactor is 1 and that no second mapping reads this stream for this group.",
            )
        self.dashboard = self._dashboard(dashboard_name, streams, api, groups, api_dimensions)

    def _alarm(self, construct_id: str, metric: cw.Metric, threshold: float, description: str) -> None:
        alarm = metric.create_alarm(
            self,
            construct_id,
            threshold=threshold,
            # Two bad periods of three: one burst shardline absorbs by retrying pages nobody.
            evaluation_periods=EVALUATION_PERIODS,
            datapoints_to_alarm=DATAPOINTS_TO_ALARM,
            comparison_operator=cw.ComparisonOperator.GREATER_THAN_THRESHOLD,
            treat_missing_data=cw.TreatMissingData.NOT_BREACHING,
            alarm_description=description,
        )
        alarm.add_alarm_action(*self._targets)
        alarm.add_ok_action(*self._targets)  # the page that says it is over
        self.alarms.append(alarm)

    def _dashboard(self, name, streams, api, groups, api_dimensions) -> cw.Dashboard:
        dashboard = cw.Dashboard(self, "Dashboard", dashboard_name=name)
        graph = cw.GraphWidget
        # The producer function publishes per stream (dimensions service and StreamName).
        producer = [{"service": "shardline-producer", "StreamName": s.name} for s in streams]
        dashboard.add_widgets(
            cw.TextWidget(markdown="# shardline", width=24, height=1),
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
            ),
            graph(
                title="Traffic in: Kinesis records",
                left=[_kinesis("IncomingRecords", s) for s in streams],
                width=12,
            ),
            graph(
                title="Producer: user records per Kinesis record",
                left=[
                    _shardline(self.namespace, "UserRecordsPerKinesisRecord", p, "Average") for p in producer
                ],
                width=6,
            ),
            graph(
                title="Producer: retries per record",
                left=[_shardline(self.namespace, "RetriesPerRecord", p, "Average") for p in producer],
                width=6,
            ),
            graph(
                title="Producer: errors and expired",
                left=[
                    _shardline(self.namespace, m, p)
                    for p in producer
                    for m in ("AllErrors", "UserRecordExpired")
                ],
                width=6,
            ),
            graph(
                title="Producer: not landed, sealed, resent",
                left=[
                    _shardline(self.namespace, m, p)
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
            graph(
                title="Stream health: iterator age",
                left=[_kinesis("GetRecords.IteratorAgeMilliseconds", s, "Maximum") for s in streams],
                width=12,
            ),
            graph(
                title="Stream health: throttled",
                left=[
                    m
                    for s in streams
                    for m in (
                        _kinesis("WriteProvisionedThroughputExceeded", s),
                        _kinesis("ReadProvisionedThroughputExceeded", s),
                        _kinesis("PutRecords.ThrottledRecords", s),
                        _kinesis("PutRecords.FailedRecords", s),
                    )
                ],
                width=12,
            ),
        )
        for group in groups:
            name = group.config.name
            dimensions = {"service": f"shardline-{name}", "ConsumerGroup": name}
            dashboard.add_widgets(
                graph(
                    title=f"{name}: processed, duplicates skipped, DLQ",
                    left=[
                        _shardline(self.namespace, m, dimensions)
                        for m in ("RecordsProcessed", "DuplicatesSkipped", "RecordsSentToDLQ")
                    ],
                    width=6,
                ),
                graph(
                    # Copies of one aggregate (producer retries) and re-posted client ids, applied once.
                    title=f"{name}: copies and client ids skipped",
                    left=[
                        _shardline(self.namespace, m, dimensions)
                        for m in (
                            "AggregateCopiesSkipped",
                            "OutOfRangeRecordsSkipped",
                            "ClientIdDuplicatesSkipped",
                        )
                    ],
                    width=6,
                ),
                graph(
                    title=f"{name}: lag",
                    left=[
                        _shardline(self.namespace, "MillisBehindLatest", dimensions, "Maximum"),
                        _lambda("IteratorAge", group.function.function_name, "Maximum"),
                    ],
                    width=6,
                ),
                graph(
                    title=f"{name}: lease table throttles",
                    left=[
                        group.leases.metric_throttled_requests_for_operations(
                            operations=[op], period=FIVE_MINUTES
                        )
                        for op in (
                            dynamodb.Operation.GET_ITEM,
                            dynamodb.Operation.UPDATE_ITEM,
                            dynamodb.Operation.TRANSACT_WRITE_ITEMS,
                        )
                    ],
                    width=6,
                ),
            )
        log_groups = [api.function.log_group.log_group_name] + [
            g.function.log_group.log_group_name for g in groups
        ]
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
