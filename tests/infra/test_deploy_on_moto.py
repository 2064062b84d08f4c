"""The synthesized template, deployed into moto's CloudFormation on loopback.

Assets are zipped and uploaded to moto's S3 under the bootstrap bucket the template names, the
public SSM parameters the template reads are created in moto's SSM, and the stack is created from
the template as `cdk deploy` would. Every resource moto's CloudFormation creates is then read back
through its own API and checked against the settings the template asks for.

What moto's CloudFormation does not create is listed here (`SKIPPED`) and asserted to be exactly
what it skipped, so a moto upgrade that starts creating one of them shows up.
"""

from __future__ import annotations

import io
import json
import time
import zipfile
from pathlib import Path

import pytest

from app import build
from tests.support.integration import aws_client

ACCOUNT, REGION = "123456789012", "us-east-1"

#: Resource types moto's CloudFormation skips (it answers CREATE_COMPLETE without a resource).
SKIPPED = {
    "AWS::ApiGateway::Account",
    "AWS::ApiGateway::RequestValidator",
    "AWS::ApiGateway::Stage",
    "AWS::CloudWatch::Alarm",
    "AWS::SNS::TopicPolicy",
    "AWS::SQS::QueuePolicy",
    "AWS::S3::BucketPolicy",
}


@pytest.fixture(scope="module")
def moto_server(own_moto_server: str) -> str:
    """The stack's names are fixed (`shardline-dev-events`, ...): a server of this module's own,
    whichever module ran before it on this worker."""
    return own_moto_server


@pytest.fixture(scope="module")
def deployed(moto_server, tmp_path_factory):
    outdir = tmp_path_factory.mktemp("cdk.out")
    app, stack = build(None, outdir=str(outdir))
    app.synth()
    template = json.loads((outdir / f"{stack.stack_name}.template.json").read_text())
    _upload_assets(moto_server, outdir, stack.stack_name)
    ssm = aws_client("ssm", moto_server)
    for parameter in template["Parameters"].values():
        if parameter["Type"].startswith("AWS::SSM::Parameter::Value"):
            if parameter["Default"].startswith("/aws/"):
                # AWS publishes these; moto reserves /aws/ and holds no Powertools ones: stand one in.
                parameter["Default"] = "/moto-stand-in" + parameter["Default"]
                value = f"arn:aws:lambda:{REGION}:017000801446:layer:AWSLambdaPowertoolsPythonV3:1"
            else:
                value = "30"  # the bootstrap stack's version, which the template's rule checks
            ssm.put_parameter(Name=parameter["Default"], Value=value, Type="String", Overwrite=True)
    for key in _of_type(template, "AWS::KMS::Key").values():
        # moto's KMS model reads CloudFormation's Key/Value tags as TagKey/TagValue and fails: untag.
        key["Properties"].pop("Tags", None)
    cloudformation = aws_client("cloudformation", moto_server)
    cloudformation.create_stack(
        StackName=stack.stack_name,
        TemplateBody=json.dumps(template),
        Capabilities=["CAPABILITY_IAM", "CAPABILITY_NAMED_IAM"],
    )
    status = _wait(cloudformation, stack.stack_name)
    assert status == "CREATE_COMPLETE", cloudformation.describe_stack_events(StackName=stack.stack_name)
    created = cloudformation.list_stack_resources(StackName=stack.stack_name)["StackResourceSummaries"]
    return template, {r["LogicalResourceId"]: r for r in created}


def _upload_assets(endpoint: str, outdir: Path, stack_name: str) -> None:
    s3 = aws_client("s3", endpoint)
    manifest = json.loads((outdir / f"{stack_name}.assets.json").read_text())
    bucket = f"cdk-hnb659fds-assets-{ACCOUNT}-{REGION}"
    s3.create_bucket(Bucket=bucket)
    for asset in manifest["files"].values():
        source = outdir / asset["source"]["path"]
        destination = next(iter(asset["destinations"].values()))
        if asset["source"]["packaging"] == "zip":
            body = io.BytesIO()
            with zipfile.ZipFile(body, "w") as archive:
                for path in sorted(source.rglob("*")):
                    archive.write(path, path.relative_to(source))
            data = body.getvalue()
        else:
            data = source.read_bytes()
        s3.put_object(Bucket=bucket, Key=destination["objectKey"], Body=data)


