"""Issue 10: the CDK app as a platform engineer deploys it — alarms that reach someone, the Powertools
that was tested, stages side by side, settings that reach the stream, alarms on loss, scoped
acknowledgements, the feature flags, and a layer with bytecode. All offline.
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
from shardline.cdk._config import ConfigError, load
from tests.support.cdk import default_context, resources

ROOT = Path(__file__).resolve().parents[2]


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
    from shardline.cdk._config import LAMBDA_SYNC_PAYLOAD, MAX_BODY_BYTES

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
    clients = [{"name": "orders", "requestsPerDay": 1000}, {"name": "billing", "requestsPerDay": 10}]
    template = synth(lambda c: c["api"].update(auth="api-key", clients=clients))
    template.has_resource_properties(
        "AWS::ApiGateway::Method", {"ApiKeyRequired": True, "AuthorizationType": "NONE"}
    )
    template.resource_count_is("AWS::ApiGateway::UsagePlan", 2)  # one per client, none shared
    template.resource_count_is("AWS::ApiGateway::ApiKey", 2)
    assert "Policy" not in template.find_resources("AWS::ApiGateway::RestApi").popitem()[1]["Properties"]


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
    context = default_context()
    # A stage that retains data names its API's writers (issue 40): here, an organization.
    context["shardline"]["api"]["allowedOrganization"] = "o-a1b2c3d4e5"
    app, stack = build({**context, "stage": stage})
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
        # Every log group (functions', API access and execution logs) is kept with the data.
        log_groups = resources(template, "AWS::Logs::LogGroup")
        assert len(log_groups) >= 5
        assert {group["DeletionPolicy"] for group in log_groups.values()} == {"Retain" if kept else "Delete"}


def test_7_prod_is_protected_from_termination_and_every_key_has_an_alias():
    for stage, protected in (("dev", False), ("prod", True)):
        context = default_context()
        context["shardline"]["api"]["allowedOrganization"] = "o-a1b2c3d4e5"  # prod names its writers
        app, stack = build({**context, "stage": stage})
        assembly = app.synth()
        assert stack.termination_protection is protected
        assert assembly.get_stack_by_name(stack.stack_name).termination_protection is protected
        template = Template.from_stack(stack)
        keys = resources(template, "AWS::KMS::Key")
        aliases = [a["Properties"] for a in resources(template, "AWS::KMS::Alias").values()]
        assert sorted(a["TargetKeyId"]["Fn::GetAtt"][0] for a in aliases) == sorted(keys), aliases
        names = {a["AliasName"] for a in aliases}
        assert names == {
            f"alias/shardline-{stage}/alarms",  # the alarm topic's, and only its
            f"alias/shardline-{stage}/logs",
            f"alias/shardline-{stage}/api/ids",  # the API's idempotency table's
            f"alias/shardline-{stage}/event-sink",  # each consumer group's own
            f"alias/shardline-{stage}/key-counter",
            f"alias/shardline-{stage}-events",
        }


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
    from shardline.cdk._layers import RUNTIME, runtime_python

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


_LAYER_ASSET = """
from app import build
from aws_cdk.assertions import Template
_, stack = build()
resources = Template.from_stack(stack).to_json()["Resources"].values()
layers = [r for r in resources if r["Type"] == "AWS::Lambda::LayerVersion"]
print(layers[0]["Properties"]["Content"]["S3Key"])
"""


def test_7_the_same_commit_builds_the_same_layer_asset_in_any_process(synthesized):
    """Two synths in two processes (two build folders) give one layer asset: the layer holds only
    the package's files, and its bytecode names its source where Lambda unpacks it, not the
    build folder (which held the process id: one commit gave a new layer hash per synth)."""
    from shardline.cdk._layers import LAYER_MOUNT, RUNTIME, runtime_python

    env = dict(os.environ)
    command = [sys.executable, "-c", _LAYER_ASSET]
    hashes = set()
    for _ in range(2):
        run = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, check=True)
        hashes.add(run.stdout.split()[-1])
    assert len(hashes) == 1, hashes
    template_file = synthesized[1]
    layer = next(
        r
        for r in json.loads(template_file.read_text())["Resources"].values()
        if r["Type"] == "AWS::Lambda::LayerVersion"
    )
    assert layer["Properties"]["Content"]["S3Key"] in hashes, "the test session's own synth too"
    assets_file = template_file.with_name(template_file.name.replace(".template.", ".assets."))
    asset = json.loads(assets_file.read_text())["files"][layer["Properties"]["Content"]["S3Key"][:-4]]
    folder = template_file.parent / asset["source"]["path"]
    shipped = {path.name for path in folder.rglob("*") if path.is_file()}
    assert {name.rsplit(".", 1)[-1] if "." in name else name for name in shipped} <= {"py", "typed", "pyc"}
    if runtime_python() is None:
        pytest.skip(f"no {RUNTIME.name} interpreter here: the layer ships sources (synth warns)")
    compiled = next((folder / "python" / "shardline" / "__pycache__").glob("__init__.*.pyc")).read_bytes()
    assert f"{LAYER_MOUNT}/shardline/__init__.py".encode() in compiled
    assert str(ROOT).encode() not in compiled
