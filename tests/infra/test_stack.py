"""The synthesized template is what we claim: secure defaults, least privilege, alarms, dashboard.

All offline: no credentials, no lookups. cdk-nag (AwsSolutions) runs on every synth of `app.build`;
cfn-lint checks the template; the pinned CDK CLI synthesizes the app as `cdk synth` would.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from aws_cdk.assertions import Match, Template

from app import CDK_JSON, build
from infra.config import ConfigError, load
from shardline.aws_lambda import POWERTOOLS_VARIABLES, ConsumerEnvironment, ProducerEnvironment

ROOT = Path(__file__).resolve().parents[2]
os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")


def default_context() -> dict:
    return json.loads(CDK_JSON.read_text())["context"]


@pytest.fixture(scope="module")
def synthesized(tmp_path_factory) -> tuple[Template, Path]:
    outdir = tmp_path_factory.mktemp("cdk.out")
    app, stack = build(default_context(), outdir=str(outdir))
    app.synth()  # raises if cdk-nag reports an unacknowledged finding
    return Template.from_stack(stack), outdir / f"{stack.stack_name}.template.json"


@pytest.fixture(scope="module")
def template(synthesized) -> Template:
    return synthesized[0]


def resources(template: Template, kind: str) -> dict:
    return template.find_resources(kind)


def test_the_stream_is_encrypted_with_its_own_key_and_configured_capacity(template):
    template.has_resource_properties(
        "AWS::Kinesis::Stream",
        {
            "Name": "shardline-dev-events",
            "ShardCount": 4,
            "RetentionPeriodHours": 24,
            "StreamEncryption": {"EncryptionType": "KMS", "KeyId": Match.any_value()},
        },
    )
    template.has_resource_properties("AWS::KMS::Key", {"EnableKeyRotation": True})


def test_each_group_has_a_kcl_lease_table_and_a_sink_pay_per_request_with_pitr(template):
    tables = resources(template, "AWS::DynamoDB::Table").values()
    assert len(tables) == 4
    for table in tables:
        props = table["Properties"]
        assert props["BillingMode"] == "PAY_PER_REQUEST"
        assert props["PointInTimeRecoverySpecification"] == {"PointInTimeRecoveryEnabled": True}
        assert props["SSESpecification"] == {"SSEEnabled": True}
    keys = sorted(tuple(k["AttributeName"] for k in t["Properties"]["KeySchema"]) for t in tables)
    assert keys == [("leaseKey",), ("leaseKey",), ("partitionKey",), ("pk", "sk")]


def test_functions_are_arm64_python312_traced_with_both_layers_and_explicit_logs(template):
    functions = resources(template, "AWS::Lambda::Function")
    assert len(functions) == 3
    for function in functions.values():
        props = function["Properties"]
        assert props["Runtime"] == "python3.12" and props["Architectures"] == ["arm64"]
        assert props["TracingConfig"] == {"Mode": "Active"}
        assert len(props["Layers"]) == 2
        assert "LogGroup" in props["LoggingConfig"]
    parameters = template.to_json()["Parameters"]
    powertools = {
        json.dumps(layer)
        for f in functions.values()
        for layer in f["Properties"]["Layers"]
        if "Ref" in layer and layer["Ref"] in parameters
    }
    assert len(powertools) == 1, "every function has the one Powertools layer, from the SSM parameter"
    for group in resources(template, "AWS::Logs::LogGroup").values():
        assert group["Properties"].get("RetentionInDays") == 30


def test_mapping_defaults_retry_forever_within_a_margin_below_retention(template):
    mappings = resources(template, "AWS::Lambda::EventSourceMapping").values()
    assert len(mappings) == 2
    for mapping in mappings:
        props = mapping["Properties"]
        assert props["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
        assert props["BisectBatchOnFunctionError"] is True
        assert props["MaximumRetryAttempts"] == -1, "until the record age: never before shardline's DLQ"
        assert props["MaximumRecordAgeInSeconds"] == 24 * 3600 - 3600, "an hour below the 24 h retention"
        assert props["StartingPosition"] == "TRIM_HORIZON" and props["BatchSize"] == 100
        assert props["ParallelizationFactor"] == 1 and props["MaximumBatchingWindowInSeconds"] == 1
        assert "Fn::GetAtt" in json.dumps(props["DestinationConfig"]["OnFailure"]["Destination"])


def test_queues_are_kms_encrypted_and_tls_only(template):
    queues = resources(template, "AWS::SQS::Queue")
    assert len(queues) == 4  # per group: shardline's DLQ and the mapping's on-failure destination
    assert all("KmsMasterKeyId" in q["Properties"] for q in queues.values())
    policies = json.dumps(resources(template, "AWS::SQS::QueuePolicy"))
    assert policies.count('"aws:SecureTransport": "false"') == 4


def test_the_api_requires_iam_validates_requests_throttles_logs_and_traces(template):
    template.has_resource_properties(
        "AWS::ApiGateway::Method",
        {
            "HttpMethod": "POST",
            "AuthorizationType": "AWS_IAM",
            "RequestValidatorId": Match.any_value(),
            "RequestModels": {"application/json": Match.any_value()},
            "RequestParameters": {"method.request.path.stream": True},
        },
    )
    template.has_resource_properties(
        "AWS::ApiGateway::RequestValidator", {"ValidateRequestBody": True, "ValidateRequestParameters": True}
    )
    template.has_resource_properties(
        "AWS::ApiGateway::Stage",
        {
            "TracingEnabled": True,
            "AccessLogSetting": {
                "DestinationArn": Match.any_value(),
                "Format": Match.string_like_regexp("requestId"),
            },
            "MethodSettings": [
                Match.object_like(
                    {
                        "LoggingLevel": "INFO",
                        "DataTraceEnabled": False,
                        "ThrottlingRateLimit": 100,
                        "ThrottlingBurstLimit": 200,
                    }
                )
            ],
        },
    )


def _statements(template: Template, role_prefix: str) -> list[dict]:
    return [
        statement
        for name, policy in resources(template, "AWS::IAM::Policy").items()
        if name.startswith(role_prefix)
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]
    ]


def test_the_producer_may_only_list_shards_and_put_records_on_its_stream(template):
    statements = _statements(template, "ProducerFunction")
    kinesis = [s for s in statements if any(a.startswith("kinesis:") for a in _actions(s))]
    assert len(kinesis) == 1 and sorted(_actions(kinesis[0])) == ["kinesis:ListShards", "kinesis:PutRecords"]
    assert "StreameventsStream" in json.dumps(kinesis[0]["Resource"])
    others = {a for s in statements for a in _actions(s)} - {"kinesis:ListShards", "kinesis:PutRecords"}
    assert others <= {"kms:GenerateDataKey", "xray:PutTraceSegments", "xray:PutTelemetryRecords"}


def test_each_consumer_reads_its_stream_and_writes_only_its_tables_and_queue(template):
    for prefix, own in (("Groupeventsink", "Groupeventsink"), ("Groupkeycounter", "Groupkeycounter")):
        statements = _statements(template, f"{prefix}Function")
        actions = {a for s in statements for a in _actions(s)}
        assert "kinesis:PutRecords" not in actions and "kinesis:GetRecords" in actions
        dynamodb = sorted(a for s in statements for a in _actions(s) if a.startswith("dynamodb:"))
        lease = ["dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem"]
        sink = [
            "dynamodb:PutItem",
            "dynamodb:UpdateItem",
            "dynamodb:ConditionCheckItem",
            "dynamodb:DescribeTable",
        ]
        assert dynamodb == sorted([*lease, *sink]), "exactly what the lease table and sink need"
        for statement in statements:
            if any(a.startswith(("dynamodb:", "sqs:")) for a in _actions(statement)):
                assert own in json.dumps(statement["Resource"]), statement


def _actions(statement: dict) -> list[str]:
    actions = statement["Action"]
    return [actions] if isinstance(actions, str) else actions


def test_alarms_carry_their_dimensions_and_notify_one_encrypted_topic(template):
    alarms = resources(template, "AWS::CloudWatch::Alarm").values()
    by_metric = {
        (a["Properties"]["Namespace"], a["Properties"]["MetricName"]): a["Properties"] for a in alarms
    }
    expected = {
        ("AWS/Kinesis", "GetRecords.IteratorAgeMilliseconds"): "StreamName",
        ("shardline/dev", "UserRecordExpired"): "StreamName",
        ("AWS/Lambda", "IteratorAge"): "FunctionName",
        ("AWS/Lambda", "Errors"): "FunctionName",
        ("AWS/SQS", "ApproximateNumberOfMessagesVisible"): "QueueName",
        ("AWS/ApiGateway", "5XXError"): "ApiName",
        ("AWS/ApiGateway", "Latency"): "ApiName",
        ("shardline/dev", "RecordsFailed"): "ConsumerGroup",
        ("shardline/dev", "LeaseLosses"): "ConsumerGroup",
    }
    for key, dimension in expected.items():
        assert key in by_metric, key
        assert dimension in {d["Name"] for d in by_metric[key]["Dimensions"]}, key
    iterator_age = by_metric[("AWS/Kinesis", "GetRecords.IteratorAgeMilliseconds")]
    assert iterator_age["Threshold"] == 24 * 3600 * 1000 / 2, "half the retention period"
    topics = resources(template, "AWS::SNS::Topic")
    assert len(topics) == 1 and "KmsMasterKeyId" in next(iter(topics.values()))["Properties"]
    topic = next(iter(topics))
    assert all(json.dumps(a["Properties"]["AlarmActions"]) == json.dumps([{"Ref": topic}]) for a in alarms)


def test_alarms_page_on_loss_and_delay_only_over_several_periods_with_a_runbook(template):
    alarms = [a["Properties"] for a in resources(template, "AWS::CloudWatch::Alarm").values()]
    metrics = {a["MetricName"] for a in alarms}
    retried_anyway = {
        "WriteProvisionedThroughputExceeded",
        "ReadProvisionedThroughputExceeded",
        "PutRecords.FailedRecords",
        "PutRecords.ThrottledRecords",
        "Throttles",
    }
    assert not metrics & retried_anyway, "throttling shardline retries is a dashboard widget, not a page"
    for alarm in alarms:
        assert alarm["EvaluationPeriods"] == 3 and alarm["DatapointsToAlarm"] == 2, alarm["MetricName"]
        assert "Runbook:" in alarm["AlarmDescription"], alarm["MetricName"]
    consumer_age = [a for a in alarms if a["MetricName"] == "IteratorAge"]
    assert consumer_age and all(a["Threshold"] == 24 * 3600 * 1000 / 2 for a in consumer_age)
    latency = next(a for a in alarms if a["MetricName"] == "Latency")
    assert latency["ExtendedStatistic"] == "p99"


def test_the_dashboard_shows_traffic_producer_streams_groups_tables_and_errors(template):
    [dashboard] = resources(template, "AWS::CloudWatch::Dashboard").values()
    body = json.dumps(dashboard["Properties"]["DashboardBody"])
    for title in (
        "Traffic in: API requests",
        "Traffic in: Kinesis records",
        "Producer: user records per Kinesis record",
        "Producer: retries per record",
        "Producer: errors and expired",
        "Stream health: iterator age",
        "event-sink: processed, duplicates skipped, DLQ",
        "key-counter: lag",
        "event-sink: lease table throttles",
        "Recent errors",
    ):
        assert title in body, title


#: cfn-lint warnings the template keeps, each with why it is harmless.
EXPLAINED_WARNINGS = {
    "W3005": "CDK adds DependsOn on a function's role (and its policy) that a GetAtt already implies: "
    "redundant, and it makes CloudFormation attach the policy before the function is created",
}


def test_cfn_lint_finds_no_errors_and_only_explained_warnings(synthesized):
    _, template_file = synthesized
    result = subprocess.run(
        [str(Path(sys.executable).parent / "cfn-lint"), "--format", "parseable", str(template_file)],
        capture_output=True,
        text=True,
    )
    # Exit status: a bit mask, 2 errors, 4 warnings, 8 informational; anything on stderr is a crash.
    assert result.stderr == "" and not result.returncode & 2, result.stdout + result.stderr
    findings = [line.split(":")[5] for line in result.stdout.splitlines()]
    unexplained = {code for code in findings if code not in EXPLAINED_WARNINGS}
    assert not unexplained, result.stdout


def test_parallelization_above_one_is_rejected_at_synth():
    context = default_context()["shardline"]
    context["consumerGroups"][1]["parallelization"] = 2
    with pytest.raises(
        ConfigError, match=r"^shardline\.consumerGroups\[1\]\.parallelization: must be 1.*checkpoint"
    ):
        load(context)


def test_retry_attempts_below_max_attempts_is_rejected_at_synth():
    context = default_context()["shardline"]
    context["consumerGroups"][0].update(retryAttempts=3, maxAttempts=3)
    with pytest.raises(
        ConfigError, match=r"^shardline\.consumerGroups\[0\]\.retryAttempts: 3 .*maxAttempts \(3\)"
    ):
        load(context)
    context["consumerGroups"][0].update(retryAttempts=4)
    assert load(context).consumer_groups[0].retry_attempts == 4


def test_record_age_at_or_beyond_retention_is_rejected_at_synth():
    context = default_context()["shardline"]
    context["consumerGroups"][0]["maxRecordAgeSeconds"] = 86400
    with pytest.raises(ConfigError, match=r"maxRecordAgeSeconds: 86400 must be below the stream's retention"):
        load(context)
    del context["consumerGroups"][0]["maxRecordAgeSeconds"]
    context["streams"][0]["retentionHours"] = 48
    assert load(context).consumer_groups[0].max_record_age_seconds == 47 * 3600


def test_each_consumer_group_has_a_tls_only_encrypted_expiring_dead_letter_bucket(template):
    buckets = resources(template, "AWS::S3::Bucket")
    assert len(buckets) == 2
    for bucket in buckets.values():
        props = bucket["Properties"]
        [rule] = props["BucketEncryption"]["ServerSideEncryptionConfiguration"]
        assert rule["ServerSideEncryptionByDefault"]["SSEAlgorithm"] == "aws:kms"
        assert "KMSMasterKeyID" in rule["ServerSideEncryptionByDefault"]
        assert all(props["PublicAccessBlockConfiguration"].values())
        assert props["LifecycleConfiguration"]["Rules"][0]["ExpirationInDays"] == 14
    policies = json.dumps(resources(template, "AWS::S3::BucketPolicy"))
    assert policies.count('"aws:SecureTransport": "false"') == 2


def test_consumer_function_may_only_put_dead_letter_objects_and_describe_its_sink(template):
    policies = json.dumps(resources(template, "AWS::IAM::Policy"))
    s3_actions = {action for action in __import__("re").findall(r'"(s3:[A-Za-z*]+)"', policies)}
    assert s3_actions == {"s3:PutObject"}
    assert policies.count('"dynamodb:DescribeTable"') >= 2, "each group reads its sink's key schema"


@pytest.mark.parametrize(
    ("change", "key"),
    [
        (
            lambda c: c["consumerGroups"][0].__setitem__("stream", "nope"),
            "shardline.consumerGroups[0].stream",
        ),
        (lambda c: c["streams"][0].__setitem__("shards", 0), "shardline.streams[0].shards"),
        (lambda c: c["streams"][0].__setitem__("retentionHours", 1), "shardline.streams[0].retentionHours"),
        (lambda c: c["api"].__setitem__("auth", "open"), "shardline.api.auth"),
    ],
)
def test_configuration_errors_name_the_key(change, key):
    context = default_context()["shardline"]
    change(context)
    with pytest.raises(ConfigError, match=rf"^{__import__('re').escape(key)}:"):
        load(context)


def test_python_app_py_and_the_pinned_cli_synthesize_offline(tmp_path):
    env = {
        **os.environ,
        "CDK_DISABLE_VERSION_CHECK": "1",
        "AWS_ACCESS_KEY_ID": "",
        "AWS_SECRET_ACCESS_KEY": "",
        "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "20",
    }
    direct = subprocess.run([sys.executable, "app.py"], cwd=ROOT, env=env, capture_output=True, text=True)
    assert direct.returncode == 0, direct.stderr[-2000:]
    cli = ROOT / "node_modules" / ".bin" / "cdk"
    out = tmp_path / "cdk.out"
    result = subprocess.run(
        [str(cli), "synth", "--no-notices", "--quiet", "--output", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert (out / "shardline-dev.template.json").exists()


def _placeholders(value: object) -> object:
    """A template value with every CDK token (Ref, Fn::GetAtt, Fn::Join, ...) as a placeholder string."""
    return value if isinstance(value, str) else "token-resolved-at-deploy-time"


def test_every_function_environment_is_exactly_the_shardline_contract(template):
    functions = resources(template, "AWS::Lambda::Function").values()
    producers, consumers = 0, 0
    for function in functions:
        variables = function["Properties"]["Environment"]["Variables"]
        environ = {name: str(_placeholders(value)) for name, value in variables.items()}
        if "SHARDLINE_STREAMS" in environ:
            contract: type = ProducerEnvironment
            parsed = ProducerEnvironment.from_environ(environ)
            assert set(json.loads(parsed.streams_json)) == {"events"}
            producers += 1
        else:
            contract = ConsumerEnvironment
            parsed = ConsumerEnvironment.from_environ(environ)
            assert parsed.group in {"event-sink", "key-counter"} and parsed.dlq_url is not None
            consumers += 1
        assert (
            parsed.to_environ().keys() == {n: v for n, v in environ.items() if n in contract.VARIABLES}.keys()
        )
        unknown = set(environ) - set(contract.VARIABLES) - POWERTOOLS_VARIABLES
        assert not unknown, f"variables outside the contract (renamed?): {sorted(unknown)}"
    assert (producers, consumers) == (1, 2)


# -- issue 10 ------------------------------------------------------------------------------------


def synth(change) -> Template:
    context = default_context()
    change(context["shardline"])
    app, stack = build(context)
    app.synth()  # cdk-nag: raises on an unacknowledged finding
    return Template.from_stack(stack)


def test_cloudwatch_may_publish_to_the_alarm_topic_from_this_account_only(template):
    allow = Match.object_like(
        {
            "Effect": "Allow",
            "Principal": {"Service": "cloudwatch.amazonaws.com"},
            "Action": "sns:Publish",
            "Condition": {
                "StringEquals": {"aws:SourceAccount": {"Ref": "AWS::AccountId"}},
                "ArnLike": {"aws:SourceArn": Match.any_value()},
            },
        }
    )
    deny_plain_http = Match.object_like(
        {"Effect": "Deny", "Condition": {"Bool": {"aws:SecureTransport": "false"}}}
    )
    template.has_resource_properties(
        "AWS::SNS::TopicPolicy", {"PolicyDocument": {"Statement": Match.array_with([deny_plain_http, allow])}}
    )


def test_alarms_notify_subscribed_emails_and_existing_topics_on_alarm_and_on_ok():
    pager = "arn:aws:sns:us-east-1:123456789012:pager"
    template = synth(lambda c: c.update(alarms={"emails": ["oncall@example.com"], "topicArns": [pager]}))
    template.has_resource_properties(
        "AWS::SNS::Subscription", {"Protocol": "email", "Endpoint": "oncall@example.com"}
    )
    for alarm in resources(template, "AWS::CloudWatch::Alarm").values():
        properties = alarm["Properties"]
        assert pager in properties["AlarmActions"] and pager in properties["OKActions"]
        assert len(properties["AlarmActions"]) == 2 and properties["OKActions"] == properties["AlarmActions"]


@pytest.mark.parametrize(
    ("alarms", "key"),
    [
        ({"emails": ["not-an-address"]}, "shardline.alarms.emails[0]"),
        ({"topicArns": ["arn:aws:sqs:us-east-1:123456789012:q"]}, "shardline.alarms.topicArns[0]"),
    ],
)
def test_alarm_destinations_that_are_not_addresses_or_topics_fail_synth(alarms, key):
    context = default_context()["shardline"]
    context["alarms"] = alarms
    with pytest.raises(ConfigError, match=key.replace("[", r"\[").replace("]", r"\]")):
        load(context)


def test_the_dashboard_is_named_after_the_stack_not_the_last_consumer_group(template):
    template.has_resource_properties("AWS::CloudWatch::Dashboard", {"DashboardName": "shardline-dev"})


def test_the_stream_takes_the_configured_maximum_record_size():
    template = synth(lambda c: c["streams"][0].update(maxRecordSizeKiB=4096))
    template.has_resource_properties("AWS::Kinesis::Stream", {"MaxRecordSizeInKiB": 4096})


def test_the_body_bound_leaves_room_for_the_proxy_event_in_lambdas_6_mb_payload(template):
    from infra.config import LAMBDA_SYNC_PAYLOAD, MAX_BODY_BYTES

    producer = next(
        f["Properties"]["Environment"]["Variables"]
        for f in resources(template, "AWS::Lambda::Function").values()
        if "MAX_BODY_BYTES" in f["Properties"].get("Environment", {}).get("Variables", {})
    )
    body = int(producer["MAX_BODY_BYTES"])
    assert body <= MAX_BODY_BYTES == LAMBDA_SYNC_PAYLOAD - 128 * 1024
    context = default_context()["shardline"]
    context["api"]["maxBodyBytes"] = LAMBDA_SYNC_PAYLOAD
    with pytest.raises(ConfigError, match=r"shardline\.api\.maxBodyBytes"):
        load(context)


def test_api_key_auth_synthesizes_with_a_scoped_acknowledgement():
    template = synth(lambda c: c["api"].update(auth="api-key"))
    template.has_resource_properties(
        "AWS::ApiGateway::Method", {"ApiKeyRequired": True, "AuthorizationType": "NONE"}
    )
    template.resource_count_is("AWS::ApiGateway::UsagePlan", 1)


def test_the_deployed_powertools_layer_is_the_version_the_tests_ran(template):
    from importlib.metadata import version

    parameters = template.to_json()["Parameters"]
    wanted = f"/aws/service/powertools/python/arm64/python3.12/{version('aws-lambda-powertools')}"
    ssm = [p for p in parameters.values() if p["Type"] == "AWS::SSM::Parameter::Value<String>"]
    assert [p["Default"] for p in ssm if "powertools" in p["Default"]] == [wanted]
    assert "arn:aws:" not in json.dumps(template.to_json()), "no partition spelled in the template"


def test_the_removed_powertools_layer_version_key_fails_with_a_reason():
    context = default_context()["shardline"]
    context["powertoolsLayerVersion"] = 27
    with pytest.raises(ConfigError, match=r"shardline\.powertoolsLayerVersion: no longer read"):
        load(context)


def test_access_and_execution_logs_follow_log_retention_days():
    template = synth(lambda c: c.update(logRetentionDays=7))
    groups = [g["Properties"] for g in resources(template, "AWS::Logs::LogGroup").values()]
    assert groups and all(g.get("RetentionInDays") == 7 for g in groups), groups
    assert any("API-Gateway-Execution-Logs_" in json.dumps(g.get("LogGroupName")) for g in groups)


PHYSICAL_NAMES = {
    "AWS::Kinesis::Stream": "Name",
    "AWS::ApiGateway::RestApi": "Name",
    "AWS::CloudWatch::Dashboard": "DashboardName",
}


def _stage(stage: str) -> tuple[str, Template]:
    app, stack = build({**default_context(), "stage": stage})
    app.synth()
    return stack.stack_name, Template.from_stack(stack)


def test_two_stages_synthesize_side_by_side_with_no_shared_physical_name():
    (dev_stack, dev), (prod_stack, prod) = _stage("dev"), _stage("prod")
    assert (dev_stack, prod_stack) == ("shardline-dev", "shardline-prod")

    def names(template: Template) -> set[str]:
        found = {
            json.dumps(r["Properties"][key])
            for kind, key in PHYSICAL_NAMES.items()
            for r in resources(template, kind).values()
        }
        functions = resources(template, "AWS::Lambda::Function").values()
        found |= {
            f["Properties"]["Environment"]["Variables"]["POWERTOOLS_METRICS_NAMESPACE"] for f in functions
        }
        return found

    assert len(names(dev)) == 4 and not names(dev) & names(prod), (names(dev), names(prod))
    assert {'"shardline-prod-events"', '"shardline-prod-producer"', "shardline/prod"} < names(prod)


def test_prod_keeps_its_data_and_other_stages_go_with_their_stack():
    _, dev = _stage("dev")
    _, prod = _stage("prod")
    for template, kept in ((dev, False), (prod, True)):
        for table in resources(template, "AWS::DynamoDB::Table").values():
            assert table["DeletionPolicy"] == ("Retain" if kept else "Delete")
            assert table["Properties"].get("DeletionProtectionEnabled", False) is kept
        for stream in resources(template, "AWS::Kinesis::Stream").values():
            assert stream["DeletionPolicy"] == ("Retain" if kept else "Delete")


def test_a_stage_that_is_not_a_short_lowercase_name_fails_synth():
    with pytest.raises(ConfigError, match=r"shardline\.stage"):
        load(default_context()["shardline"], stage="Prod_1")


def test_the_api_is_regional_and_keeps_the_account_wide_logging_role(template):
    template.has_resource_properties(
        "AWS::ApiGateway::RestApi", {"EndpointConfiguration": {"Types": ["REGIONAL"]}}
    )
    template.has_resource("AWS::ApiGateway::Account", {"DeletionPolicy": "Retain"})


def test_cloudwatch_may_use_the_key_only_for_this_accounts_alarms(template):
    statements = [
        statement
        for key in resources(template, "AWS::KMS::Key").values()
        for statement in key["Properties"]["KeyPolicy"]["Statement"]
        if statement.get("Principal") == {"Service": "cloudwatch.amazonaws.com"}
    ]
    assert statements and all(
        s["Condition"] == {"StringEquals": {"aws:SourceAccount": {"Ref": "AWS::AccountId"}}}
        for s in statements
    )


def test_every_resource_carries_the_cost_allocation_tags_of_its_stage(template):
    tagged = [r for r in resources(template, "AWS::Kinesis::Stream").values()] + list(
        resources(template, "AWS::DynamoDB::Table").values()
    )
    for resource in tagged:
        tags = {t["Key"]: t["Value"] for t in resource["Properties"]["Tags"]}
        assert tags["project"] == "shardline" and tags["stage"] == "dev"


def test_outputs_name_the_api_url_streams_tables_queues_and_the_alarm_topic(template):
    outputs = template.to_json()["Outputs"]
    assert {"ApiUrl", "AlarmTopic", "StreamEvents"} <= set(outputs)
    for group in ("EventSink", "KeyCounter"):
        for what in ("LeaseTable", "SinkTable", "DeadLetters", "MappingFailures"):
            assert f"{group}{what}" in outputs, f"{group}{what}"


def test_acknowledgements_are_scoped_to_their_resources_not_the_stack():
    from aws_cdk import aws_sqs as sqs

    app, stack = build(default_context())
    # A queue of the same kind as the acknowledged DLQs, but not one of them: SQS3 must be reported.
    sqs.Queue(stack, "NewQueue", encryption=sqs.QueueEncryption.KMS_MANAGED, enforce_ssl=True)
    with pytest.raises(Exception, match=r"AwsSolutions-SQS3") as failure:
        app.synth()
    assert "NewQueue" in str(failure.value)


#: Recommended feature flags cdk.json leaves unset, and why.
UNSET_FLAGS = {
    "@aws-cdk/core:defaultCrossStackReferences": "one stack: no cross-stack references to shape",
    "@aws-cdk/core:target-partitions": "a list, not a switch; the template spells no partition",
}


def test_cdk_json_sets_every_recommended_feature_flag():
    env = {
        **os.environ,
        "CDK_DISABLE_VERSION_CHECK": "1",
        "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "20",
    }
    result = subprocess.run(
        [str(ROOT / "node_modules" / ".bin" / "cdk"), "flags", "--unstable=flags"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    unset = {line.split()[1] for line in (result.stdout + result.stderr).splitlines() if "<unset>" in line}
    assert result.returncode == 0 and unset == set(UNSET_FLAGS), result.stdout + result.stderr


def test_the_layer_ships_unchecked_hash_bytecode_for_the_runtimes_python(synthesized):
    from infra.layers import RUNTIME, runtime_python

    if runtime_python() is None:
        pytest.skip(f"no {RUNTIME.name} interpreter here: the layer ships sources (synth warns)")
    template_file = synthesized[1]
    layer = next(
        r
        for r in json.loads(template_file.read_text())["Resources"].values()
        if r["Type"] == "AWS::Lambda::LayerVersion"
    )
    asset_hash = layer["Properties"]["Content"]["S3Key"].removesuffix(".zip")
    assets = json.loads(
        template_file.with_name(template_file.name.replace(".template.", ".assets.")).read_text()
    )
    folder = template_file.parent / assets["files"][asset_hash]["source"]["path"]
    sources = sorted((folder / "python" / "shardline").rglob("*.py"))
    tag = f"cpython-{RUNTIME.name.removeprefix('python').replace('.', '')}"
    for source in sources:
        compiled = source.parent / "__pycache__" / f"{source.stem}.{tag}.pyc"
        assert compiled.exists(), compiled
        flags = int.from_bytes(compiled.read_bytes()[4:8], "little")
        assert flags == 0b01, f"{compiled.name}: hash-based and unchecked, as a read-only /opt needs"
    assert len(sources) > 40
