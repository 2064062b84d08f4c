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

from app import build
from shardline.aws_lambda import POWERTOOLS_VARIABLES, ConsumerEnvironment, ProducerEnvironment
from shardline.cdk._config import ConfigError, load
from shardline.consumer._sink_writes import sink_actions
from tests.support.cdk import default_context, placeholders, resources

ROOT = Path(__file__).resolve().parents[2]


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
    tables = resources(template, "AWS::DynamoDB::Table")
    assert len(tables) == 5
    for name, table in tables.items():
        props = table["Properties"]
        assert props["BillingMode"] == "PAY_PER_REQUEST"
        assert props["PointInTimeRecoverySpecification"] == {"PointInTimeRecoveryEnabled": True}
        # The group's (the API's) customer-managed key, not aws/dynamodb (issue 25, item 5).
        assert props["SSESpecification"]["SSEType"] == "KMS" and props["SSESpecification"]["SSEEnabled"]
        owner = "ProducerIds" if name.startswith("ProducerIds") else "Group"
        assert props["SSESpecification"]["KMSMasterKeyId"]["Fn::GetAtt"][0].startswith(owner)
    keys = sorted(tuple(k["AttributeName"] for k in t["Properties"]["KeySchema"]) for t in tables.values())
    assert keys == [("leaseKey",), ("leaseKey",), ("partitionKey",), ("pk", "sk"), ("scopedId",)]


def test_functions_are_arm64_python312_traced_with_both_layers_and_explicit_logs(template):
    functions = resources(template, "AWS::Lambda::Function")
    assert len(functions) == 3
    for function in functions.values():
        props = function["Properties"]
        assert props["Runtime"] == "python3.12" and props["Architectures"] == ["arm64"]
        assert props["TracingConfig"] == {"Mode": "Active"}
        assert len(props["Layers"]) == 2
        assert "LogGroup" in props["LoggingConfig"]
        assert props["LoggingConfig"]["LogFormat"] == "JSON"  # every line has a level for "Recent errors"
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


def test_4_the_api_takes_tls_1_2_at_least(template):
    """Without a security policy the Regional endpoint also accepts TLS 1.0 (issue 25, item 4)."""
    apis = [api["Properties"] for api in resources(template, "AWS::ApiGateway::RestApi").values()]
    assert apis and all(api["SecurityPolicy"] == "TLS_1_2" for api in apis), apis
    assert all(api["EndpointConfiguration"] == {"Types": ["REGIONAL"]} for api in apis)


def test_6_the_account_wide_api_logging_role_trusts_api_gateway_for_this_account_only(template):
    roles = [
        role["Properties"]["AssumeRolePolicyDocument"]
        for role in resources(template, "AWS::IAM::Role").values()
        if "apigateway" in json.dumps(role["Properties"]["AssumeRolePolicyDocument"])
    ]
    assert len(roles) == 1
    [statement] = roles[0]["Statement"]
    assert statement["Principal"] == {"Service": "apigateway.amazonaws.com"}
    assert statement["Condition"] == {"StringEquals": {"aws:SourceAccount": {"Ref": "AWS::AccountId"}}}


