"""The local runtime reads the synthesized app from its template: nothing declared twice, nothing dropped."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from local.app import model
from local.app.provision import client, provision
from local.app.template import IAM_RESOURCES, NOT_RUN, PARTS, TemplateError, find_template, load
from local.endpoint.handle import Endpoint

ENDPOINT = "http://127.0.0.1:4566"


@pytest.fixture(scope="module")
def template(cdk_out: Path) -> dict:
    return json.loads(find_template(cdk_out).read_text())


@pytest.fixture(scope="module")
def app(cdk_out: Path) -> model.LocalApp:
    return load(cdk_out, endpoint_url=ENDPOINT)


def test_every_resource_of_the_template_is_run_or_listed_with_a_reason(template, app):
    run = {s.logical_id for s in app.streams} | {r.logical_id for r in app.resources}
    run |= {f.logical_id for f in app.functions} | {m.logical_id for m in app.mappings}
    run |= {a.logical_id for a in app.apis} | {r.logical_id for r in app.monitoring}
    listed = {logical_id for logical_id, _ in app.unsupported}
    parts = {lid for lid, r in template["Resources"].items() if r["Type"] in PARTS}
    # Roles, their policies, queue and bucket policies: read into `app.iam`, the endpoint enforces them.
    iam = {lid for lid, r in template["Resources"].items() if r["Type"] in IAM_RESOURCES}
    assert {lid for lid in iam if template["Resources"][lid]["Type"] == "AWS::IAM::Role"} == {
        role.logical_id for role in app.iam.roles
    }
    assert run | listed | parts | iam == set(template["Resources"])
    assert not run & listed
    for _, kind in app.unsupported:
        assert kind in NOT_RUN, f"{kind} is listed without a reason"


def test_alarms_and_the_dashboard_are_read_resolved(template, app):
    kinds = {r.type for r in app.monitoring}
    assert kinds == {"AWS::CloudWatch::Alarm", "AWS::CloudWatch::Dashboard"}
    assert sum(r.type == "AWS::CloudWatch::Alarm" for r in app.monitoring) == 23  # + DedupLanesEvicted x2
    board = next(r for r in app.monitoring if r.type == "AWS::CloudWatch::Dashboard")
    body = board.properties["DashboardBody"]
    assert isinstance(body, str) and '"Ref"' not in body  # every Fn::Join part resolved
    stage = app.apis[0].stage
    assert f'"Stage","{stage}"' in body  # a stage's Ref is its name, as in CloudFormation


def test_functions_run_the_template_code_with_its_settings(template, app, cdk_out):
    assert len(app.functions) == 3
    for function in app.functions:
        properties = template["Resources"][function.logical_id]["Properties"]
        assert function.handler == properties["Handler"]
        assert function.timeout_seconds == properties["Timeout"]
        assert function.memory_mb == properties["MemorySize"]
        module = function.handler.split(".")[0]
        assert (function.code_dir / f"{module}.py").is_file()
        assert function.code_dir.parent == cdk_out.resolve()
        assert [
            (layer / "python" / "shardline" / "__init__.py").is_file() for layer in function.layer_dirs
        ] == [True]
        assert set(function.environment) == set(properties["Environment"]["Variables"])


def test_references_resolve_to_the_local_names_and_endpoint(app):
    tables = {r.name for r in app.resources if r.type == "AWS::DynamoDB::Table"}
    queues = {r.name for r in app.resources if r.type == "AWS::SQS::Queue"}
    buckets = {r.name for r in app.resources if r.type == "AWS::S3::Bucket"}
    consumers = [f for f in app.functions if "LEASE_TABLE" in f.environment]
    assert len(consumers) == 2
    for function in consumers:
        env = function.environment
        assert {env["LEASE_TABLE"], env["SINK_TABLE"]} <= tables
        assert env["DLQ_URL"].startswith(f"{ENDPOINT}/{model.ACCOUNT}/")
        assert env["DLQ_URL"].rsplit("/", 1)[1] in queues
        assert env["DLQ_BUCKET"] in buckets
    producer = next(f for f in app.functions if "SHARDLINE_STREAMS" in f.environment)
    streams = json.loads(producer.environment["SHARDLINE_STREAMS"])
    assert streams["events"]["streamName"] == app.streams[0].name == "shardline-dev-events"


def test_generated_names_are_stable_and_fit_each_service(cdk_out, app):
    again = load(cdk_out, endpoint_url=ENDPOINT)
    assert again == app
    for resource in app.resources:
        limit = {"AWS::S3::Bucket": 63, "AWS::SQS::Queue": 80}.get(resource.type, 255)
        assert len(resource.name) <= limit, resource.name
    assert all(len(f.name) <= 64 for f in app.functions)


def test_mappings_carry_every_setting_of_the_template(template, app):
    assert len(app.mappings) == 2
    function_names = {f.name for f in app.functions}
    for mapping in app.mappings:
        properties = template["Resources"][mapping.logical_id]["Properties"]
        assert mapping.function_name in function_names
        assert mapping.stream_name == "shardline-dev-events"
        assert mapping.batch_size == properties["BatchSize"]
        assert mapping.batching_window_seconds == properties["MaximumBatchingWindowInSeconds"]
        assert mapping.starting_position == properties["StartingPosition"]
        assert mapping.report_batch_item_failures is True
        assert mapping.bisect_on_error is properties["BisectBatchOnFunctionError"]
        assert mapping.maximum_retry_attempts == properties["MaximumRetryAttempts"]
        assert mapping.maximum_record_age_seconds == properties["MaximumRecordAgeInSeconds"]
        assert mapping.on_failure_arn and mapping.on_failure_arn.startswith(f"arn:aws:sqs:{model.REGION}:")


def test_the_rest_api_has_its_route_authorization_validator_and_throttling(app):
    (api,) = app.apis
    assert api.stage == "v1"
    (method,) = api.methods
    assert (method.http_method, method.path, method.authorization) == (
        "POST",
        "/streams/{stream}/records",
        "AWS_IAM",
    )
    assert method.function_name == next(f.name for f in app.functions if "SHARDLINE_STREAMS" in f.environment)
    # the parameters only: the function names each refused record's index and field (issue 42, 4)
    assert method.validate_parameters and not method.validate_body
    assert method.request_models == {}
    assert method.required_parameters == {
        "method.request.path.stream": True,
        "method.request.header.Idempotency-Key": False,  # declared, optional
    }
    assert (api.throttle_rate, api.throttle_burst) == (100, 200)


def test_an_intrinsic_the_runtime_cannot_resolve_names_the_resource(tmp_path, cdk_out):
    manifest = json.loads((cdk_out / "manifest.json").read_text())
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    template = json.loads(find_template(cdk_out).read_text())
    stream = next(lid for lid, r in template["Resources"].items() if r["Type"] == "AWS::Kinesis::Stream")
    template["Resources"][stream]["Properties"]["ShardCount"] = {"Fn::ImportValue": "shards"}
    (tmp_path / find_template(cdk_out).name).write_text(json.dumps(template))
    with pytest.raises(TemplateError, match=f"{stream}: Fn::ImportValue"):
        load(tmp_path, endpoint_url=ENDPOINT)


def _edited_copy(cdk_out: Path, tmp_path: Path, edit) -> Path:  # type: ignore[no-untyped-def]
    """The synthesized app with `edit` applied to a copy of its template (the assets linked)."""
    for entry in cdk_out.iterdir():
        if entry != find_template(cdk_out):
            (tmp_path / entry.name).symlink_to(entry.resolve())
    template = json.loads(find_template(cdk_out).read_text())
    edit(template["Resources"])
    (tmp_path / find_template(cdk_out).name).write_text(json.dumps(template))
    return tmp_path


def test_a_reserved_variable_in_a_functions_environment_is_refused_as_at_deploy(tmp_path, cdk_out):
    def set_region(resources: dict) -> None:
        function = next(r for r in resources.values() if r["Type"] == "AWS::Lambda::Function")
        function["Properties"]["Environment"]["Variables"]["AWS_REGION"] = "eu-west-1"

    with pytest.raises(
        TemplateError, match=r"reserved keys .* Reserved keys used in this request: AWS_REGION$"
    ):
        load(_edited_copy(cdk_out, tmp_path, set_region), endpoint_url=ENDPOINT)


def test_a_property_the_runtime_does_not_honour_is_listed_with_what_differs(tmp_path, cdk_out):
    def tumbling(resources: dict) -> None:
        mapping = next(r for r in resources.values() if r["Type"] == "AWS::Lambda::EventSourceMapping")
        mapping["Properties"]["TumblingWindowInSeconds"] = 60

    app = load(_edited_copy(cdk_out, tmp_path, tumbling), endpoint_url=ENDPOINT)
    [window] = [entry for entry in app.not_emulated if entry.property == "TumblingWindowInSeconds"]
    assert "isFinalInvokeForWindow" in window.difference


def test_the_apps_own_unhonoured_properties_are_each_listed(app, template):
    """What the repository's own app declares and the runtime does not act on is all on the list."""
    listed = {(entry.logical_id, entry.property) for entry in app.not_emulated}
    traced = [
        logical_id
        for logical_id, resource in template["Resources"].items()
        if resource["Type"] == "AWS::Lambda::Function" and "TracingConfig" in resource["Properties"]
    ]
    assert traced, "the app's functions are traced: the check has something to check"
    assert {(logical_id, "TracingConfig") for logical_id in traced} <= listed


