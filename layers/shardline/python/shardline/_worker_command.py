"""`shardline worker`: one worker of a consumer group, from flags or the environment, until SIGTERM.

    shardline worker --stream orders --group orders-sink --lease-table orders-leases \\
        --handler app:function

`--handler module:attribute` (imported from the working directory) names the group's code: a
`ConsumerFunction` (the same object a Lambda group deploys: `functions/event_sink/app.py`'s
`function`, configured from SHARDLINE_GROUP, LEASE_TABLE, SINK_TABLE, DLQ_URL, ... as in Lambda),
a `KinesisConsumer`, or a plain function — a record handler, or with `--batch` a batch handler.
Every flag has an environment variable (`WORKER_SETTINGS`); a flag wins. AWS clients come from
boto3's usual chain (AWS_REGION, AWS_ENDPOINT_URL, credentials). Metrics are printed as
CloudWatch EMF lines (namespace POWERTOOLS_METRICS_NAMESPACE, dimensions `service` and
`ConsumerGroup`) every `--metrics-interval` seconds when Powertools is installed, and logs go to
stderr. Exit status: 0 after SIGTERM/SIGINT (leases handed back), 2 for bad settings.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from collections.abc import Callable, Mapping
from typing import Any

#: Each setting: (flag, environment variable, default, help).
WORKER_SETTINGS: tuple[tuple[str, str, str | None, str], ...] = (
    ("--stream", "SHARDLINE_STREAM", None, "the stream's name"),
    ("--group", "SHARDLINE_GROUP", None, "the consumer group's name"),
    ("--lease-table", "LEASE_TABLE", None, "the group's lease table"),
    ("--handler", "SHARDLINE_HANDLER", None, "module:attribute of the group's code"),
    ("--sink-table", "SINK_TABLE", None, "the sink table a ConsumerFunction's handler_for is given"),
    ("--dlq-url", "DLQ_URL", None, "the dead-letter queue (none: poison records block)"),
    ("--dlq-bucket", "DLQ_BUCKET", None, "where a dead letter over SQS's 1 MiB is stored whole"),
    ("--max-attempts", "MAX_ATTEMPTS", "3", "failed attempts before a record is dead-lettered"),
    ("--checkpoint-interval", "CHECKPOINT_INTERVAL", "5", "seconds between checkpoints within a batch"),
    (
        "--failure-detail",
        "FAILURE_DETAIL",
        "fingerprint",
        "what is kept of a handler's exception: fingerprint or message",
    ),
    ("--lease-duration", "LEASE_DURATION_SECONDS", "10", "seconds without renewal before a lease expires"),
    ("--renew-interval", "RENEW_INTERVAL_SECONDS", None, "seconds between renewals (default a third)"),
    ("--max-leases", "MAX_LEASES_PER_WORKER", None, "at most this many leases per worker"),
    ("--initial-position", "INITIAL_POSITION", "TRIM_HORIZON", "TRIM_HORIZON or LATEST: a new group starts"),
    ("--batch-limit", "BATCH_LIMIT", "10000", "Kinesis records per GetRecords call (at most 10,000)"),
    ("--batch-timeout", "BATCH_TIMEOUT_SECONDS", "120", "seconds a batch's handler may run"),
    ("--metrics-interval", "METRICS_INTERVAL_SECONDS", "60", "seconds between EMF metric lines"),
    ("--owner", "WORKER_ID", None, "this worker's name in the lease table (default host-pid-random)"),
    ("--consumer-arn", "STREAM_CONSUMER_ARN", None, "a registered stream consumer: enhanced fan-out"),
)


def parser(
    prog: str = "shardline worker", environ: Mapping[str, str] = os.environ
) -> argparse.ArgumentParser:
    """The command's flags, each defaulting to its variable in `environ`, then to shardline's default."""
    parser = argparse.ArgumentParser(prog=prog, description="One worker of a consumer group.")
    for flag, variable, default, text in WORKER_SETTINGS:
        parser.add_argument(flag, default=environ.get(variable, default), help=f"{text} (${variable})")
    parser.add_argument("--batch", action="store_true", help="the handler function takes a list of records")
    parser.add_argument("--endpoint-url", default=None, help="AWS endpoint (default: boto3's)")
    return parser


def main(argv: list[str], prog: str = "shardline worker") -> int:
    """Run one worker; the exit status."""
    from shardline.errors import ConfigurationError

    args = parser(prog).parse_args(argv)
    logging.basicConfig(level=os.environ.get("LOG_LEVEL", "INFO"), stream=sys.stderr, format="%(message)s")
    for chatty in ("botocore", "boto3", "urllib3"):  # their INFO lines say which endpoint, per client
        logging.getLogger(chatty).setLevel(logging.WARNING)
    try:
        worker = build(args)
    except (ConfigurationError, ValueError, ImportError, AttributeError) as error:
        print(f"{prog}: {error}", file=sys.stderr)
        return 2
    worker.run()
    return 0


def build(args: argparse.Namespace) -> Any:
    """The `Worker` the settings describe (`ConfigurationError` naming a missing or bad one)."""
    import boto3

    from shardline.consumer import KinesisConsumer, Worker
    from shardline.errors import ConfigurationError

    for name in ("stream", "group", "lease_table", "handler"):
        if not getattr(args, name):
            flag, variable = f"--{name.replace('_', '-')}", _variable(name)
            raise ConfigurationError(f"{flag} (or ${variable}) is required")
    _export(args)  # what a ConsumerFunction reads, as in Lambda
    clients: dict[str, Any] = {}

    def client(service: str) -> Any:
        if service not in clients:
            clients[service] = boto3.client(service, endpoint_url=args.endpoint_url)
        return clients[service]

    code = load(args.handler)
    function_type = _consumer_function_type()
    if function_type is not None and isinstance(code, function_type):
        code.clients.update({service: client(service) for service in ("kinesis", "dynamodb", "sqs", "s3")})
        consumer = code.get()
    elif isinstance(code, KinesisConsumer):
        consumer = code
    elif callable(code):
        consumer = _consumer_of(code, args, client)
    else:
        raise ConfigurationError(
            f"--handler {args.handler}: not a ConsumerFunction, KinesisConsumer or function"
        )
    return Worker(
        consumer,
        client("kinesis"),
        args.stream,
        owner=args.owner,
        lease_duration=float(args.lease_duration),
        renew_interval=float(args.renew_interval) if args.renew_interval else None,
        max_leases=int(args.max_leases) if args.max_leases else None,
        initial_position=args.initial_position,
        batch_limit=int(args.batch_limit),
        batch_timeout=float(args.batch_timeout),
        publish=_emf_publisher(consumer.group),
        publish_interval=float(args.metrics_interval),
        consumer_arn=args.consumer_arn,
    )


def load(reference: str) -> Any:
    """`module:attribute`, imported with the working directory on the path."""
    module_name, _, attribute = reference.partition(":")
    if not module_name or not attribute:
        raise ValueError(f"--handler {reference!r}: expected module:attribute")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    return getattr(importlib.import_module(module_name), attribute)


def _consumer_of(function: Callable[..., Any], args: argparse.Namespace, client: Callable[[str], Any]) -> Any:
    from shardline.consumer import KinesisConsumer, LeaseTable

    consumer = KinesisConsumer(
        args.group,
        LeaseTable(client("dynamodb"), args.lease_table),
        kinesis=client("kinesis"),
        dlq=_dead_letters(args, client),
        max_attempts=int(args.max_attempts),
        checkpoint_interval=float(args.checkpoint_interval),
        failure_detail=args.failure_detail,
    )
    if args.batch:
        consumer.batch_handler(function)
    else:
        consumer.handler(function)
    return consumer


def _dead_letters(args: argparse.Namespace, client: Callable[[str], Any]) -> Any:
    from shardline.consumer import DeadLetterQueue

    if not args.dlq_url:
        return None
    if not args.dlq_bucket:
        return DeadLetterQueue(client("sqs"), args.dlq_url)
    return DeadLetterQueue(client("sqs"), args.dlq_url, s3=client("s3"), bucket=args.dlq_bucket)


def _consumer_function_type() -> type[Any] | None:
    """`ConsumerFunction`, if Powertools (which it needs) is installed."""
    try:
        from shardline.aws_lambda._consumer_function import ConsumerFunction
    except ImportError:
        return None
    return ConsumerFunction


def _variable(name: str) -> str:
    flag = f"--{name.replace('_', '-')}"
    return next(variable for option, variable, _, _ in WORKER_SETTINGS if option == flag)


def _export(args: argparse.Namespace) -> None:
    """Put the settings a `ConsumerFunction` reads from the environment there, flags winning."""
    for flag, variable, _, _ in WORKER_SETTINGS:
        value = getattr(args, flag[2:].replace("-", "_"))
        if value is not None:
            os.environ[variable] = str(value)


_NOT_COUNTERS = frozenset({"LeasesHeld", "leases", "owner"})


def _emf_publisher(group: str) -> Callable[[Mapping[str, Any]], None] | None:
    """Print each snapshot's increase as one EMF line (Powertools), or None without Powertools."""
    try:
        from aws_lambda_powertools import Metrics
        from aws_lambda_powertools.metrics import MetricUnit

        from shardline.aws_lambda._emf import publish_metrics
    except ImportError:
        logging.getLogger(__name__).warning("no metrics: aws-lambda-powertools is not installed")
        return None
    metrics = Metrics(namespace=os.environ.get("POWERTOOLS_METRICS_NAMESPACE", "shardline"))
    previous: dict[str, Any] = {}

    def publish(snapshot: Mapping[str, Any]) -> None:
        metrics.add_dimension(name="ConsumerGroup", value=group)
        counters = {name: value for name, value in snapshot.items() if name not in _NOT_COUNTERS}
        publish_metrics(metrics, counters, since=previous)
        metrics.add_metric(name="LeasesHeld", unit=MetricUnit.Count, value=snapshot["LeasesHeld"])
        metrics.flush_metrics()
        previous.clear()
        previous.update(counters)

    return publish