def test_the_api_requires_iam_validates_its_parameters_throttles_logs_and_traces(template):
    template.has_resource_properties(
        "AWS::ApiGateway::Method",
        {
            "HttpMethod": "POST",
            "AuthorizationType": "AWS_IAM",
            "RequestValidatorId": Match.any_value(),
            "RequestModels": Match.absent(),
            "RequestParameters": {"method.request.path.stream": True},
        },
    )
    template.has_resource_properties(
        "AWS::ApiGateway::RequestValidator", {"ValidateRequestBody": False, "ValidateRequestParameters": True}
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


def test_1_the_producer_role_may_only_write_and_list_shards_never_read_or_decrypt(template):
    statements = _statements(template, "ProducerFunction")
    kinesis = [s for s in statements if any(a.startswith("kinesis:") for a in _actions(s))]
    own = ["kinesis:ListShards", "kinesis:PutRecords"]
    assert len(kinesis) == 1 and sorted(_actions(kinesis[0])) == own
    assert "StreameventsStream" in json.dumps(kinesis[0]["Resource"])
    actions = {a for s in statements for a in _actions(s)}
    reads = {"kinesis:GetRecords", "kinesis:GetShardIterator", "kinesis:SubscribeToShard"}
    assert not actions & reads, "the internet-facing role cannot read the stream"
    assert not any(a.endswith("*") for a in actions), "no wildcard action can hide a read"
    # Its idempotency table (issue 39), and the per-caller counters kept in it (issue 40).
    ids = ["dynamodb:BatchGetItem", "dynamodb:BatchWriteItem", "dynamodb:UpdateItem"]
    assert actions - set(own) <= {
        "kms:GenerateDataKey",
        "kms:Decrypt",
        *ids,
        "xray:PutTraceSegments",
        "xray:PutTelemetryRecords",
        "logs:CreateLogStream",  # its own log group (tests/infra/test_permissions.py)
        "logs:PutLogEvents",
    }
    kms = [s for s in statements if "kms:GenerateDataKey" in _actions(s)]
    assert kms and all(s["Effect"] == "Allow" and "StreameventsKey" in json.dumps(s["Resource"]) for s in kms)
    # Decrypt only on the idempotency table's key, only through DynamoDB: never the stream's key.
    decrypt = [s for s in statements if "kms:Decrypt" in _actions(s)]
    assert len(decrypt) == 1 and _actions(decrypt[0]) == ["kms:Decrypt"]
    assert "ProducerIdsKey" in json.dumps(decrypt[0]["Resource"])
    assert "StreameventsKey" not in json.dumps(decrypt[0]["Resource"])
    assert "dynamodb." in json.dumps(decrypt[0]["Condition"]["StringEquals"]["kms:ViaService"])
    tables = [s for s in statements if any(a.startswith("dynamodb:") for a in _actions(s))]
    assert len(tables) == 1 and sorted(_actions(tables[0])) == ids
    assert "ProducerIds" in json.dumps(tables[0]["Resource"])


def test_each_consumer_reads_its_stream_and_writes_only_its_tables_and_queue(template):
    for prefix, own in (("Groupeventsink", "Groupeventsink"), ("Groupkeycounter", "Groupkeycounter")):
        statements = _statements(template, f"{prefix}Function")
        actions = {a for s in statements for a in _actions(s)}
        assert "kinesis:PutRecords" not in actions and "kinesis:GetRecords" in actions
        dynamodb = sorted(a for s in statements for a in _actions(s) if a.startswith("dynamodb:"))
        lease = ["dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem"]
        # What each example handler writes (issue 40, 6): the events sink's idempotent puts, the
        # counter's Updates and once guards.
        writes = {"Groupeventsink": ["idempotent_put"], "Groupkeycounter": ["Update", "once"]}[prefix]
        sink = list(sink_actions(writes))  # type: ignore[arg-type]
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
        ("shardline/dev", "UserRecordsNotLanded"): "StreamName",
        ("AWS/Lambda", "IteratorAge"): "FunctionName",
        ("AWS/Lambda", "Errors"): "FunctionName",
        ("AWS/SQS", "ApproximateNumberOfMessagesVisible"): "QueueName",
        ("AWS/ApiGateway", "5XXError"): "ApiName",
        ("AWS/ApiGateway", "Latency"): "ApiName",
        ("shardline/dev", "RecordsFailed"): "ConsumerGroup",
        ("shardline/dev", "LeaseLosses"): "ConsumerGroup",
        ("shardline/dev", "ShardStalls"): "ConsumerGroup",
        ("shardline/dev", "BatchesSkippedByMapping"): "ConsumerGroup",
        ("shardline/dev", "DedupLanesEvicted"): "ConsumerGroup",  # issue 39, 8: the lane bound
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


def test_records_the_producer_could_not_land_page_per_stream(template):
    alarms = [a["Properties"] for a in resources(template, "AWS::CloudWatch::Alarm").values()]
    [not_landed] = [a for a in alarms if a["MetricName"] == "UserRecordsNotLanded"]
    assert not_landed["Namespace"] == "shardline/dev" and not_landed["Statistic"] == "Sum"
    assert not_landed["Threshold"] == 0 and not_landed["ComparisonOperator"] == "GreaterThanThreshold"
    dimensions = {d["Name"]: d["Value"] for d in not_landed["Dimensions"]}
    # What the producer function publishes (Powertools' service and the StreamName it adds).
    assert dimensions["service"] == "shardline-producer" and "StreamName" in dimensions
    assert "Runbook:" in not_landed["AlarmDescription"] and "resend" in not_landed["AlarmDescription"]


def test_sink_tables_expire_client_id_guards_by_their_ttl_attribute(template):
    tables = resources(template, "AWS::DynamoDB::Table").values()
    ttl = {
        tuple(k["AttributeName"] for k in t["Properties"]["KeySchema"]): t["Properties"].get(
            "TimeToLiveSpecification"
        )
        for t in tables
    }
    expected = {"AttributeName": "expiresAt", "Enabled": True}
    assert ttl[("pk", "sk")] == expected and ttl[("partitionKey",)] == expected
    assert ttl[("leaseKey",)] is None


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
    # A stalled shard and a batch the mapping skipped page on one datapoint (next test); the rest on 2 of 3.
    stall_signals = {"ShardStalls", "BatchesSkippedByMapping"}
    for alarm in alarms:
        if alarm["MetricName"] not in stall_signals:
            assert alarm["EvaluationPeriods"] == 3 and alarm["DatapointsToAlarm"] == 2, alarm["MetricName"]
        assert "Runbook:" in alarm["AlarmDescription"], alarm["MetricName"]
    consumer_age = [a for a in alarms if a["MetricName"] == "IteratorAge"]
    assert consumer_age and all(a["Threshold"] == 24 * 3600 * 1000 / 2 for a in consumer_age)
    latency = next(a for a in alarms if a["MetricName"] == "Latency")
    assert latency["ExtendedStatistic"] == "p99"


def _stall_alarms(template, metric: str) -> dict[str, dict]:
    """The alarms on `metric`, by the ConsumerGroup they watch."""
    alarms = [a["Properties"] for a in resources(template, "AWS::CloudWatch::Alarm").values()]
    return {
        next(d["Value"] for d in a["Dimensions"] if d["Name"] == "ConsumerGroup"): a
        for a in alarms
        if a["MetricName"] == metric
    }


def test_a_stalled_shard_pages_within_minutes_long_before_the_record_age(template):
    stalled = _stall_alarms(template, "ShardStalls")
    assert set(stalled) == {"event-sink", "key-counter"}, "one alarm per consumer group"
    [topic] = resources(template, "AWS::SNS::Topic")
    record_age = {
        m["Properties"]["MaximumRecordAgeInSeconds"]
        for m in resources(template, "AWS::Lambda::EventSourceMapping").values()
    }
    for group, alarm in stalled.items():
        dimensions = {d["Name"]: d["Value"] for d in alarm["Dimensions"]}
        # What the consumer function publishes (Powertools' service and the ConsumerGroup it adds).
        assert dimensions == {"service": f"shardline-{group}", "ConsumerGroup": group}
        assert alarm["Namespace"] == "shardline/dev" and alarm["Statistic"] == "Sum"
        assert alarm["Period"] == 60 and alarm["DatapointsToAlarm"] == 2
        assert alarm["Threshold"] == 1 and alarm["ComparisonOperator"] == "GreaterThanOrEqualToThreshold"
        assert alarm["TreatMissingData"] == "notBreaching"
        # Stalled deliveries in two minutes of the window page (one throttled delivery that the next
        # got past does not); the window outlasts the gap between two stalled deliveries (an
        # invocation of 60 s, or the 60 s backoff cap), so a stalled shard does not flap.
        assert alarm["EvaluationPeriods"] == 3
        assert alarm["Period"] * alarm["EvaluationPeriods"] * 10 < min(record_age), "long before the age"
        description = alarm["AlarmDescription"]
        for says in ("stalledCause", "make status", "Nothing is dead-lettered or lost", "23 h", "Runbook:"):
            assert says in description, (group, says)
        assert (
            json.dumps(alarm["AlarmActions"])
            == json.dumps([{"Ref": topic}])
            == json.dumps(alarm["OKActions"])
        )
    assert "EventSinkLeaseTable" in stalled["event-sink"]["AlarmDescription"], "the output naming the table"


def test_a_batch_the_mapping_skipped_pages_and_points_at_the_redrive(template):
    skipped = _stall_alarms(template, "BatchesSkippedByMapping")
    assert set(skipped) == {"event-sink", "key-counter"}
    for alarm in skipped.values():
        assert (alarm["Statistic"], alarm["Period"], alarm["Threshold"]) == ("Sum", 60, 1)
        assert alarm["ComparisonOperator"] == "GreaterThanOrEqualToThreshold"
        assert alarm["DatapointsToAlarm"] == 1 and alarm["EvaluationPeriods"] == 60  # ALARM for an hour
        assert alarm["TreatMissingData"] == "notBreaching"
        description = alarm["AlarmDescription"]
        assert "Redriving what the mapping discarded" in description
        assert "#redriving-what-the-mapping-discarded" in description
        assert "skippedByMapping" in description and "on-failure" in description


def test_the_stall_window_follows_the_function_timeout_and_descriptions_fit_cloudwatch():
    from shardline.cdk._monitoring import STALL_BACKOFF_CAP_S, stall_window_minutes
    from shardline.consumer import _stalls

    assert STALL_BACKOFF_CAP_S >= _stalls.MAX_BACKOFF_S, "the window must outlast the library's longest wait"
    assert [stall_window_minutes(t) for t in (3, 60, 61, 900)] == [3, 3, 4, 17]
    # The longest names and timeout the configuration accepts still fit CloudWatch's 1024 characters.
    context = default_context()
    context["shardline"]["consumerGroups"][0].update(name="g" * 64, timeoutSeconds=900)
    _, stack = build(context)
    template = Template.from_stack(stack)
    alarms = [a["Properties"] for a in resources(template, "AWS::CloudWatch::Alarm").values()]
    assert all(len(a["AlarmDescription"]) <= 1024 for a in alarms), max(
        len(a["AlarmDescription"]) for a in alarms
    )
    assert _stall_alarms(template, "ShardStalls")["g" * 64]["EvaluationPeriods"] == 17


def test_max_attempts_below_two_is_refused_at_synth():
    context = default_context()["shardline"]
    context["consumerGroups"][1]["maxAttempts"] = 1
    with pytest.raises(
        ConfigError,
        match=r"^shardline\.consumerGroups\[1\]\.maxAttempts: must be at least 2, got 1: .*evidence",
    ):
        load(context)
    context["consumerGroups"][1]["maxAttempts"] = 0
    with pytest.raises(ConfigError, match=r"maxAttempts: must be at least 2, got 0"):
        load(context)
    context["consumerGroups"][1]["maxAttempts"] = 2
    assert load(context).consumer_groups[1].max_attempts == 2


def test_the_dashboard_shows_traffic_producer_streams_groups_tables_and_errors(template):
    [dashboard] = resources(template, "AWS::CloudWatch::Dashboard").values()
    body = json.dumps(dashboard["Properties"]["DashboardBody"])
    for title in (
        "Consumer groups: shards stalled, batches skipped by the mapping",
        "Traffic in: API requests",
        "Traffic in: Kinesis records",
        "Producer: user records per Kinesis record",
        "Producer: retries per record",
        "Producer: errors and expired",
        "Producer: not landed, sealed, resent",
        "event-sink: copies and client ids skipped",
        "Stream health: iterator age",
        "event-sink: processed, duplicates skipped, DLQ",
        "key-counter: lag",
        "event-sink: lease table throttles",
        "Recent errors",
    ):
        assert title in body, title
    for group in ("event-sink", "key-counter"):  # the stall widget: a line per group and signal
        assert f"{group} ShardStalls" in body and f"{group} BatchesSkippedByMapping" in body


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
    buckets = {
        lid: b
        for lid, b in resources(template, "AWS::S3::Bucket").items()
        if not lid.startswith("AccessLogs")
    }
    assert len(buckets) == 2
    for bucket in buckets.values():
        props = bucket["Properties"]
        [rule] = props["BucketEncryption"]["ServerSideEncryptionConfiguration"]
        assert rule["ServerSideEncryptionByDefault"]["SSEAlgorithm"] == "aws:kms"
        assert "KMSMasterKeyID" in rule["ServerSideEncryptionByDefault"]
        assert all(props["PublicAccessBlockConfiguration"].values())
        assert props["LifecycleConfiguration"]["Rules"][0]["ExpirationInDays"] == 14
        assert props["LoggingConfiguration"]["DestinationBucketName"]["Ref"].startswith("AccessLogs")
    policies = json.dumps(resources(template, "AWS::S3::BucketPolicy"))
    assert policies.count('"aws:SecureTransport": "false"') == 3  # and the access-log bucket


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
        (
            lambda c: c["streams"][0].__setitem__("explicitHashKeys", "no"),
            "shardline.streams[0].explicitHashKeys",
        ),
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


def test_3_a_stream_may_refuse_caller_chosen_explicit_hash_keys():
    from shardline.aws_lambda import parse_streams

    for refuse in (False, True):
        context = default_context()
        # Off unless asked (issue 40's security review): the option turns them on.
        context["shardline"]["streams"][0]["explicitHashKeys"] = not refuse
        app, stack = build(context)
        app.synth()
        functions = resources(Template.from_stack(stack), "AWS::Lambda::Function").values()
        [streams] = [
            f["Properties"]["Environment"]["Variables"]["SHARDLINE_STREAMS"]
            for f in functions
            if "SHARDLINE_STREAMS" in f["Properties"]["Environment"]["Variables"]
        ]
        assert isinstance(streams, str), "SHARDLINE_STREAMS is known at synth"
        assert parse_streams(streams)["events"].explicit_hash_keys is not refuse


def test_every_function_environment_is_exactly_the_shardline_contract(template):
    functions = resources(template, "AWS::Lambda::Function").values()
    producers, consumers = 0, 0
    for function in functions:
        variables = function["Properties"]["Environment"]["Variables"]
        environ = {name: placeholders(value) for name, value in variables.items()}
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
