"""Issue 25, item 2: every function's concurrency is reserved from configuration by a documented
formula, synth refuses reservations that cannot coexist, and the producer gives a throttling shard
up promptly (its setting reaches the function)."""

from __future__ import annotations

import copy
import math

import pytest

from shardline.aws_lambda import ProducerEnvironment
from shardline.cdk._config import (
    DEFAULT_CONCURRENCY_BUDGET,
    ON_DEMAND_SHARDS_RESERVED,
    ConfigError,
    load,
)
from tests.support.cdk import default_context, placeholders, resources


def functions_by_service(template) -> dict[str, dict]:
    found = {}
    for resource in resources(template, "AWS::Lambda::Function").values():
        variables = resource["Properties"]["Environment"]["Variables"]
        found[variables["POWERTOOLS_SERVICE_NAME"]] = resource["Properties"]
    return found


def test_2_every_function_reserves_the_concurrency_its_formula_gives(template):
    functions = functions_by_service(template)
    # Every function of the stack (no custom-resource function hides beside them) has a reservation.
    assert set(functions) == {"shardline-producer", "shardline-event-sink", "shardline-key-counter"}
    # Producer: ceil(throttleRate × (throttledGiveUpSeconds + 1 s)) = ceil(100 × 4).
    assert functions["shardline-producer"]["ReservedConcurrentExecutions"] == math.ceil(100 * (3 + 1))
    # A consumer group: shards × parallelization = 4 × 1.
    assert functions["shardline-event-sink"]["ReservedConcurrentExecutions"] == 4
    assert functions["shardline-key-counter"]["ReservedConcurrentExecutions"] == 4


def test_2_the_formula_follows_the_configuration():
    context = copy.deepcopy(default_context())
    shardline = context["shardline"]
    shardline["api"] |= {"throttleRate": 50, "throttledGiveUpSeconds": 1.5}
    shardline["streams"][0]["shards"] = "on-demand"
    config = load(shardline)
    assert config.api.reserved_concurrency == math.ceil(50 * 2.5)
    assert {group.reserved_concurrency for group in config.consumer_groups} == {ON_DEMAND_SHARDS_RESERVED}
    shardline["consumerGroups"][0]["reservedConcurrency"] = 30  # a team that knows its peak shards
    assert load(shardline).consumer_groups[0].reserved_concurrency == 30


@pytest.mark.parametrize(
    ("api", "budget", "accepted"),
    [
        ({"reservedConcurrency": DEFAULT_CONCURRENCY_BUDGET - 8}, None, True),  # 892 + 4 + 4 = 900
        ({"reservedConcurrency": DEFAULT_CONCURRENCY_BUDGET - 7}, None, False),  # 901
        ({"throttleRate": 300}, None, False),  # the formula's 1,200
        ({"throttleRate": 300}, 1300, True),  # a stage whose account has a raised quota
    ],
)
def test_2_synth_refuses_a_producer_reservation_the_consumers_cannot_coexist_with(api, budget, accepted):
    context = copy.deepcopy(default_context())
    shardline = context["shardline"]
    shardline["api"] |= api
    if budget is not None:
        shardline["concurrencyBudget"] = budget
    if accepted:
        load(shardline)
        return
    with pytest.raises(ConfigError) as refused:
        load(shardline)
    message = str(refused.value)
    assert message.startswith("shardline.api.reservedConcurrency:")
    assert "event-sink 4, key-counter 4" in message and "shardline.concurrencyBudget (900" in message


def test_2_the_producer_gets_its_throttled_give_up_setting(template):
    variables = functions_by_service(template)["shardline-producer"]
    environ = {name: placeholders(value) for name, value in variables["Environment"]["Variables"].items()}
    environment = ProducerEnvironment.from_environ(environ)
    assert environment.throttled_give_up_seconds == 3.0
