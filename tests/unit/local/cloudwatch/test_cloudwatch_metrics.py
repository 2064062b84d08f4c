"""The local CloudWatch's statistics, store and EMF extraction, against values computed by hand."""

from __future__ import annotations

import re
import tracemalloc

import pytest

from local.cloudwatch.emf import EmfError, extract
from local.cloudwatch.metrics import MetricId, MetricStore
from local.cloudwatch.statistics import StatisticError, check_statistic, statistic

VALUES = [4.0, 1.0, 3.0, 2.0, 10.0]


@pytest.mark.parametrize(
    ("name", "expected"),
    [("Sum", 20.0), ("Average", 4.0), ("Minimum", 1.0), ("Maximum", 10.0), ("SampleCount", 5.0),
     ("p50", 3.0), ("p80", 4.0), ("p81", 10.0), ("p99", 10.0), ("p100", 10.0), ("p0.1", 1.0)],
)  # fmt: skip
def test_statistics_of_one_period(name: str, expected: float) -> None:
    # Nearest rank: p80 of 5 values is the 4th smallest (ceil(0.8 * 5) = 4), p81 the 5th.
    assert statistic(name, VALUES) == expected


def test_a_period_without_values_has_no_datapoint_whatever_the_statistic() -> None:
    assert {statistic(name, []) for name in ("Sum", "SampleCount", "p99")} == {None}


def test_an_unknown_statistic_is_refused_by_name() -> None:
    for name in ("Mean", "p101", "P99", "sum"):
        with pytest.raises(StatisticError, match=repr(name)):
            check_statistic(name)


def test_the_store_aggregates_seconds_into_periods_aligned_on_the_epoch() -> None:
    store = MetricStore(clock=lambda: 1_000_000.0)
    metric = MetricId.of("ns", "Requests", {"Api": "a"})
    for second, value in [(999_880, 1), (999_899, 2), (999_900, 5), (999_959, 1), (999_990, 7)]:
        store.put_id(metric, [float(value)], second)
    # Periods of 60 s start at multiples of 60: 999_840, 999_900, 999_960.
    points = store.query(metric, "Sum", start=999_850, end=999_999, period=60)
    assert points == [(999_840, 3.0), (999_900, 6.0), (999_960, 7.0)]
    assert store.query(metric, "SampleCount", start=999_850, end=999_999, period=60)[1] == (999_900, 2.0)


def test_a_metric_is_its_exact_dimension_set() -> None:
    store = MetricStore(clock=lambda: 100.0)
    store.put("ns", "M", {"StreamName": "s", "ShardId": "0"}, 5, timestamp=90)
    store.put("ns", "M", {"ShardId": "0", "StreamName": "s"}, 1, timestamp=90)  # same set, other order
    stream_only = MetricId.of("ns", "M", {"StreamName": "s"})
    assert store.query(stream_only, "Sum", start=90, end=90, period=1) == [(90, None)]
    both = MetricId.of("ns", "M", {"StreamName": "s", "ShardId": "0"})
    assert store.query(both, "Sum", start=90, end=90, period=1) == [(90, 6.0)]


def test_values_older_than_the_retention_are_dropped_and_not_accepted() -> None:
    now = [10_000.0]
    store = MetricStore(retention_s=3600, clock=lambda: now[0])
    metric = MetricId.of("ns", "M")
    store.put_id(metric, [1.0], 9_000)
    store.put_id(metric, [1.0], 5_000)  # older than an hour already: not kept
    now[0] = 12_700.0  # 9_000 is now past the hour; a put prunes
    store.put_id(metric, [2.0], 12_700)
    assert store.query(metric, "Sum", start=4_800, end=12_700, period=3600) == [
        (3_600, None), (7_200, None), (10_800, 2.0)
    ]  # fmt: skip


def test_a_late_value_lands_in_its_own_period() -> None:
    store = MetricStore(clock=lambda: 1_000.0)
    metric = MetricId.of("ns", "M")
    for second, value in [(960, 1.0), (990, 2.0), (930, 4.0), (990, 8.0), (905, 16.0)]:
        store.put_id(metric, [value], second)  # 930 and 905 arrive after 990, as EMF timestamps may
    assert store.query(metric, "Sum", start=900, end=999, period=30) == [
        (900, 16.0), (930, 4.0), (960, 1.0), (990, 10.0)
    ]  # fmt: skip
    assert store.query(metric, "Sum", start=990, end=990, period=1) == [(990, 10.0)]


