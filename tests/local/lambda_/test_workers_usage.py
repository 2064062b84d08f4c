"""What the workers bill (`local.cloudwatch.usage`): invocations, each one's duration rounded up to the
millisecond, the function's memory and so its GB-seconds, the init phase apart."""

from __future__ import annotations

import math
import re

from local.cloudwatch.usage import Usage
from tests.support.workers import function


def test_each_invocation_is_billed_its_duration_rounded_up_at_the_functions_memory(make_functions):
    usage = Usage()
    functions = make_functions(function("sleepy", memory_mb=512), usage=usage)
    functions.start()
    durations = [functions.invoke("test-sleepy", {"seconds": s}).duration_ms for s in (0.02, 0.05, 0.11)]
    billed = sum(math.ceil(d) for d in durations)
    counted = usage.snapshot()["services"]["lambda"]["test-sleepy"]
    assert counted["invocations"] == 3
    assert counted["billed_ms"] == billed >= 20 + 50 + 110
    assert counted["memory_mb"] == 512
    assert counted["gb_seconds"] == round(billed / 1000 * 512 / 1024, 6)
    # the same as the REPORT lines Lambda writes (and the log ships)
    log = functions.log_path("test-sleepy").read_text()
    assert sum(int(n) for n in re.findall(r"Billed Duration: (\d+) ms", log)) == billed
    (init,) = (float(ms) for ms in re.findall(r"\tInit Duration: ([\d.]+) ms", log))  # the first REPORT's
    assert counted["inits"] == 1
    assert counted["init_billed_ms"] in {
        math.ceil(init - 0.005),
        math.ceil(init + 0.005),
    }  # the log's 2 decimals


def test_a_reset_starts_from_zero_and_keeps_the_memory(make_functions):
    usage = Usage()
    functions = make_functions(function("echo", memory_mb=1769), usage=usage)
    functions.start()
    functions.invoke("test-echo", {})
    usage.reset()
    functions.invoke("test-echo", {})
    counted = usage.snapshot()["services"]["lambda"]["test-echo"]
    assert (counted["invocations"], counted["memory_mb"]) == (1, 1769)
    assert "inits" not in counted  # the worker was warm
