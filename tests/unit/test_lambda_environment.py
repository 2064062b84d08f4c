"""The environment contract of the Lambda functions: defaults, round trips, and errors that name
the variable and its value."""

from __future__ import annotations

import pytest

from shardline.aws_lambda import ConsumerEnvironment, ProducerEnvironment, SinkDeclaration
from shardline.errors import ConfigurationError

CONSUMER = {"SHARDLINE_GROUP": "orders", "LEASE_TABLE": "orders-leases", "SINK_TABLE": "orders"}


def test_a_consumer_environment_has_defaults_for_everything_but_its_names() -> None:
    env = ConsumerEnvironment.from_environ(CONSUMER)
    assert env == ConsumerEnvironment("orders", "orders-leases", "orders", None, 3, 5.0, 2.0)


@pytest.mark.parametrize("name", ["SHARDLINE_GROUP", "LEASE_TABLE"])
def test_a_missing_required_variable_is_named(name: str) -> None:
    environ = {key: value for key, value in CONSUMER.items() if key != name}
    with pytest.raises(ConfigurationError, match=name):
        ConsumerEnvironment.from_environ(environ)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("MAX_ATTEMPTS", "three"),
        ("MAX_ATTEMPTS", "0"),
        ("CHECKPOINT_INTERVAL", "soon"),
        ("CHECKPOINT_INTERVAL", "-1"),
        ("TIME_MARGIN", "nan"),
        ("TIME_MARGIN", "inf"),
        ("FAILURE_DETAIL", "traceback"),
        ("SINK_TTL_DAYS", "0"),
        ("SINK_TTL_DAYS", "month"),
        ("SHARDLINE_STARTING_POSITION", "AT_SEQUENCE_NUMBER"),
        ("SHARDLINE_STARTING_POSITION_TIMESTAMP", "yesterday"),
        ("SHARDLINE_MAX_RECORD_AGE_SECONDS", "0"),
    ],
)
def test_a_malformed_consumer_variable_is_named_with_its_value(name: str, value: str) -> None:
    with pytest.raises(ConfigurationError, match=rf"{name}.*{value}"):
        ConsumerEnvironment.from_environ({**CONSUMER, name: value})


@pytest.mark.parametrize(
    ("value", "named"),
    [
        ("{not json", "must be a JSON list, got '{not json'"),
        ('{"table": "t"}', "must be a JSON list"),
        ('["t"]', "each entry is an object with a table, got 't'"),
        ('[{"table": "t", "holds": "rows"}]', "sink 't': holds must be records or counts, got 'rows'"),
        ('[{"table": "t", "holds": "records", "idAttr": "id"}]', r"sink 't' has unknown keys \['idAttr'\]"),
        (
            '[{"table": "t", "holds": "counts", "keyAttribute": ""}]',
            "sink 't': key_attribute must be a non-empty",
        ),
    ],
)
def test_a_malformed_sink_declaration_is_named_with_its_sink_and_field(value: str, named: str) -> None:
    with pytest.raises(ConfigurationError, match=f"^SHARDLINE_SINKS:? .*{named}"):
        ConsumerEnvironment.from_environ({**CONSUMER, "SHARDLINE_SINKS": value})


@pytest.mark.parametrize(("name", "value"), [("MAX_RECORDS_PER_REQUEST", "1.5"), ("MAX_BODY_BYTES", "-3")])
def test_a_malformed_producer_variable_is_named_with_its_value(name: str, value: str) -> None:
    with pytest.raises(ConfigurationError, match=rf"{name}.*{value.lstrip('-')}"):
        ProducerEnvironment.from_environ({name: value})


def test_both_contracts_round_trip_through_the_environment() -> None:
    sinks = (
        SinkDeclaration("orders", "records", id_attribute="eventId"),
        SinkDeclaration("per-tenant", "counts", key_attribute="tenant", count_attribute="n"),
    )
    consumer = ConsumerEnvironment(
        "g", "l", "s", "https://sqs/q", 7, 0.5, 1.25, "dead-letters", "message", 30, sinks,
        starting_position="AT_TIMESTAMP", starting_position_timestamp=1_790_000_000.25,
        max_record_age_seconds=86_000,
    )  # fmt: skip
    assert ConsumerEnvironment.from_environ(consumer.to_environ()) == consumer
    assert set(consumer.to_environ()) == set(ConsumerEnvironment.VARIABLES)
    producer = ProducerEnvironment(
        '{"events": {"streamName": "events-prod"}}', 100, 1024, 2.5, "ids", 86_400, 12.5
    )
    assert ProducerEnvironment.from_environ(producer.to_environ()) == producer
    assert set(producer.to_environ()) == set(ProducerEnvironment.VARIABLES)
    assert ProducerEnvironment.from_environ({}) == ProducerEnvironment("{}", 500, 6_000_000)
    # Without an idempotency table the variable is left out (ids' payloads are then not checked).
    unchecked = ProducerEnvironment('{"events": {"streamName": "events-prod"}}')
    assert "IDEMPOTENCY_TABLE" not in unchecked.to_environ()
    assert ProducerEnvironment.from_environ(unchecked.to_environ()) == unchecked
    # Without a per-caller rate too (issue 40): 0 is no per-caller limit.
    assert "PER_CALLER_RATE" not in unchecked.to_environ()


def test_a_group_without_a_sink_table_leaves_it_out_of_its_environment() -> None:
    env = ConsumerEnvironment.from_environ({"SHARDLINE_GROUP": "forward", "LEASE_TABLE": "forward-leases"})
    assert env.sink_table is None and env.sinks == ()
    assert "SINK_TABLE" not in env.to_environ() and "SHARDLINE_SINKS" not in env.to_environ()


def test_property_5_the_group_start_defaults_to_trim_horizon_a_timestamp_only_with_at_timestamp() -> None:
    env = ConsumerEnvironment.from_environ(CONSUMER)
    assert (env.starting_position, env.starting_position_timestamp, env.max_record_age_seconds) == (
        "TRIM_HORIZON",
        None,
        None,
    )
    for position, timestamp in [("AT_TIMESTAMP", None), ("LATEST", "1790000000")]:
        environ = {**CONSUMER, "SHARDLINE_STARTING_POSITION": position}
        if timestamp is not None:
            environ["SHARDLINE_STARTING_POSITION_TIMESTAMP"] = timestamp
        with pytest.raises(ConfigurationError, match="SHARDLINE_STARTING_POSITION_TIMESTAMP is set exactly"):
            ConsumerEnvironment.from_environ(environ)


def test_property_5_the_consumer_function_gives_its_consumer_where_the_mapping_starts() -> None:
    """What the constructs render reaches the lineage's rule (`_resharding.GroupStart`)."""
    from shardline.aws_lambda import ConsumerFunction
    from shardline.consumer._resharding import GroupStart

    function = ConsumerFunction(handler=lambda record: [])
    environ = {
        **CONSUMER,
        "AWS_REGION": "us-east-1",
        "SHARDLINE_STARTING_POSITION": "AT_TIMESTAMP",
        "SHARDLINE_STARTING_POSITION_TIMESTAMP": "1790000000.5",
        "SHARDLINE_MAX_RECORD_AGE_SECONDS": "86000",
    }
    with pytest.MonkeyPatch.context() as patch:
        for name, value in environ.items():
            patch.setenv(name, value)
        lineage = function.get()._lineage  # clients are made, not called
    assert lineage is not None and lineage._start == GroupStart("AT_TIMESTAMP", 1_790_000_000.5, 86_000)