@pytest.mark.integration
def test_provision_creates_every_stream_table_queue_and_bucket(cdk_out, tmp_path):
    with Endpoint(port=0, log_path=tmp_path / "endpoint.log") as endpoint:  # its own: names are the app's
        app = load(cdk_out, endpoint_url=endpoint.url)
        provision(app, endpoint.url)
        kinesis = client("kinesis", endpoint.url)
        summary = kinesis.describe_stream_summary(StreamName=app.streams[0].name)["StreamDescriptionSummary"]
        assert (summary["StreamStatus"], summary["OpenShardCount"]) == ("ACTIVE", 4)
        dynamodb = client("dynamodb", endpoint.url)
        tables = set(dynamodb.list_tables()["TableNames"])
        assert {r.name for r in app.resources if r.type == "AWS::DynamoDB::Table"} <= tables
        expiring = [r for r in app.resources if "TimeToLiveSpecification" in r.properties]
        assert expiring, "the sink tables expire their client-id guards"
        for resource in expiring:  # honoured, as CloudFormation sets it: UpdateTimeToLive
            ttl = dynamodb.describe_time_to_live(TableName=resource.name)["TimeToLiveDescription"]
            wanted = resource.properties["TimeToLiveSpecification"]["AttributeName"]
            assert (ttl["TimeToLiveStatus"], ttl["AttributeName"]) == ("ENABLED", wanted)
        queues = {url.rsplit("/", 1)[1] for url in client("sqs", endpoint.url).list_queues()["QueueUrls"]}
        assert {r.name for r in app.resources if r.type == "AWS::SQS::Queue"} <= queues
        buckets = {b["Name"] for b in client("s3", endpoint.url).list_buckets()["Buckets"]}
        assert {r.name for r in app.resources if r.type == "AWS::S3::Bucket"} <= buckets


def test_a_fifo_queue_cloudformation_names_ends_in_fifo_and_fits(tmp_path):
    """CloudFormation names a FIFO queue without a QueueName `<stack>-<id>-<suffix>.fifo`; SQS refuses
    a FIFO queue whose name does not end in `.fifo`."""
    from local.app.template import _Reader

    resources = {
        "Outbox": {"Type": "AWS::SQS::Queue", "Properties": {"FifoQueue": True}},
        "Plain": {"Type": "AWS::SQS::Queue", "Properties": {}},
        "Named": {"Type": "AWS::SQS::Queue", "Properties": {"FifoQueue": True, "QueueName": "orders.fifo"}},
    }
    reader = _Reader({"Resources": resources}, "a-stack-with-a-rather-long-name-" * 2, tmp_path, ENDPOINT)
    outbox, plain = reader.name("Outbox"), reader.name("Plain")
    assert outbox.endswith(".fifo") and len(outbox) <= 80, outbox
    assert not plain.endswith(".fifo")
    assert reader.name("Named") == "orders.fifo"
