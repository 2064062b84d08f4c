"""Property 6 of issue 40: the groups' roles carry what the consumer's sink writes call.

"What the code calls" is recorded, not listed: the example handlers (functions/event_sink,
functions/key_counter) run through `KinesisConsumer` on moto server, and every request their
botocore clients send is caught by botocore's `before-parameter-build` event on those (real) clients and
mapped to the IAM actions AWS authorises it by (TransactWriteItems: one action per item, by its
kind; BatchWriteItem: on each table it names). Each recorded (action, resource) must be allowed
to the group's role in the synthesized default app (its Lambda groups) and in a worker group
running the same handler: the code's tables and queue are the ones the template's environment
names (LEASE_TABLE, SINK_TABLE, DLQ_URL), so each call is checked on its own resource.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from aws_cdk import Stack
from aws_cdk import aws_dynamodb as dynamodb

from shardline.cdk import ConsumerGroup, Layers, Sink, Stream, WorkerGroup
from shardline.consumer._sink_writes import ALL_SINK_WRITES, SINK_WRITE_ACTIONS, sink_actions
from shardline.kinesis import UserRecord
from shardline.producer import Producer
from tests.support.cdk import ORDERS_ARN, alone
from tests.support.consumer_handlers import drain
from tests.support.consumer_handlers import stream as stream
from tests.support.permissions import read_functions

#: A TransactWriteItems entry -> the action IAM authorises it by (transaction-apis-iam.html).
TRANSACT_ITEM_ACTION = {
    "Put": "dynamodb:PutItem",
    "Update": "dynamodb:UpdateItem",
    "Delete": "dynamodb:DeleteItem",
    "ConditionCheck": "dynamodb:ConditionCheckItem",
}
#: The request parameter that names each call's resource.
RESOURCE_PARAMETERS = ("TableName", "QueueUrl", "Bucket", "StreamName", "StreamARN")
#: The environment variables that name a group's resources, in the test's run and in the template.
NAMED_BY = ("LEASE_TABLE", "SINK_TABLE", "DLQ_URL")
STRING = dynamodb.AttributeType.STRING


class Recorder:
    """Every request botocore sends through the clients created while it is installed, as the
    (IAM action, resource name) pairs AWS authorises it by."""

    def __init__(self) -> None:
        self.calls: set[tuple[str, str]] = set()

    def __call__(self, model: Any, params: dict[str, Any], **_: Any) -> None:
        try:
            self._record(model, params)
        except Exception as exc:  # never raise into the consumer: it would stall the shard on it
            self.calls.add((f"unrecorded {model.name}", repr(exc)))

    def _record(self, model: Any, params: dict[str, Any]) -> None:
        prefix, operation = model.service_model.signing_name, model.name
        if operation == "TransactWriteItems":
            for item in params["TransactItems"]:
                [(kind, body)] = item.items()
                self.calls.add((TRANSACT_ITEM_ACTION[kind], body["TableName"]))
        elif operation == "BatchWriteItem":
            self.calls |= {(f"{prefix}:{operation}", table) for table in params["RequestItems"]}
        else:
            named = [params[name] for name in RESOURCE_PARAMETERS if name in params]
            self.calls.add((f"{prefix}:{operation}", named[0] if named else f"? {sorted(params)}"))


@pytest.fixture
def recorder(monkeypatch) -> Iterator[Recorder]:
    """A fresh default boto3 session with the recorder on `before-parameter-build` (the operation's
    own parameters, before botocore serializes and sends them): the handlers create their clients
    from it on first use (their warm caches are reset), so every call they make is seen."""
    recording = Recorder()
    session = boto3.Session(region_name="us-east-1")
    session.events.register("before-parameter-build", recording)
    monkeypatch.setattr(boto3, "DEFAULT_SESSION", session)
    yield recording


def with_client_ids(stream: Any) -> None:
    """Records with client ids beside the stream's records without: the id-keyed paths too
    (event_sink's conditional idempotent puts, key_counter's `once` guards)."""
    producer = Producer(stream.kinesis, stream.name)
    records = [UserRecord(f"key-{i}", b'{"n": %d}' % i, id=f"order-{i}", caller="alice") for i in range(20)]
    assert all(result.success for result in producer.put_many(records))


def record(stream: Any, recorder: Recorder, function: str, key: str) -> dict[str, set[str]]:
    """Run `function`'s handler over every record of `stream`; its calls, by the environment
    variable that names their resource (e.g. {"SINK_TABLE": {"dynamodb:BatchWriteItem", ...}})."""
    group, _, _ = stream.group(function, key=key)
    drain(group, stream.feeds())
    by_value = {group.env[name]: name for name in NAMED_BY} | {stream.name: "STREAM"}
    calls: dict[str, set[str]] = {}
    for action, resource in recorder.calls:
        assert resource in by_value, f"{action} on {resource}: a resource of no environment variable"
        calls.setdefault(by_value[resource], set()).add(action)
    assert calls.get("SINK_TABLE"), f"{function} wrote nothing to its sink: the recording saw nothing"
    return calls


def missing(calls: dict[str, set[str]], granted: dict[str, set[str]]) -> dict[str, list[str]]:
    """Recorded actions the role is not granted on the same resource, by environment variable."""
    gaps = {name: sorted(actions - granted.get(name, set())) for name, actions in calls.items()}
    return {name: gap for name, gap in gaps.items() if gap}


# -- the default app's Lambda groups ------------------------------------------------------------


@pytest.fixture(scope="module")
def app_grants(synthesized) -> dict[str, dict[str, set[str]]]:
    """Per group (SHARDLINE_GROUP), the actions its function's role is allowed on the resource each
    environment variable of NAMED_BY names."""
    _, path = synthesized
    raw = json.loads(path.read_text())
    functions = read_functions(raw, path.parent, path.name.removesuffix(".template.json"))
    grants: dict[str, dict[str, set[str]]] = {}
    for lid, function in functions.items():
        variables = raw["Resources"][lid]["Properties"]["Environment"]["Variables"]
        if "SHARDLINE_GROUP" not in variables:
            continue
        grants[variables["SHARDLINE_GROUP"]] = {
            name: {a for a, r in function.permissions if r == f"<{variables[name]['Ref']}>"}
            | {a for a, r in function.permissions if r == f"<{_queue_of(raw, variables[name])}>"}
            for name in NAMED_BY
        }
        # The stream its mapping reads (the consumer's resharding probe calls it with the role).
        grants[variables["SHARDLINE_GROUP"]]["STREAM"] = {
            a for a, r in function.permissions for s in function.mapped_streams if r == f"<{s}>"
        }
    assert set(grants) == {"event-sink", "key-counter"}
    return grants


def _queue_of(raw: dict, value: Any) -> str:
    """A queue's URL (Ref) in the environment -> the queue's logical id (its ARN in a policy)."""
    return str(value.get("Ref", "")) if isinstance(value, dict) else ""


def test_property_6_the_event_sink_group_role_grants_every_action_its_code_calls(
    stream, recorder, app_grants
):
    with_client_ids(stream)
    calls = record(stream, recorder, "event_sink", key="pk")
    print(f"\nevent_sink called: {calls}")
    assert "dynamodb:BatchWriteItem" in calls["SINK_TABLE"], "the unkeyed idempotent puts' call"
    assert "dynamodb:PutItem" in calls["SINK_TABLE"], "the id-keyed puts' transaction items"
    assert missing(calls, app_grants["event-sink"]) == {}, (
        f"MISSING: event_sink {missing(calls, app_grants['event-sink'])}"
    )


def test_property_6_the_key_counter_group_role_grants_every_action_its_code_calls(
    stream, recorder, app_grants
):
    with_client_ids(stream)
    calls = record(stream, recorder, "key_counter", key="partitionKey")
    print(f"\nkey_counter called: {calls}")
    assert {"dynamodb:UpdateItem", "dynamodb:PutItem"} <= calls["SINK_TABLE"], "counts and once guards"
    assert missing(calls, app_grants["key-counter"]) == {}, (
        f"MISSING: key_counter {missing(calls, app_grants['key-counter'])}"
    )


def test_property_6_each_example_sink_is_granted_exactly_what_its_handler_writes(app_grants):
    """No more than the writes declared: event_sink's idempotent puts, key_counter's Updates and
    once guards (and DescribeTable on each)."""
    assert app_grants["event-sink"]["SINK_TABLE"] == set(sink_actions(["idempotent_put"]))
    assert app_grants["key-counter"]["SINK_TABLE"] == set(sink_actions(["Update", "once"]))


# -- a worker group and a Lambda group, side by side --------------------------------------------


def _sink(writes: tuple[str, ...] = ALL_SINK_WRITES) -> Sink:
    return Sink.create(
        dynamodb.Attribute(name="pk", type=STRING),
        dynamodb.Attribute(name="sk", type=STRING),
        holds="records",
        writes=writes,  # type: ignore[arg-type]
    )


def _groups(stack: Stack, writes: tuple[str, ...] = ALL_SINK_WRITES) -> None:
    stream_ = Stream.from_stream_arn(stack, "Orders", ORDERS_ARN)
    WorkerGroup(
        stack, "Workers", name="workers", stream=stream_, code="functions/event_sink", sinks=[_sink(writes)]
    )
    ConsumerGroup(
        stack,
        "Lambdas",
        name="lambdas",
        stream=stream_,
        layers=Layers(stack, "Layers"),
        code=Path("functions/event_sink"),
        sinks=[_sink(writes)],
    )


def sink_grants(template: Any) -> dict[str, set[str]]:
    """The actions allowed on each group's sink table, by the group's construct id."""
    raw = template.to_json()["Resources"]
    sinks = {lid for lid, r in raw.items() if r["Type"] == "AWS::DynamoDB::Table" and "Sink" in lid}
    found: dict[str, set[str]] = {}
    for policy in (r for r in raw.values() if r["Type"] == "AWS::IAM::Policy"):
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
            targets = (
                statement["Resource"] if isinstance(statement["Resource"], list) else [statement["Resource"]]
            )
            for target in targets:
                lid = target.get("Fn::GetAtt", [None])[0] if isinstance(target, dict) else None
                if lid in sinks:
                    actions = statement["Action"]
                    group = "Workers" if lid.startswith("Workers") else "Lambdas"
                    found.setdefault(group, set()).update(actions if isinstance(actions, list) else [actions])
    return found


@pytest.mark.parametrize("writes", [ALL_SINK_WRITES, ("idempotent_put",), ("Update", "once"), ("Delete",)])
def test_property_6_the_lambda_and_worker_drivers_grant_the_same_sink_actions_for_the_same_writes(writes):
    grants = sink_grants(alone(lambda stack: _groups(stack, writes)))
    assert grants["Workers"] == grants["Lambdas"] == set(sink_actions(writes)), grants


def test_property_6_a_worker_group_role_grants_every_action_the_event_sink_calls(stream, recorder):
    """The worker runs the same handler through the same consumer: the sink calls recorded above
    are all allowed on its sink table (default `writes`: every kind)."""
    with_client_ids(stream)
    calls = record(stream, recorder, "event_sink", key="pk")
    grants = sink_grants(alone(lambda stack: _groups(stack, ("idempotent_put",))))
    assert calls["SINK_TABLE"] <= grants["Workers"], sorted(calls["SINK_TABLE"] - grants["Workers"])


def test_property_6_every_kind_of_sink_write_maps_to_dynamodb_actions():
    assert set(SINK_WRITE_ACTIONS) == set(ALL_SINK_WRITES)
    assert "dynamodb:BatchWriteItem" in SINK_WRITE_ACTIONS["idempotent_put"]


@pytest.mark.parametrize("writes", [("transact",), "idempotent_put", ()])
def test_property_6_a_sink_declaring_an_unknown_write_is_refused_naming_the_sink_and_the_value(writes):
    with pytest.raises(ValueError, match=r"Sink \(created, partition key pk\): writes") as refused:
        _sink(writes)
    if writes == ("transact",):
        assert "'transact'" in str(refused.value)


# -- the configuration's own sinks ----------------------------------------------------------------


def _listed(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


TENANT = {"name": "tenant", "type": "S"}


def test_property_6_a_configured_sink_declares_its_writes_and_gets_exactly_their_actions():
    from app import build
    from tests.support.cdk import default_context

    context = default_context()
    sink = {"partitionKey": TENANT, "holds": "records", "writes": ["Update", "once"]}
    context["shardline"]["consumerGroups"][0]["sink"] = sink
    app, stack = build(context)
    raw = app.synth().get_stack_by_name(stack.stack_name).template["Resources"]
    [table] = [
        lid
        for lid, r in raw.items()
        if r["Type"] == "AWS::DynamoDB::Table"
        and r["Properties"]["KeySchema"][0]["AttributeName"] == "tenant"
    ]
    granted = {
        action
        for r in raw.values()
        if r["Type"] == "AWS::IAM::Policy"
        for statement in r["Properties"]["PolicyDocument"]["Statement"]
        if {"Fn::GetAtt": [table, "Arn"]} in _listed(statement["Resource"])
        for action in _listed(statement["Action"])
    }
    assert granted == set(sink_actions(["Update", "once"]))


def test_property_6_a_configured_sink_with_an_unknown_write_is_refused_naming_the_key_and_the_value():
    from shardline.cdk import ConfigError, load_config
    from tests.support.cdk import default_context

    context = default_context()["shardline"]
    context["consumerGroups"][0]["sink"] = {"partitionKey": TENANT, "writes": ["Upsert"]}
    with pytest.raises(ConfigError, match=r"consumerGroups\[0\]\.sink\.writes: unknown kind 'Upsert'"):
        load_config(context)
