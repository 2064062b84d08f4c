"""`local.lambda_` warm workers, what the handler sees (context, env, sys.path), and the real producer."""

import base64
import json
import uuid

import pytest

from local.app.model import ACCOUNT, REGION, Function
from local.iam.principals import session_credentials
from local.lambda_.runtimes import site_dir
from local.lambda_.workers import RequestTooLargeError
from shardline.cdk._producer_api import PRODUCER_HANDLER
from tests.support.workers import (
    LOG_STREAM,
    POWERTOOLS_LAYER,
    REPO,
    TEST_FUNCTIONS,
    function,
    rest_event,
    wait_until,
)

# -- warm workers ----------------------------------------------------------------------------------


def test_warm_reuse_imports_once_and_keeps_the_process(make_functions):
    functions = make_functions(function("echo", "app.count"))
    functions.start()

    answers = [functions.invoke("test-echo", {}).payload for _ in range(3)]

    assert [answer["count"] for answer in answers] == [1, 2, 3]
    assert len({answer["pid"] for answer in answers}) == 1
    assert functions.stats()["test-echo"]["cold_starts"] == 0


def test_echo_round_trips_the_event_as_json(make_functions):
    functions = make_functions(function("echo"))
    event = {"text": "clé ünïcode", "n": [1, 2.5, None, True], "nested": {"a": "b" * 1000}}

    result = functions.invoke("test-echo", event)

    assert result.function_error is None
    assert result.payload == event
    assert str(uuid.UUID(result.request_id, version=4)) == result.request_id


def test_start_prewarms_one_worker_per_function(make_functions):
    functions = make_functions(function("echo"), function("sleepy"), function("failing", "app.whoami"))

    functions.start()

    stats = functions.stats()
    assert {name: stats[name]["workers"] for name in stats} == dict.fromkeys(stats, 1)
    functions.invoke("test-sleepy", {})
    assert functions.stats()["test-sleepy"]["cold_starts"] == 0


def test_unknown_function_is_a_key_error(make_functions):
    functions = make_functions(function("echo"))
    with pytest.raises(KeyError):
        functions.invoke("no-such-function", {})


def test_event_over_6_mb_is_refused_before_any_worker_sees_it(make_functions):
    functions = make_functions(function("echo"))
    with pytest.raises(RequestTooLargeError, match="6291456 bytes"):
        functions.invoke("test-echo", {"data": "x" * 6_291_456})
    assert functions.stats()["test-echo"]["invocations"] == 0


def test_handler_returning_bytes_passes_them_through(make_functions):
    functions = make_functions(function("failing", "app.raw_bytes"))
    result = functions.invoke("test-failing", {})
    assert (result.payload, result.function_error) == (b"\x00not json", None)


# -- what the handler sees -------------------------------------------------------------------------


def test_context_has_lambdas_fields_and_remaining_time_decreases(make_functions):
    functions = make_functions(function("introspect", "app.context_fields", timeout_seconds=7, memory_mb=256))

    first = functions.invoke("test-introspect", {"sleep": 0.2})
    second = functions.invoke("test-introspect", {})

    fields = first.payload
    assert fields["aws_request_id"] == first.request_id != second.payload["aws_request_id"]
    assert fields["function_name"] == "test-introspect"
    assert fields["function_version"] == "$LATEST"
    assert fields["invoked_function_arn"] == f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:test-introspect"
    assert (fields["memory_limit_in_mb"], fields["memory_limit_type"]) == ("256", "str")  # as awslambdaric
    assert fields["log_group_name"] == "/aws/lambda/test-introspect"
    assert LOG_STREAM.match(fields["log_stream_name"])
    assert fields["log_stream_name"] == second.payload["log_stream_name"]  # one stream per worker
    assert fields["identity"] == [None, None] and fields["client_context"] is None
    before, after = fields["remaining_ms"]
    assert 0 < after <= before - 150 and before <= 7000


def test_log_group_from_the_function_record(make_functions):
    functions = make_functions(function("introspect", "app.context_fields", log_group="/custom/group"))
    assert functions.invoke("test-introspect", {}).payload["log_group_name"] == "/custom/group"


