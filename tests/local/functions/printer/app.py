"""Test function: writes to stdout and stderr, logs, and prints a Powertools EMF line."""

import logging
import sys

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
