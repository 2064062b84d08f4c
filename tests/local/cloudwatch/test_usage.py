"""The usage ledger (`local.cloudwatch.usage`): AWS's rounding, the counters, the reset, the merge; and
the functions' logs billed by the collector (`local.cloudwatch.sources`)."""

from __future__ import annotations

import json
import time
from pathlib import Path

from local.app import model
from local.cloudwatch.metrics import MetricStore
from local.cloudwatch.sources import Collector
from local.cloudwatch.usage import (
    Usage,
    billed_ms,
    gb_seconds,
    merge,
    payload_units,
    read_units,
    sqs_requests,
    write_units,
)

KiB = 1024


def test_each_service_rounds_as_it_bills():
    sizes = (0, 5 * KiB, 25 * KiB, 25 * KiB + 1, 45 * KiB, 1000 * KiB, 1024 * KiB)
    assert [payload_units(n) for n in sizes] == [1, 1, 1, 2, 2, 40, 41]
    assert [write_units(n) for n in (1, 1024, 1025, 1536, 30 * KiB)] == [1, 1, 2, 2, 30]
    assert [read_units(n, consistent=True) for n in (0, 4096, 4097, 9 * KiB)] == [1, 1, 2, 3]
    assert [read_units(n, consistent=False) for n in (0, 4096, 9 * KiB)] == [0.5, 0.5, 1.5]
    assert [sqs_requests(n) for n in (0, 64 * KiB, 64 * KiB + 1, 100 * KiB, 256 * KiB)] == [1, 1, 2, 2, 4]
    assert [billed_ms(d) for d in (0.0, 0.2, 1.0, 1.01, 99.5)] == [1, 1, 1, 2, 100]
    assert gb_seconds(2000, 512) == 1.0


def test_counts_add_distinct_keys_count_once_and_a_reset_keeps_what_a_resource_is():
    now = [1000.0]
    usage = Usage(clock=lambda: now[0])
    usage.describe("lambda", "fn", memory_mb=512)
    usage.add("lambda", "fn", invocations=1, billed_ms=1500)
    usage.add("lambda", "fn", invocations=1, billed_ms=500)
    usage.distinct("emf", "/aws/lambda/fn", "metrics", ["a", "b"])
    usage.distinct("emf", "/aws/lambda/fn", "metrics", ["b", "c"])
    now[0] = 1010.0
    reading = usage.snapshot(reset=True)
    assert reading["since"] == 1000.0 and reading["seconds"] == 10.0
    assert reading["services"] == {
        "lambda": {"fn": {"memory_mb": 512, "invocations": 2, "billed_ms": 2000, "gb_seconds": 1.0,
                          "init_gb_seconds": 0.0}},
        "emf": {"/aws/lambda/fn": {"metrics": 3}},
    }  # fmt: skip
    after = usage.snapshot()
    assert after["since"] == 1010.0
    assert after["services"] == {
        "lambda": {"fn": {"memory_mb": 512, "gb_seconds": 0.0, "init_gb_seconds": 0.0}}
    }


def test_a_merge_puts_the_ledgers_side_by_side_and_adds_what_both_count():
    ours = {
        "since": 5.0,
        "seconds": 2.0,
        "services": {"lambda": {"fn": {"memory_mb": 1024, "billed_ms": 3000}}},
    }
    endpoint = {"since": 4.0, "seconds": 3.0, "services": {"sqs": {"q": {"requests": 2}}, "dynamodb": {}}}
    merged = merge(ours, endpoint, {"services": {"sqs": {"q": {"requests": 1}}}})
    assert merged["since"] == 4.0 and merged["seconds"] == 3.0
    assert merged["services"]["sqs"] == {"q": {"requests": 3}}
    assert merged["services"]["lambda"]["fn"]["gb_seconds"] == 3.0


def test_the_functions_log_lines_are_billed_as_ingested_with_their_emf_documents(tmp_path: Path):
    function = model.Function("F", "fn", "h.handler", tmp_path, log_group="/aws/lambda/fn")
    log = tmp_path / "fn.log"
    earlier = "a line of an earlier run\n"
    log.write_text(earlier)  # workers append: what was there before the run is not billed
    usage = Usage()
    collector = Collector(
        MetricStore(), model.LocalApp(stack_name="s", functions=(function,)),
        endpoint_url="http://127.0.0.1:9", log_dir=tmp_path, usage=usage,
    )  # fmt: skip

    def emf(service: str, **values: float) -> str:
        directive = {
            "Namespace": "app",
            "Dimensions": [["service"]],
            "Metrics": [{"Name": n} for n in values],
        }
        return json.dumps({"_aws": {"Timestamp": int(time.time() * 1000), "CloudWatchMetrics": [directive]},
                           "service": service, **values})  # fmt: skip

    lines = [
        "START RequestId: 1 Version: $LATEST",
        emf("svc", Handled=1, Failed=0),
        emf("svc", Handled=2),  # the same metric again: not a new one
        emf("other", Handled=1),  # another dimension value: another metric
        '{"_aws": {"Timestamp": "bad"}}',  # not extracted: a log line, not an EMF document
        "END RequestId: 1",
        "REPORT RequestId: 1\tDuration: 1.00 ms\tBilled Duration: 1 ms\t",
    ]
    with log.open("a") as out:
        out.write("local runtime: not as deployed: a note of the runtime's\n")
        out.write("\n".join(lines) + "\n" + '{"partial": ')
    collector.read_logs()
    services = usage.snapshot()["services"]
    assert services["logs"] == {
        "/aws/lambda/fn": {"events": 7, "bytes": sum(len(line.encode()) for line in lines)}
    }
    assert services["emf"] == {"/aws/lambda/fn": {"documents": 3, "metrics": 3}}
    with log.open("a") as out:
        out.write("1}\n")
    collector.read_logs()
    assert usage.snapshot()["services"]["logs"]["/aws/lambda/fn"]["events"] == 8
    assert len(collector.log_events) == 1 + 1 + 7 + 1  # the earlier run's line is still shown
