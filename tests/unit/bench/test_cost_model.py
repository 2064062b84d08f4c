"""bench.cost_model: counts taken by the local runtime, priced per million records — each figure
worked by hand from the price table."""

from __future__ import annotations

import math

import pytest

from bench.cost_model import FunctionUse, Measured, lambda_gb_seconds, price, shards_needed, total
from bench.cost_prices import PRICES

#: 100,000 records of 100 B: aggregated 100 to a Kinesis record (shardline-like) or one each.
AGGREGATED = Measured(records=100_000, kinesis_records=1_000, kinesis_bytes=10_000_000, reading_groups=2)
ONE_EACH = Measured(records=100_000, kinesis_records=100_000, kinesis_bytes=13_000_000, reading_groups=2)


def test_a_duration_measured_here_becomes_lambdas_by_the_cpu_share_of_its_memory():
    assert lambda_gb_seconds(FunctionUse(10, 1000.0, 512)) == pytest.approx(1769 / 1024)
    assert lambda_gb_seconds(FunctionUse(10, 1000.0, 1024)) == pytest.approx(
        1769 / 1024
    )  # same work, same cost
    assert lambda_gb_seconds(FunctionUse(10, 1000.0, 4096)) == pytest.approx(
        4.0
    )  # more than a vCPU: paid, unused


def test_shards_follow_the_binding_limit_of_the_rate():
    assert shards_needed(AGGREGATED, 10_000) == 1  # 100 Kinesis records/s, 1.0 MB/s written, read twice
    assert shards_needed(ONE_EACH, 10_000) == 10  # 10,000 records/s: the records limit binds
    assert shards_needed(AGGREGATED, 100_000) == 10  # 10 MB/s: the bytes limit binds (ceil(1e7 / 2**20))
    three_groups = Measured(records=1_000, kinesis_records=10, kinesis_bytes=943_718, reading_groups=3)
    assert shards_needed(three_groups, 1_000) == 2  # 0.9 MiB/s written fits one shard; read 3 times, not


def test_each_component_is_its_count_per_million_times_its_price():
    app = Measured(
        records=200_000, api_requests=400, functions={"p": FunctionUse(400, 20_000.0, 512)},
        kinesis_records=2_000, kinesis_bytes=20_000_000, put_payload_units=4_000, reading_groups=1,
        dynamodb_wru=1_000_000.0, dynamodb_rru=10_000.0, dynamodb_bytes_stored=50_000_000,
        sqs_requests=10, log_bytes=2_000_000, custom_metrics=20,
    )  # fmt: skip
    bill = price(app, 10_000)
    p = {name: item.usd for name, item in PRICES.items()}
    hours = 1e6 / 10_000 / 3600
    assert bill["API Gateway requests"].usd == pytest.approx(2_000 * p["apigateway.rest_request"])
    assert bill["Lambda requests"].usd == pytest.approx(2_000 * p["lambda.request"])
    assert bill["Lambda duration"].quantity == pytest.approx(5 * 20 * 1769 / 1024)
    assert bill["Kinesis shard-hours"].quantity == pytest.approx(1 * hours)  # 1.0 MB/s, under 1 MiB: 1 shard
    assert bill["Kinesis PUT payload units"].usd == pytest.approx(20_000 * p["kinesis.put_payload_unit"])
    assert bill["DynamoDB writes"].usd == pytest.approx(5_000_000 * p["dynamodb.wru"])
    assert bill["DynamoDB reads"].usd == pytest.approx(50_000 * p["dynamodb.rru"])
    assert bill["DynamoDB storage (a month)"].quantity == pytest.approx(0.25)
    assert bill["SQS requests"].quantity == pytest.approx(50)
    assert bill["CloudWatch logs"].quantity == pytest.approx(0.01)
    assert bill["CloudWatch custom metrics"].quantity == pytest.approx(20 * hours / 730)
    assert total(bill) == pytest.approx(sum(line.usd for line in bill.values()))


def test_the_other_capacity_modes():
    app = Measured(records=1_000_000, kinesis_records=1_000_000, kinesis_bytes=130_000_000,
                   kinesis_in_kib_rounded=1_000_000, dynamodb_wru=3_000_000.0, reading_groups=2)  # fmt: skip
    bill = price(app, 1_000, kinesis="on-demand", dynamodb="provisioned")
    hours = 1e6 / 1_000 / 3600
    assert bill["Kinesis stream-hours"].quantity == pytest.approx(hours)
    assert bill["Kinesis data in"].quantity == pytest.approx(1_000_000 / 2**20)  # each record 1 KiB
    assert bill["Kinesis data out"].quantity == pytest.approx(2 * 130_000_000 / 2**30)
    assert bill["DynamoDB writes"].quantity == pytest.approx(math.ceil(3 * 1_000) * hours)  # 3,000 WCU
    with pytest.raises(ValueError, match="kinesis: provisioned or on-demand"):
        price(app, 1_000, kinesis="serverless")
    with pytest.raises(ValueError, match="records and rate must be positive"):
        price(app, 0)


def test_a_usage_reading_becomes_the_counts_the_model_prices():
    usage = {
        "since": 0.0,
        "services": {
            "apigateway": {"api": {"requests": 7}},
            "lambda": {
                "f": {"memory_mb": 256, "invocations": 3, "billed_ms": 12, "inits": 1, "init_billed_ms": 100}
            },
            "kinesis": {
                "s": {"records_written": 5, "bytes_written": 900, "put_payload_units": 5, "kib_written": 5}
            },
            "dynamodb": {"t": {"write_units": 4, "read_units": 1.5, "items": 3, "bytes_stored": 300}},
            "sqs": {"q": {"requests": 2, "messages_sent": 2}, "o.fifo": {"requests": 3, "messages_sent": 3}},
            "logs": {"g": {"events": 10, "bytes": 1000}},
            "emf": {"documents": 4, "metrics": 9},
        },
    }
    app = Measured.from_usage(usage, records=5, reading_groups=2)
    assert (app.api_requests, app.kinesis_records, app.kinesis_bytes, app.put_payload_units) == (7, 5, 900, 5)
    assert app.functions == {"f": FunctionUse(3, 112.0, 256)}  # the init phase billed too
    assert (app.dynamodb_wru, app.dynamodb_rru, app.dynamodb_bytes_stored) == (4, 1.5, 300)
    assert (app.sqs_requests, app.sqs_fifo_requests, app.custom_metrics) == (2, 3, 9)
    assert app.log_bytes == 1000 + 26 * 10 and app.reading_groups == 2 and app.kinesis_in_kib_rounded == 5


def test_every_price_names_its_source_and_how_sure_it_is():
    for name, item in PRICES.items():
        assert item.usd > 0 and item.source.startswith("https://"), name
        assert item.sureness in {"A", "S", "U"}, name
