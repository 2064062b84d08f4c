"""Test function: writes to stdout and stderr, logs, and prints a Powertools EMF line."""

import json
import logging
import sys
import time

from aws_lambda_powertools import Metrics
from aws_lambda_powertools.metrics import MetricUnit

metrics = Metrics(namespace="local-tests", service="printer")


@metrics.log_metrics
def handler(event, context):
    print(f"hello from {context.aws_request_id}")
    print("to stderr", file=sys.stderr)
    print("no newline yet", end="")
    print(" ... now")
    logging.getLogger().warning("a warning through the root logger")
    metrics.add_metric(name="Printed", unit=MetricUnit.Count, value=event.get("lines", 1))
    return {"printed": True}


def long_lines(event, context):
    """Prints `count` JSON lines of `size` characters each, in pieces (as a logger might write them),
    from the epoch time `at` on (so that two workers print at the same time)."""
    time.sleep(max(0.0, event["at"] - time.time()))
    for index in range(event["count"]):
        line = json.dumps(
            {"_aws": {"worker": context.log_stream_name, "index": index}, "pad": "x" * event["size"]}
        )
        sys.stdout.write(line[:100])
        sys.stdout.write(line[100:])
        sys.stdout.write("\n")
    return {"printed": event["count"]}
