"""Nothing in the template is dropped in silence: every property of what the runtime runs is
honoured, of no local effect, or listed as not emulated with what differs."""

from __future__ import annotations

from local.app.properties import HONOURED, not_emulated


def test_unhonoured_properties_are_listed_with_what_differs():
    listed = not_emulated(
        "Mapping",
        "AWS::Lambda::EventSourceMapping",
        {"BatchSize": 10, "TumblingWindowInSeconds": 60, "Tags": [], "SomethingNew": 1},
    )
    assert [(entry.property, entry.logical_id) for entry in listed] == [
        ("SomethingNew", "Mapping"),
        ("TumblingWindowInSeconds", "Mapping"),
    ]
    assert "isFinalInvokeForWindow" in listed[1].difference
    assert "not emulated" in listed[0].difference


def test_types_the_runtime_does_not_run_are_not_listed_property_by_property():
    assert not_emulated("Table", "AWS::DynamoDB::Table", {"SSESpecification": {}}) == []


def test_the_mapping_options_lambda_documents_for_kinesis_are_honoured():
    assert {"FilterCriteria", "BisectBatchOnFunctionError", "DestinationConfig"} <= HONOURED[
        "AWS::Lambda::EventSourceMapping"
    ]
