"""The baseline's CDK app (bench/baseline) synthesized offline: the resources and the settings its
cost depends on, as its stack's docstring states them, and nothing of shardline in it."""

from __future__ import annotations

import ast
import json
import sys
from typing import Any

import pytest

from bench.baseline.app import build
from bench.baseline.stack import HANDLERS, POWERTOOLS_PARAMETER
from shardline.aws_lambda import SinkDeclaration

pytestmark = pytest.mark.slow  # a synth: about 6 s


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    outdir = tmp_path_factory.mktemp("baseline.out")
    app, stack = build(str(outdir), shards=7)
    app.synth()
    return json.loads((outdir / f"{stack.stack_name}.template.json").read_text())


def of_type(template: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    return [r["Properties"] for r in template["Resources"].values() if r["Type"] == kind]


def test_its_resources(template):
    types = sorted({r["Type"] for r in template["Resources"].values()})
    assert "AWS::Lambda::LayerVersion" not in types  # Powertools is the public layer, shardline's absent
    assert len(of_type(template, "AWS::Lambda::Function")) == 2
    assert len(of_type(template, "AWS::DynamoDB::Table")) == 3
    (stream,) = of_type(template, "AWS::Kinesis::Stream")
    assert stream["ShardCount"] == 7 and stream["RetentionPeriodHours"] == 24
    (stage,) = of_type(template, "AWS::ApiGateway::Stage")
    assert stage["StageName"] == "v1"
    paths = {r["PathPart"] for r in of_type(template, "AWS::ApiGateway::Resource")}
    assert paths == {"streams", "{stream}", "records"}
    (method,) = of_type(template, "AWS::ApiGateway::Method")
    assert method["HttpMethod"] == "POST" and method["AuthorizationType"] == "AWS_IAM"
    assert method["Integration"]["Type"] == "AWS_PROXY"


def test_the_mapping_is_powertools_batch_processor_s(template):
    (mapping,) = of_type(template, "AWS::Lambda::EventSourceMapping")
    assert mapping["BatchSize"] == 100 and mapping["MaximumBatchingWindowInSeconds"] == 1
    assert mapping["StartingPosition"] == "TRIM_HORIZON"
    assert mapping["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
    assert mapping["BisectBatchOnFunctionError"] is True and mapping["MaximumRetryAttempts"] == 2
    assert "OnFailure" in mapping["DestinationConfig"]


def test_functions_memory_layers_and_the_declared_sinks(template):
    functions = {f["Handler"]: f for f in of_type(template, "AWS::Lambda::Function")}
    assert set(functions) == {"producer.handler", "consumer.handler"}
    assert {f["MemorySize"] for f in functions.values()} == {256}
    assert functions["producer.handler"]["Timeout"] == 15 and functions["consumer.handler"]["Timeout"] == 60
    assert "Layers" not in functions["producer.handler"]
    (layer,) = functions["consumer.handler"]["Layers"]
    parameter = template["Parameters"][layer["Ref"]]
    assert parameter["Default"] == POWERTOOLS_PARAMETER
    variables = functions["consumer.handler"]["Environment"]["Variables"]
    # What the local verdict finds a consumer group by, and its sinks (table names are tokens).
    assert variables["SHARDLINE_GROUP"] == "baseline-consumer" and "Ref" in variables["LEASE_TABLE"]
    sinks_join = variables["SHARDLINE_SINKS"]["Fn::Join"][1]
    text = "".join(part if isinstance(part, str) else "TABLE" for part in sinks_join)
    sinks = [SinkDeclaration.from_json(item) for item in json.loads(text)]
    assert [(s.holds, s.id_attribute, s.key_attribute, s.count_attribute) for s in sinks] == [
        ("records", "id", "partitionKey", "count"),
        ("counts", "recordId", "partitionKey", "count"),
    ]


def test_the_tables_are_on_demand_and_the_idempotency_one_as_powertools_documents(template):
    tables = of_type(template, "AWS::DynamoDB::Table")
    assert {t["BillingMode"] for t in tables} == {"PAY_PER_REQUEST"}
    keys = sorted(t["KeySchema"][0]["AttributeName"] for t in tables)
    assert keys == ["id", "id", "partitionKey"]
    ttls = sorted(t.get("TimeToLiveSpecification", {}).get("AttributeName", "") for t in tables)
    assert ttls == ["", "expiration", "expiresAt"]


def test_the_handlers_import_only_lambda_s_boto3_and_powertools():
    allowed = {"boto3", "botocore", "aws_lambda_powertools", "__future__", *sys.stdlib_module_names}
    for source in HANDLERS.rglob("*.py"):
        tree = ast.parse(source.read_text())
        names = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        names |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
        assert {name.split(".")[0] for name in names} <= allowed, (source, names)