def _wait(cloudformation, name: str) -> str:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        status = cloudformation.describe_stacks(StackName=name)["Stacks"][0]["StackStatus"]
        if not status.endswith("IN_PROGRESS"):
            return status
        time.sleep(0.5)
    return "TIMED_OUT"


def _of_type(template: dict, kind: str) -> dict[str, dict]:
    return {lid: r for lid, r in template["Resources"].items() if r["Type"] == kind}


def test_moto_creates_every_resource_it_supports_and_skips_only_the_listed_types(deployed):
    template, created = deployed
    missing = {template["Resources"][lid]["Type"] for lid in template["Resources"] if lid not in created}
    assert missing == SKIPPED, f"not created: {sorted(missing)}"


def test_the_stream_has_its_name_and_shards(deployed, moto_server):
    template, created = deployed
    kinesis = aws_client("kinesis", moto_server)
    for lid, resource in _of_type(template, "AWS::Kinesis::Stream").items():
        name = created[lid]["PhysicalResourceId"]
        assert name == resource["Properties"]["Name"] == "shardline-dev-events"
        summary = kinesis.describe_stream_summary(StreamName=name)["StreamDescriptionSummary"]
        assert summary["OpenShardCount"] == resource["Properties"]["ShardCount"]
        assert summary["RetentionPeriodHours"] == resource["Properties"]["RetentionPeriodHours"]


def test_tables_have_their_keys_billing_and_recovery(deployed, moto_server):
    template, created = deployed
    dynamodb = aws_client("dynamodb", moto_server)
    tables = _of_type(template, "AWS::DynamoDB::Table")
    assert len(tables) == 5  # two lease tables, two sinks, the producer API's ids
    for lid, resource in tables.items():
        table = dynamodb.describe_table(TableName=created[lid]["PhysicalResourceId"])["Table"]
        assert table["KeySchema"] == resource["Properties"]["KeySchema"]
        assert table["BillingModeSummary"]["BillingMode"] == "PAY_PER_REQUEST"


def test_functions_have_their_handler_runtime_memory_timeout_and_environment(deployed, moto_server):
    template, created = deployed
    lambda_ = aws_client("lambda", moto_server)
    functions = _of_type(template, "AWS::Lambda::Function")
    assert len(functions) == 3
    for lid, resource in functions.items():
        wanted = resource["Properties"]
        got = lambda_.get_function(FunctionName=created[lid]["PhysicalResourceId"])["Configuration"]
        assert (got["Handler"], got["Runtime"]) == (wanted["Handler"], wanted["Runtime"])
        assert (got["MemorySize"], got["Timeout"]) == (wanted["MemorySize"], wanted["Timeout"])
        variables = got["Environment"]["Variables"]
        assert set(variables) == set(wanted["Environment"]["Variables"])
        assert variables["POWERTOOLS_METRICS_NAMESPACE"] == "shardline/dev"


def test_each_mapping_reads_the_stream_with_its_batch_settings(deployed, moto_server):
    template, created = deployed
    lambda_ = aws_client("lambda", moto_server)
    mappings = _of_type(template, "AWS::Lambda::EventSourceMapping")
    assert len(mappings) == 2
    for lid, resource in mappings.items():
        got = lambda_.get_event_source_mapping(UUID=created[lid]["PhysicalResourceId"])
        assert got["BatchSize"] == resource["Properties"]["BatchSize"]
        assert got["EventSourceArn"].endswith(":stream/shardline-dev-events")


def test_the_dashboard_is_created_under_the_stage_name_with_its_widgets(deployed, moto_server):
    cloudwatch = aws_client("cloudwatch", moto_server)
    body = json.loads(cloudwatch.get_dashboard(DashboardName="shardline-dev")["DashboardBody"])
    assert len(body["widgets"]) > 10


def test_queues_and_the_alarm_topic_exist(deployed, moto_server):
    template, created = deployed
    sqs = aws_client("sqs", moto_server)
    queues = _of_type(template, "AWS::SQS::Queue")
    assert len(queues) == 4
    for lid in queues:
        attributes = sqs.get_queue_attributes(
            QueueUrl=created[lid]["PhysicalResourceId"], AttributeNames=["All"]
        )
        assert attributes["Attributes"]["MessageRetentionPeriod"] == str(14 * 24 * 3600)
    sns = aws_client("sns", moto_server)
    (topic,) = _of_type(template, "AWS::SNS::Topic")
    assert sns.get_topic_attributes(TopicArn=created[topic]["PhysicalResourceId"])["Attributes"]
