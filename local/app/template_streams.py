"""The Kinesis part of reading a template (`local.app.template`): streams, registered consumers, and
the streams an app names by ARN without defining them.

A mix-in of `local.app.template`'s reader, leaning on its `properties`, `name` and `resources`:

- `AWS::Kinesis::Stream`: provisioned streams (on-demand is refused: the runtime meters shards).
- `AWS::Kinesis::StreamConsumer` (`StreamARN`, `ConsumerName`): an enhanced fan-out consumer,
  registered on the local endpoint. Its `ConsumerARN` (also its `Ref`) has Kinesis's shape,
  `<stream ARN>/consumer/<name>:<creation time>`, the time stable per stream and name
  (`model.consumer_created`), which the endpoint registers it with. An event-source
  mapping whose `EventSourceArn` is that ARN reads through the consumer (`EventSourceMapping.
  consumer_name`), with the consumer's own read budget (see `local.lambda_.esm.runner`).
- A stream that a mapping, a consumer or the producer's `SHARDLINE_STREAMS` names by ARN or name,
  but the template does not define, is a team's existing stream: it is created locally with 1 shard
  (`up --stream NAME=SHARDS` to choose), marked `Stream.defined = False`, and `up` says so.

Kinesis refuses a consumer name over 128 characters or outside `[a-zA-Z0-9_.-]`, and more than 20
consumers on one stream (RegisterStreamConsumer's LimitExceededException): so does loading.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from . import model
from .template_api import TemplateError

_STREAM_ARN = re.compile(
    r"^arn:aws[\w-]*:kinesis:[^:]*:[^:]*:stream/(?P<stream>[^/]+)"
    r"(?:/consumer/(?P<consumer>[^:/]+)(?::\d+)?)?$"
)
_CONSUMER_NAME = re.compile(r"^[a-zA-Z0-9_.-]{1,128}$")
#: Registered consumers a stream takes at most (Kinesis quotas).
MAX_CONSUMERS_PER_STREAM = 20


def parse_source(arn: str) -> tuple[str, str | None]:
    """(stream name, consumer name or None) from a stream's or a registered consumer's ARN."""
    match = _STREAM_ARN.match(arn)
    if match is None:
        raise TemplateError(f"{arn!r} is not the ARN of a Kinesis stream or stream consumer")
    return match["stream"], match["consumer"]


class StreamReader:
    resources: dict[str, dict[str, Any]]

    def properties(self, logical_id: str) -> dict[str, Any]:
        raise NotImplementedError

    def name(self, logical_id: str) -> str:
        raise NotImplementedError

    def stream(self, logical_id: str) -> model.Stream:
        properties = self.properties(logical_id)
        mode = properties.get("StreamModeDetails", {}).get("StreamMode", "PROVISIONED")
        if mode != "PROVISIONED":
            raise TemplateError(
                f"{logical_id}: StreamMode {mode} is not supported locally (PROVISIONED only)"
            )
        return model.Stream(
            logical_id,
            self.name(logical_id),
            int(properties.get("ShardCount", 1)),
            int(properties.get("RetentionPeriodHours", 24)),
            int(properties.get("MaxRecordSizeInKiB", 1024)),
        )

    def consumer_name(self, logical_id: str) -> tuple[str, str]:
        """(stream name, consumer name) of an `AWS::Kinesis::StreamConsumer`."""
        properties = self.properties(logical_id)
        name = str(properties.get("ConsumerName", ""))
        if not _CONSUMER_NAME.match(name):
            raise TemplateError(
                f"{logical_id}: ConsumerName {name!r}: 1 to 128 characters of a-z, A-Z, 0-9, _ . -"
            )
        stream, consumer = parse_source(str(properties.get("StreamARN", "")))
        if consumer is not None:
            raise TemplateError(f"{logical_id}: StreamARN names a consumer, not a stream")
        return stream, name

    def consumer_att(self, logical_id: str, attribute: str) -> str | None:
        """An attribute of an `AWS::Kinesis::StreamConsumer` (its Ref is its ARN); None if unknown."""
        stream, name = self.consumer_name(logical_id)
        created = model.consumer_created(stream, name)  # the time the endpoint registers it with
        return {
            "ConsumerARN": model.consumer_arn(stream, name, created),
            "ConsumerName": name,
            "StreamARN": model.stream_arn(stream),
            "ConsumerStatus": "ACTIVE",
            "ConsumerCreationTimestamp": str(created),
        }.get(attribute)

    def stream_consumers(self, logical_ids: Iterable[str]) -> tuple[model.StreamConsumer, ...]:
        consumers = []
        per_stream: dict[str, set[str]] = {}
        for logical_id in logical_ids:
            stream, name = self.consumer_name(logical_id)
            names = per_stream.setdefault(stream, set())
            if name in names:
                raise TemplateError(
                    f"{logical_id}: ResourceInUseException: consumer {name} of {stream} exists"
                )
            names.add(name)
            if len(names) > MAX_CONSUMERS_PER_STREAM:
                raise TemplateError(
                    f"{logical_id}: LimitExceededException: stream {stream} takes at most "
                    f"{MAX_CONSUMERS_PER_STREAM} registered consumers"
                )
            arn = self.consumer_att(logical_id, "ConsumerARN")
            assert arn is not None
            consumers.append(model.StreamConsumer(logical_id, name, stream, arn))
        return tuple(consumers)


def undefined_streams(
    defined: Iterable[model.Stream], named: Iterable[str], shards: Mapping[str, int]
) -> tuple[model.Stream, ...]:
    """The streams `named` (by mappings, consumers, the producer's routes) that are not `defined`:
    existing streams, created locally with `shards[name]` shards (default 1)."""
    known = {stream.name for stream in defined}
    missing = sorted(set(named) - known)
    return tuple(
        model.Stream(f"(existing {name})", name, shards.get(name, 1), defined=False) for name in missing
    )
