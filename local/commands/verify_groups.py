"""Which consumer groups `send`'s verdict checks, and how: read from what each group declares.

A consumer group is a function with a consumer's environment (`SHARDLINE_GROUP`, `LEASE_TABLE`;
`shardline.aws_lambda.ConsumerEnvironment`) whose event-source mapping reads the stream the records
were sent to, or a worker group (an ECS service of `shardline worker` tasks, the same environment)
reading that stream. What its sinks hold it declares in `SHARDLINE_SINKS`, a JSON list of
`shardline.aws_lambda.SinkDeclaration`s (the CDK's ConsumerGroup writes it from what it is told):

    SHARDLINE_SINKS='[{"table": "orders", "holds": "records", "idAttribute": "eventId"},
                      {"table": "per-tenant", "holds": "counts",
                       "keyAttribute": "tenant", "countAttribute": "orders"}]'

- `records`: one item per user record, the record's id (the client's, which `send` gives every
  record, or the producer's) in `idAttribute` (default `recordId`). Checked by identity: every
  accepted record's id in the table exactly once, none twice, no refused record's. A table keyed
  `pk`/`sk` (shardline's event-sink layout) is read incrementally, partition by partition, and
  its items keyed by client id (`id#<id>`) by BatchGetItem; any
  other key schema is scanned whole on each poll (a table keyed by the id itself cannot show a
  record applied twice: the second write lands on the first).
- `counts`: one item per partition key (`keyAttribute`, a string; default `partitionKey`) whose
  `countAttribute` (a number; default `count`) counts that key's records. Checked for exact counts.
- Nothing declared, or no sink at all (`SINK_TABLE` unset): checked by lag and errors only — the
  group must have checkpointed (its lease rows) past the last record the run wrote to each shard,
  with no function error, no healthy record in its DLQ and no on-failure message of the run. The
  verdict says "sink not declared: checked by lag and errors only".

A `SINK_TABLE` without declarations (an app synthesized before its groups declared) is guessed from its
key schema (`pk`/`sk`: records by `recordId`; a lone `partitionKey`: counts in `count`), and the
verdict says the kind was guessed.
"""

from __future__ import annotations

import dataclasses

from shardline.aws_lambda import ConsumerEnvironment

from ..app import environments, model
from .verify_verdict import COUNTER, LAG, NOT_DECLARED, RECORDS, Group

EVENT_SINK_KEYS = {"pk": "HASH", "sk": "RANGE"}


def _key_schema(resource: model.Resource | None) -> dict[str, str]:
    properties = resource.properties if resource else {}
    return {key["AttributeName"]: key["KeyType"] for key in properties.get("KeySchema", [])}


def _guessed_kind(resource: model.Resource | None) -> str | None:
    schema = _key_schema(resource)
    if schema == EVENT_SINK_KEYS:
        return RECORDS
    if schema == {"partitionKey": "HASH"}:
        return COUNTER
    return None


def consumer_groups(app: model.LocalApp, stream_name: str) -> list[Group]:
    """The consumer groups that read `stream_name` — a function through its event-source mapping,
    or a worker group's tasks (`model.WorkerService`: the same environment contract, no mapping):
    one `Group` per declared sink, else one checked by its guessed sink or by lag."""
    readers: list[tuple[str, ConsumerEnvironment, str]] = []  # (function or service, env, on-failure)
    for function in app.functions:
        env = environments.consumer(function)
        mappings = [
            m for m in app.mappings if m.function_name == function.name and m.stream_name == stream_name
        ]
        if env is not None and mappings:
            readers.append((function.name, env, mappings[0].on_failure_arn or ""))
    for service in app.workers:
        env = environments.consumer_of(service.environment)
        if env is not None and service.stream_name == stream_name:
            readers.append((service.name, env, ""))
    return [group for reader in readers for group in _groups(app, stream_name, *reader)]


def _groups(
    app: model.LocalApp, stream_name: str, reader: str, env: ConsumerEnvironment, on_failure: str
) -> list[Group]:
    tables = {r.name: r for r in app.resources if r.type == "AWS::DynamoDB::Table"}
    groups: list[Group] = []
    common = Group(
        env.group, reader, LAG, "", stream_name, env.dlq_url or "", lease_table=env.lease_table,
        on_failure_queue=on_failure.rsplit(":", 1)[-1] if on_failure.startswith("arn:aws:sqs:") else "",
        source=NOT_DECLARED,
    )  # fmt: skip
    for sink in env.sinks:
        kind = RECORDS if sink.holds == "records" else COUNTER
        groups.append(
            dataclasses.replace(
                common, name=env.group if len(env.sinks) == 1 else f"{env.group}/{sink.table}",
                kind=kind, sink_table=sink.table, id_attribute=sink.id_attribute,
                key_attribute=sink.key_attribute, count_attribute=sink.count_attribute,
                incremental=kind == RECORDS and _key_schema(tables.get(sink.table)) == EVENT_SINK_KEYS,
                source="declared",
            )
        )  # fmt: skip
    guessed = _guessed_kind(tables.get(env.sink_table or ""))
    if env.sinks:
        return groups
    if env.sink_table is not None and guessed is not None:
        groups.append(
            dataclasses.replace(common, kind=guessed, sink_table=env.sink_table,
                                incremental=guessed == RECORDS, source="key schema")
        )  # fmt: skip
    else:
        groups.append(common)
    return groups
