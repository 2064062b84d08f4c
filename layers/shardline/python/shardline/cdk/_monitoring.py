"""Alarms (with the dimensions they need) to one encrypted SNS topic and/or the team's own alarm
actions, and the dashboard, for whatever streams, producer API and consumer groups it is given."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from aws_cdk import Aws
from aws_cdk import aws_cloudwatch as cw
from aws_cdk import aws_cloudwatch_actions as actions
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as subscriptions
from constructs import Construct

from shardline.cdk._config_reader import logical_id
from shardline.cdk._consumer_group import ConsumerGroup
from shardline.cdk._dashboard import dashboard
from shardline.cdk._feature_flags import pin_feature_flags
from shardline.cdk._function import add_tags
from shardline.cdk._keys import alarm_topic_key
from shardline.cdk._metrics import (
    FIVE_MINUTES,
    ONE_MINUTE,
    kinesis,
    lambda_metric,
    shardline,
    workers_missing,
)
from shardline.cdk._producer_api import ProducerApi
from shardline.cdk._signatures import shows_its_props
from shardline.cdk._stream import Stream
from shardline.cdk._worker_group import WorkerGroup

_ALARM_ARNS = f"arn:{Aws.PARTITION}:cloudwatch:{Aws.REGION}:{Aws.ACCOUNT_ID}:alarm:*"
#: The longest wait of a stalled shard between two deliveries (shardline.consumer's backoff cap).
STALL_BACKOFF_CAP_S = 60
#: An hour in ALARM after the mapping skipped a batch: the page is not undone by the next quiet minute.
SKIPPED_WINDOW_MINUTES = 60
EVALUATION_PERIODS = 3
DATAPOINTS_TO_ALARM = 2
#: README heading (another section's anchor) that says how to put back what the mapping discarded.
REDRIVE_SECTION = "Redriving what the mapping discarded"
REDRIVE_ANCHOR = "#redriving-what-the-mapping-discarded"
API_LATENCY_P99_MS = 20_000
#: README heading that draws the applied-aggregate state's lane bound and what to do past it.
LANE_BOUND_SECTION = "The lane bound of the dedup state"
LANE_BOUND_ANCHOR = "#the-lane-bound-of-the-dedup-state"
#: A worker group's lease losses page when they go on: in this many of the last
#: LEASE_CHURN_WINDOW_MINUTES one-minute periods (a rebalance, when workers start or stop, moves
#: leases for a few minutes and pages nobody).
LEASE_CHURN_DATAPOINTS = 10
LEASE_CHURN_WINDOW_MINUTES = 15
#: A worker group's service runs fewer tasks than it wants for this many minutes in a row (a task
#: that stops is replaced within a minute or two).
WORKERS_MISSING_MINUTES = 5


def stall_window_minutes(timeout_seconds: int) -> int:
    """One-minute periods a stall alarm looks back over (one stalled delivery in them pages): longer than
    the longest gap between two stalled deliveries of a shard, each at most one invocation (the
    function's timeout, its backoff wait included) or one backoff wait, so a shard that stays stalled
    keeps the alarm in ALARM instead of flapping to OK between two deliveries."""
    return math.ceil(max(timeout_seconds, STALL_BACKOFF_CAP_S) / 60) + 2


def _duration(seconds: int) -> str:
    """`82800` -> `23 h`: a record age as an on-call engineer reads it."""
    if seconds % 3600 == 0:
        return f"{seconds // 3600} h"
    if seconds % 60 == 0:
        return f"{seconds // 60} min"
    return f"{seconds} s"


@shows_its_props
class Monitoring(Construct):
    """Alarms on what loses or delays data, each with its runbook line, and a dashboard, for the
    `streams`, `api` and `groups` it is given (any of them; a stream by ARN is drawn by its name).

    Every alarm and its return to OK go to `topic` (an encrypted SNS topic it creates, `emails`
    subscribed; `alarm_topic=False`: none) and to each of `alarm_actions` (the team's own, e.g. an
    `SnsAction` of its pager's topic). `alarms_enabled=False`: no alarm and no topic, the dashboard
    stays (a team that alarms its own way)."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        streams: Sequence[Stream] = (),
        api: ProducerApi | None = None,
        groups: Sequence[ConsumerGroup | WorkerGroup] = (),
        alarm_actions: Sequence[cw.IAlarmAction] = (),
        alarm_topic: bool = True,
        emails: Sequence[str] = (),
        alarms_enabled: bool = True,
        dashboard_name: str | None = None,
        key: kms.IKey | None = None,
        tags: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        pin_feature_flags(self)
        owner = f"Monitoring {construct_id!r}"
        if not alarms_enabled and (alarm_actions or emails):
            raise ValueError(
                f"{owner}: alarms_enabled: false, yet alarm_actions or emails are given: nobody would be told"
            )
        if alarms_enabled and not alarm_topic and not alarm_actions:
            raise ValueError(f"{owner}: alarm_topic: false and no alarm_actions: no alarm would reach anyone")
        if emails and not alarm_topic:
            raise ValueError(
                f"{owner}: emails: they subscribe to the alarm topic, which alarm_topic=False leaves out"
            )
        self.alarms: list[cw.Alarm] = []
        self._enabled = alarms_enabled
        self.topic: sns.Topic | None = None
        self._targets: list[cw.IAlarmAction] = []
        if alarms_enabled and alarm_topic:
            self._alarm_topic(key or alarm_topic_key(self, "Key", alias=None), emails)
        self._targets += list(alarm_actions)
        api_dimensions = self._alarms_on(list(streams), api, list(groups))
        self.dashboard = dashboard(self, dashboard_name, list(streams), api, list(groups), api_dimensions)
        add_tags(self, tags)

    def _alarm_topic(self, key: kms.IKey, emails: Sequence[str]) -> None:
        """One encrypted topic every alarm and OK goes to."""
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
        for email in emails:
            self.topic.add_subscription(subscriptions.EmailSubscription(email))
        self._targets = [actions.SnsAction(self.topic)]

    def _alarms_on(
        self, streams: list[Stream], api: ProducerApi | None, groups: list[ConsumerGroup | WorkerGroup]
    ) -> dict[str, str]:
        """The alarms (none when they are off); the API's metric dimensions, which the dashboard uses."""
        # Alarms only on what loses or delays data, each over several periods and with its runbook
        # line. Throttling that shardline retries anyway is on the dashboard, not a page.
        for stream in streams:
            name = stream.route
            half_retention_ms = stream.retention_hours * 3600 * 1000 / 2
            self._alarm(
                f"{name}IteratorAge",
                kinesis("GetRecords.IteratorAgeMilliseconds", stream, "Maximum"),
                half_retention_ms,
                f"{name}: the slowest reader is half a retention period behind; records start to be trimmed "
                "unread at the full period. Runbook: find the lagging group on the dashboard (lag widgets), "
                "check its function errors and duration; add shards or raise the retention.",
            )
            if api is None:
                continue
            producer = {"service": "shardline-producer", "StreamName": stream.stream_name}
            self._alarm(
                f"{name}ProducerNotLanded",
                shardline(api.metrics_namespace, "UserRecordsNotLanded", producer),
                0,
                f"{name}: the producer could not land records in time (throttled or expired, Kinesis "
                "unavailable, or replies lost and never confirmed) and answered them as failed: each "
                "entry says written false or unconfirmed, and callers must resend them (with their ids). "
                "Runbook: dashboard 'Producer: not landed, sealed, resent' and 'Stream health: "
                "throttled'; add shards if throttled, check Kinesis health if aggregates are sealed; "
                "check callers resend failed entries (API 207/503).",
            )
        api_dimensions = {} if api is None else self._api_alarms(api)
        for group in groups:
            if isinstance(group, WorkerGroup):
                self._worker_alarms(group)
            else:
                self._group_alarms(group)
        return api_dimensions

    def _api_alarms(self, api: ProducerApi) -> dict[str, str]:
        """The producer's alarms; the API's metric dimensions, which the dashboard uses."""
        self._alarm(
            "ProducerErrors",
            lambda_metric("Errors", api.function.function_name),
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
        return api_dimensions

    def _group_alarms(self, group: ConsumerGroup) -> None:
        """One consumer group's alarms."""
        name = group.name
        namespace = group.metrics_namespace
        function_name = group.function.function_name
        dimensions = {"service": f"shardline-{name}", "ConsumerGroup": name}
        retention_ms = group.stream.retention_hours * 3600 * 1000
        self._alarm(
            f"{name}IteratorAge",
            lambda_metric("IteratorAge", function_name, "Maximum"),
            retention_ms / 2,
            f"{name}: half a retention period behind; at the full period records are trimmed before "
            "this group reads them. Runbook: function errors and duration on the dashboard; a poison "
            "record is dead-lettered after maxAttempts, a slow sink needs capacity.",
        )
        self._alarm(
            f"{name}Errors",
            lambda_metric("Errors", function_name),
            0,
            f"{name}: invocations failed as a whole (timeouts, crashes): their batches are retried and "
            "the shard waits. Runbook: 'Recent errors'; CrashesDetected in the group's metrics.",
        )
        self._alarm(
            f"{name}RecordsFailed",
            shardline(namespace, "RecordsFailed", dimensions),
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
            "shard and sequence ranges only. Runbook: redrive those ranges through the group while "
            f"the stream retains them (README, '{REDRIVE_SECTION}', {REDRIVE_ANCHOR}).",
        )
        # A stalled shard pages within minutes, not over five-minute periods: nothing else moves
        # it, and the mapping discards the stalled batch at its record age, which this alarm must
        # come well before. Two minutes with a stalled delivery in the window: a stall that goes
        # on (a delivery at least every function timeout) pages in about two minutes; one
        # throttled delivery that the next one got past pages nobody. It stays in ALARM while
        # deliveries keep stalling.
        record_age = _duration(group.max_record_age_seconds)
        window = stall_window_minutes(group.timeout_seconds)
        self._alarm(
            f"{name}ShardStalled",
            shardline(namespace, "ShardStalls", dimensions, period=ONE_MINUTE),
            1,
            f"{name}: a shard is stalled on its environment, not on a record (sink table missing or "
            "forbidden, ItemCollectionSizeLimitExceeded, DLQ or dead-letter bucket refusing sends, "
            "DynamoDB down, a handler's DependencyUnavailable). Nothing is dead-lettered or lost while "
            "the stream holds the records: the shard retries from its first uncommitted record, with "
            "backoff. Runbook: read stalledCause (stalledSince, stalls) in the shard's lease row (table: "
            f"output {logical_id(name)}LeaseTable; locally `make status`) or the function's ERROR log; "
            "fix the cause (create the table, grant the permission, restore the dependency): the shard "
            "resumes by itself. This fires within minutes; the mapping discards a stalled batch only "
            f"at its record age ({record_age}): fix it before then, or see the BatchesSkippedByMapping "
            f"alarm. ALARM on stalled deliveries in 2 of the last {window} minutes; OK when fewer.",
            within_minutes=window,
            datapoints=2,
        )
        self._alarm(
            f"{name}BatchesSkippedByMapping",
            shardline(namespace, "BatchesSkippedByMapping", dimensions, period=ONE_MINUTE),
            1,
            f"{name}: the event-source mapping gave up on a stalled batch (record age or retries) and "
            "moved past records this group never applied. The on-failure queue holds their shard and "
            "sequence range (metadata only); the shard's lease row lists them in skippedByMapping. "
            "They are not lost while the stream retains them. Runbook: fix the stall's cause first "
            "(the ShardStalled alarm, stalledCause), then redrive them from the on-failure destination "
            f"before the stream trims them: README, '{REDRIVE_SECTION}' ({REDRIVE_ANCHOR}). OK an hour "
            "after the last skip, redriven or not: the lease row and the queue keep what to redrive.",
            within_minutes=SKIPPED_WINDOW_MINUTES,
        )
        self._alarm(
            f"{name}LeaseLosses",
            shardline(namespace, "LeaseLosses", dimensions),
            0,
            f"{name}: two invocations held one shard's lease. Runbook: check the mapping's "
            "ParallelizationFactor is 1 and that no second mapping reads this stream for this group.",
        )
        self._lanes_evicted(group.name, namespace, dimensions)

    def _worker_alarms(self, group: WorkerGroup) -> None:
        """A worker group's alarms: those of a Lambda group that apply (no function, no mapping),
        its lag, lease losses that go on, and workers missing."""
        name = group.name
        namespace = group.metrics_namespace
        dimensions = {"service": f"shardline-{name}", "ConsumerGroup": name}
        self._alarm(
            f"{name}MillisBehindLatest",
            shardline(namespace, "MillisBehindLatest", dimensions, "Maximum"),
            group.stream.retention_hours * 3600 * 1000 / 2,
            f"{name}: the workers are half a retention period behind; at the full period records are "
            "trimmed before this group reads them. Runbook: LeasesHeld and the workers running on the "
            "dashboard (a shard nobody holds does not move), ShardStalls, the handler's duration in the "
            "logs; raise workers.count (up to one per shard) or workers.cpu.",
        )
        self._alarm(
            f"{name}RecordsFailed",
            shardline(namespace, "RecordsFailed", dimensions),
            0,
            f"{name}: the handler failed on records (each is retried, then dead-lettered). Runbook: "
            "the workers' logs name the record; a fix followed by a DLQ redrive restores them.",
        )
        self._alarm(
            f"{name}DeadLetters",
            group.dead_letters.metric_approximate_number_of_messages_visible(
                period=FIVE_MINUTES, statistic="Maximum"
            ),
            0,
            f"{name}: poison records wait whole in the DLQ. Runbook: read one, fix the handler, send "
            "them back through the producer API.",
        )
        window = stall_window_minutes(0)  # a worker retries a stalled shard after its backoff
        self._alarm(
            f"{name}ShardStalled",
            shardline(namespace, "ShardStalls", dimensions, period=ONE_MINUTE),
            1,
            f"{name}: a shard is stalled on its environment, not on a record (sink table missing or "
            "forbidden, ItemCollectionSizeLimitExceeded, the DLQ refusing sends, DynamoDB down, a "
            "handler's DependencyUnavailable). Nothing is dead-lettered or skipped: the worker retries "
            "from the shard's first uncommitted record, with backoff, until the stream trims it (its "
            "retention is the deadline). Runbook: read stalledCause (stalledSince, stalls) in the "
            f"shard's lease row (table: output {logical_id(name)}LeaseTable) or the workers' ERROR log; "
            "fix the cause: the shard resumes by itself. ALARM on stalled attempts in 2 of the last "
            f"{window} minutes; OK when fewer.",
            within_minutes=window,
            datapoints=2,
        )
        self._alarm(
            f"{name}LeaseLosses",
            shardline(namespace, "LeaseLosses", dimensions, period=ONE_MINUTE),
            1,
            f"{name}: workers keep losing leases they held, in {LEASE_CHURN_DATAPOINTS} of the last "
            f"{LEASE_CHURN_WINDOW_MINUTES} minutes (a rebalance when workers start or stop moves leases "
            "for a few minutes, and pages nobody): renewals fail. Runbook: a worker starved of CPU "
            "(workers.cpu), the lease table throttled (dashboard), or leaseDurationSeconds too short "
            "for a renewal's round trip. Nothing is lost: a checkpoint moves only under the lease it "
            "was taken with, and the new holder resumes from the last one.",
            within_minutes=LEASE_CHURN_WINDOW_MINUTES,
            datapoints=LEASE_CHURN_DATAPOINTS,
        )
        self._lanes_evicted(name, namespace, dimensions)
        self._alarm(
            f"{name}WorkersMissing",
            workers_missing(group),
            1,
            f"{name}: the service ran fewer workers than its desired count for {WORKERS_MISSING_MINUTES} "
            "minutes: tasks stop or fail to start (the image, the role, the subnets' route to AWS, "
            "Fargate capacity), and the others hold more shards or some go unheld. Runbook: the "
            "service's events and stopped tasks' reasons in the ECS console, the workers' logs.",
            within_minutes=WORKERS_MISSING_MINUTES,
            datapoints=WORKERS_MISSING_MINUTES,
        )

    def _lanes_evicted(self, name: str, namespace: str, dimensions: dict[str, str]) -> None:
        """Evictions from a shard's applied-aggregate state (Lambda and worker groups alike): two
        five-minute periods of three with any, so a shard that stays over its bound pages and one
        burst of dead lanes (a fleet restarting under new producer ids) pages nobody."""
        self._alarm(
            f"{name}DedupLanesEvicted",
            shardline(namespace, "DedupLanesEvicted", dimensions),
            0,
            f"{name}: a shard's dedup state is over its bound (150 KB, about 4,150 producer lanes seen "
            "in the last 10 minutes) and drops the lanes that wrote least recently. A late copy of an "
            "aggregate of a dropped lane (a producer's resend after a lost reply) is applied again: "
            "records without a client id may be applied twice (never lost; records with ids are "
            "guarded by the sink). Runbook: the group's WARNING logs ('lanes evicted') say when; fewer "
            "producer incarnations per shard (long-lived producers, fewer forks or cold starts), "
            f"client ids on records that must not be applied twice: README, '{LANE_BOUND_SECTION}' "
            f"({LANE_BOUND_ANCHOR}).",
        )

    def _alarm(
        self,
        construct_id: str,
        metric: cw.Metric | cw.MathExpression,
        threshold: float,
        description: str,
        *,
        within_minutes: int | None = None,
        datapoints: int = 1,
    ) -> None:
        """Two bad periods of three above `threshold` (one burst shardline absorbs by retrying pages
        nobody); with `within_minutes` (a metric of one-minute periods), `datapoints` at or above it
        in the last `within_minutes` periods. None at all when the configuration turned alarms off."""
        if not self._enabled:
            return
        fast = within_minutes is not None
        alarm = metric.create_alarm(
            self,
            construct_id,
            threshold=threshold,
            evaluation_periods=within_minutes or EVALUATION_PERIODS,
            datapoints_to_alarm=datapoints if fast else DATAPOINTS_TO_ALARM,
            comparison_operator=cw.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD
            if fast
            else cw.ComparisonOperator.GREATER_THAN_THRESHOLD,
            treat_missing_data=cw.TreatMissingData.NOT_BREACHING,
            alarm_description=description,
        )
        alarm.add_alarm_action(*self._targets)
        alarm.add_ok_action(*self._targets)  # the page that says it is over
        self.alarms.append(alarm)
