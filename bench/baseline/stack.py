"""The baseline stack: shardline's pipeline built the way a team builds it today, for `make cost`.

    POST /v1/streams/{stream}/records ──► API Gateway (REST, IAM) ──► producer Lambda ──► PutRecords
        ──► Kinesis stream ──► event-source mapping ──► consumer Lambda (Powertools BatchProcessor
        + idempotency) ──► events table (one item per record) + counts table (ADD per record)

Plain `aws-cdk-lib`, no `shardline` anywhere: the handlers (`handlers/`) import boto3 (the Lambda
runtime's) and Powertools (its public layer). It speaks shardline's HTTP contract (the same path,
body and per-record answer) so that `python -m local send` drives it unchanged.

What decides its cost, and why a competent team would choose it so (AWS's and Powertools' docs):

- **No aggregation.** The producer sends each record as its own Kinesis record (PutRecords, up to
  500 per call). A 100-B record then costs one PUT payload unit (25 KB) by itself and one of a
  shard's 1,000 records/s: Kinesis bills and limits by record count long before bytes. Aggregating
  needs the KPL (Java, a daemon) or a hand-written codec and de-aggregation in every consumer;
  teams on Lambda do not. Only the failed entries of a PutRecords answer are sent again, 3 attempts
  at most with a jittered backoff (AWS's PutRecords guidance); what is still failing is answered
  per record so the client resends it.
- **The stream** has the shards shardline's app gives the same load (`shards`, default 4: its
  cdk.json), on-demand capacity not used (a provisioned stream is what a sustained rate costs
  least on), 24 h retention (the default: no extended-retention charge), AWS-managed encryption.
- **The consumer**: one function doing both effects of shardline's two example groups, on one
  event-source mapping (shardline's app has two: one per group, each reading every record). Batch
  size 100 and a 1 s batching window, TRIM_HORIZON, as shardline's groups; ReportBatchItemFailures
  (Powertools' `BatchProcessor`), bisect on error, 2 retries then the SQS on-failure destination
  (Powertools' own Kinesis example template: "sent after 2 retries").
- **Idempotency: one Powertools idempotency record per Kinesis record.** `@idempotent_function`
  per record, keyed by the record's own id (in its payload: a stable id, not the sequence number,
  so a client's re-post is applied once too), the docs' defaults otherwise: DynamoDB persistence
  (a table of its own, key `id`, TTL on `expiration`), `expires_after_seconds` 3600, no local
  cache (it only helps within one warm container, and costs nothing in DynamoDB either way),
  `register_lambda_context` so a timed-out record's lock expires with the invocation. On the happy
  path that is 2 writes per record (PutItem INPROGRESS, UpdateItem COMPLETED with the result), plus
  a read only when a record was seen before.
- **The effects: 2 more writes per record.** A PutItem into the events table (keyed by the record's
  id: replaying it rewrites the same item) and an UpdateItem ADD on the counts table (keyed by the
  partition key). No transactions: Powertools' utility does not use them (so a crash between the
  count and the COMPLETED update counts a record twice on its retry — the docs' behaviour, kept), and
  a transaction would double the write units. 4 write request units per 100-B record in all (each
  item under 1 KB). Events items expire after 30 days (TTL), as shardline's app's sink items.
- **On-demand tables** (PAY_PER_REQUEST): what a team starts with, and what Powertools' examples use.
- **Memory and timeouts.** Both functions 256 MB on arm64: they wait on Kinesis and DynamoDB rather
  than compute, and 256 MB is where such functions usually land (128 MB's CPU share makes Powertools'
  imports and JSON slow, more memory buys no I/O). The producer's timeout 15 s (within API Gateway's
  29 s, room for its 3 PutRecords attempts); the consumer's 60 s (a batch of 100 records is 400
  DynamoDB calls, a few seconds; shardline's groups have 60 s too).
- **Logs**: one log group per function, kept one month; no per-record log lines (the handlers log
  only failures). The API stage logs one access line per request (what AWS and cdk-nag recommend);
  no execution logs, no X-Ray tracing (both extra cost a team turns on when it needs them).
- **The API** throttles at 100 requests/s, burst 200, as shardline's app.

For the local runtime only: the consumer's environment declares its sinks (`SHARDLINE_SINKS`, read
by `send`'s verdict) and names itself a consumer group (`SHARDLINE_GROUP`, `LEASE_TABLE`: the
verdict finds groups by them; the baseline has no lease table, so it names its idempotency table),
and the producer's names its route (`SHARDLINE_STREAMS`, which `send` reads for the stream); the
handlers read `SHARDLINE_STREAMS` as their route table and ignore the others.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from aws_cdk import Duration, RemovalPolicy, Stack
from aws_cdk import aws_apigateway as apigw
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_kinesis as kinesis
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_lambda_event_sources as sources
from aws_cdk import aws_logs as logs
from aws_cdk import aws_sqs as sqs
from aws_cdk import aws_ssm as ssm
from constructs import Construct

HANDLERS = Path(__file__).resolve().parent / "handlers"
DEFAULT_SHARDS = 4
#: The route of `POST /v1/streams/{stream}/records` (shardline's app calls its stream "events" too).
ROUTE = "events"
RUNTIME = lambda_.Runtime.PYTHON_3_12
ARCHITECTURE = lambda_.Architecture.ARM_64
#: The Powertools release shardline's app uses, from AWS's public layer by its SSM parameter.
POWERTOOLS_VERSION = "3.37.0"
POWERTOOLS_PARAMETER = f"/aws/service/powertools/python/arm64/python3.12/{POWERTOOLS_VERSION}"
MEMORY_MB = 256
PRODUCER_TIMEOUT_S = 15
CONSUMER_TIMEOUT_S = 60
BATCH_SIZE = 100
BATCHING_WINDOW_S = 1
RETRY_ATTEMPTS = 2
IDEMPOTENCY_EXPIRES_S = 3600
EVENTS_TTL_DAYS = 30
API_RATE, API_BURST = 100, 200
#: The attributes the handlers write, declared to the local verdict.
EVENT_ID, COUNT_KEY, COUNT = "id", "partitionKey", "count"


class BaselineStack(Stack):
    """The API, the stream, the consumer and its three tables and on-failure queue."""

    def __init__(self, scope: Construct, construct_id: str, *, shards: int = DEFAULT_SHARDS, **kwargs: Any):
        super().__init__(scope, construct_id, **kwargs)
        if not 1 <= shards <= 10_000:
            raise ValueError(f"shards: 1..10000, got {shards}")
        stream = kinesis.Stream(
            self,
            "Events",
            shard_count=shards,
            retention_period=Duration.hours(24),
            encryption=kinesis.StreamEncryption.MANAGED,
        )
        powertools = lambda_.LayerVersion.from_layer_version_arn(
            self, "Powertools", ssm.StringParameter.value_for_string_parameter(self, POWERTOOLS_PARAMETER)
        )
        self.producer = self._function(
            "Producer",
            "producer",
            PRODUCER_TIMEOUT_S,
            {"SHARDLINE_STREAMS": self.to_json_string({ROUTE: {"streamName": stream.stream_name}})},
        )
        stream.grant_write(self.producer)
        self.api = self._api(self.producer)

        idempotency = self._table("Idempotency", "id", ttl="expiration")
        events = self._table("EventsTable", EVENT_ID, ttl="expiresAt")
        counts = self._table("Counts", COUNT_KEY)
        sinks = [
            {"table": events.table_name, "holds": "records", "idAttribute": EVENT_ID},
            {
                "table": counts.table_name,
                "holds": "counts",
                "keyAttribute": COUNT_KEY,
                "countAttribute": COUNT,
            },
        ]
        self.consumer = self._function(
            "Consumer",
            "consumer",
            CONSUMER_TIMEOUT_S,
            {
                "IDEMPOTENCY_TABLE": idempotency.table_name,
                "IDEMPOTENCY_EXPIRES_SECONDS": str(IDEMPOTENCY_EXPIRES_S),
                "EVENTS_TABLE": events.table_name,
                "EVENTS_TTL_DAYS": str(EVENTS_TTL_DAYS),
                "COUNTS_TABLE": counts.table_name,
                "POWERTOOLS_SERVICE_NAME": "baseline-consumer",
                # For the local runtime's verdict only (see the module's docstring).
                "SHARDLINE_GROUP": "baseline-consumer",
                "LEASE_TABLE": idempotency.table_name,
                "SHARDLINE_SINKS": self.to_json_string(sinks),
            },
            layers=[powertools],
        )
        idempotency.grant_read_write_data(self.consumer)
        events.grant_write_data(self.consumer)
        counts.grant_write_data(self.consumer)
        self.failures = sqs.Queue(
            self,
            "ConsumerFailures",
            encryption=sqs.QueueEncryption.SQS_MANAGED,
            enforce_ssl=True,
            retention_period=Duration.days(14),
        )
        self.consumer.add_event_source(
            sources.KinesisEventSource(
                stream,
                starting_position=lambda_.StartingPosition.TRIM_HORIZON,
                batch_size=BATCH_SIZE,
                max_batching_window=Duration.seconds(BATCHING_WINDOW_S),
                bisect_batch_on_error=True,
                report_batch_item_failures=True,
                retry_attempts=RETRY_ATTEMPTS,
                on_failure=sources.SqsDlq(self.failures),
            )
        )
        self.stream = stream

    def _function(
        self,
        construct_id: str,
        handler: str,
        timeout_s: int,
        environment: dict[str, str],
        layers: list[lambda_.ILayerVersion] | None = None,
    ) -> lambda_.Function:
        log_group = logs.LogGroup(
            self,
            f"{construct_id}Logs",
            retention=logs.RetentionDays.ONE_MONTH,
            removal_policy=RemovalPolicy.DESTROY,
        )
        return lambda_.Function(
            self,
            construct_id,
            runtime=RUNTIME,
            architecture=ARCHITECTURE,
            code=lambda_.Code.from_asset(str(HANDLERS / handler)),
            handler=f"{handler}.handler",
            memory_size=MEMORY_MB,
            timeout=Duration.seconds(timeout_s),
            environment=environment,
            layers=layers or [],
            log_group=log_group,
        )

    def _table(self, construct_id: str, key: str, *, ttl: str | None = None) -> dynamodb.Table:
        return dynamodb.Table(
            self,
            construct_id,
            partition_key=dynamodb.Attribute(name=key, type=dynamodb.AttributeType.STRING),
            billing_mode=dynamodb.BillingMode.PAY_PER_REQUEST,
            time_to_live_attribute=ttl,
            removal_policy=RemovalPolicy.DESTROY,
        )

    def _api(self, producer: lambda_.Function) -> apigw.RestApi:
        access_logs = logs.LogGroup(
            self,
            "ApiAccessLogs",
            retention=logs.RetentionDays.ONE_MONTH,
            removal_policy=RemovalPolicy.DESTROY,
        )
        api = apigw.RestApi(
            self,
            "Api",
            description="baseline producer: POST /streams/{stream}/records",
            endpoint_types=[apigw.EndpointType.REGIONAL],
            cloud_watch_role=False,
            deploy_options=apigw.StageOptions(
                stage_name="v1",
                throttling_rate_limit=API_RATE,
                throttling_burst_limit=API_BURST,
                access_log_destination=apigw.LogGroupLogDestination(access_logs),
                access_log_format=apigw.AccessLogFormat.json_with_standard_fields(
                    caller=False,
                    http_method=True,
                    ip=True,
                    protocol=True,
                    request_time=True,
                    resource_path=True,
                    response_length=True,
                    status=True,
                    user=True,
                ),
            ),
        )
        records = api.root.add_resource("streams").add_resource("{stream}").add_resource("records")
        records.add_method(
            "POST",
            apigw.LambdaIntegration(producer),
            authorization_type=apigw.AuthorizationType.IAM,
        )
        return api