def test_three_hours_of_a_metric_cost_about_16_bytes_a_second() -> None:
    # A dict of seconds cost ~150 bytes a second: three hours of 500 metrics were ~770 MiB.
    store = MetricStore(clock=lambda: 20_000.0)
    metrics = [MetricId.of("ns", f"M{i}", {"Shard": str(i)}) for i in range(20)]
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for second in range(20_000 - 3 * 3600, 20_000):
            for metric in metrics:
                store.put_id(metric, [1.0], second)
        per_value = (tracemalloc.get_traced_memory()[0] - before) / (len(metrics) * 3 * 3600)
    finally:
        tracemalloc.stop()
    assert per_value < 24, f"{per_value:.1f} bytes per metric-second"
    assert store.query(metrics[0], "SampleCount", start=0, end=19_999, period=3600)[-1] == (18_000, 2_000.0)


POWERTOOLS_LINE = {
    "_aws": {
        "Timestamp": 1_795_523_962_466,
        "CloudWatchMetrics": [
            {
                "Namespace": "shardline/dev",
                "Dimensions": [["StreamName", "service"], ["service"]],
                "Metrics": [
                    {"Name": "UserRecordsPut", "Unit": "Count"},
                    {"Name": "Latency", "Unit": "Milliseconds"},
                ],
            }
        ],
    },
    "StreamName": "events",
    "service": "shardline-producer",
    "UserRecordsPut": 500,
    "Latency": [12.5, 30.0],
    "function_request_id": "not a dimension, not a metric",
    "NotANumber": float("nan"),  # json.loads("NaN") gives one; CloudWatch refuses it
}


def test_emf_gives_each_metric_once_per_dimension_set_with_its_values_and_time() -> None:
    extracted = {(m.name, m.dimensions): (values, t) for m, values, t in extract(POWERTOOLS_LINE)}
    both = (("StreamName", "events"), ("service", "shardline-producer"))
    service = (("service", "shardline-producer"),)
    at = 1_795_523_962.466
    assert extracted == {
        ("UserRecordsPut", both): ([500.0], at),
        ("UserRecordsPut", service): ([500.0], at),
        ("Latency", both): ([12.5, 30.0], at),
        ("Latency", service): ([12.5, 30.0], at),
    }


def test_an_empty_dimension_set_is_the_metric_without_dimensions() -> None:
    line = {"_aws": {"Timestamp": 0, "CloudWatchMetrics": [{"Namespace": "n", "Dimensions": [[]],
                                                           "Metrics": [{"Name": "M"}]}]}, "M": 1}  # fmt: skip
    ((metric, values, _),) = extract(line)
    assert (metric.dimensions, values) == ((), [1.0])


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"Timestamp": "now"}, "_aws.Timestamp"),
        ({"CloudWatchMetrics": {}}, "_aws.CloudWatchMetrics"),
        ({"Namespace": ""}, "Namespace"),
        ({"Dimensions": [["missing"]]}, "'missing' is not a string"),
        ({"Metrics": [{"Name": "function_request_id"}]}, "metric 'function_request_id'"),
        ({"Metrics": [{"Unit": "Count"}]}, "Metrics[0].Name"),
        ({"Metrics": [{"Name": "NotANumber"}]}, "metric 'NotANumber'"),
    ],
)
def test_a_malformed_emf_line_is_not_extracted_and_the_error_says_where(change: dict, message: str) -> None:
    line = {**POWERTOOLS_LINE, "_aws": {**POWERTOOLS_LINE["_aws"]}}
    directive = dict(line["_aws"]["CloudWatchMetrics"][0])
    for key, value in change.items():
        if key in ("Timestamp", "CloudWatchMetrics"):
            line["_aws"][key] = value
        else:
            directive[key] = value
            line["_aws"]["CloudWatchMetrics"] = [directive]
    with pytest.raises(EmfError, match=re.escape(message)):
        extract(line)