def test_reserved_and_endpoint_variables_are_set(make_functions):
    settings = {"environment": {"GREETING": "hello", "AWS_REGION": "eu-west-1"}, "memory_mb": 1024}
    functions = make_functions(
        function("introspect", "app.environment", **settings), endpoint_url="http://127.0.0.1:4566"
    )

    env = functions.invoke("test-introspect", {}).payload

    code_dir = str((TEST_FUNCTIONS / "introspect").resolve())
    role_key, role_secret = session_credentials(Function.role_arn, "test-introspect")
    assert env["GREETING"] == "hello"
    assert {
        name: env[name]
        for name in (
            "AWS_LAMBDA_FUNCTION_NAME",
            "AWS_LAMBDA_FUNCTION_VERSION",
            "AWS_LAMBDA_FUNCTION_MEMORY_SIZE",
            "AWS_LAMBDA_LOG_GROUP_NAME",
            "AWS_REGION",
            "AWS_DEFAULT_REGION",
            "AWS_EXECUTION_ENV",
            "LAMBDA_TASK_ROOT",
            "_HANDLER",
            "TZ",
            "AWS_ENDPOINT_URL",
            "AWS_ACCESS_KEY_ID",
            "AWS_SECRET_ACCESS_KEY",
            "POWERTOOLS_TRACE_DISABLED",
        )
    } == {
        "AWS_LAMBDA_FUNCTION_NAME": "test-introspect",
        "AWS_LAMBDA_FUNCTION_VERSION": "$LATEST",
        "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": "1024",
        "AWS_LAMBDA_LOG_GROUP_NAME": "/aws/lambda/test-introspect",
        "AWS_REGION": "us-east-1",  # reserved: the function's own value does not apply, as in Lambda
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_EXECUTION_ENV": "AWS_Lambda_python3.12",
        "LAMBDA_TASK_ROOT": code_dir,
        "_HANDLER": "app.environment",
        "TZ": ":UTC",
        "AWS_ENDPOINT_URL": "http://127.0.0.1:4566",
        "AWS_ACCESS_KEY_ID": role_key,  # its role's, in a session of its own (local.iam)
        "AWS_SECRET_ACCESS_KEY": role_secret,
        "POWERTOOLS_TRACE_DISABLED": "true",
    }
    assert LOG_STREAM.match(env["AWS_LAMBDA_LOG_STREAM_NAME"])
    assert env["_X_AMZN_TRACE_ID"].startswith("Root=1-")
    assert "PYTEST_CURRENT_TEST" not in env  # nothing of this process's environment leaks in


def test_function_may_turn_powertools_tracing_on(make_functions):
    settings = {"environment": {"POWERTOOLS_TRACE_DISABLED": "false"}}
    functions = make_functions(function("introspect", "app.environment", **settings))
    assert functions.invoke("test-introspect", {}).payload["POWERTOOLS_TRACE_DISABLED"] == "false"


def test_sys_path_is_code_dir_then_layers_then_runtime_packages(make_functions, tmp_path):
    layer = tmp_path / "layer"
    (layer / "python").mkdir(parents=True)
    (layer / "python" / "layer_probe.py").write_text("")
    functions = make_functions(function("introspect", "app.paths", layer_dirs=(layer,), public_layers=()))

    answer = functions.invoke("test-introspect", {}).payload

    code_dir = str((TEST_FUNCTIONS / "introspect").resolve())
    sys_path = answer["sys_path"]
    runtime_site = str(site_dir("python3.12"))
    assert sys_path[:3] == [code_dir, str((layer / "python").resolve()), runtime_site]
    assert all(not path.endswith("site-packages") for path in sys_path), "no interpreter's site-packages"
    assert str(REPO) not in sys_path and str(REPO / "layers" / "shardline" / "python") not in sys_path
    assert answer["cwd"] == code_dir
    assert answer["layer_probe"] == str(layer / "python" / "layer_probe.py")


# -- the real producer -----------------------------------------------------------------------------


@pytest.mark.integration
def test_producer_handler_answers_200_and_lands_records_in_kinesis(make_functions, moto_server):
    from shardline.cdk._config import load
    from tests.support.integration import kinesis_client, read_stream, wait_active

    config = load(json.loads((REPO / "cdk.json").read_text())["context"]["shardline"])
    stream_name = f"{config.prefix}-{config.streams[0].name}"
    kinesis = kinesis_client(moto_server)
    if stream_name in kinesis.list_streams()["StreamNames"]:
        kinesis.delete_stream(StreamName=stream_name, EnforceConsumerDeletion=True)
        wait_until(lambda: stream_name not in kinesis.list_streams()["StreamNames"], 30)
    kinesis.create_stream(StreamName=stream_name, ShardCount=2)
    wait_active(kinesis, stream_name)
    producer = Function(
        logical_id="ProducerFunction",
        name=f"{config.prefix}-producer",
        handler="app.handler",
        code_dir=PRODUCER_HANDLER,
        layer_dirs=(REPO / "layers" / "shardline",),
        public_layers=(POWERTOOLS_LAYER,),
        timeout_seconds=29,
        memory_mb=512,
        environment={
            "POWERTOOLS_SERVICE_NAME": "shardline-producer",
            "POWERTOOLS_METRICS_NAMESPACE": config.metrics_namespace,
            "SHARDLINE_STREAMS": json.dumps(
                {"events": {"streamName": stream_name, "maxRecordSize": 1048576}}
            ),
            "MAX_RECORDS_PER_REQUEST": str(config.api.max_records_per_request),
            "MAX_BODY_BYTES": str(config.api.max_body_bytes),
        },
    )
    functions = make_functions(producer, endpoint_url=moto_server)
    functions.start()
    records = [
        {"data": base64.b64encode(f"event-{i}".encode()).decode(), "partitionKey": f"key-{i}"}
        for i in range(25)
    ]

    result = functions.invoke(producer.name, rest_event("events", json.dumps({"records": records})))

    assert result.function_error is None, result.payload
    assert result.payload["statusCode"] == 200, result.payload
    answer = json.loads(result.payload["body"])
    assert answer["failedRecordCount"] == 0 and len(answer["records"]) == 25
    landed = sorted(
        user.data for entries in read_stream(kinesis, stream_name).values() for _, _, user in entries
    )
    assert landed == sorted(f"event-{i}".encode() for i in range(25))
    log = functions.log_path(producer.name).read_text()
    assert '"_aws"' in log and "REPORT RequestId: " + result.request_id in log
