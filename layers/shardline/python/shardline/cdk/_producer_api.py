"""The REST API in front of the producer Lambda: `POST /streams/{stream}/records`."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from aws_cdk import Acknowledgment, Aws, RemovalPolicy, Validations
from aws_cdk import aws_apigateway as apigw
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs
from constructs import Construct

from shardline.aws_lambda import ProducerEnvironment
from shardline.aws_lambda._http_idempotency import EXPIRES_AT_ATTRIBUTE, KEY_ATTRIBUTE
from shardline.cdk._config_api import (
    DEFAULT_MAX_BODY_BYTES,
    ApiClient,
    ApiConfig,
    check_api,
    default_per_caller_rate,
    producer_reservation,
)
from shardline.cdk._config_reader import logical_id
from shardline.cdk._feature_flags import pin_feature_flags
from shardline.cdk._function import add_tags, log_retention, python_function
from shardline.cdk._keys import grant_via, logs_key, retained_key
from shardline.cdk._layers import Layers
from shardline.cdk._nag import API, acknowledge_function, acknowledge_rules
from shardline.cdk._signatures import shows_its_props
from shardline.cdk._stream import Stream
from shardline.cdk._tables import attribute, table
from shardline.consumer._once import SQS_MAX_RETENTION_SECONDS, guard_ttl_seconds

#: The access log: who called (IAM identity, API key id, organization, address), what and when, and
#: the request id under which the producer logs the shard and sequence numbers of what it wrote.
ACCESS_LOG_FIELDS = {
    "requestId": "$context.requestId",
    "requestTime": "$context.requestTime",
    "httpMethod": "$context.httpMethod",
    "resourcePath": "$context.resourcePath",
    "path": "$context.path",
    "status": "$context.status",
    "responseLength": "$context.responseLength",
    "integrationLatency": "$context.integrationLatency",
    "protocol": "$context.protocol",
    "sourceIp": "$context.identity.sourceIp",
    "userAgent": "$context.identity.userAgent",
    "caller": "$context.identity.caller",
    "user": "$context.identity.user",
    "userArn": "$context.identity.userArn",
    "accountId": "$context.identity.accountId",
    "principalOrgId": "$context.identity.principalOrgId",
    "apiKeyId": "$context.identity.apiKeyId",
}
#: The producer's Kinesis actions on its streams, and no other: it writes and lists shards (its shard
#: map). It never reads the stream: a lost reply is settled by identity (the aggregate's id, which
#: consumers deduplicate), not by reading back, so the internet-facing role cannot read a record.
#: The API's TLS: 1.2 at least (API Gateway's legacy policy name; it takes TLS 1.2 and 1.3).
TLS_POLICY = "TLS_1_2"
PRODUCER_KINESIS_ACTIONS = ["kinesis:ListShards", "kinesis:PutRecords"]
#: ... and on a stream's customer-managed key, only what writing needs (never kms:Decrypt).
PRODUCER_KMS_ACTIONS = ["kms:GenerateDataKey"]
#: What API Gateway's account-level logging role does for execution and access logs: the writes of
#: AWS's AmazonAPIGatewayPushToCloudWatchLogs, without its reads (GetLogEvents, FilterLogEvents).
LOGGING_ROLE_ACTIONS = (
    "logs:CreateLogGroup",
    "logs:CreateLogStream",
    "logs:DescribeLogGroups",
    "logs:DescribeLogStreams",
    "logs:PutLogEvents",
)
#: On its idempotency table, what `_http_idempotency` calls: read a request's ids, record the
#: payload hashes of what it wrote. Nothing else (no Scan, no delete: the table's TTL deletes).
PRODUCER_IDEMPOTENCY_ACTIONS = ["dynamodb:BatchGetItem", "dynamodb:BatchWriteItem"]
#: ... and, with a per-caller rate, what `_http_rate` calls: one conditional counter update a request.
PRODUCER_RATE_ACTIONS = ["dynamodb:UpdateItem"]
#: API Gateway's integration limit: the producer answers within it.
API_INTEGRATION_SECONDS = 29


#: The producer function's code: one line of wiring around `shardline.aws_lambda.ProducerFunction`,
#: shipped with shardline (package data), so a team's app deploys it without holding a copy.
PRODUCER_HANDLER = Path(__file__).resolve().parent / "_producer_handler"


@shows_its_props
class ProducerApi(Construct):
    """The producer function, its least-privilege grants, and the REST API with its stage:
    `POST /v1/streams/{route}/records` for each of `streams` (a mapping route -> `Stream`, or a list,
    each under its `route`).

    Secure by default: IAM (SigV4) auth with a resource policy admitting this account (or
    `allowed_principals`, `allowed_organization`), or `auth="api-key"` with a key and usage plan per
    client; TLS 1.2+, throttling, request validation, access and execution logs encrypted with
    `log_key` (created if not given), X-Ray. The function writes its streams and never reads them.

    Its idempotency table keeps the payload hash of every id it wrote, so an id re-used with another
    body answers 422 (`shardline.aws_lambda._http_idempotency`): `idempotency_table` (the team's own:
    partition key `scopedId` S, TTL attribute `expiresAt`), or one created here (on demand,
    point-in-time recovery, encrypted with a key of its own). A hash is kept as long as a consumer's
    guard of its id (`guard_ttl_seconds`: the longest retention of the API's streams + SQS's 14
    days + a day).
    `key_alias` names the key made for a created table.

    `per_caller_rate` (auth "iam"): each IAM caller's requests per second, counted by the function
    in the idempotency table (`shardline.aws_lambda._http_rate`: an assumed role's sessions are one
    caller; over it, 429 with `Retry-After`), since API Gateway cannot key a usage plan by IAM
    principal. None: half the stage's `throttle_rate`; 0: no per-caller limit."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        streams: Mapping[str, Stream] | Sequence[Stream],
        layers: Layers,
        auth: str = "iam",
        throttle_rate: float = 100.0,
        throttle_burst: int = 200,
        max_records_per_request: int = 500,
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
        throttled_give_up_seconds: float = 3.0,
        reserved_concurrency: int | None = None,
        allowed_principals: Sequence[str] = (),
        allowed_organization: str | None = None,
        clients: Sequence[ApiClient] = (),
        memory_mb: int = 512,
        timeout_seconds: int = 29,
        log_retention_days: int = 30,
        log_key: kms.IKey | None = None,
        removal_policy: RemovalPolicy = RemovalPolicy.RETAIN,
        api_name: str | None = None,
        metrics_namespace: str = "shardline",
        tags: Mapping[str, str] | None = None,
        function_props: Mapping[str, Any] | None = None,
        idempotency_table: dynamodb.ITable | None = None,
        key_alias: str | None = None,
        per_caller_rate: float | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        pin_feature_flags(self)
        owner = f"ProducerApi {construct_id!r}"
        routes = dict(streams) if isinstance(streams, Mapping) else {s.route: s for s in streams}
        if not routes:
            raise ValueError(f"{owner}: streams: give at least one stream")
        config = ApiConfig(
            auth=auth,
            throttle_rate=throttle_rate,
            throttle_burst=throttle_burst,
            max_records_per_request=max_records_per_request,
            max_body_bytes=max_body_bytes,
            throttled_give_up_seconds=throttled_give_up_seconds,
            reserved_concurrency=producer_reservation(throttle_rate, throttled_give_up_seconds)
            if reserved_concurrency is None
            else reserved_concurrency,
            allowed_principals=tuple(allowed_principals),
            allowed_organization=allowed_organization,
            clients=tuple(clients),
            per_caller_rate=default_per_caller_rate(auth, throttle_rate)
            if per_caller_rate is None
            else per_caller_rate,
        )
        check_api(
            lambda _key, prop: f"{owner}: {prop}",
            auth=auth,
            throttle_rate=throttle_rate,
            throttle_burst=throttle_burst,
            max_body_bytes=max_body_bytes,
            allowed_principals=config.allowed_principals,
            allowed_organization=allowed_organization,
            clients=config.clients,
            per_caller_rate=config.per_caller_rate,
        )
        if not 1 <= timeout_seconds <= API_INTEGRATION_SECONDS:
            raise ValueError(
                f"{owner}: timeout_seconds: must be within 1..{API_INTEGRATION_SECONDS} (API Gateway's "
                f"integration limit), got {timeout_seconds}"
            )
        self.streams = routes
        self.metrics_namespace = metrics_namespace
        if log_key is None:
            log_key = logs_key(self, "LogsKey", description="shardline producer API: logs", alias=None)
        self.log_key = log_key  # given, or made here: pass it to the app's other constructs to share it
        if idempotency_table is None:
            idempotency_key = retained_key(
                self, "IdsKey", description="shardline producer API: idempotency table", alias=key_alias
            )
            idempotency_table = table(
                self,
                "Ids",
                attribute((KEY_ATTRIBUTE, "S")),
                removal_policy=removal_policy,
                key=idempotency_key,
                ttl=EXPIRES_AT_ATTRIBUTE,
            )
        self.idempotency_table = idempotency_table
        # As long as the consumers' guards of an id: a copy can be read (the stream's retention) or
        # redriven (a DLQ: SQS's longest, as the API knows no group's queue), + a day.
        self.idempotency_ttl_seconds = max(
            guard_ttl_seconds(s.retention_seconds, SQS_MAX_RETENTION_SECONDS) for s in routes.values()
        )
        self.function = python_function(
            self,
            "Function",
            owner=owner,
            code=PRODUCER_HANDLER,  # shardline's own: absolute, so no app needs a copy
            handler="app.handler",
            layers=layers,
            memory_mb=memory_mb,
            timeout_seconds=timeout_seconds,
            reserved_concurrency=config.reserved_concurrency,
            metrics_namespace=metrics_namespace,
            log_key=log_key,
            log_retention_days=log_retention_days,
            log_removal=removal_policy,
            environment={
                "POWERTOOLS_SERVICE_NAME": "shardline-producer",
                **ProducerEnvironment(
                    streams_json=json.dumps(
                        {
                            route: {
                                "streamName": s.stream_name,
                                "maxRecordSize": s.max_record_size_kib * 1024,
                                "explicitHashKeys": s.explicit_hash_keys,
                            }
                            for route, s in routes.items()
                        }
                    ),
                    max_records_per_request=config.max_records_per_request,
                    max_body_bytes=config.max_body_bytes,
                    throttled_give_up_seconds=config.throttled_give_up_seconds,
                    idempotency_table=idempotency_table.table_name,
                    idempotency_ttl_seconds=self.idempotency_ttl_seconds,
                    per_caller_rate=config.per_caller_rate,
                ).to_environ(),
            },
            contract=(
                *ProducerEnvironment.VARIABLES,
                "POWERTOOLS_SERVICE_NAME",
                "POWERTOOLS_METRICS_NAMESPACE",
            ),
            function_props=function_props,
        )
        # Write-only: PutRecords and ListShards on its streams, GenerateDataKey on their keys.
        unique = list({id(s): s for s in routes.values()}.values())
        self.function.add_to_role_policy(
            iam.PolicyStatement(actions=PRODUCER_KINESIS_ACTIONS, resources=[s.stream_arn for s in unique])
        )
        for stream in unique:
            if stream.key is not None:  # only through Kinesis, for PutRecords to its stream
                grant_via(self.function, "kinesis", PRODUCER_KMS_ACTIONS, stream.key)
        # Its idempotency table: the two batch calls, and its key through DynamoDB only.
        # With a per-caller rate, the callers' counters too, in the same table.
        rate = PRODUCER_RATE_ACTIONS if config.per_caller_rate else []
        idempotency_table.grant(self.function, *PRODUCER_IDEMPOTENCY_ACTIONS, *rate)
        if idempotency_table.encryption_key is not None:
            grant_via(self.function, "dynamodb", ["kms:Decrypt"], idempotency_table.encryption_key)

        policy = resource_policy(config)
        access_logs = logs.LogGroup(
            self,
            "AccessLogs",
            removal_policy=removal_policy,
            retention=log_retention(log_retention_days),
            encryption_key=log_key,
        )
        self.api = apigw.RestApi(
            self,
            "Api",
            rest_api_name=api_name,
            description="shardline producer: POST /streams/{stream}/records",
            endpoint_types=[apigw.EndpointType.REGIONAL],  # service callers: no edge distribution
            policy=policy,
            # Execution logs need the account-level API Gateway role. It is one per account and region,
            # shared by every API there: created here if absent, and kept when a stage is deleted.
            cloud_watch_role=True,
            cloud_watch_role_removal_policy=RemovalPolicy.RETAIN,
            deploy_options=apigw.StageOptions(
                stage_name="v1",
                throttling_rate_limit=config.throttle_rate,
                throttling_burst_limit=config.throttle_burst,
                tracing_enabled=True,
                logging_level=apigw.MethodLoggingLevel.INFO,
                data_trace_enabled=False,  # never log payloads
                metrics_enabled=True,
                access_log_destination=apigw.LogGroupLogDestination(access_logs),
                access_log_format=apigw.AccessLogFormat.custom(json.dumps(ACCESS_LOG_FIELDS)),
            ),
        )
        # The account-wide logging role may be assumed by API Gateway acting for this account only
        # (the confused-deputy guard AWS recommends for service roles).
        logging_role = self.api.node.find_child("CloudWatchRole").node.default_child
        assert isinstance(logging_role, iam.CfnRole)
        logging_role.add_property_override(
            "AssumeRolePolicyDocument.Statement.0.Condition",
            {"StringEquals": {"aws:SourceAccount": Aws.ACCOUNT_ID}},
        )
        # No AWS-managed policy (AmazonAPIGatewayPushToCloudWatchLogs: logs:* reads too, on every
        # account's "*"): the writes API Gateway makes for execution and access logs, on this
        # account and region's log groups only. The role is the account's, shared by its APIs
        # (execution logs go to groups API Gateway names and creates: API-Gateway-Execution-Logs_*),
        # so the groups cannot be named narrower than the account's.
        logging_role.managed_policy_arns = None  # the L1 property itself: cdk-nag reads it too
        logging_role.policies = [
            iam.CfnRole.PolicyProperty(
                policy_name="PushToCloudWatchLogs",
                policy_document=iam.PolicyDocument(
                    statements=[
                        iam.PolicyStatement(
                            actions=list(LOGGING_ROLE_ACTIONS),
                            resources=[f"arn:{Aws.PARTITION}:logs:{Aws.REGION}:{Aws.ACCOUNT_ID}:log-group:*"],
                        )
                    ]
                ),
            )
        ]
        # TLS 1.2 at least: without a security policy the Regional endpoint also accepts TLS 1.0.
        # The legacy TLS_1_2 policy needs no endpoint access mode (the enhanced SecurityPolicy_*
        # ones do); override the CfnRestApi's SecurityPolicy for TLS 1.3 only.
        rest_api = self.api.node.default_child
        assert isinstance(rest_api, apigw.CfnRestApi)
        rest_api.security_policy = TLS_POLICY
        # API Gateway creates its execution log group on first use, kept forever: create it first.
        logs.LogGroup(
            self,
            "ExecutionLogs",
            log_group_name=f"API-Gateway-Execution-Logs_{self.api.rest_api_id}/{self.api.deployment_stage.stage_name}",
            removal_policy=removal_policy,
            retention=log_retention(log_retention_days),
            encryption_key=log_key,
        )
        # The parameters only, not the body: a request model's refusal is API Gateway's bare
        # {"message": "Invalid request body"}, naming no record and no field. The function checks
        # every record (`shardline.kinesis.find_problems`: one set of rules, for JSON and NDJSON
        # alike) and names each problem's index and field, writing nothing.
        validator = self.api.add_request_validator(
            "Validator", validate_request_body=False, validate_request_parameters=True
        )
        records = self.api.root.add_resource("streams").add_resource("{stream}").add_resource("records")
        self.method = records.add_method(
            "POST",
            apigw.LambdaIntegration(self.function),
            authorization_type=apigw.AuthorizationType.IAM
            if config.auth == "iam"
            else apigw.AuthorizationType.NONE,
            api_key_required=bool(config.clients),  # each client's own key, with IAM or alone
            request_validator=validator,
            # Idempotency-Key (optional): records without an id get "<key>:<index>" (shardline.aws_lambda).
            request_parameters={
                "method.request.path.stream": True,
                "method.request.header.Idempotency-Key": False,
            },
        )
        for client in config.clients:
            self._client(client)
        if config.auth == "api-key":
            Validations.of(self.method).acknowledge(
                Acknowledgment(
                    id="AwsSolutions::AwsSolutions-APIG4",
                    reason="auth 'api-key' was chosen: each client presents its own API key "
                    "(its usage plan's throttle and daily quota) instead of an IAM signature; the default "
                    "is 'iam'.",
                )
            )
        acknowledge_function(self.function)
        acknowledge_rules(self.api, API)
        add_tags(self, tags)

    def _client(self, client: ApiClient) -> None:
        """A client's API key (its value made by API Gateway: `aws apigateway get-api-key --include-value`)
        and usage plan on the stage: its own throttle within the stage's, and its daily quota."""
        name = logical_id(client.name)
        key = self.api.add_api_key(f"Key{name}", api_key_name=f"{self.api.rest_api_name}-{client.name}")
        plan = self.api.add_usage_plan(
            f"Plan{name}",
            name=f"{self.api.rest_api_name}-{client.name}",
            throttle=apigw.ThrottleSettings(
                rate_limit=client.throttle_rate, burst_limit=client.throttle_burst
            ),
            quota=apigw.QuotaSettings(limit=client.requests_per_day, period=apigw.Period.DAY),
        )
        plan.add_api_stage(stage=self.api.deployment_stage)
        plan.add_api_key(key)


