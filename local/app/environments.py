"""The functions' environments, read through `shardline.aws_lambda`'s contract (never by string):
which function is a consumer group, with its tables and queues, and which routes the producer serves."""

from __future__ import annotations

from shardline.aws_lambda import ConsumerEnvironment, ProducerEnvironment, StreamRoute, parse_streams
from shardline.errors import ConfigurationError

from . import model


def consumer(function: model.Function) -> ConsumerEnvironment | None:
    """The consumer group `function` runs (its group, lease and sink tables, DLQ), or None when its
    environment is not a consumer's."""
    return consumer_of(function.environment)


def consumer_of(environment: dict[str, str]) -> ConsumerEnvironment | None:
    """The consumer group an environment (a function's, a worker task's) declares, or None."""
    try:
        return ConsumerEnvironment.from_environ(environment)
    except ConfigurationError:
        return None


def routes(function: model.Function) -> dict[str, StreamRoute]:
    """The API routes `function` serves (route name -> its stream), empty unless it is a producer."""
    try:
        return parse_streams(ProducerEnvironment.from_environ(function.environment).streams_json)
    except ConfigurationError:
        return {}
