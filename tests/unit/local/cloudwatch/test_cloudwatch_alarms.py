"""Alarm evaluation on crafted series: thresholds, M of N, and each treatment of missing data."""

from __future__ import annotations

import pytest

from local.cloudwatch.alarms import ALARM, INSUFFICIENT_DATA, OK, Alarm, AlarmError
from local.cloudwatch.metrics import MetricStore

NOW = 6_000.0  # periods of 60 s: ..., 5_880, 5_940, 6_000 (the one in progress)


def alarm(**changes: object) -> Alarm:
    properties = {
        "Namespace": "AWS/Lambda",
        "MetricName": "Errors",
        "Dimensions": [{"Name": "FunctionName", "Value": "f"}],
        "Statistic": "Sum",
        "Period": 60,
        "EvaluationPeriods": 3,
        "DatapointsToAlarm": 2,
        "Threshold": 0,
        "ComparisonOperator": "GreaterThanThreshold",
        "TreatMissingData": "notBreaching",
        **changes,
    }
    return Alarm.from_properties("Errors", properties)


def store_with(per_period: dict[int, list[float]]) -> MetricStore:
    """`per_period`: period start -> values put in that period's first second."""
    store = MetricStore(clock=lambda: NOW)
    for start, values in per_period.items():
        store.put("AWS/Lambda", "Errors", {"FunctionName": "f"}, values, timestamp=start)
    return store


def test_two_breaching_periods_of_three_alarm_and_one_does_not() -> None:
    assert alarm().evaluate(store_with({5_880: [1], 5_940: [0], 6_000: [2]}), NOW) == ALARM
    assert alarm().evaluate(store_with({5_880: [0], 5_940: [0], 6_000: [2]}), NOW) == OK


def test_the_period_in_progress_counts_as_the_newest_datapoint() -> None:
    subject = alarm()
    assert subject.evaluate(store_with({5_940: [3]}), NOW) == OK  # one breaching, two missing (good)
    assert subject.evaluate(store_with({5_940: [3], 6_000: [1]}), NOW + 5) == ALARM
    assert subject.history[-1].old == OK and subject.history[-1].new == ALARM
    assert "2 of the last 3 datapoints [missing, 3, 1] breached Sum > 0" in subject.reason


def test_a_datapoint_older_than_the_evaluation_range_does_not_count() -> None:
    assert alarm().evaluate(store_with({5_820: [9], 5_880: [9]}), NOW) == OK  # 5_820 is out of range


def test_the_statistic_and_the_comparison_are_the_alarms() -> None:
    latency = {"MetricName": "Errors", "ExtendedStatistic": "p99", "Statistic": None, "Threshold": 100,
               "ComparisonOperator": "GreaterThanOrEqualToThreshold"}  # fmt: skip
    values = [1.0] * 98 + [100.0, 100.0]  # p99 of 100 values is the 99th: 100
    assert alarm(**latency).evaluate(store_with({5_940: values, 6_000: values}), NOW) == ALARM
    average = {"Statistic": "Average", "Threshold": 50}
    assert alarm(**average).evaluate(store_with({5_940: values, 6_000: values}), NOW) == OK  # 2.98
    below = {"ComparisonOperator": "LessThanThreshold", "Threshold": 1}
    assert alarm(**below).evaluate(store_with({5_880: [0], 5_940: [0], 6_000: [5]}), NOW) == ALARM


@pytest.mark.parametrize(
    ("treatment", "all_missing", "one_of_three"),
    [
        ("notBreaching", OK, OK),
        ("breaching", ALARM, ALARM),
        ("missing", INSUFFICIENT_DATA, OK),
        ("ignore", INSUFFICIENT_DATA, OK),  # ignore keeps the state it had: the initial one
    ],
)
def test_missing_data_is_treated_as_the_alarm_says(treatment: str, all_missing: str, one_of_three: str):
    assert alarm(TreatMissingData=treatment).evaluate(store_with({}), NOW) == all_missing
    # One breaching datapoint and two missing.
    assert alarm(TreatMissingData=treatment).evaluate(store_with({6_000: [1]}), NOW) == one_of_three


def test_ignore_keeps_the_state_when_every_datapoint_is_missing() -> None:
    subject = alarm(TreatMissingData="ignore")
    assert subject.evaluate(store_with({5_940: [1], 6_000: [1]}), NOW) == ALARM
    assert subject.evaluate(store_with({}), NOW + 600) == ALARM
    assert len(subject.history) == 1


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"Metrics": [{"Id": "m1"}]}, "metric math"),
        ({"ComparisonOperator": "GreaterThanUpperThreshold"}, "anomaly detection"),
        ({"Statistic": "Mean"}, "'Mean'"),
        ({"Period": 45}, "Period 45"),
        ({"DatapointsToAlarm": 4}, "DatapointsToAlarm 4 of EvaluationPeriods 3"),
        ({"TreatMissingData": "zero"}, "TreatMissingData 'zero'"),
    ],
)
def test_an_alarm_the_evaluator_cannot_evaluate_is_refused_naming_it(change: dict, message: str) -> None:
    with pytest.raises(AlarmError, match=f"alarm Errors: .*{message}"):
        alarm(**change)
