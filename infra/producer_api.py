"""The REST API in front of the producer Lambda: `POST /streams/{stream}/records`."""

from __future__ import annotations

import json

from aws_cdk import Acknowledgment, Aws, RemovalPolicy, Validations
from aws_cdk import aws_apigateway as apigw
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs
from constructs import Construct

from infra.config import ApiConfig, PipelineConfig
from infra.function import log_removal, log_retention, python_function
from infra.layers import Layers
from infra.stream import Stream
from shardline.aws_lambda import ProducerEnvironment

RECORDS_MODEL = {
    "type": apigw.JsonSchemaType.OBJECT,
    "required": ["records"],
    "properties": {
        "records": apigw.JsonSchema(
            type=apigw.JsonSchemaType.ARRAY,
            min_items=1,
            items=apigw.JsonSchema(
                type=apigw.JsonSchemaType.OBJECT,
                required=["partitionKey"],
                properties={
                    "partitionKey": apigw.JsonSchema(
                        type=apigw.JsonSchemaType.STRING, min_length=1, max_length=256
                    ),
                    "data": apigw.JsonSchema(type=apigw.JsonSchemaType.STRING),
                    "explicitHashKey": apigw.JsonSchema(
                        type=apigw.JsonSchemaType.STRING, pattern="^(0|[1-9][0-9]{0,38})$"
                    ),
                    # The client's id of the record: shardline consumers apply each id once.
                    "id": apigw.JsonSchema(
                        type=apigw.JsonSchemaType.STRING, min_length=1, max_length=128, pattern="^[!-~]+$"
                    ),
                },
            ),
        )
    },
}


#: The producer's Kinesis actions on its streams, and no other: it writes and lists shards (its shard
#: map). It never reads the stream: a lost reply is settled by identity (the aggregate's id, which
#: consumers deduplicate), not by reading back, so the internet-facing role cannot read a record.
#: The API's TLS: 1.2 at least (API Gateway's legacy policy name; it takes TLS 1.2 and 1.3).
TLS_POLICY = "TLS_1_2"
PRODUCER_KINESIS_ACTIONS = ["kinesis:ListShards", "kinesis:PutRecords"]
#: ... and on a stream's customer-managed key, only what writing needs (never kms:Decrypt).
PRODUCER_KMS_ACTIONS = ["kms:GenerateDataKey"]


class ProducerApi(Construct):
    """The producer function, its least-privilege grants, and the REST API with its stage."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: ApiConfig,
        streams: list[Stream],
        layers: Layers,
        pipeline: PipelineConfig,
        log_key: kms.IKey,
    ) -> None:
        super().__init__(scope, construct_id)
        self.function = python_function(
            self,
            "Function",
            folder="functions/producer",
            layers=layers,
            memory_mb=512,
            timeout_seconds=29,  # API Gateway's integration limit
            pipeline=pipeline,
            log_key=log_key,
            environment={
                "POWERTOOLS_SERVICE_NAME": "shardline-producer",
                **ProducerEnvironment(
                    streams_json=json.dumps(
                        {
                            s.config.name: {
                                "streamName": s.name,
                                "maxRecordSize": s.config.max_record_size_kib * 1024,
                                "explicitHashKeys": s.config.explicit_hash_keys,
                            }
                            for s in streams
                        }
                    ),
                    max_records_per_request=config.max_records_per_request,
                    max_body_bytes=config.max_body_bytes,
                ).to_environ(),
            },
        )
        # Write-only: PutRecords and ListShards on its streams, GenerateDataKey on their keys.
        self.function.add_to_role_policy(
            iam.PolicyStatement(
                actions=PRODUCER_KINESIS_ACTIONS,
                resources=[s.stream.stream_arn for s in streams],
            )
        )
        for stream in streams:
            if stream.key is not None:
                stream.key.grant(self.function, *PRODUCER_KMS_ACTIONS)

        access_logs = logs.LogGroup(
            self,
            "AccessLogs",
            removal_policy=log_removal(pipeline),
            retention=log_retention(pipeline.log_retention_days),
            encryption_key=log_key,
        )
        self.api = apigw.RestApi(
            self,
            "Api",
            rest_api_name=f"{pipeline.prefix}-producer",
            description="shardline producer: POST /streams/{stream}/records",
            endpoint_types=[apigw.EndpointType.REGIONAL],  # service callers: no edge distribution
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
                access_log_format=apigw.AccessLogFormat.json_with_standard_fields(
                    caller=True,
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
        # The account-wide logging role may be assumed by API Gateway acting for this account only
        # (the confused-deputy guard AWS recommends for service roles).
        logging_role = self.api.node.find_child("CloudWatchRole").node.default_child
        assert isinstance(logging_role, iam.CfnRole)
        logging_role.add_property_override(
            "AssumeRolePolicyDocument.Statement.0.Condition",
            {"StringEquals": {"aws:SourceAccount": Aws.ACCOUNT_ID}},
        )
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
            removal_policy=log_removal(pipeline),
            retention=log_retention(pipeline.log_retention_days),
            encryption_key=log_key,
        )
        validator = self.api.add_request_validator(
            "Validator", validate_request_body=True, validate_request_parameters=True
        )
        model = self.api.add_model(
            "Records", content_type="application/json", schema=apigw.JsonSchema(**RECORDS_MODEL)
        )
        records = self.api.root.add_resource("streams").add_resource("{stream}").add_resource("records")
        self.method = records.add_method(
            "POST",
            apigw.LambdaIntegration(self.function),
            authorization_type=apigw.AuthorizationType.IAM
            if config.auth == "iam"
            else apigw.AuthorizationType.NONE,
            api_key_required=config.auth == "api-key",
            request_validator=validator,
            request_models={"application/json": model},
            # Idempotency-Key (optional): records without an id get "<key>:<index>" (shardline.aws_lambda).
            request_parameters={
                "method.request.path.stream": True,
                "method.request.header.Idempotency-Key": False,
            },
        )
        if config.auth == "api-key":
            plan = self.api.add_usage_plan(
                "Plan",
                throttle=apigw.ThrottleSettings(
                    rate_limit=config.throttle_rate, burst_limit=config.throttle_burst
                ),
            )
            plan.add_api_stage(stage=self.api.deployment_stage)
            plan.add_api_key(self.api.add_api_key("Key"))
            Validations.of(self.method).acknowledge(
                Acknowledgment(
                    id="AwsSolutions::AwsSolutions-APIG4",
                    reason="auth 'api-key' was chosen in cdk.json: callers present an API key of the "
                    "usage plan (throttled per key) instead of an IAM signature; the default is 'iam'.",
                )
            )
