"""The usage of a running app (`Runtime.usage`, `GET|POST /_shardline/usage`, `python -m local usage`):
a team's app (tests/support/team_app) under a known load, every component's reading worked out by hand."""

from __future__ import annotations

import json
import time
import urllib.request
from pathlib import Path

from local.__main__ import main
from local.apigw.server import ApiServer
from local.app import model
from local.app.provision import client
from local.runtime import USAGE_ROUTE
from tests.support.runtime import start_runtime
from tests.support.team_app import team_assembly, team_template


def test_a_running_app_answers_its_usage_and_the_command_prints_and_resets_it(
    tmp_path: Path, capsys, monkeypatch
) -> None:
    monkeypatch.setenv("COLUMNS", "250")  # the tables' headers whole, on one line
    runtime = start_runtime(
        team_assembly(tmp_path, team_template()), tmp_path / "logs", existing_streams={"existing-orders": 1}
    )
    # The team's app has no REST API: its usage route served by a stage of its own, as `up` serves it.
    assert runtime.functions is not None
    api = ApiServer(model.RestApi("Api", "usage", "u1", "v1", ()), runtime.functions, port=0)
    api.add_route(USAGE_ROUTE, runtime.usage_route)
    api.start()
    try:
        app, functions = runtime.app, runtime.functions
        assert app is not None and functions is not None
        orders = next(s for s in app.streams if s.logical_id == "Orders")
        forwarder = next(f for f in app.functions if f.logical_id == "Forwarder")
        queue = next(r.name for r in app.resources if r.logical_id == "Forwarded")
        log = functions.log_path(forwarder.name)
        runtime.usage(
            reset=True
        )  # from here: start-up (provisioning, the warm workers' init) is not the load
        logged_before, invoked_before = log.stat().st_size, functions.stats()[forwarder.name]["invocations"]
        bodies = [f"order-{n:03d}" for n in range(20)]  # 9 bytes of data + 9 of partition key each
        kinesis = client("kinesis", runtime.endpoint_url, user_agent_extra="an-app/1.0")  # the app's, metered
        kinesis.put_records(
            StreamName=orders.name, Records=[{"Data": b.encode(), "PartitionKey": b} for b in bodies]
        )
        fan_out = next(r for r in runtime.runners if r.mapping.consumer_name == "fan-out")
        deadline = time.monotonic() + 60
        while (
            sum(shard["records"] for shard in fan_out.stats().values()) < 20 and time.monotonic() < deadline
        ):
            time.sleep(0.2)
        time.sleep(0.5)  # the last invocation's END and REPORT lines
        with urllib.request.urlopen(f"{api.url}{USAGE_ROUTE}", timeout=60) as answer:
            services = json.load(answer)["services"]

        assert services["kinesis"][orders.name] == {
            "put_records_calls": 1, "records_written": 20, "bytes_written": 20 * 18, "put_payload_units": 20,
            "kib_written": 20,
        }  # fmt: skip
        consumer = services["kinesis_consumers"][f"{orders.name}/fan-out"]
        assert (consumer["records_read"], consumer["bytes_read"]) == (20, 20 * 18)
        lambda_ = services["lambda"][forwarder.name]
        invocations = functions.stats()[forwarder.name]["invocations"] - invoked_before
        assert lambda_["invocations"] == invocations >= 1
        assert lambda_["memory_mb"] == forwarder.memory_mb == 128
        assert lambda_["gb_seconds"] == round(lambda_["billed_ms"] / 1000 * 128 / 1024, 6)
        assert services["sqs"][queue]["messages_sent"] == 20
        lines = [line for line in log.read_bytes()[logged_before:].split(b"\n") if line]
        group = forwarder.log_group or forwarder.name
        assert services["logs"][group] == {"events": len(lines), "bytes": sum(len(line) for line in lines)}
        assert sum(line.startswith(b"REPORT ") for line in lines) == invocations

        assert main(["usage", "--api-port", str(api.port), "--json"]) == 0
        printed = json.loads(capsys.readouterr().out)
        assert printed["services"]["kinesis"][orders.name]["put_payload_units"] == 20
        assert main(["usage", "--api-port", str(api.port), "--reset"]) == 0
        table = capsys.readouterr().out
        assert "PUT payload units" in table and orders.name in table and "GB-s" in table
        after = runtime.usage()["services"]
        assert orders.name not in after.get("kinesis", {})  # nothing written since the reset
        assert after["lambda"][forwarder.name] == {
            "memory_mb": 128,
            "gb_seconds": 0.0,
            "init_gb_seconds": 0.0,
        }
    finally:
        api.stop()
        runtime.stop()


def test_the_command_says_when_no_runtime_answers(capsys) -> None:
    from local.exit_codes import NOT_RUNNING
    from tests.support.runtime import free_port

    assert main(["usage", "--api-port", str(free_port())]) == NOT_RUNNING
    assert "runtime not answering" in capsys.readouterr().out
