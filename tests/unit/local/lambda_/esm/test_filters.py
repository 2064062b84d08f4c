"""A mapping's FilterCriteria: refused where Lambda refuses it, and matched as Lambda matches Kinesis
records (on `data` parsed as JSON; a record whose data is not JSON, a KPL aggregate among them,
matches no pattern on `data`). Patterns and records follow the AWS docs' Kinesis filtering examples."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from local.lambda_.esm.filters import MAX_FILTERS, FilterError, RecordFilter, filter_view
from shardline.kinesis import UserRecord
from shardline.kpl import encode


def record(data: bytes) -> dict[str, Any]:
    return {"kinesis": {"partitionKey": "1", "data": base64.b64encode(data).decode()}}


def criteria(*patterns: Any) -> dict[str, Any]:
    return {"Filters": [{"Pattern": json.dumps(p)} for p in patterns]}


ORDER = json.dumps({"record": 12345, "order": {"type": "buy", "stock": "ANYCO", "quantity": 1000}}).encode()


def test_a_data_pattern_matches_the_parsed_json_payload():
    buys = RecordFilter.from_criteria(criteria({"data": {"order": {"type": ["buy"]}}}))
    assert buys is not None
    assert buys.matches(record(ORDER))
    assert not buys.matches(record(ORDER.replace(b'"buy"', b'"sell"')))


def test_any_of_the_filters_lets_a_record_through():
    either = RecordFilter.from_criteria(
        criteria(
            {"data": {"order": {"type": ["sell"]}}},
            {"data": {"order": {"quantity": [{"numeric": [">", 500]}]}}},
        )
    )
    assert either is not None and either.matches(record(ORDER))


@pytest.mark.parametrize(
    ("rule", "matches"),
    [
        ({"prefix": "AN"}, True),
        ({"suffix": "CO"}, True),
        ({"equals-ignore-case": "anyco"}, True),
        ({"anything-but": ["ANYCO"]}, False),
        ({"exists": True}, True),
    ],
)
def test_lambdas_operators(rule, matches):
    stock = RecordFilter.from_criteria(criteria({"data": {"order": {"stock": [rule]}}}))
    assert stock is not None and stock.matches(record(ORDER)) is matches


def test_data_that_is_not_json_matches_no_data_pattern():
    anything = RecordFilter.from_criteria(criteria({"data": {"order": [{"exists": False}]}}))
    assert anything is not None
    assert filter_view(record(b"\xff\x00 not json")) == {}
    assert not anything.matches(record(b"plain text"))


def test_a_kpl_aggregate_is_filtered_as_one_record_whose_data_is_not_json():
    """With a polling mapping, Lambda filters the aggregate, not its user records: a filter on
    `data` drops an aggregate even when every user record in it would match."""
    aggregate = encode([UserRecord(partition_key="pk", data=ORDER)] * 3)
    buys = RecordFilter.from_criteria(criteria({"data": {"order": {"type": ["buy"]}}}))
    assert buys is not None and buys.matches(record(ORDER))
    assert not buys.matches(record(aggregate))


@pytest.mark.parametrize(
    ("bad", "reason"),
    [
        (criteria({"partitionKey": ["1"]}), "data key only"),
        (criteria({"data": {"a": [{"wildcard": "x*"}]}}), "'wildcard' is not in Lambda's filter rule syntax"),
        (
            criteria({"data": {"$or": [{"a": ["x"]}, {"b": ["y"]}]}}),
            "'$or' is not in Lambda's filter rule syntax",
        ),
        (criteria({"data": {"a": [{"numeric": [">", "5"]}]}}), "numeric pair"),
        (criteria({"data": {"a": []}}), "empty list"),
        (criteria({"data": {"a": "x"}}), "must be an object or a list"),
        ({"Filters": [{"Pattern": "{not json"}]}, "not valid JSON"),
        (criteria(*[{"data": {"a": [str(i)]}} for i in range(MAX_FILTERS + 1)]), "at most 5"),
    ],
)
def test_what_lambda_refuses_is_refused_with_the_reason(bad, reason):
    with pytest.raises(FilterError, match=reason.replace("$", r"\$")):
        RecordFilter.from_criteria(bad)


def test_no_filters_is_no_filter():
    assert RecordFilter.from_criteria(None) is None
    assert RecordFilter.from_criteria({"Filters": []}) is None