def resource_policy(config: ApiConfig) -> iam.PolicyDocument | None:
    """Who may invoke the API (auth "iam"), whatever their own IAM policies say: the configured
    principals (role or user ARNs, account ids) and organization, else this account. Everyone else
    meets an explicit Deny: for a caller of the same account an identity policy's Allow would
    otherwise be enough. No policy for auth "api-key", whose callers have no IAM identity."""
    if config.auth != "iam":
        return None
    org = config.allowed_organization
    arns = [principal for principal in config.allowed_principals if principal.startswith("arn:")]
    accounts = [principal for principal in config.allowed_principals if not principal.startswith("arn:")]
    if not (arns or accounts or org):
        accounts = [Aws.ACCOUNT_ID]
    invoke: dict[str, Any] = {"actions": ["execute-api:Invoke"], "resources": ["execute-api:/*"]}
    statements = []
    principals = [iam.ArnPrincipal(arn) for arn in arns] + [iam.AccountPrincipal(a) for a in accounts]
    if principals:
        statements.append(iam.PolicyStatement(sid="AllowedPrincipals", principals=principals, **invoke))
    if org is not None:
        statements.append(
            iam.PolicyStatement(
                sid="AllowedOrganization",
                principals=[iam.AnyPrincipal()],
                conditions={"StringEquals": {"aws:PrincipalOrgID": org}},
                **invoke,
            )
        )
    # A caller is refused when it matches none of the above (the conditions of one statement AND;
    # a negated operator holds when the key is absent, e.g. a caller outside any organization).
    unlisted: dict[str, Any] = {"ArnNotLike": {"aws:PrincipalArn": arns}} if arns else {}
    not_equal: dict[str, Any] = {"aws:PrincipalAccount": accounts} if accounts else {}
    if org is not None:
        not_equal["aws:PrincipalOrgID"] = org
    if not_equal:
        unlisted["StringNotEquals"] = not_equal
    statements.append(
        iam.PolicyStatement(
            sid="NoOneElse",
            effect=iam.Effect.DENY,
            principals=[iam.AnyPrincipal()],
            conditions=unlisted,
            **invoke,
        )
    )
    return iam.PolicyDocument(statements=statements)
