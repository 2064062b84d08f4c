"""Issue 39, property 6: a client-id guard outlives every copy of its record. The constructs render
`SHARDLINE_GUARD_TTL_SECONDS` from the stream's retention and the dead-letter queue's (a copy is
read from the stream until its retention ends, and redriven from the DLQ until the message's
retention ends after it was dead-lettered), plus a day's margin, for a Lambda group and a worker
group alike; `ConsumerEnvironment` reads it back; the CDK app's groups carry it.

The expected figures are written out here, not derived with the library's function: 24 h of stream
retention + 14 days in the DLQ + 1 day = 16 days."""

from __future__ import annotations

from typing import Any

import pytest
from aws_cdk import Duration, Stack
from aws_cdk import aws_ecs as ecs
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sqs as sqs
from aws_cdk.assertions import Template

from shardline.aws_lambda import ConsumerEnvironment
from shardline.cdk import ConsumerGroup, Layers, Stream, WorkerGroup
from tests.support.cdk import alone, placeholders, resources

HOUR, DAY = 3600, 24 * 3600
VARIABLE = "SHARDLINE_GUARD_TTL_SECONDS"
INLINE = lambda_.Code.from_inline("def handler(event, context):\n    return {}\n")
#: retention hours -> the guard TTL: the stream's retention + 14 days (the DLQ's) + 1 day.
TEAM_QUEUE_ARN = "arn:aws:sqs:us-east-1:111122223333:team-dead-letters"
EXPECTED = {24: 16 * DAY, 168: 22 * DAY, 8760: 380 * DAY}


def stream_in(stack: Stack, hours: int) -> Stream:
    return Stream(stack, "Orders", stream_name="orders", shards=1, retention_hours=hours)


def lambda_variables(template: Template) -> dict[str, Any]:
    [function] = [
        f
        for f in resources(template, "AWS::Lambda::Function").values()
        if f["Properties"]["Handler"] == "index.handler"
    ]
    found: dict[str, Any] = function["Properties"]["Environment"]["Variables"]
    return found


def worker_variables(template: Template) -> dict[str, Any]:
    [definition] = resources(template, "AWS::ECS::TaskDefinition").values()
    [container] = definition["Properties"]["ContainerDefinitions"]
    return {variable["Name"]: variable["Value"] for variable in container["Environment"]}


def parsed(variables: dict[str, Any]) -> ConsumerEnvironment:
    return ConsumerEnvironment.from_environ({name: placeholders(value) for name, value in variables.items()})


@pytest.mark.parametrize("hours", sorted(EXPECTED))
def test_property_6_a_lambda_group_renders_its_guard_ttl_from_the_stream_and_dlq_retentions(hours: int):
    def build(stack: Stack) -> None:
        ConsumerGroup(
            stack, "Writer", name="order-writer", stream=stream_in(stack, hours),
            layers=Layers(stack, "Layers"), code=INLINE, handler="index.handler",
        )  # fmt: skip

    variables = lambda_variables(alone(build, nag=False))
    assert variables[VARIABLE] == str(EXPECTED[hours])
    assert parsed(variables).guard_ttl_seconds == EXPECTED[hours]
    # Longer than a copy can be read (the retention) and then redriven (14 days in the DLQ).
    assert EXPECTED[hours] > hours * HOUR + 14 * DAY


@pytest.mark.parametrize("hours", [24, 8760])
def test_property_6_a_worker_group_renders_the_same_guard_ttl_through_the_same_contract(hours: int):
    def build(stack: Stack) -> None:
        WorkerGroup(
            stack, "Workers", name="order-workers", stream=stream_in(stack, hours),
            image=ecs.ContainerImage.from_registry("public.ecr.aws/example/worker:1"),
        )  # fmt: skip

    variables = worker_variables(alone(build, nag=False))
    assert variables[VARIABLE] == str(EXPECTED[hours])
    assert parsed(variables).guard_ttl_seconds == EXPECTED[hours]


@pytest.mark.parametrize(
    ("queue", "dlq_days"),
    [
        (lambda stack: sqs.Queue(stack, "TeamQueue", enforce_ssl=True), 4),  # SQS's default retention
        (lambda stack: sqs.Queue(stack, "TeamQueue", enforce_ssl=True, retention_period=Duration.days(9)), 9),
        (
            lambda stack: sqs.Queue.from_queue_arn(stack, "TeamQueue", TEAM_QUEUE_ARN),
            14,
        ),  # not known: SQS's longest
    ],
    ids=["team-queue-default", "team-queue-9-days", "imported-queue"],
)
def test_property_6_a_team_s_own_dead_letter_queue_counts_with_its_own_retention(queue: Any, dlq_days: int):
    """A worker group given a queue of the team's: its retention when the app defines the queue,
    SQS's longest (14 days), which no queue exceeds, when it is imported and not known here."""

    def build(stack: Stack) -> None:
        WorkerGroup(
            stack, "Workers", name="order-workers", stream=stream_in(stack, 168),
            image=ecs.ContainerImage.from_registry("public.ecr.aws/example/worker:1"),
            dead_letters=queue(stack),
        )  # fmt: skip

    assert worker_variables(alone(build, nag=False))[VARIABLE] == str((7 + dlq_days + 1) * DAY)


def test_property_6_the_app_s_consumer_groups_carry_the_guard_ttl_of_their_stream(template: Template):
    functions = resources(template, "AWS::Lambda::Function").values()
    ttls = {
        variables["SHARDLINE_GROUP"]: parsed(variables).guard_ttl_seconds
        for variables in (f["Properties"]["Environment"]["Variables"] for f in functions)
        if "SHARDLINE_GROUP" in variables
    }
    assert ttls == {"event-sink": 16 * DAY, "key-counter": 16 * DAY}  # cdk.json: 24 h retention
    assert all(VARIABLE in f["Properties"]["Environment"]["Variables"] for f in functions if
               "SHARDLINE_GROUP" in f["Properties"]["Environment"]["Variables"])  # fmt: skip


def test_property_6_without_the_variable_a_function_gets_the_default_retentions_guard_ttl():
    env = ConsumerEnvironment.from_environ({"SHARDLINE_GROUP": "g", "LEASE_TABLE": "t"})
    assert env.guard_ttl_seconds == 16 * DAY  # a stream of 24 h, the DLQ's 14 days, a day's margin
